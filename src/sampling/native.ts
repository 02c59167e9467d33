// bloomery sampling: the bun:ffi side of ffi/cpu/sample.c (bl_sample_candidates, bl_sample_argmax):
// lays out the op list and arguments (ffi/bloomery.h "sampling") and reads the candidates back.
import { ptr } from "bun:ffi";
import { check, cpu } from "../../ffi/cpu.ts";
import { SamplingError } from "./errors.ts";

/** Native op kinds (BL_SAMPLE_OP_*). */
export const NativeOpKind = { add: 1, ban: 2, penalty: 3, nsigma: 4 } as const;

/** One vocabulary-wide op, applied in list order (see ffi/bloomery.h). */
export type NativeOp =
  | { readonly kind: "add"; readonly ids: Int32Array; readonly values: Float32Array }
  | { readonly kind: "ban"; readonly ids: Int32Array }
  | {
      readonly kind: "penalty";
      readonly ids: Int32Array;
      /** Occurrences of each id in the window. */
      readonly counts: Float32Array;
      readonly repeat: number;
      readonly frequency: number;
      readonly presence: number;
    }
  | { readonly kind: "nsigma"; readonly n: number };

/** Softmax statistics of the whole adjusted row (d = logit - max; s = the asked scale). */
export interface RowStats {
  /** Largest adjusted logit (-Infinity when every token is banned). */
  readonly max: number;
  /** Tokens whose adjusted logit is not -Infinity. */
  readonly finite: number;
  /** sum exp(d), sum exp(d) * d */
  readonly z1: number;
  readonly s1: number;
  /** sum exp(s d), sum exp(s d) * s d */
  readonly zs: number;
  readonly ss: number;
  readonly scale: number;
}

export interface NativeCandidates {
  /** Token ids, best first ((logit desc, id asc) order). */
  readonly ids: Int32Array;
  /** Their adjusted logits. */
  readonly logits: Float32Array;
  readonly stats?: RowStats;
}

const OP_SLOTS = 7;
const ARG_SLOTS = 16;
const A = { logits: 0, nVocab: 1, ops: 2, nOps: 3, k: 4, outIds: 5, outLogits: 6, wantStats: 7, scale: 8, nOut: 9, stats: 10 } as const;

function addr(a: Int32Array | Float32Array | BigInt64Array): bigint {
  return a.byteLength === 0 ? 0n : BigInt(ptr(a));
}

/**
 * The best `k` tokens of `logits` after `ops` (k is clamped to the vocabulary), and when
 * `statsScale` is given, the softmax statistics of the whole adjusted row at scale 1 and at
 * that scale. Throws SamplingError for bad rows (NaN or +inf logits) or ops.
 */
export function nativeCandidates(logits: Float32Array, ops: readonly NativeOp[], k: number, statsScale?: number): NativeCandidates {
  const nVocab = logits.length;
  if (nVocab === 0) throw new SamplingError("sampling: empty logits row");
  const kk = Math.max(0, Math.min(Math.floor(k), nVocab));
  const ids = new Int32Array(kk);
  const out = new Float32Array(kk);
  const opBuf = new ArrayBuffer(Math.max(1, ops.length) * OP_SLOTS * 8);
  const oi = new BigInt64Array(opBuf);
  const of = new Float64Array(opBuf);
  ops.forEach((op, j) => {
    const b = j * OP_SLOTS;
    oi[b] = BigInt(NativeOpKind[op.kind]);
    switch (op.kind) {
      case "add":
        if (op.values.length !== op.ids.length) throw new SamplingError("sampling: add op with ids and values of different lengths");
        oi[b + 1] = BigInt(op.ids.length);
        oi[b + 2] = addr(op.ids);
        oi[b + 3] = addr(op.values);
        break;
      case "ban":
        oi[b + 1] = BigInt(op.ids.length);
        oi[b + 2] = addr(op.ids);
        break;
      case "penalty":
        if (op.counts.length !== op.ids.length) throw new SamplingError("sampling: penalty op with ids and counts of different lengths");
        oi[b + 1] = BigInt(op.ids.length);
        oi[b + 2] = addr(op.ids);
        oi[b + 3] = addr(op.counts);
        of[b + 4] = op.repeat;
        of[b + 5] = op.frequency;
        of[b + 6] = op.presence;
        break;
      case "nsigma":
        of[b + 4] = op.n;
        break;
    }
  });
  const argBuf = new ArrayBuffer(ARG_SLOTS * 8);
  const ai = new BigInt64Array(argBuf);
  const af = new Float64Array(argBuf);
  ai[A.logits] = addr(logits);
  ai[A.nVocab] = BigInt(nVocab);
  ai[A.ops] = ops.length ? addr(oi) : 0n;
  ai[A.nOps] = BigInt(ops.length);
  ai[A.k] = BigInt(kk);
  ai[A.outIds] = addr(ids);
  ai[A.outLogits] = addr(out);
  ai[A.wantStats] = statsScale === undefined ? 0n : 1n;
  af[A.scale] = statsScale ?? 1;
  const st = cpu().bl_sample_candidates(ptr(ai));
  try {
    check(st, "sampling candidates");
  } catch (e) {
    throw new SamplingError(e instanceof Error ? e.message : String(e));
  }
  const res: { ids: Int32Array; logits: Float32Array; stats?: RowStats } = { ids, logits: out };
  if (statsScale !== undefined) {
    const s = A.stats;
    res.stats = { max: af[s], finite: af[s + 1], z1: af[s + 2], s1: af[s + 3], zs: af[s + 4], ss: af[s + 5], scale: statsScale };
  }
  return res;
}

/** Index of the first largest logit. Throws SamplingError on NaN or +inf. */
export function nativeArgmax(logits: Float32Array): number {
  if (logits.length === 0) throw new SamplingError("sampling: empty logits row");
  const out = new BigInt64Array(1);
  const st = cpu().bl_sample_argmax(ptr(logits), logits.length, ptr(out));
  try {
    check(st, "argmax");
  } catch (e) {
    throw new SamplingError(e instanceof Error ? e.message : String(e));
  }
  return Number(out[0]);
}
