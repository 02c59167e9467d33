// bloomery engine: the CPU context's workspace as ffi/cpu/forward.c's bl_cpu_ctx_new sizes it (bl_cpu_work_bytes,
// without the KV cache), with the logits rows and a recurrent model's delta-net work space at the largest batch
// (ffi/cpu/deltanet.c). One owner for the estimate: the start plan (agent-sizes.ts), -np auto and the memory a
// draft-mtp MTP layer takes beside its target (mtp-memory.ts) all read it; test/cpu-work-bytes.test.ts checks it.
import { deltanetWorkFloats } from "../models/ops.ts";
import { kvWidths, qWidth, type HParams } from "../models/types.ts";

/** What a CPU context's workspace is sized by. */
export interface CpuWorkShape {
  nSlots: number;
  /** tokens per slot */
  nCtxSlot: number;
  /** largest batch per forward pass (-ub) */
  maxTokens: number;
  /** CPU threads (each has an attention scores row) */
  nThreads: number;
}

/**
 * The CPU context's workspace (bl_cpu_work_bytes; the widths ctxParams gives it), the logits rows of a whole
 * batch, and a recurrent model's delta-net work space at the largest batch.
 */
export function cpuWorkBytes(hp: HParams, s: CpuWorkShape): number {
  const T = s.maxTokens, F = 4, E = hp.nEmbd, X = Math.max(hp.nExpert, 1);
  const qd = qWidth(hp), kv = kvWidths(hp);
  const qrow = Math.max(E, hp.nFf, qd) * 4 + 512; // the widest converted row (ctx qact_row)
  // x, h, ff_b, moe_out; q and att; k; v; ff_a (gate and up); six rows of the experts (router, scores, picks, weights, lists); qact; the threads' scores
  const batch = T * E * F * 4 + T * qd * F * 2 + T * kv.k * F + T * kv.v * F + 2 * T * hp.nFf * F + T * X * 24 + 2 * T * qrow + s.nThreads * s.nCtxSlot * F;
  const dn = hp.deltanet ? deltanetWorkFloats(hp.deltanet, T, E, s.nThreads, s.nSlots) * F : 0;
  return batch + dn + T * hp.nVocab * F;
}
