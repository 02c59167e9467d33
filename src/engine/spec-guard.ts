// bloomery engine: whether speculative decoding that was not asked for (draft-mtp on by default where
// the file has an MTP layer) drafts at all, by the decode steps' measured time a token. A draft
// pays only where it is accepted often enough to cover its own cost and the wider verification
// pass (a MoE target's k+1 tokens read more experts than one token's): the guard times the steps
// that only decode, drafting and not, and keeps the faster - looking at the other after a while,
// the wait doubling each time the other loses (a server's load and its prompts change). Drafting
// asked for (--spec-type) is never guarded.

/** Decode-only steps a look at the other mode takes, and the first and longest stays before a look. */
export const GUARD_LOOK = 8;
export const GUARD_FIRST = 32;
export const GUARD_MOST = 1024;
/** the other mode is taken when its time a token was under this share of the current one's */
const GUARD_MARGIN = 0.95;

interface Side {
  ms: number;
  tokens: number;
}

/** The guard of one engine (its scheduler's steps). */
export class SpecGuard {
  /** whether the steps draft now */
  private on = true;
  /** decode-only steps in this stay, and how many it lasts before the other mode is looked at */
  private n = 0;
  private stay = GUARD_FIRST;
  /** looking at the other mode: its steps so far (-1: not looking) */
  private look = -1;
  private readonly t: Record<"on" | "off", Side> = { on: { ms: 0, tokens: 0 }, off: { ms: 0, tokens: 0 } };
  /** the last measured time a token of each mode (0: none yet), the mode changes made */
  readonly last = { on: 0, off: 0 };
  switches = 0;

  /** Whether this step drafts. */
  drafting(): boolean {
    return this.look >= 0 ? !this.on : this.on;
  }

  /**
   * A step that only decoded (no prompt tokens in it): whether it drafted, its time (the drafts'
   * making, the pass and the sampling) and the tokens it gave the sequences.
   */
  record(drafted: boolean, ms: number, tokens: number): void {
    if (tokens <= 0 || !(ms >= 0)) return;
    const side = this.t[drafted ? "on" : "off"];
    side.ms += ms;
    side.tokens += tokens;
    if (this.look >= 0) {
      if (++this.look < GUARD_LOOK) return;
      this.decide();
      return;
    }
    if (++this.n >= this.stay) {
      // this stay's measure stands for the current mode; the other is looked at now
      const cur = this.t[this.on ? "on" : "off"];
      this.last[this.on ? "on" : "off"] = cur.ms / cur.tokens;
      this.look = 0;
      this.t[this.on ? "off" : "on"] = { ms: 0, tokens: 0 };
    }
  }

  /** After a look: the other mode is taken where it was faster by the margin, else the stay doubles. */
  private decide(): void {
    const other = this.t[this.on ? "off" : "on"];
    const o = other.tokens > 0 ? other.ms / other.tokens : Infinity;
    this.last[this.on ? "off" : "on"] = other.tokens > 0 ? o : 0;
    const cur = this.last[this.on ? "on" : "off"];
    this.look = -1;
    this.n = 0;
    if (o < GUARD_MARGIN * cur) {
      this.on = !this.on;
      this.switches++;
      this.stay = GUARD_FIRST;
    } else {
      this.stay = Math.min(GUARD_MOST, this.stay * 2);
    }
    this.t.on = { ms: 0, tokens: 0 };
    this.t.off = { ms: 0, tokens: 0 };
  }
}
