// bloomery server: the engine settings a server's flags ask for (the context per slot: -c split over
// -np N as llama-server splits it, --slot-ctx, or -np auto's count from the memory the caller
// measured; threads, batches), and one log line for each flag that parses but the CPU engine
// cannot honour, saying what happens instead.
import { availableParallelism } from "node:os";
import type { ServerOptionKey, ServerOptions } from "../cli/flags.ts";
import type { EngineOptions } from "../engine/protocol.ts";
import { AUTO_MIN_SLOTS, MIN_SHARED_SLOT_CTX } from "../engine/slot-fit.ts";
import { PROMOTE_AUTO } from "../engine/promote-fit.ts";

/** Fewest tokens a slot may hold. */
export const MIN_SLOT_CTX = 16;

/** The prompt batch when routed experts stay in host RAM beside a card and -ub is not given. */
export const HYBRID_UBATCH = 4096;

export class EngineOptionError extends Error {
  override readonly name = "EngineOptionError";
  constructor(
    readonly flag: string,
    message: string,
  ) {
    super(message);
  }
}

export interface EnginePlan {
  engine: EngineOptions;
  /** the whole context: slots x tokens per slot */
  nCtxTotal: number;
  /** the -c this plan stands for: with -np N the whole context (-c, or the model's training context), with -np auto each slot's */
  nCtxAsked: number;
  /** lines worth logging at start */
  notes: string[];
}

/**
 * What -np auto is asked: slots of `nCtxSlot` tokens each (--slot-ctx, or -c N); or, with the
 * context left to the model (-c 0), `nCtxTotal` tokens (the training context) shared by the slots,
 * each holding at least `minSlotCtx` (llama-server's -c 0 is all slots' context together).
 */
export type AutoAsk =
  | { nCtxSlot: number; nCtxTotal?: undefined; minSlotCtx?: undefined }
  | { nCtxSlot?: undefined; nCtxTotal: number; minSlotCtx: number };

/**
 * -np auto's count from the memory where the model runs (agent-plan.ts, with src/engine/slot-fit.ts),
 * and each slot's context when the slots share one (default: what was asked, or the shared context
 * split evenly); `line` says the count and why.
 */
export type AutoSlots = (ask: AutoAsk) => { nSlots: number; nCtxSlot?: number; line: string };

/** The slots and tokens per slot the flags ask for (auto's count from `auto`). */
export function slotLayout(o: ServerOptions, nCtxTrain: number, auto: AutoSlots): { nSlots: number; nCtxSlot: number; nCtxAsked: number; note?: string } {
  const flag = o.slotCtx > 0 ? "--slot-ctx" : o.nParallel > 0 ? "--parallel" : "--ctx-size";
  let nSlots: number, nCtxSlot: number, nCtxAsked: number, note: string | undefined;
  if (o.nParallel > 0 && o.slotCtx <= 0) {
    // llama-server's split: -c is the whole context
    nCtxAsked = o.ctxSize > 0 ? o.ctxSize : nCtxTrain;
    if (nCtxAsked <= 0) throw new EngineOptionError("--ctx-size", "the model does not say its training context; give -c N");
    nSlots = o.nParallel;
    nCtxSlot = Math.floor(nCtxAsked / nSlots);
    if (nCtxSlot < MIN_SLOT_CTX) throw new EngineOptionError("--parallel", `-c ${nCtxAsked} split over ${nSlots} slots leaves ${nCtxSlot} tokens per slot; give a larger -c or a smaller -np`);
  } else if (o.nParallel <= 0 && o.slotCtx <= 0 && o.ctxSize <= 0) {
    // -np auto with the context left to the model: llama-server's -c 0 is the training context for
    // all slots together; they share it (or what fits), each holding at least what a request needs
    if (nCtxTrain <= 0) throw new EngineOptionError("--ctx-size", "the model does not say its training context; give -c N or --slot-ctx N");
    if (nCtxTrain < MIN_SLOT_CTX) throw new EngineOptionError("--ctx-size", `the model's training context of ${nCtxTrain} tokens is less than a slot holds (${MIN_SLOT_CTX}); give --slot-ctx N`);
    const a = auto({ nCtxTotal: nCtxTrain, minSlotCtx: Math.min(MIN_SHARED_SLOT_CTX, nCtxTrain) });
    if (!Number.isInteger(a.nSlots) || a.nSlots < 1) throw new EngineOptionError("--parallel", `-np auto chose ${a.nSlots} slots; at least 1 is needed`);
    nSlots = a.nSlots;
    nCtxSlot = a.nCtxSlot ?? Math.floor(nCtxTrain / nSlots);
    // slots share the training context, or (a short one) each hold all of it
    if (!Number.isInteger(nCtxSlot) || nCtxSlot < MIN_SLOT_CTX || nCtxSlot > nCtxTrain || (nSlots * nCtxSlot > nCtxTrain && !(nCtxSlot === nCtxTrain && nSlots <= AUTO_MIN_SLOTS)))
      throw new EngineOptionError("--parallel", `-np auto chose ${nSlots} slots of ${nCtxSlot} tokens; the training context is ${nCtxTrain} and a slot holds at least ${MIN_SLOT_CTX}`);
    nCtxAsked = nSlots * nCtxSlot > nCtxTrain ? nCtxSlot : nSlots * nCtxSlot; // each slot all of it, or their share
    note = `srv  load_model: ${a.line}`;
  } else {
    // --slot-ctx, or -np auto with -c N: each slot gets what was asked (llama-server's auto shares
    // one cache in which a slot can grow to all of -c; here every slot has the whole -c)
    nCtxSlot = o.slotCtx > 0 ? o.slotCtx : o.ctxSize > 0 ? o.ctxSize : nCtxTrain;
    if (nCtxSlot <= 0) throw new EngineOptionError("--ctx-size", "the model does not say its training context; give -c N or --slot-ctx N");
    if (nCtxSlot < MIN_SLOT_CTX) throw new EngineOptionError(flag, `${nCtxSlot} tokens a slot: a slot holds at least ${MIN_SLOT_CTX}`);
    if (o.nParallel > 0) nSlots = o.nParallel;
    else {
      const a = auto({ nCtxSlot });
      if (!Number.isInteger(a.nSlots) || a.nSlots < 1) throw new EngineOptionError("--parallel", `-np auto chose ${a.nSlots} slots; at least 1 is needed`);
      nSlots = a.nSlots;
      note = `srv  load_model: ${a.line}`;
    }
    nCtxAsked = o.nParallel > 0 ? nSlots * nCtxSlot : nCtxSlot;
  }
  return { nSlots, nCtxSlot, nCtxAsked, note };
}

/**
 * --promote-slots as the engine gets it: as given; unset, auto (PROMOTE_AUTO) on a card unless the
 * flags keep experts in host RAM themselves - then only the plan's own host layers (a card too
 * small for every expert) get slots, and a --cpu-moe or --n-cpu-moe start stays comparable with
 * llama-server's placement. Where every expert is on the card, auto is nothing.
 */
export function promoteSlotsFor(o: ServerOptions, explicit: ReadonlySet<ServerOptionKey>, nGpuLayers: EngineOptions["nGpuLayers"], expertFlags: boolean): number {
  if (explicit.has("promoteSlots")) return o.promoteSlots;
  return nGpuLayers !== 0 && !expertFlags ? PROMOTE_AUTO : 0;
}

export function planEngine(o: ServerOptions, explicit: ReadonlySet<ServerOptionKey>, nCtxTrain: number, auto: AutoSlots): EnginePlan {
  const notes: string[] = [];
  const { nSlots, nCtxSlot, nCtxAsked, note } = slotLayout(o, nCtxTrain, auto);
  if (note) notes.push(note);
  const cores = Math.max(1, availableParallelism());
  const nThreads = o.threads > 0 ? o.threads : cores;
  const nThreadsBatch = o.threadsBatch > 0 ? o.threadsBatch : nThreads;
  let ubatch = Math.min(o.ubatchSize, o.batchSize);
  if (o.ubatchSize > o.batchSize) notes.push(`srv  load_model: -ub ${o.ubatchSize} is larger than -b ${o.batchSize}; using -ub ${ubatch}`);
  if (explicit.has("threadsBatch") && nThreadsBatch !== nThreads) notes.push(`srv  load_model: -tb ${nThreadsBatch}: the CPU engine runs prompts and generation on one pool of ${nThreads} threads`);

  // placement: -ngl picks the card (placement.ts logs what it decides); -dev names it.
  // Flags that parse but that this engine cannot honour say so.
  const one = "bloomery runs a model on one card or on the CPU";
  let device = 0;
  if (explicit.has("devices")) {
    const d = o.devices.filter((x) => x !== "none");
    const m = d.length === 1 ? /^CUDA(\d+)$/i.exec(d[0]) : null;
    if (o.devices.length === 1 && o.devices[0] === "none") notes.push("srv  load_model: -dev none: running on the CPU");
    else if (m) device = Number(m[1]);
    else notes.push(`srv  load_model: -dev ${o.devices.join(",")}: ${one}; using CUDA0`);
  }
  const nGpuLayers = explicit.has("devices") && o.devices.length === 1 && o.devices[0] === "none" ? 0 : o.nGpuLayers;
  // routed experts in host RAM beside a card: a prompt batch uploads every host layer's experts
  // once (cuda/hybrid/hybrid.cu), so larger batches amortise it (pp4096 on the H200 with --cpu-moe: 1,600
  // t/s at -ub 512, 10,788 at -ub 4096)
  const expertFlags = o.cpuMoe || o.nCpuMoe > 0 || o.overrideTensor.some((t) => /^cpu/i.test(t.buffer));
  const hostExperts = nGpuLayers !== 0 && expertFlags;
  if (hostExperts && !explicit.has("ubatchSize")) {
    const hybridUb = Math.min(HYBRID_UBATCH, explicit.has("batchSize") ? o.batchSize : HYBRID_UBATCH);
    if (hybridUb > ubatch) {
      ubatch = hybridUb;
      notes.push(`srv  load_model: routed experts in host RAM beside the card: -ub ${ubatch} (a prompt batch uploads each host layer's experts once; -ub sets it)`);
    }
  }
  if (o.tensorSplit.length > 0) notes.push(`srv  load_model: -ts ${o.tensorSplit.join(",")}: ${one}; nothing to split across`);
  if (explicit.has("splitMode")) notes.push(`srv  load_model: -sm ${o.splitMode}: ${one}; ignored`);
  if (explicit.has("mainGpu")) notes.push(`srv  load_model: -mg ${o.mainGpu}: ${one}; ignored`);
  if (explicit.has("fitTargetMiB")) notes.push("srv  load_model: -fitt: a per-device margin is not implemented; -fit shrinks only a context left to the model (-c 0) to what fits");
  if (explicit.has("flashAttn")) notes.push(`srv  load_model: -fa ${o.flashAttn}: bloomery always runs its own fused attention; the flag changes nothing`);
  if (o.contextShift) notes.push("srv  load_model: --context-shift: context shifting is not implemented; a generation stops when its slot context is full");
  if (o.cacheReuse > 0) notes.push(`srv  load_model: --cache-reuse ${o.cacheReuse}: KV shifting is not implemented; only the common prefix of a slot's last prompt is reused`);
  if (!o.contBatching) notes.push("srv  load_model: --no-cont-batching: the engine always batches the busy slots together");
  if (o.loadMode === "none") notes.push("srv  load_model: --no-mmap: weights are always memory-mapped by this engine");
  if (explicit.has("timeout") && o.timeout > 255) notes.push(`srv  load_model: -to ${o.timeout}: idle connections are closed after 255 s at most (Bun's limit); generating requests are never timed out`);

  return {
    engine: {
      nCtx: nCtxSlot,
      nSlots,
      nThreads,
      nThreadsBatch,
      batchSize: o.batchSize,
      ubatchSize: ubatch,
      cacheRamMiB: o.cacheRamMiB,
      nGpuLayers,
      device,
      batchInvariant: o.batchInvariant,
      promoteSlots: promoteSlotsFor(o, explicit, nGpuLayers, expertFlags),
      spec: {
        type: o.specType, inferred: !explicit.has("specType"), sizeN: o.specNgramSimpleSizeN, sizeM: o.specNgramSimpleSizeM,
        draftModel: o.specDraftModel, draftNgl: o.specDraftNgl === "auto" ? undefined : o.specDraftNgl, nMax: o.specDraftNMax, nMin: o.specDraftNMin, pMin: o.specDraftPMin,
      },
      placement: {
        nGpuLayers, cpuMoe: o.cpuMoe, nCpuMoe: o.nCpuMoe, overrides: o.overrideTensor.map((t) => ({ pattern: t.pattern, buffer: t.buffer })),
        hostBudgetBytes: o.hostBudgetMiB > 0 ? o.hostBudgetMiB * 1024 * 1024 : undefined,
        cardBudgetBytes: o.cardBudgetMiB > 0 ? o.cardBudgetMiB * 1024 * 1024 : undefined,
      },
    },
    nCtxTotal: nSlots * nCtxSlot,
    nCtxAsked,
    notes,
  };
}
