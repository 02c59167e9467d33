// bloomery engine: stop strings over streamed text: releases text as soon as it cannot be the
// start of a stop string, never a partial match; reports the first full match.

export class StopMatcher {
  private held = "";
  constructor(private readonly stops: readonly string[]) {}

  /** Add text; returns what can be released now and the stop string matched, if any. */
  push(text: string): { out: string; stop?: string } {
    this.held += text;
    let best = -1, which = "";
    for (const s of this.stops) {
      if (!s) continue;
      const i = this.held.indexOf(s);
      if (i >= 0 && (best < 0 || i < best)) { best = i; which = s; }
    }
    if (best >= 0) {
      const out = this.held.slice(0, best);
      this.held = "";
      return { out, stop: which };
    }
    // hold back the longest suffix that is a prefix of some stop string
    let keep = 0;
    for (const s of this.stops) {
      for (let k = Math.min(s.length - 1, this.held.length); k > keep; k--) {
        if (this.held.endsWith(s.slice(0, k))) { keep = k; break; }
      }
    }
    const out = this.held.slice(0, this.held.length - keep);
    this.held = this.held.slice(this.held.length - keep);
    return { out };
  }

  /** The held-back remainder (at the end of generation). */
  flush(): string {
    const r = this.held;
    this.held = "";
    return r;
  }
}
