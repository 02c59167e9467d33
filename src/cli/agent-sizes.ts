// bloomery CLI: how much memory a model needs where it runs: its geometry (hyper-parameters and
// weight bytes, read from a GGUF or computed for a known model before any download), the KV cache
// and work buffers for a context (and a recurrent model's state a slot), whether that fits a card or the host, and the largest context
// that does. On a card with the file at hand the sizes are the CUDA library's own
// (cudaPlanBytes); otherwise the work buffers are estimated the way cuda/runtime/ctx.cu and
// ffi/cpu/forward.c lay them out. On a card, routed experts the plan keeps in host memory
// (agent-card-share.ts) count as the plan's card share, not the file's total.
import { checkModelFile } from "../engine/model-check.ts";
import { openModelPath } from "../safetensors/model.ts";
import { GgufFile, type GgufTensorInfo } from "../gguf/index.ts";
import { familyFor } from "../models/registry.ts";
import { kvBytesPerPos, type HParams } from "../models/types.ts";
import { cudaPlanBytes } from "../engine/cuda-backend.ts";
import { NativeError } from "../../ffi/cpu.ts";
import { encodeProgram, markHostExperts } from "../engine/program.ts";
import { MappedWeights } from "../engine/weights.ts";
import { cpuContextBytes, PlanError } from "../engine/plan.ts";
import { cpuWorkBytes } from "../engine/cpu-memory.ts";
import { mtpFixedBytes, mtpKvBytesPerPos, mtpMemoryOf, mtpSlotStateBytes, type MtpMemory } from "../engine/mtp-memory.ts";
import { recurrentSlotBytes, rsStateBytes } from "../engine/recurrent-state.ts";
import { fitSharedContext, fitSlots, kvBytesPerToken, MAX_AUTO_SLOTS, sharedLayout, type SharedFit, type SlotFit } from "../engine/slot-fit.ts";
import type { CardShare, CardSplit } from "./agent-card-share.ts";
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
  /**
   * speculative decoding's draft-mtp runs beside the model (withMtp): its MTP layer's KV cache, rows and buffers
   * count on the host (its tensors are in weightBytes: the file's)
   */
  mtp?: MtpMemory;
}

const align256 = (n: number) => Math.ceil(n / 256) * 256;
const isExpert = (t: GgufTensorInfo) => /_exps\.weight$/.test(t.name);

/** Geometry of an open GGUF; throws GgufError when bloomery cannot run it (architecture, tensors). */
export function geometryFromGguf(f: GgufFile): Geometry {
  const fam = familyFor(f);
  const hp = fam.hparams(f);
  fam.program(f, hp); // checks every tensor the forward pass needs is there with its shape
  checkModelFile(f, hp); // and the shapes and types against the vocabulary and every layer in the file
  let w = 0, card = 0, ex = 0;
  for (const t of f.tensors.values()) {
    w += t.nbytes;
    card += align256(t.nbytes);
    if (isExpert(t)) ex += t.nbytes;
  }
  const embdBytes = f.tensor("token_embd.weight")?.nbytes ?? 0;
  return { hp, weightBytes: w, cardWeightBytes: card, expertBytes: ex, embdBytes, fromFile: true, gguf: f };
}

/**
 * The geometry with draft-mtp's MTP layer beside the model (of `file`, -md's, else the model's own): undefined
 * `file` and `on` false leave it as it is. A geometry without its file (a known shape) cannot say the layer's
 * sizes: it stays as it is too (the load's plan counts them).
 */
export function withMtp(g: Geometry, on: boolean, file?: string): Geometry {
  if (!on) return g;
  if (file && file !== g.gguf?.path) {
    // -md's file: its MTP layer's tensors are mapped beside the model's
    const mtp = mtpMemoryOf(openModelPath(file), false);
    return { ...g, weightBytes: g.weightBytes + mtp.weightBytes, mtp };
  }
  return g.gguf ? { ...g, mtp: mtpMemoryOf(g.gguf) } : g;
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
  /**
   * a recurrent model's state of every slot (the Qwen hybrids' conv inputs and delta-rule states): on the host with
   * the checkpoints each slot keeps of it (recurrentSlotBytes), on a card the live state alone; 0 for other models
   */
  state: number;
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
  return nSlots * nCtxSlot * kvBytesPerPos(hp);
}

/** The CUDA context's work buffers (cuda/runtime/ctx.cu buffer_list, without the KV cache). */
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

/** The CPU context's workspace (the engine's estimate, src/engine/cpu-memory.ts). */
export { cpuWorkBytes };

/** Bytes a slot holds on the host beside its KV cache: a recurrent model's states, draft-mtp's rows of the slot. */
function hostSlotState(g: Geometry, maxTokens: number): number {
  return recurrentSlotBytes(g.hp) + (g.mtp ? mtpSlotStateBytes(g.mtp, maxTokens) : 0);
}

/** What the model needs in host memory when it runs on the CPU. */
export function hostNeed(g: Geometry, s: ContextSettings): MemoryNeed {
  // with draft-mtp: its MTP layer's KV cache, its rows a slot and its buffers (its tensors are in weightBytes)
  const m = g.mtp;
  const kv = kvBytes(g.hp, s.nSlots, s.nCtxSlot) + (m ? s.nSlots * s.nCtxSlot * mtpKvBytesPerPos(m) : 0);
  const state = s.nSlots * hostSlotState(g, s.maxTokens);
  const work = cpuWorkBytes(g.hp, s) + (m ? mtpFixedBytes(m, s, false) : 0);
  return { weights: g.weightBytes, kv, state, work, total: g.weightBytes + kv + state + work, exact: false };
}

/**
 * What the model needs on a card: the CUDA library's sizes when `exact` and the file is open, else
 * the estimate. With `share` (routed experts the plan keeps in host memory) the weights are the
 * card's share and the buffers include two staging layers.
 */
export function cardNeed(g: Geometry, s: ContextSettings, exact: boolean, share?: CardShare): MemoryNeed {
  const kv = kvBytes(g.hp, s.nSlots, s.nCtxSlot);
  // the live states would be in the card's context (the card refuses the delta-net layer today); their checkpoints in host RAM
  const state = s.nSlots * rsStateBytes(g.hp);
  const work = cudaWorkBytes(g.hp, s.maxTokens) + (share ? 2 * share.stageBytes : 0);
  const weights = share ? share.cardWeightBytes : g.cardWeightBytes;
  const estimate: MemoryNeed = { weights, kv, state, work, total: weights + kv + state + work, exact: false };
  if (exact && g.gguf) {
    const w = new MappedWeights(g.gguf, false);
    try {
      const fam = familyFor(g.gguf);
      const specs = fam.program(g.gguf, g.hp);
      const prog = encodeProgram(specs, (n) => w.tensor(n), g.hp.nEmbd, g.hp.nVocab);
      if (share) markHostExperts(prog, (n) => share.host.has(n));
      const got = cudaPlanBytes(g.hp, prog, { nSlots: s.nSlots, nCtxSlot: s.nCtxSlot, maxTokens: s.maxTokens });
      return { weights: got.weights, kv, state: 0, work: got.context - kv, total: got.weights + got.context, exact: true };
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
  /** on a card: the plan's share of the weights at a context (agent-card-share.ts); absent: every tensor on the card */
  split?: CardSplit;
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
  /** on the host (the KV cache in host RAM): the prompt cache's budget, --cache-ram (0 off; -1, no limit, is not counted) */
  cacheBytes?: number;
}

/** -np auto with the context left to the model: the training context shared by the slots, each holding at least `minSlotCtx`. */
export interface SharedAsk {
  nCtxTotal: number;
  minSlotCtx: number;
  /** --fit: a total that does not fit shrinks to what does */
  shrink: boolean;
}

const MORE_HOST_LAYERS = "more would move another layer's experts to host memory (the plan at load)";

/** The card's share at a context; a plan that refuses is the reason no slot fits. */
function shareAt(o: FitOptions, s: ContextSettings): { share?: CardShare; refused?: string } {
  if (!o.split) return {};
  try {
    return { share: o.split({ nSlots: s.nSlots, nCtxSlot: s.nCtxSlot, maxTokens: s.maxTokens }) };
  } catch (e) {
    if (e instanceof PlanError) return { refused: e.message };
    throw e;
  }
}

/** The layers whose experts the plan keeps in host memory at a context (Infinity: the plan refuses it). */
function hostLayersAt(o: FitOptions, s: ContextSettings): number {
  const a = shareAt(o, s);
  return a.refused !== undefined ? Infinity : (a.share?.hostLayers ?? 0);
}

/** The largest n in [lo, hi] with ok(n), given ok(lo) and ok falling as n grows. */
function largest(lo: number, hi: number, ok: (n: number) => boolean): number {
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (ok(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/**
 * -np auto's count (src/engine/slot-fit.ts) with the weights and buffers this model needs where it
 * runs: at `ask` tokens a slot, or sharing the training context (SharedAsk). On a card the weights
 * are the plan's card share at the least context, and the slots never take the room of experts the
 * plan would then keep on the card. A context the CUDA library or the plan refuses fits no slot.
 */
export function autoSlotFit(g: Geometry, where: "card" | "host", ask: number | SharedAsk, room: SlotRoom, o: FitOptions): SlotFit | SharedFit {
  const shared = typeof ask !== "number";
  const least = shared ? ask.minSlotCtx : ask;
  // the weights and the card's share are measured at one slot of the least context; the CPU's
  // buffers grow with a slot's context, so they are counted at the widest
  const s = { nSlots: 1, nCtxSlot: least, maxTokens: o.maxTokens, nThreads: o.nThreads };
  const split = where === "card" ? shareAt(o, s) : {};
  const one = where === "card" ? cardNeed(g, s, o.exact, split.share) : hostNeed(g, { ...s, nCtxSlot: shared ? ask.nCtxTotal : least });
  // under a --host-budget the plan at load (src/engine/plan.ts) is the judge, with its own estimate
  // of the buffers: the larger one, so the load does not refuse a count chosen here
  const slotState = where === "host" ? hostSlotState(g, o.maxTokens) : rsStateBytes(g.hp);
  // draft-mtp runs beside a CPU target: its MTP layer's KV cache grows with the slots as the target's does
  const mtpKv = where === "host" && g.mtp ? mtpKvBytesPerPos(g.mtp) : 0;
  const work = where === "host" && room.loadPlanBuffers
    ? Math.max(one.work, cpuContextBytes(g.hp, { ...s, mtp: g.mtp }) - kvBytes(g.hp, 1, least) - least * mtpKv - slotState) : one.work;
  const base = {
    kvBytesPerToken: kvBytesPerToken(g.hp) + mtpKv, stateBytesPerSlot: slotState, weightBytes: one.weights, workBytes: work,
    cacheBytes: where === "host" ? Math.max(0, room.cacheBytes ?? 0) : 0,
    availableBytes: room.available, marginBytes: room.margin ?? (where === "card" ? CARD_MARGIN : HOST_MARGIN),
    where: room.where ?? (where === "card" ? "the card" : "host RAM"), availableText: room.availableText ?? (where === "card" ? "free" : "usable"),
  };
  const count = (cap?: number): SlotFit | SharedFit => shared
    ? fitSharedContext({ ...base, nCtxTotal: ask.nCtxTotal, minSlotCtx: ask.minSlotCtx, shrink: ask.shrink, capTokens: cap, capText: cap === undefined ? undefined : MORE_HOST_LAYERS })
    : fitSlots({ ...base, nCtxSlot: least, maxSlots: cap, maxSlotsText: cap === undefined ? undefined : MORE_HOST_LAYERS });
  let fit = count();
  const refused = one.refused ?? split.refused;
  if (refused !== undefined) {
    const why = `-np auto: the model cannot run on ${room.where ?? "the card"} with even 1 slot of ${least} tokens: ${refused}`;
    return { ...fit, nSlots: 0, kvBytes: 0, line: why, refusal: why };
  }
  if (where === "card" && o.split && fit.nSlots >= 1) {
    // the plan at load moves more layers' experts to host memory when the KV cache takes their room
    const keep = split.share?.hostLayers ?? 0;
    const at = (nSlots: number, nCtxSlot: number) => hostLayersAt(o, { ...s, nSlots, nCtxSlot }) <= keep;
    if (!at(fit.nSlots, fit.nCtxSlot)) {
      if (shared) {
        const layout = (t: number) => {
          const total = Math.min(ask.nCtxTotal, t);
          const l = sharedLayout(total, t, ask.minSlotCtx, MAX_AUTO_SLOTS, total < ask.nCtxTotal);
          return at(l.nSlots, l.nCtxSlot);
        };
        fit = count(largest(ask.minSlotCtx, (fit as SharedFit).nCtxTotal, layout));
      } else fit = count(largest(1, fit.nSlots, (n) => at(n, least)));
    }
  }
  return fit;
}

/** The need with these settings where the model runs (on a card, the plan's share of the weights; a plan that refuses them is `refused`). */
export function needOn(g: Geometry, where: "card" | "host", s: ContextSettings, o: FitOptions): MemoryNeed {
  if (where === "host") return hostNeed(g, s);
  const a = shareAt(o, s);
  const need = cardNeed(g, s, o.exact, a.share);
  return a.refused === undefined ? need : { ...need, refused: a.refused };
}

/** The need at context `nCtx`: split over -np N as the server splits it; with -np auto one slot of nCtx (the least such a start takes). */
export function needAt(g: Geometry, where: "card" | "host", nCtx: number, o: FitOptions): FittedContext {
  const nSlots = o.nParallel > 0 ? o.nParallel : 1;
  const nCtxSlot = o.nParallel > 0 ? Math.floor(nCtx / nSlots) : nCtx;
  const s = { nSlots, nCtxSlot, maxTokens: o.maxTokens, nThreads: o.nThreads };
  return { nCtx, nSlots, nCtxSlot, need: needOn(g, where, s, o) };
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
    const need = needOn(g, where, s, o);
    if (fitsIn(need, available, where)) return { nCtx, nSlots: a.nSlots, nCtxSlot: nCtx, need, line: a.line };
  }
  return undefined;
}

export const GiB = 1024 ** 3;
export const gib = (n: number) => `${(n / GiB).toFixed(2)} GiB`;
