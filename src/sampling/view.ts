// bloomery sampling: the whole vocabulary as a lazily widened, sorted candidate source. The
// native step hands back the best k tokens and softmax statistics of the whole adjusted row;
// a stage that reads past the k-th asks for more (k grows 8x a time, up to the vocabulary).
// A filtered source keeps only the tokens a grammar allows, testing each token once.
import { nativeCandidates, type NativeOp, type RowStats } from "./native.ts";
import { SamplingError } from "./errors.ts";

/** Softmax statistics of a whole source at one scale: Z = sum exp(d), S = sum exp(d) * d, d = scale * (logit - max). */
export interface ScaledStats {
  readonly max: number;
  readonly z: number;
  readonly s: number;
}

/** Tokens sorted by adjusted logit, descending; index i is the (i+1)-th best. */
export interface SortedSource {
  /** Whether entry i exists (fetching more candidates when needed). */
  has(i: number): boolean;
  id(i: number): number;
  /** Adjusted logit, before any temperature. */
  logit(i: number): number;
  /** Entries in the whole source, when known without reading them all. */
  readonly total: number | undefined;
  stats(scale: number): ScaledStats;
}

/** The native candidates of one logits row after the row-wide ops. */
export class NativeSource implements SortedSource {
  private ids: Int32Array = new Int32Array(0);
  private logits: Float32Array = new Float32Array(0);
  private readonly cache = new Map<number, ScaledStats>();
  readonly total: number;
  /** Native passes made (for tests and measurement). */
  calls = 0;

  constructor(
    private readonly row: Float32Array,
    private readonly ops: readonly NativeOp[],
    firstK: number,
    statsScale?: number,
  ) {
    this.total = row.length;
    this.fetch(Math.max(1, firstK), statsScale);
  }

  private fetch(k: number, statsScale?: number): void {
    const r = nativeCandidates(this.row, this.ops, k, statsScale);
    this.calls++;
    this.ids = r.ids;
    this.logits = r.logits;
    if (r.stats) this.keep(r.stats);
  }

  private keep(st: RowStats): void {
    this.cache.set(1, { max: st.max, z: st.z1, s: st.s1 });
    if (st.scale !== 1) this.cache.set(st.scale, { max: st.max, z: st.zs, s: st.ss });
  }

  has(i: number): boolean {
    if (i < this.ids.length) return true;
    if (i >= this.total) return false;
    this.fetch(Math.min(this.total, Math.max(i + 1, this.ids.length * 8, 256)));
    return true;
  }

  id(i: number): number {
    return this.ids[i];
  }

  logit(i: number): number {
    return this.logits[i];
  }

  /** Entries fetched so far. */
  get fetched(): number {
    return this.ids.length;
  }

  stats(scale: number): ScaledStats {
    let st = this.cache.get(scale);
    if (!st) {
      const r = nativeCandidates(this.row, this.ops, 0, scale);
      this.calls++;
      this.keep(r.stats!);
      st = this.cache.get(scale)!;
    }
    return st;
  }
}

/** The entries of `src` whose token `allowed` accepts, in the same order. */
export class FilteredSource implements SortedSource {
  private readonly idx: number[] = [];
  private scanned = 0;
  private done = false;
  private readonly cache = new Map<number, ScaledStats>();

  constructor(
    private readonly src: SortedSource,
    private readonly allowed: (id: number) => boolean,
  ) {}

  has(i: number): boolean {
    while (this.idx.length <= i) {
      if (this.done || !this.src.has(this.scanned)) {
        this.done = true;
        return false;
      }
      const j = this.scanned++;
      if (this.allowed(this.src.id(j))) this.idx.push(j);
    }
    return true;
  }

  id(i: number): number {
    return this.src.id(this.idx[i]);
  }

  logit(i: number): number {
    return this.src.logit(this.idx[i]);
  }

  get total(): number | undefined {
    return this.done ? this.idx.length : undefined;
  }

  /** Needs every allowed token: reads (and tests) the whole vocabulary once. */
  stats(scale: number): ScaledStats {
    let st = this.cache.get(scale);
    if (st) return st;
    let n = 0;
    while (this.has(n)) n++;
    if (n === 0) throw new SamplingError("sampling: no token is allowed");
    const max = this.logit(0);
    let z = 0;
    let s = 0;
    for (let i = 0; i < n; i++) {
      const l = this.logit(i);
      if (l === -Infinity) continue;
      const d = scale * (l - max);
      const e = Math.exp(d);
      z += e;
      s += e * d;
    }
    st = { max, z, s };
    this.cache.set(scale, st);
    return st;
  }
}

/** Number of entries of a source (reads it all when the total is unknown). */
export function sourceSize(src: SortedSource): number {
  if (src.total !== undefined) return src.total;
  let n = 0;
  while (src.has(n)) n++;
  return n;
}

/** The most candidates a backend's top-k forward hands the sampler (cuda-backend.ts forwardTopK). */
export const TOP_CANDIDATES_MAX = 64;

/**
 * The best tokens of a row as a backend selected them (logit desc, id asc - the native pass's
 * order), for samplers whose first cutting stage is top-k (Sampler.candidatesNeeded): entries
 * past them are not known, and asking for one (or for whole-row statistics) is an internal error.
 */
export class TopSource implements SortedSource {
  readonly total: number | undefined = undefined;

  constructor(private readonly ids: Int32Array, private readonly logits: Float32Array) {
    // as the native pass over a whole row: NaN or +inf anywhere is refused (the card hands a NaN over first)
    for (let i = 0; i < logits.length; i++) {
      if (Number.isNaN(logits[i])) throw new SamplingError("sampling: the logits row contains NaN");
      if (logits[i] === Infinity) throw new SamplingError("sampling: the logits row contains +inf");
    }
  }

  /** Entries past the candidates are unknown: a stage reaching for one is an internal error, not "no more tokens". */
  has(i: number): boolean {
    if (i < this.ids.length) return true;
    throw new SamplingError(`internal: a stage read candidate ${i + 1} of the ${this.ids.length} the backend selected`);
  }

  id(i: number): number {
    return this.ids[i];
  }

  logit(i: number): number {
    return this.logits[i];
  }

  stats(): ScaledStats {
    throw new SamplingError("internal: a stage asked for whole-row statistics of the backend's top candidates");
  }
}
