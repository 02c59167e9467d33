// bloomery engine: a recurrent model's slot states beside the KV (the gated delta-net layers' conv inputs and
// delta-rule states, bl_cpu_rs_*): the live state a slot holds after its tokens, the checkpoints it keeps of
// it at shorter prefixes, the prefixes they make restorable, and the prompt cache's saved states that carry
// them (a saved state restores only at a prefix where it kept a recurrent state); and speculative decoding's
// rollback: a snapshot of a slot's state in the backend's memory before a pass that verifies a draft, put
// back when the target rejects part of the draft (the accepted tokens are then taken again from it).
import type { HParams } from "../models/types.ts";
import type { Backend, SavedKv } from "./backend.ts";

/** A recurrent state after the first n tokens of a slot (or of a prompt cache entry). */
export interface Checkpoint {
  n: number;
  state: Uint8Array;
}

/** What a slot holds of its recurrent state. */
export interface RecurrentSlot {
  id: number;
  tokens: number[];
  /** the tokens the slot's live recurrent state has taken */
  rsAt: number;
  /** saved states at shorter prefixes of tokens */
  checkpoints: Checkpoint[];
}

/** The checkpoints a slot keeps besides its live state (the newest: a state is rs_bytes, 63 MiB a slot for Qwen3.6-35B-A3B). */
export const MAX_CHECKPOINTS = 1;

/** Bytes of one slot's recurrent state (bl_cpu_rs_bytes: every linear-attention layer's conv inputs and delta-rule state, f32); 0: none. */
export function rsStateBytes(hp: HParams): number {
  return (hp.rsLayers ?? 0) * (hp.rsDim ?? 0) * 4;
}

/**
 * Host bytes a slot's recurrent state takes: the live state in the context and the checkpoints the slot keeps
 * of it (MAX_CHECKPOINTS, the prefixes the prompt cache can restore it at). The prompt cache's own saved states
 * count in its budget (--cache-ram), as its KV does.
 */
export function recurrentSlotBytes(hp: HParams): number {
  return rsStateBytes(hp) * (1 + MAX_CHECKPOINTS);
}

export class RecurrentStates {
  /** bytes: a slot's state (Backend.rsBytes, > 0) */
  constructor(private readonly be: Backend, readonly bytes: number) {}

  /** A copy of the slot's live state. */
  live(s: RecurrentSlot): Uint8Array {
    const state = new Uint8Array(this.bytes);
    this.be.rsSave!(s.id, state);
    return state;
  }

  /** The slot holds nothing (its next token is at position 0, which starts its state anew). */
  reset(s: RecurrentSlot): void {
    s.rsAt = 0;
    s.checkpoints = [];
  }

  /** The longest prefix of at most n tokens the slot holds a state for (its live one or a checkpoint); 0: none. */
  restorable(s: RecurrentSlot, n: number): number {
    let best = s.rsAt === s.tokens.length && s.rsAt <= n ? s.rsAt : 0;
    for (const c of s.checkpoints) if (c.n <= n && c.n > best) best = c.n;
    return best;
  }

  /** The slot cut to its first keep tokens (a prefix restorable() gave), its live state put there. */
  cut(s: RecurrentSlot, keep: number): void {
    if (keep > 0 && keep !== s.rsAt) {
      const c = s.checkpoints.find((x) => x.n === keep);
      if (!c) throw new Error(`internal: slot ${s.id} keeps no recurrent state at ${keep} tokens`);
      this.be.rsLoad!(s.id, c.state);
    }
    s.rsAt = keep;
    s.tokens.length = keep;
    s.checkpoints = s.checkpoints.filter((c) => c.n <= keep);
  }

  /**
   * Speculative decoding on this model: room for every slot's snapshot in the backend (taken once, at load);
   * a backend that cannot keep one is refused by name.
   */
  reserveSnapshots(): void {
    const be = this.be;
    if (!be.rsSnapReserve || !be.rsSnapTake || !be.rsSnapBack) {
      throw new Error(`speculative decoding with recurrent layers needs a slot's recurrent state kept and put back around a verification, which the ${be.name} backend does not do yet`);
    }
    be.rsSnapReserve();
  }

  /** Before a pass that verifies a draft after the slot's tokens: its live state (at its tokens) kept in the backend. */
  snapshot(s: RecurrentSlot): void {
    if (s.rsAt !== s.tokens.length) throw new Error(`internal: slot ${s.id}'s recurrent state is at ${s.rsAt} of its ${s.tokens.length} tokens before a verification`);
    this.be.rsSnapTake!(s.id);
  }

  /** After it, part of the draft rejected: the live state back to the snapshot, taken before the slot's first `at` tokens' successors. */
  rollback(s: RecurrentSlot, at: number): void {
    this.be.rsSnapBack!(s.id);
    s.rsAt = at;
  }

  /** Keep the slot's live state as a checkpoint at its tokens. */
  checkpoint(s: RecurrentSlot): void {
    s.checkpoints = s.checkpoints.filter((c) => c.n !== s.rsAt);
    s.checkpoints.push({ n: s.rsAt, state: this.live(s) });
    if (s.checkpoints.length > MAX_CHECKPOINTS) s.checkpoints.shift();
  }

  /** The states a stash of the slot keeps: its checkpoints, and undefined for its live state (copied when stashed). */
  private statesOf(s: RecurrentSlot): (Checkpoint | undefined)[] {
    const n = s.tokens.length;
    const out: (Checkpoint | undefined)[] = s.checkpoints.filter((c) => c.n <= n && c.n !== s.rsAt);
    if (s.rsAt === n && n > 0) out.push(undefined);
    return out;
  }

  /** Bytes a stash of the slot adds to its KV. */
  stashBytes(s: RecurrentSlot): number {
    return this.bytes * this.statesOf(s).length;
  }

  /** The slot's saved KV with its recurrent states (live and checkpoints): it restores only at those. */
  stash(s: RecurrentSlot, kv: SavedKv): SavedKv {
    const cps = this.statesOf(s).map((c) => c ?? { n: s.rsAt, state: this.live(s) });
    return {
      bytes: kv.bytes + cps.length * this.bytes,
      where: kv.where,
      restorable: (m) => cps.reduce((best, c) => (c.n <= m && c.n > best ? c.n : best), 0),
      restore: (slot, m) => {
        const c = cps.find((x) => x.n === m);
        if (!c) throw new Error(`internal: no recurrent state saved at ${m} tokens`);
        kv.restore(slot, m);
        this.be.rsLoad!(slot, c.state);
      },
      free: () => kv.free(),
    };
  }
}
