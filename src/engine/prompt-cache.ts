// bloomery engine: the prompt cache: saved prompt states (token ids + their KV, position-major)
// within a byte budget (--cache-ram), least recently used evicted first; a state lives on the
// card while it has room (restored at device-memory speed), else in host RAM. A new request
// restores the longest saved prefix, even after other requests used the slot it came from.

import type { SavedKv } from "./backend.ts";

export type { SavedKv };

export interface CachedPrompt {
  tokens: number[];
  kv: SavedKv;
  lastUsed: number;
  /** when it was saved or last restored (ms since the epoch) */
  usedAt: number;
}

export class PromptCache {
  private entries: CachedPrompt[] = [];
  private clock = 0;
  hits = 0;
  misses = 0;

  /** maxBytes < 0: no limit; 0: disabled */
  constructor(private readonly maxBytes: number, private readonly posBytes: number) {}

  get enabled(): boolean {
    return this.maxBytes !== 0;
  }

  get bytes(): number {
    return this.entries.reduce((a, e) => a + e.kv.bytes, 0);
  }

  /** Bytes of the saved states that live on the card. */
  get cardBytes(): number {
    return this.entries.reduce((a, e) => a + (e.kv.where === "card" ? e.kv.bytes : 0), 0);
  }

  get size(): number {
    return this.entries.length;
  }

  /**
   * The entry sharing the longest prefix with `prompt` that it can restore, and that prefix's length: at most
   * `limit` tokens, and for a recurrent model's state only up to one of its checkpoints (SavedKv.restorable).
   */
  best(prompt: readonly number[], limit = Infinity): { entry?: CachedPrompt; n: number } {
    let entry: CachedPrompt | undefined, n = 0;
    for (const e of this.entries) {
      let k = Math.min(commonPrefix(e.tokens, prompt), limit);
      if (e.kv.restorable) k = e.kv.restorable(k);
      if (k > n) { n = k; entry = e; }
    }
    return { entry, n };
  }

  /** Mark an entry used (it moves to the back of the eviction order). */
  touch(e: CachedPrompt): void {
    e.lastUsed = ++this.clock;
    e.usedAt = Date.now();
  }

  /** The entries, most recently used first (read only: for reports). */
  list(): readonly Readonly<CachedPrompt>[] {
    return [...this.entries].sort((a, b) => b.lastUsed - a.lastUsed);
  }

  /**
   * Save a state. An entry that is a prefix of the new one is replaced; a state that an entry
   * already covers is not saved twice. Returns false when it cannot fit the budget at all
   * (`keep`, an entry about to be restored, is never evicted for it). extraBytes: what the state holds beside
   * its KV (a recurrent model's checkpoints).
   */
  save(tokens: readonly number[], make: () => SavedKv, keep?: CachedPrompt, extraBytes = 0): boolean {
    if (!this.enabled || tokens.length === 0) return false;
    const need = tokens.length * this.posBytes + extraBytes;
    if (this.maxBytes > 0 && need > this.maxBytes) return false;
    for (const e of this.entries) if (e.tokens.length >= tokens.length && commonPrefix(e.tokens, tokens) === tokens.length) { this.touch(e); return true; }
    if (this.maxBytes > 0 && keep && keep.kv.bytes + need > this.maxBytes) return false;
    this.entries = this.entries.filter((e) => {
      const covered = e !== keep && e.tokens.length < tokens.length && commonPrefix(e.tokens, tokens) === e.tokens.length;
      if (covered) e.kv.free();
      return !covered;
    });
    if (this.maxBytes > 0) {
      this.entries.sort((a, b) => (a === keep ? 1 : 0) - (b === keep ? 1 : 0) || a.lastUsed - b.lastUsed);
      let total = this.bytes;
      while (this.entries.length && this.entries[0] !== keep && total + need > this.maxBytes) {
        const e = this.entries.shift()!;
        total -= e.kv.bytes;
        e.kv.free(); // card memory goes back before the new state takes its place
      }
    }
    this.entries.push({ tokens: [...tokens], kv: make(), lastUsed: ++this.clock, usedAt: Date.now() });
    return true;
  }

  clear(): void {
    for (const e of this.entries) e.kv.free();
    this.entries = [];
  }
}

export function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
