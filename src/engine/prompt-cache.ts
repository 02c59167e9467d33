// bloomery engine: the prompt cache: saved prompt states (token ids + their KV, position-major)
// in host RAM within a byte budget, least recently used evicted first. A new request restores
// the longest saved prefix, even after other requests used the slot it came from.

export interface CachedPrompt {
  tokens: number[];
  kv: Uint8Array;
  lastUsed: number;
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
    return this.entries.reduce((a, e) => a + e.kv.length, 0);
  }

  get size(): number {
    return this.entries.length;
  }

  /** The entry sharing the longest prefix with `prompt`, and that prefix's length. */
  best(prompt: readonly number[]): { entry?: CachedPrompt; n: number } {
    let entry: CachedPrompt | undefined, n = 0;
    for (const e of this.entries) {
      const k = commonPrefix(e.tokens, prompt);
      if (k > n) { n = k; entry = e; }
    }
    return { entry, n };
  }

  /** Mark an entry used (it moves to the back of the eviction order). */
  touch(e: CachedPrompt): void {
    e.lastUsed = ++this.clock;
  }

  /**
   * Save a state. An entry that is a prefix of the new one is replaced; a state that an entry
   * already covers is not saved twice. Returns false when it cannot fit the budget at all.
   */
  save(tokens: readonly number[], fill: (dst: Uint8Array) => void): boolean {
    if (!this.enabled || tokens.length === 0) return false;
    const need = tokens.length * this.posBytes;
    if (this.maxBytes > 0 && need > this.maxBytes) return false;
    for (const e of this.entries) if (e.tokens.length >= tokens.length && commonPrefix(e.tokens, tokens) === tokens.length) { this.touch(e); return true; }
    this.entries = this.entries.filter((e) => !(e.tokens.length < tokens.length && commonPrefix(e.tokens, tokens) === e.tokens.length));
    if (this.maxBytes > 0) {
      this.entries.sort((a, b) => a.lastUsed - b.lastUsed);
      let total = this.bytes;
      while (this.entries.length && total + need > this.maxBytes) total -= this.entries.shift()!.kv.length;
    }
    const kv = new Uint8Array(need);
    fill(kv);
    this.entries.push({ tokens: [...tokens], kv, lastUsed: ++this.clock });
    return true;
  }

  clear(): void {
    this.entries = [];
  }
}

export function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
