// bloomery CLI: how much memory a model needs where it runs: its geometry (hyper-parameters and
// weight bytes, read from a GGUF or computed for a known model before any download), the KV cache
// and work buffers for a context, whether that fits a card or the host, and the largest context
// that does. On a card with the file at hand the sizes are the CUDA library's own
// (cudaPlanBytes); otherwise the work buffers are estimated the way cuda/ctx.cu and
// ffi/cpu/forward.c lay them out.
import { GgufFile, type GgufTensorInfo } from "../gguf/index.ts";
import { familyFor } from "../models/registry.ts";
import type { HParams } from "../models/types.ts";
import { cudaPlanBytes } from "../engine/cuda-backend.ts";
import { NativeError } from "../../ffi/cpu.ts";
import { encodeProgram } from "../engine/program.ts";
import { MappedWeights } from "../engine/weights.ts";
import { cpuContextBytes } from "../engine/plan.ts";
import { fitSlots, kvBytesPerToken, type SlotFit } from "../engine/slot-fit.ts";
import { expertBytes, knownShape, tokenEmbdBytes, shapeHParams, type KnownModel, type KnownQuant } from "./known-models.ts";

/** Memory kept free on a card (as placement.ts keeps it). */
export const CARD_MARGIN = 512 * 1024 ** 2;
/** Memory kept free on the host for the process itself and the system. */
export const HOST_MARGIN = 1024 ** 3;
/** Smallest context a fitted start accepts (tokens). */
export const MIN_FIT_CTX = 4096;

export interface Geometry {
  hp: HParams;
  /** bytes of every tensor (what the host maps) */
  weightBytes: number;
  /** bytes of the card's weight arena (each tensor rounded up to 256) */
  cardWeightBytes: number;
  /** bytes of the routed experts (ffn_*_exps) */
  expertBytes: number;
  /** bytes of the token embedding (a token reads one row of it) */
  embdBytes: number;
  /** read from the model file (true), or computed from a known model's shape (false) */
  fromFile: boolean;
  /** the open file, when there is one (the card's exact sizes come from it) */
  gguf?: GgufFile;
}

const align256 = (n: number) => Math.ceil(n / 256) * 256;
const isExpert = (t: GgufTensorInfo) => /_exps\.weight$/.test(t.name);

/** Geometry of an open GGUF; throws GgufError when bloomery cannot run it (architecture, tensors). */
export function geometryFromGguf(f: GgufFile): Geometry {
  const fam = familyFor(f);
  const hp = fam.hparams(f);
  fam.program(f, hp); // checks every tensor the forward pass needs is there with its shape
  let w = 0, card = 0, ex = 0;
  for (const t of f.tensors.values()) {
    w += t.nbytes;
    card += align256(t.nbytes);
    if (isExpert(t)) ex += t.nbytes;
  }
  const embdBytes = f.tensor("token_embd.weight")?.nbytes ?? 0;
  return { hp, weightBytes: w, cardWeightBytes: card, expertBytes: ex, embdBytes, fromFile: true, gguf: f };
}

/** Geometry of a known model's quant from its shape (undefined for the demo or an unknown mix). */
export function geometryFromKnown(m: KnownModel, q: KnownQuant): Geometry | undefined {
  const shape = knownShape(m);
  if (!shape) return undefined;
  const ex = expertBytes(shape, q.name);
  const embd = tokenEmbdBytes(shape, q.name);
  if (ex === undefined || embd === undefined) return undefined;
  const tensors = 3 + 12 * shape.nLayer;
  return { hp: shapeHParams(shape, m.nCtxTrain), weightBytes: q.bytes, cardWeightBytes: q.bytes + 256 * tensors, expertBytes: ex, embdBytes: embd, fromFile: false };
}

/** Bytes read per generated token: every weight but the experts and the embedding, the experts a token uses, one embedding row. */
export function decodeBytesPerToken(g: Geometry): number {
  const rest = g.weightBytes - g.expertBytes - g.embdBytes;
  return Math.round(rest + (g.expertBytes * g.hp.nExpertUsed) / g.hp.nExpert + g.embdBytes / Math.max(1, g.hp.nVocab));
}

export interface ContextSettings {
  nSlots: number;
  /** tokens per slot */
  nCtxSlot: number;
  /** largest batch per forward pass (-ub) */
  maxTokens: number;
  /** CPU threads (each has an attention scores row) */
  nThreads: number;
}

export interface MemoryNeed {
  weights: number;
  /** the f16 K and V caches of every slot */
  kv: number;
  /** activations, routing and attention scratch */
  work: number;
  total: number;
  /** the card's numbers are the CUDA library's (true) or estimated (false) */
  exact: boolean;
  /** the CUDA library refused these sizes (a context beyond its limits): the model cannot run there */
  refused?: string;
}

/** f16 K and V for every attention layer, slot and position. */
export function kvBytes(hp: HParams, nSlots: number, nCtxSlot: number): number {
  return 2 * hp.kvLayers * nSlots * nCtxSlot * hp.nHeadKv * hp.headDim * 2;
}

/** The CUDA context's work buffers (cuda/ctx.cu buffer_list, without the KV cache). */
export function cudaWorkBytes(hp: HParams, maxTokens: number): number {
  const T = maxTokens, F = 4, I = 4, E = hp.nEmbd, K = hp.nExpertUsed, X = hp.nExpert;
  const qd = hp.nHead * hp.headDim, kd = hp.nHeadKv * hp.headDim, pairs = T * K;
  const MV = 8, SPLITS = 32, TOPK = 64 * 64;
  const bufs = [
    T * E * F, T * E * F, T * qd * F, T * kd * F, T * kd * F, T * qd * F, T * X * F,
    pairs * I, pairs * F, pairs * hp.nFf * F, pairs * E * F, pairs * I, pairs * I,
    (Math.ceil(pairs / 32) + X + 1) * 16, 64, MV * SPLITS * (qd + 2 * hp.nHead) * F,
    MV * hp.nHeadKv * I, T * I, T * I, T * F, T * TOPK * F, T * TOPK * I, T * 64 * F, T * 64 * I,
    4 * T * I + (T + Math.floor(T / 64) + 2) * 16,
  ];
  return bufs.reduce((s, b) => s + align256(b), 0) + MV * hp.nVocab * F;
}

/** The CPU context's workspace (ffi/cpu/forward.c bl_cpu_ctx_new, without the KV cache) and the logits rows. */
export function cpuWorkBytes(hp: HParams, s: ContextSettings): number {
  const T = s.maxTokens, F = 4, E = hp.nEmbd, X = hp.nExpert;
  const qd = hp.nHead * hp.headDim, kd = hp.nHeadKv * hp.headDim;
  const qrow = Math.max(E, hp.nFf, qd) * 2;
  return T * E * F * 4 + T * qd * F * 2 + T * kd * F * 2 + 2 * T * hp.nFf * F + T * X * 20 + 2 * T * qrow + s.nThreads * s.nCtxSlot * F + T * hp.nVocab * F;
}

/** What the model needs in host memory when it runs on the CPU. */
export function hostNeed(g: Geometry, s: ContextSettings): MemoryNeed {
  const kv = kvBytes(g.hp, s.nSlots, s.nCtxSlot);
  const work = cpuWorkBytes(g.hp, s);
  return { weights: g.weightBytes, kv, work, total: g.weightBytes + kv + work, exact: false };
}

/** What the model needs on a card: the CUDA library's sizes when `exact` and the file is open, else the estimate. */
export function cardNeed(g: Geometry, s: ContextSettings, exact: boolean): MemoryNeed {
  const kv = kvBytes(g.hp, s.nSlots, s.nCtxSlot);
  const work = cudaWorkBytes(g.hp, s.maxTokens);
  const estimate: MemoryNeed = { weights: g.cardWeightBytes, kv, work, total: g.cardWeightBytes + kv + work, exact: false };
  if (exact && g.gguf) {
    const w = new MappedWeights(g.gguf, false);
    try {
      const fam = familyFor(g.gguf);
      const prog = encodeProgram(fam.program(g.gguf, g.hp), (n) => w.tensor(n), g.hp.nEmbd, g.hp.nVocab);
      const got = cudaPlanBytes(g.hp, prog, { nSlots: s.nSlots, nCtxSlot: s.nCtxSlot, maxTokens: s.maxTokens });
      return { weights: got.weights, kv, work: got.context - kv, total: got.weights + got.context, exact: true };
    } catch (e) {
      if (!(e instanceof NativeError)) throw e;
      return { ...estimate, refused: e.message };
    } finally {
      w.close();
    }
  }
  return estimate;
}

/** Whether `need` fits `available` bytes with the margin kept free there. */
export function fitsIn(need: MemoryNeed, available: number, where: "card" | "host"): boolean {
  return need.refused === undefined && need.total + (where === "card" ? CARD_MARGIN : HOST_MARGIN) <= available;
}

/** Contexts tried when fitting, largest first, none above the training context. */
export function contextLadder(nCtxTrain: number): number[] {
  const steps = [nCtxTrain, 262144, 131072, 65536, 32768, 16384, 8192, 4096].filter((c) => c > 0 && c <= nCtxTrain);
  return [...new Set(steps)].sort((a, b) => b - a);
}

export interface FitOptions {
  /** -np; -1 or 0 = auto (each slot gets the whole context, as many slots as fit) */
  nParallel: number;
  maxTokens: number;
  nThreads: number;
  /** card sizes from the CUDA library when possible */
  exact: boolean;
}

export interface FittedContext {
  /** the -c that gives this: with -np N the whole context, with -np auto each slot's */
  nCtx: number;
  nSlots: number;
  nCtxSlot: number;
  need: MemoryNeed;
  /** -np auto: the slot-fit line (the count and why) */
  line?: string;
}

/** Where -np auto's count is measured, when not the plain card or host (a budget). */
export interface SlotRoom {
  /** bytes there (default: the `available` given) */
  available: number;
  /** kept free (default: CARD_MARGIN or HOST_MARGIN) */
  margin?: number;
  /** the card's name, or "host RAM" */
  where?: string;
  /** "free", "usable", "--host-budget" */
  availableText?: string;
  /** on the host, count the buffers as the plan at load does (src/engine/plan.ts) where they are more: for a --host-budget, which that plan enforces */
  loadPlanBuffers?: boolean;
}

/**
 * -np auto's count at `nCtxSlot` tokens a slot (src/engine/slot-fit.ts) with the weights and
 * buffers this model needs where it runs. A context the CUDA library refuses fits no slot.
 */
export function autoSlotFit(g: Geometry, where: "card" | "host", nCtxSlot: number, room: SlotRoom, o: FitOptions): SlotFit {
  const s = { nSlots: 1, nCtxSlot, maxTokens: o.maxTokens, nThreads: o.nThreads };
  const one = where === "card" ? cardNeed(g, s, o.exact) : hostNeed(g, s);
  // under a --host-budget the plan at load (src/engine/plan.ts) is the judge, with its own estimate
  // of the buffers: the larger one, so the load does not refuse a count chosen here
  const work = where === "host" && room.loadPlanBuffers ? Math.max(one.work, cpuContextBytes(g.hp, s) - one.kv) : one.work;
  const fit = fitSlots({
    nCtxSlot, kvBytesPerToken: kvBytesPerToken(g.hp), weightBytes: one.weights, workBytes: work,
    availableBytes: room.available, marginBytes: room.margin ?? (where === "card" ? CARD_MARGIN : HOST_MARGIN),
    where: room.where ?? (where === "card" ? "the card" : "host RAM"), availableText: room.availableText ?? (where === "card" ? "free" : "usable"),
  });
  if (one.refused === undefined) return fit;
  const why = `-np auto: the model cannot run on ${room.where ?? "the card"} with even 1 slot of ${nCtxSlot} tokens: ${one.refused}`;
  return { ...fit, nSlots: 0, kvBytes: 0, line: why, refusal: why };
}

/** The need at context `nCtx`: split over -np N as the server splits it; with -np auto one slot of nCtx (the least such a start takes). */
export function needAt(g: Geometry, where: "card" | "host", nCtx: number, o: FitOptions): FittedContext {
  const nSlots = o.nParallel > 0 ? o.nParallel : 1;
  const nCtxSlot = o.nParallel > 0 ? Math.floor(nCtx / nSlots) : nCtx;
  const s = { nSlots, nCtxSlot, maxTokens: o.maxTokens, nThreads: o.nThreads };
  return { nCtx, nSlots, nCtxSlot, need: where === "card" ? cardNeed(g, s, o.exact) : hostNeed(g, s) };
}

/**
 * The largest context of the ladder (at least MIN_FIT_CTX, or the training context if smaller)
 * that fits; undefined if none. With -np auto the ladder is each slot's context, and the slots
 * are as many as fit there.
 */
export function fitContext(g: Geometry, where: "card" | "host", available: number, o: FitOptions): FittedContext | undefined {
  const floor = Math.min(MIN_FIT_CTX, g.hp.nCtxTrain);
  for (const nCtx of contextLadder(g.hp.nCtxTrain)) {
    if (nCtx < floor) break;
    if (o.nParallel > 0) {
      const f = needAt(g, where, nCtx, o);
      if (fitsIn(f.need, available, where)) return f;
      continue;
    }
    const a = autoSlotFit(g, where, nCtx, { available }, o);
    if (a.nSlots < 1) continue;
    const s = { nSlots: a.nSlots, nCtxSlot: nCtx, maxTokens: o.maxTokens, nThreads: o.nThreads };
    const need = where === "card" ? cardNeed(g, s, o.exact) : hostNeed(g, s);
    if (fitsIn(need, available, where)) return { nCtx, nSlots: a.nSlots, nCtxSlot: nCtx, need, line: a.line };
  }
  return undefined;
}

export const GiB = 1024 ** 3;
export const gib = (n: number) => `${(n / GiB).toFixed(2)} GiB`;
