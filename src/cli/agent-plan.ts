// bloomery CLI: the plan a start uses, as data (the `plan` event, `--dry-run --json`): the model
// and where its files are, the backend chooseBackend picks and why, context and slots, weight, KV
// and work bytes against the memory there, and whether it fits. A context left to the model (-c 0)
// that does not fit is shrunk to the largest that does (with --fit, the default); a model that
// does not fit is refused with E_DOES_NOT_FIT and a command that would fit.
import type { ServerOptionKey, ServerOptions } from "./flags.ts";
import type { HfPlan } from "../hf/index.ts";
import type { HParams } from "../models/types.ts";
import { chooseBackend, PlacementError } from "../engine/placement.ts";
import { cudaStatus } from "../../ffi/cuda.ts";
import { EngineOptionError, planEngine, type AutoSlots, type EnginePlan } from "../server/engine-options.ts";
import type { SharedFit, SlotFit } from "../engine/slot-fit.ts";
import { cardSplit, planTensors, type CardSplit } from "./agent-card-share.ts";
import { planLayerSplit } from "../engine/plan-split.ts";
import { PlanError } from "../engine/plan.ts";
import { listedCards } from "./agent-machine.ts";
import { hasMtpLayer, runsOwnMtp } from "../engine/spec-mtp.ts";
import { openModelPath } from "../safetensors/model.ts";
import { tmpfsResidentBytes } from "../engine/tmpfs.ts";
import { AgentError, commandLine, withoutFlags, type ErrorEvent } from "./agent-exit.ts";
import type { Machine } from "./agent-machine.ts";
import { PLACEMENT_NOT_IMPLEMENTED, recommend } from "./agent-recommend.ts";
import type { ModelSource } from "./agent-resolve.ts";
import {
  autoSlotFit, fitContext, fitsIn, geometryFromKnown, gib, hostNeed, needAt, needOn, withMtp, CARD_MARGIN, HOST_MARGIN, MIN_FIT_CTX, type ContextSettings, type FitOptions, type FittedContext, type Geometry, type MemoryNeed,
} from "./agent-sizes.ts";

export interface PlanEvent {
  event: "plan";
  dry_run: boolean;
  model: {
    source: "file" | "demo" | "hf" | "known";
    /** the id the API answers to */
    name: string;
    /** the GGUF to load (null until an -hf download is done) */
    path: string | null;
    repo: string | null;
    quant: string | null;
    /** how the quant was chosen for a known model */
    quant_chosen: "given" | "recommended" | "default" | null;
    files: { path: string; size: number; cached: boolean }[];
    bytes_total: number;
    bytes_cached: number;
    bytes_to_download: number;
    architecture: string | null;
    n_ctx_train: number | null;
    n_layer: number | null;
    n_expert: number | null;
    n_expert_used: number | null;
    /** where the sizes come from: the GGUF, a known model's shape, or only the repository's file list */
    sizes_from: "file" | "known_shape" | "file_list";
  };
  backend: {
    kind: "cpu" | "cuda";
    device: number | null;
    device_name: string;
    /** why this backend (empty when it is what the flags plainly ask) */
    reason: string;
  };
  context: {
    /** the whole context, shared by the slots (null when the model's shape is unknown) */
    n_ctx: number | null;
    n_slots: number | null;
    n_ctx_slot: number | null;
    /** shrunk from the model's training context to fit */
    fitted: boolean;
    n_ubatch: number;
    n_threads: number;
  };
  memory: {
    where: "card" | "host";
    weights_bytes: number;
    kv_bytes: number | null;
    /** a recurrent model's slot states, with the checkpoints kept of them on the host (0 for other models) */
    recurrent_bytes: number | null;
    work_bytes: number | null;
    total_bytes: number | null;
    available_bytes: number;
    /** kept free besides total_bytes */
    margin_bytes: number;
    /** null when the model's shape is unknown (an -hf repository not downloaded and not in the known table) */
    fits: boolean | null;
    /** the card's sizes are the CUDA library's own (else estimated) */
    exact: boolean;
  };
  notes: string[];
  not_implemented: { dense_tensors_on_host: string };
  /** the command that starts what this plan describes */
  command: string;
  /**
   * where -dev lists several cards: the layer split across them (src/engine/plan-split.ts), planned
   * only (built: false): the start runs on the first listed card
   */
  split?: {
    mode: string;
    built: false;
    cards: { device: number; device_name: string; layers: number[]; total_bytes: number; free_bytes: number; fits: boolean }[];
    host_experts_bytes: number;
    fits: boolean;
    refusal?: string;
  };
  /** present when the start would be refused */
  refusal?: ErrorEvent;
}

export interface PlanInput {
  /** options after the source is resolved (sourceOptions) */
  o: ServerOptions;
  explicit: ReadonlySet<ServerOptionKey>;
  argv: readonly string[];
  source: ModelSource;
  machine: Machine;
  dryRun: boolean;
  /** the model's geometry, from its file or its known shape (undefined when unknown) */
  geometry?: Geometry;
  /** the -hf choice and what is cached (dry-run) */
  hfPlan?: HfPlan;
  /** the local GGUF, once known */
  path?: string;
}

export interface StartPlan {
  event: PlanEvent;
  /** the engine settings (undefined when the model's shape is unknown) */
  engine?: EnginePlan;
  refusal?: AgentError;
}

const CTX_FLAGS = { "-c": true, "--ctx-size": true };
const SLOT_CTX_FLAGS = { "-c": true, "--ctx-size": true, "--slot-ctx": true };
const NGL_FLAGS = { "-ngl": true, "--gpu-layers": true, "--n-gpu-layers": true };

/** argv with the flags of `drop` replaced by `add`. */
function replaced(argv: readonly string[], drop: Record<string, boolean>, add: string[]): string {
  return commandLine([...withoutFlags(argv, drop), ...add]);
}

function settingsOf(ep: EnginePlan): ContextSettings {
  return { nSlots: ep.engine.nSlots, nCtxSlot: ep.engine.nCtx, maxTokens: ep.engine.ubatchSize, nThreads: ep.engine.nThreads };
}

/** -np auto before the placement is known: one slot (the plan counts them where the model runs). */
const ONE_SLOT: AutoSlots = () => ({ nSlots: 1, line: "-np auto: 1 slot until the placement is known" });

function engineFor(o: ServerOptions, explicit: ReadonlySet<ServerOptionKey>, nCtxTrain: number, auto: AutoSlots, nCtx?: number): EnginePlan {
  try {
    return planEngine(nCtx === undefined ? o : { ...o, ctxSize: nCtx }, explicit, nCtxTrain, auto);
  } catch (e) {
    if (e instanceof EngineOptionError) throw new AgentError("E_USAGE", `${e.flag}: ${e.message}`, "bloomery-serve --help");
    throw e;
  }
}

const RECOMMEND = "bloomery-serve --recommend   # a model or quant that fits this machine";

/** The start command of the quant of the same known model that fits this machine best, if one does. */
function fittingAlternative(inp: PlanInput, ep: EnginePlan): string | undefined {
  const k = inp.source.known;
  if (!k) return undefined;
  const quants = k.model.quants.flatMap((quant) => {
    const geometry = geometryFromKnown(k.model, quant);
    return geometry ? [{ quant, geometry }] : [];
  });
  const rec = recommend(inp.machine, [{ model: k.model, quants }], { nParallel: inp.o.nParallel, maxTokens: ep.engine.ubatchSize, nThreads: ep.engine.nThreads }).models[0].recommended;
  return rec ? `${rec.command}   # ${rec.quant} fits` : undefined;
}

function describeNeed(n: MemoryNeed, s: ContextSettings): string {
  const state = n.state > 0 ? ` + recurrent state ${gib(n.state)}` : "";
  return `weights ${gib(n.weights)} + KV cache ${gib(n.kv)}${state} + buffers ${gib(n.work)} (${s.nSlots} slot(s) of ${s.nCtxSlot} positions)`;
}

function modelPart(inp: PlanInput, g: Geometry | undefined): PlanEvent["model"] {
  const { source: src, o, hfPlan } = inp;
  const hp = g?.hp;
  const files = hfPlan ? hfPlan.files.map((f) => ({ path: f.path, size: f.size, cached: f.cached })) : [];
  const total = hfPlan ? hfPlan.bytesTotal : (g?.gguf?.totalBytes ?? g?.weightBytes ?? 0);
  const cached = hfPlan ? hfPlan.bytesCached : src.kind === "hf" ? 0 : total;
  return {
    source: src.byName && src.kind === "hf" ? "known" : src.kind,
    name: o.alias[0] ?? o.hfRepo ?? (inp.path ?? src.path ?? "").replace(/^.*\//, ""),
    path: inp.path ?? src.path ?? null,
    repo: src.spec?.repo ?? null,
    quant: src.known?.tag ?? src.spec?.tag ?? null,
    quant_chosen: src.known?.chosen ?? null,
    files,
    bytes_total: total,
    bytes_cached: cached,
    bytes_to_download: src.kind === "hf" ? (hfPlan ? hfPlan.bytesTotal - hfPlan.bytesCached : (inp.path ? 0 : total)) : 0,
    architecture: hp?.arch ?? null,
    n_ctx_train: hp?.nCtxTrain ?? null,
    n_layer: hp?.nLayer ?? null,
    n_expert: hp?.nExpert ?? null,
    n_expert_used: hp?.nExpertUsed ?? null,
    sizes_from: !g ? "file_list" : g.fromFile ? "file" : "known_shape",
  };
}

/** Context and slots known from the flags alone (before the model's shape is). */
function knownSlots(o: ServerOptions): { n_ctx: number | null; n_slots: number | null; n_ctx_slot: number | null } {
  const n = o.nParallel > 0 ? o.nParallel : null;
  const slot = o.slotCtx > 0 ? o.slotCtx : n === null ? (o.ctxSize > 0 ? o.ctxSize : null) : o.ctxSize > 0 ? Math.floor(o.ctxSize / n) : null;
  return { n_ctx: n !== null && slot !== null ? n * slot : null, n_slots: n, n_ctx_slot: slot };
}

/**
 * The geometry with draft-mtp's MTP layer when the start runs it: --spec-type draft-mtp (the MTP layer of -md,
 * else of the model's file), or -md alone naming a file with one (as the engine infers it: spec-mtp.ts specFor).
 */
function mtpGeometry(g: Geometry, o: ServerOptions, explicit: ReadonlySet<ServerOptionKey>): Geometry {
  const file = o.specDraftModel || undefined;
  try {
    const inferred = o.specType === "draft-simple" && !explicit.has("specType") && !!file && hasMtpLayer(openModelPath(file));
    return withMtp(g, o.specType === "draft-mtp" || inferred, file);
  } catch (e) {
    throw new AgentError("E_USAGE", `--spec-type draft-mtp: ${e instanceof Error ? e.message : String(e)}`, "bloomery-serve --help");
  }
}

/**
 * The plan of a start with these options on this machine; a refusal when it would not run. With no
 * --spec-type and no -md, where the model's own file has an MTP layer the engine runs, draft-mtp is on
 * by default (spec-mtp.ts specFor): the plan counts its layer where the start then runs it on the CPU
 * without a refusal and without a smaller context than the plan without it; else the engine turns
 * it off (worker.ts), and so does the plan, with a note.
 */
export function planStart(inp: PlanInput): StartPlan {
  const { o, explicit } = inp;
  const g = inp.geometry;
  const byDefault = g?.gguf !== undefined && o.specType === "none" && !explicit.has("specType") && !o.specDraftModel && runsOwnMtp(g.gguf);
  if (!byDefault) return planWith(inp, false);
  const on = planWith(inp, true);
  // the plan without the MTP layer is needed only where the layer is refused, on the card, or fitted the context
  const usable = !on.refusal && on.event.backend.kind === "cpu";
  const plain = usable && !on.event.context.fitted ? undefined : planWith(inp, false);
  const shrinks = on.event.context.fitted && plain !== undefined && !plain.event.context.fitted;
  if (usable && !shrinks) {
    on.event.notes.push("speculative decoding: draft-mtp on by default (the model's MTP layer, counted here; --spec-type none turns it off)");
    return on;
  }
  const why = on.refusal ? `with its MTP layer ${on.refusal.message}` : shrinks ? "its MTP layer would shrink the context" : "the card does not run the MTP layer yet";
  plain!.event.notes.push(`speculative decoding: draft-mtp off: ${why} (--spec-type draft-mtp asks for it)`);
  return plain!;
}

function planWith(inp: PlanInput, mtpByDefault: boolean): StartPlan {
  const { o, explicit, argv, machine } = inp;
  // draft-mtp's MTP layer runs beside a CPU target: the host's sums count it (agent-sizes.ts withMtp)
  const g = inp.geometry && (mtpByDefault ? withMtp(inp.geometry, true) : mtpGeometry(inp.geometry, o, explicit));
  const notes: string[] = [];
  const command = commandLine(withoutFlags(argv, { "--dry-run": false }));
  const base = (): Omit<PlanEvent, "backend" | "context" | "memory"> => ({
    event: "plan", dry_run: inp.dryRun, model: modelPart(inp, g), notes, not_implemented: { dense_tensors_on_host: PLACEMENT_NOT_IMPLEMENTED }, command,
  });
  const ctxExplicit = explicit.has("ctxSize") || o.slotCtx > 0;
  const auto = o.nParallel <= 0;
  /** The need as the refusal states it: at the smallest context a fit would take when the context was left to the model. */
  const shortOf = (geo: Geometry, place: "card" | "host", n: MemoryNeed, e: EnginePlan): string => {
    if (ctxExplicit || !o.fit) return describeNeed(n, settingsOf(e));
    const least = Math.min(MIN_FIT_CTX, geo.hp.nCtxTrain);
    const f = needAt(geo, place, least, fitOpts(e, exact));
    return `even with -c ${least}, ${describeNeed(f.need, { ...settingsOf(e), nSlots: f.nSlots, nCtxSlot: Math.floor(least / f.nSlots) })}`;
  };
  /** The command with the smaller context a fit found: --slot-ctx when the flags gave it, else -c. */
  const smallerCtx = (f: FittedContext): string =>
    o.slotCtx > 0 ? replaced(argv, SLOT_CTX_FLAGS, ["--slot-ctx", String(f.nCtxSlot)]) : replaced(argv, CTX_FLAGS, ["-c", String(f.nCtx)]);
  /** on a card: the plan's share of the weights (routed experts the plan keeps in host memory are not on the card) */
  let split: CardSplit | undefined;
  const fitOpts = (ep: EnginePlan, exact: boolean): FitOptions => ({ nParallel: o.nParallel, maxTokens: ep.engine.ubatchSize, nThreads: ep.engine.nThreads, exact, split });

  if (!g) {
    // the shape is read from the GGUF after the download: only the file sizes are known now
    const ngl = explicit.has("devices") && o.devices.length === 1 && o.devices[0] === "none" ? 0 : o.nGpuLayers;
    const unknownHp: HParams = { arch: "", nVocab: 0, nEmbd: 0, nLayer: 0, nCtxTrain: 0, nHead: 0, nHeadKv: 0, headDim: 0, nFf: 0, nExpert: 0, nExpertUsed: 0, eps: 0, kvLayers: 0 };
    const choice = chooseBackend(unknownHp, { nGpuLayers: ngl }); // reads only nLayer, for a partial -ngl note
    const card = choice.kind === "cuda" ? machine.cards[0] : undefined;
    notes.push(`the model's shape is read from its ${inp.hfPlan?.folder ? "config.json" : "GGUF"} after the download: context, KV cache and fit are decided then`);
    const event: PlanEvent = {
      ...base(),
      backend: { kind: choice.kind, device: card ? card.index : null, device_name: card?.name ?? "CPU", reason: choice.note },
      context: { ...knownSlots(o), fitted: false, n_ubatch: Math.min(o.ubatchSize, o.batchSize), n_threads: o.threads > 0 ? o.threads : machine.cpu.cores },
      memory: {
        where: card ? "card" : "host", weights_bytes: inp.hfPlan?.bytesTotal ?? 0, kv_bytes: null, recurrent_bytes: null, work_bytes: null, total_bytes: null,
        available_bytes: card ? card.free_bytes : machine.ram.usable_bytes, margin_bytes: card ? CARD_MARGIN : HOST_MARGIN, fits: null, exact: false,
      },
    };
    return { event };
  }

  const hp = g.hp;
  // a GGUF on a tmpfs is RAM already: mapped in place, its tensors take no RAM beyond it (as the load's plan counts it)
  const resident = g.gguf ? tmpfsResidentBytes(g.gguf) : 0;
  const hostRoom = machine.ram.usable_bytes + resident;
  if (resident > 0) notes.push(`the model's file lies on a tmpfs (RAM already): its ${gib(resident)} mapped in place count as available host memory`);
  let ep = engineFor(o, explicit, hp.nCtxTrain, ONE_SLOT);
  let fitted = false;
  let choice: { kind: "cpu" | "cuda"; note: string };
  try {
    choice = chooseBackend(hp, { nGpuLayers: ep.engine.nGpuLayers, device: ep.engine.device });
  } catch (e) {
    if (e instanceof PlacementError) throw new AgentError("E_USAGE", e.message, "bloomery-serve --help");
    throw e;
  }
  let reason = choice.note;
  let refusal: AgentError | undefined;
  let where: "card" | "host" = "host";
  let need: MemoryNeed;
  let available = hostRoom;
  let deviceName = "CPU";
  let device: number | null = null;
  let exact = false;
  /** -np auto's last count, and whether it was measured against the memory itself (not a budget) */
  let autoFit: { fit: SlotFit | SharedFit; plain: boolean } | undefined;

  /** -np auto's count on `place` (the budget flags, when smaller, stand for the memory there). */
  const slotsOn = (place: "card" | "host", name: string, avail: number, ex: boolean): AutoSlots => (ask) => {
    const budgetMiB = place === "card" ? o.cardBudgetMiB : o.hostBudgetMiB;
    const budget = budgetMiB > 0 ? budgetMiB * 1024 * 1024 : Infinity;
    const binds = budget < avail;
    const fit = autoSlotFit(g, place, ask.nCtxTotal === undefined ? ask.nCtxSlot : { nCtxTotal: ask.nCtxTotal, minSlotCtx: ask.minSlotCtx, shrink: o.fit }, {
      available: binds ? budget : avail,
      // as the plan at load: a host budget is all the room there is; the card keeps its margin
      margin: place === "card" ? CARD_MARGIN : binds ? 0 : HOST_MARGIN,
      where: name,
      availableText: binds ? (place === "card" ? "--card-budget" : "--host-budget") : place === "card" ? "free" : "usable",
      loadPlanBuffers: binds,
      // the KV cache in host RAM: the prompt cache's budget lives there too
      cacheBytes: place === "host" && o.cacheRamMiB > 0 ? o.cacheRamMiB * 1024 * 1024 : 0,
    }, fitOpts(ep, ex));
    autoFit = { fit, plain: !binds };
    if (fit.nSlots >= 1) return { nSlots: fit.nSlots, nCtxSlot: fit.nCtxSlot, line: fit.line };
    // the memory itself: the start is refused with every term (autoRefusal); a budget: the plan at load decides
    const one = ask.nCtxTotal === undefined ? ask.nCtxSlot : ask.minSlotCtx;
    return { nSlots: 1, nCtxSlot: one, line: `${binds ? (fit.refusal ?? fit.line) : fit.line}; trying 1 slot of ${one} tokens` };
  };
  /** The shared context shrank to fit (-c 0 with -np auto): the plan is fitted. */
  const autoShrunk = (): boolean => auto && autoFit !== undefined && autoFit.fit.nSlots >= 1 && "shrunk" in autoFit.fit && autoFit.fit.shrunk;
  /** The refusal of an auto count that fit nothing in the memory itself (every term of its sum), else undefined. */
  const autoShort = (): boolean => auto && autoFit?.plain === true && autoFit.fit.nSlots === 0;
  const autoRefusal = (): string | undefined => (ctxExplicit && autoShort() ? autoFit?.fit.refusal : undefined);

  const refit = (place: "card" | "host", avail: number, ex: boolean): boolean => {
    if (ctxExplicit || !o.fit) return false;
    const f = fitContext(g, place, avail, fitOpts(ep, ex));
    if (!f) return false;
    const asked = ep.nCtxAsked;
    ep = engineFor(o, explicit, hp.nCtxTrain, () => ({ nSlots: f.nSlots, line: f.line ?? "" }), f.nCtx);
    if (f.nCtx !== asked) {
      fitted = true;
      notes.push(`fit: the training context of ${hp.nCtxTrain} tokens does not fit; using -c ${f.nCtx}`);
    }
    need = f.need;
    return true;
  };

  if (choice.kind === "cuda") {
    const dev = ep.engine.device ?? 0;
    const card = machine.cards.find((c) => c.index === dev);
    if (!card) throw new AgentError("E_USAGE", `-dev CUDA${dev}: this machine has ${machine.cuda.devices} CUDA device(s)`, replaced(argv, { "-dev": true, "--device": true }, []));
    where = "card";
    available = card.free_bytes;
    deviceName = card.name;
    device = dev;
    exact = cudaStatus().ok && g.gguf !== undefined;
    split = cardSplit(g, ep.engine.placement ?? {}, { card: { name: card.name, freeBytes: card.free_bytes }, hostAvailableBytes: hostRoom });
    if (auto) ep = engineFor(o, explicit, hp.nCtxTrain, slotsOn("card", card.name, available, exact));
    need = needOn(g, "card", settingsOf(ep), fitOpts(ep, exact));
    if ((!fitsIn(need, available, "card") || autoShort()) && !refit("card", available, exact)) {
      const msg = need.refused
        ? `the model cannot run on ${card.name} with ${settingsOf(ep).nSlots} slot(s) of ${settingsOf(ep).nCtxSlot} positions: ${need.refused}`
        : (autoRefusal() ?? `the model does not fit ${card.name}: ${shortOf(g, "card", need, ep)} need more than the ${gib(available)} free of ${gib(card.total_bytes)} (${gib(CARD_MARGIN)} kept free)`);
      if (ep.engine.nGpuLayers === "auto") {
        reason = `placement: ${msg}; every layer runs on the CPU`;
        ep = { ...ep, engine: { ...ep.engine, nGpuLayers: 0 } };
        choice = { kind: "cpu", note: reason };
      } else {
        const smaller = fitContext(g, "card", available, fitOpts(ep, exact));
        const next = smaller
          ? smallerCtx(smaller)
          : (fittingAlternative(inp, ep) ?? replaced(argv, NGL_FLAGS, ["-ngl", "0"]) + "   # on the CPU");
        refusal = new AgentError("E_DOES_NOT_FIT", msg, next);
      }
    }
  }
  if (choice.kind === "cpu") {
    where = "host";
    available = hostRoom;
    deviceName = "CPU";
    device = null;
    exact = false;
    split = undefined;
    if (auto) {
      autoFit = undefined;
      ep = engineFor(o, explicit, hp.nCtxTrain, slotsOn("host", "host RAM", available, false));
    }
    need = hostNeed(g, settingsOf(ep));
    if ((!fitsIn(need, available, "host") || autoShort()) && !refit("host", available, false)) {
      const smaller = fitContext(g, "host", available, fitOpts(ep, false));
      const next = smaller ? smallerCtx(smaller) : (fittingAlternative(inp, ep) ?? RECOMMEND);
      refusal = new AgentError("E_DOES_NOT_FIT", autoRefusal() ?? `the model does not fit this machine's memory: ${shortOf(g, "host", need, ep)} need more than the ${gib(available)} of RAM usable (${gib(HOST_MARGIN)} kept free)`, next);
    }
  }
  if (autoShrunk()) {
    // -c 0 with -np auto: the slots share what fits
    fitted = true;
    const n = ep.engine.nSlots, c = ep.engine.nCtx;
    notes.push(`fit: the training context of ${hp.nCtxTrain} tokens does not fit; ${n * c > hp.nCtxTrain || n === 1 ? `${n === 1 ? "the slot holds" : "each slot holds"} ${c}` : `the slots share ${n * c}`}`);
  }
  notes.push(...ep.notes.map((n) => n.replace(/^srv\s+load_model:\s*/, "")));
  // the plan decides: an engine told the CPU does not probe the card again
  if (choice.kind === "cpu") ep = { ...ep, engine: { ...ep.engine, nGpuLayers: 0 } };
  const n = need!;
  const event: PlanEvent = {
    ...base(),
    backend: { kind: choice.kind, device, device_name: deviceName, reason },
    context: { n_ctx: ep.engine.nCtx * ep.engine.nSlots, n_slots: ep.engine.nSlots, n_ctx_slot: ep.engine.nCtx, fitted, n_ubatch: ep.engine.ubatchSize, n_threads: ep.engine.nThreads },
    memory: {
      where, weights_bytes: n.weights, kv_bytes: n.kv, recurrent_bytes: n.state, work_bytes: n.work, total_bytes: n.total, available_bytes: available,
      margin_bytes: where === "card" ? CARD_MARGIN : HOST_MARGIN, fits: refusal === undefined, exact: n.exact,
    },
  };
  // -dev listing several cards of this machine: the layer split they would take, planned (the runtime is one card)
  const s = splitOf(inp, g, ep);
  if (s) {
    event.split = s.split;
    notes.push(...s.lines,
      `the layer split across ${listedCards(o.devices).map((d) => `CUDA${d}`).join(", ")} is planned, not built yet: this start runs on ${choice.kind === "cuda" ? `CUDA${ep.engine.device ?? 0}` : "the CPU"}` +
      (s.split.refusal ? ` (and the split would be refused: ${s.split.refusal})` : ""));
  }
  if (refusal) event.refusal = refusal.toEvent();
  return { event, engine: ep, refusal };
}

/** The plan as a few human lines (dry-run without --json). */
export function planText(p: PlanEvent): string {
  const m = p.model, c = p.context, mem = p.memory;
  const lines = [
    `model:   ${m.name}${m.repo ? ` (${m.repo}${m.quant ? `:${m.quant}` : ""}${m.quant_chosen ? `, quant ${m.quant_chosen}` : ""})` : ""}`,
    `         ${m.path ?? "not downloaded yet"}${m.bytes_to_download > 0 ? `; ${gib(m.bytes_to_download)} to download` : ""}`,
    `backend: ${p.backend.kind === "cuda" ? `${p.backend.device_name} (CUDA${p.backend.device})` : "CPU"}${p.backend.reason ? ` - ${p.backend.reason}` : ""}`,
    c.n_ctx === null ? "context: decided after the download" : `context: ${c.n_ctx} tokens, ${c.n_slots} slot(s) of ${c.n_ctx_slot}${c.fitted ? " (fitted)" : ""}`,
    mem.total_bytes === null
      ? `memory:  weights ${gib(mem.weights_bytes)}; the rest is known after the download`
      : `memory:  ${gib(mem.total_bytes)} (weights ${gib(mem.weights_bytes)}, KV ${gib(mem.kv_bytes ?? 0)}${mem.recurrent_bytes ? `, recurrent state ${gib(mem.recurrent_bytes)}` : ""}, buffers ${gib(mem.work_bytes ?? 0)}) of ${gib(mem.available_bytes)} ${mem.where === "card" ? "free on the card" : "usable RAM"}: ${mem.fits ? "fits" : "does not fit"}`,
    ...p.notes.map((n) => `note:    ${n}`),
    `start:   ${p.command}`,
  ];
  return lines.join("\n");
}

/** The layer split's plan where -dev lists several cards this machine has, with its placement lines (undefined otherwise); an error in it is said as its refusal. */
function splitOf(inp: PlanInput, g: Geometry, ep: EnginePlan): { split: NonNullable<PlanEvent["split"]>; lines: string[] } | undefined {
  const listed = listedCards(inp.o.devices);
  if (listed.length < 2) return undefined;
  const cards = listed.map((i) => inp.machine.cards.find((c) => c.index === i)).filter((c) => c !== undefined);
  if (cards.length < 2) return undefined;
  const e = ep.engine, pl = e.placement ?? {};
  const flags = { tensorSplit: inp.o.tensorSplit, splitMode: inp.o.splitMode, mainGpu: inp.o.mainGpu, cpuMoe: pl.cpuMoe, nCpuMoe: pl.nCpuMoe, overrides: pl.overrides };
  const sc = cards.map((c) => ({ index: c.index, name: c.name, freeBytes: c.free_bytes }));
  try {
    const p = planLayerSplit(g.hp, planTensors(g), sc, flags, { nSlots: e.nSlots, nCtxSlot: e.nCtx, maxTokens: e.ubatchSize });
    const split: NonNullable<PlanEvent["split"]> = {
      mode: inp.o.splitMode, built: false, host_experts_bytes: p.host.experts, fits: p.refusal === undefined,
      cards: p.cards.map((c) => ({ device: c.card.index, device_name: c.card.name, layers: c.layers, total_bytes: c.total, free_bytes: c.card.freeBytes, fits: c.fits })),
    };
    if (p.refusal) split.refusal = p.refusal;
    return { split, lines: p.lines };
  } catch (err) {
    if (!(err instanceof PlanError)) throw err;
    return { split: { mode: inp.o.splitMode, built: false, host_experts_bytes: 0, fits: false, refusal: err.message, cards: [] }, lines: [] };
  }
}
