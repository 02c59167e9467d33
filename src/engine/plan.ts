// bloomery engine: the placement plan at load - which tensors the card holds, which stay in host
// RAM, and which routed experts are read from the file on demand (the NVMe tier) - from llama's
// placement flags (-ngl, --cpu-moe, --n-cpu-moe, -ot), the card's free memory and the host's
// available RAM, or budgets that plan as if the machine were smaller. One line states the plan;
// a plan that cannot run is refused before anything is loaded, naming every term of its sum.
import { deltanetWorkFloats } from "../models/ops.ts";
import { kvBytesPerPos, type HParams } from "../models/types.ts";
import { recurrentSlotBytes } from "./recurrent-state.ts";
import { mtpBytes, type MtpMemory } from "./mtp-memory.ts";

export type Tier = "card" | "host" | "disk";
export type GpuLayersSetting = number | "auto" | "all";

export interface PlanTensor {
  name: string;
  bytes: number;
}

/** llama's placement flags, and bloomery's budgets. */
export interface PlacementFlags {
  /** -ngl: layers on the card (llama: the last N, the output counting as one) */
  nGpuLayers?: GpuLayersSetting;
  /** --cpu-moe: every routed expert in host memory */
  cpuMoe?: boolean;
  /** --n-cpu-moe N: the routed experts of the first N layers in host memory */
  nCpuMoe?: number;
  /** -ot pattern=BUFFER, in order; the first whose regex matches a tensor's name places it */
  overrides?: readonly { pattern: string; buffer: string }[];
  /** plan as if the card had at most this much free (bytes) */
  cardBudgetBytes?: number;
  /** plan as if the host had at most this much available (bytes) */
  hostBudgetBytes?: number;
}

export interface PlanMachine {
  /** the card the plan may use; null on a machine without one (or when the CPU was chosen) */
  card: { name: string; freeBytes: number } | null;
  /** what the host can give the model: MemAvailable, the cgroup's room, whichever is smaller */
  hostAvailableBytes: number;
}

export interface PlanContext {
  nSlots: number;
  nCtxSlot: number;
  maxTokens: number;
  /** the CPU context's threads (each has an attention scores row; default 1) */
  nThreads?: number;
  /** speculative decoding's draft-mtp: the MTP layer that drafts beside the target (its tensors, context and rows: mtp-memory.ts) */
  mtp?: MtpMemory;
}

/** Bytes per tier, split as the line states them. */
export interface TierBytes {
  dense: number;
  experts: number;
  nExperts: number;
}

export interface LoadPlan {
  backend: "cpu" | "cuda";
  card: TierBytes;
  host: TierBytes & { context: number; budget: number };
  disk: TierBytes;
  /** the RAM the NVMe tier's expert cache gets (set only when some experts are on disk) */
  expertRamBytes?: number;
  /** with a card: the first N layers' routed experts the plan moved to host memory so the rest fits the card */
  autoHostLayers?: number;
  /**
   * the tier of every tensor (with a card: routed experts may be "host", run by the CPU beside the
   * card, or "disk" when those do not fit the host budget: the same CPU reads them from the file on demand)
   */
  where: Map<string, Tier>;
  line: string;
}

export class PlanError extends Error {
  override readonly name = "PlanError";
}

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
/** host RAM the plan leaves to the OS and the process's own heap */
export const HOST_RESERVE = 1 * GiB;
/** the NVMe tier's cache must hold at least this many layers' worth of a token's experts */
const MIN_CACHE_LAYERS = 2;

/** Bytes as the plan's lines say them: "1.25 GiB". */
export const gib = (n: number) => `${(n / GiB).toFixed(2)} GiB`;

/** Routed-expert tensors (3-D, one slab an expert): blk.N.ffn_{gate,up,down,gate_up}_exps.* */
export function expertLayer(name: string): number | null {
  const m = /^blk\.(\d+)\.ffn_(?:gate|up|down|gate_up)_exps\./.exec(name);
  return m ? Number(m[1]) : null;
}

/** The block a tensor belongs to (blk.N.*), or null. */
export function layerOf(name: string): number | null {
  const m = /^blk\.(\d+)\./.exec(name);
  return m ? Number(m[1]) : null;
}

/**
 * The host bytes of the CPU backend's context: the f16 KV cache of every slot and its recurrent state with the
 * checkpoints the scheduler keeps of it (recurrentSlotBytes), its workspace (an estimate; with the delta-net
 * layers' work space at the largest batch, its threads' share within the 64 MiB); with draft-mtp (c.mtp) the MTP
 * layer's context and rows beside it (mtp-memory.ts; its tensors are weights, planLoad counts them there).
 */
export function cpuContextBytes(hp: HParams, c: PlanContext): number {
  const kv = c.nSlots * (c.nCtxSlot * kvBytesPerPos(hp) + recurrentSlotBytes(hp)); // K and V, f16; the states f32
  const perTok = (6 * hp.nEmbd + 3 * hp.nHead * hp.headDim + 3 * Math.max(hp.nFf, hp.nEmbd) + hp.nExpert * 2 + hp.nVocab) * 4;
  const dn = hp.deltanet ? deltanetWorkFloats(hp.deltanet, c.maxTokens, hp.nEmbd, 1, c.nSlots) * 4 : 0;
  const mtp = c.mtp ? mtpBytes(c.mtp, { ...c, nThreads: c.nThreads ?? 1 }, false) : 0;
  return kv + c.maxTokens * perTok + dn + 64 * MiB + mtp;
}

/** The card's bytes beside the weights (an estimate of cuda/runtime/ctx.cu's buffers): the f16 KV cache of every slot, the work buffers, the first logits rows. */
export function cardContextBytes(hp: HParams, c: PlanContext): number {
  const kv = c.nSlots * c.nCtxSlot * kvBytesPerPos(hp);
  const pairs = c.maxTokens * Math.max(1, hp.nExpertUsed);
  const perTok = (5 * hp.nEmbd + 3 * hp.nHead * hp.headDim + hp.nExpert) * 4;
  return kv + c.maxTokens * perTok + pairs * (hp.nFf + hp.nEmbd) * 4 + 8 * hp.nVocab * 4 + 64 * MiB;
}

/** What the card keeps free beside the plan (the driver, graphs, the prompt cache's first states). */
export const CARD_MARGIN = 512 * MiB;

/**
 * With a card and no flag that places routed experts: when the whole model and its context do not
 * fit the card's free memory (or --card-budget), the fewest first layers whose routed experts move
 * to host memory (as --n-cpu-moe N would) so the rest fits, with the staging buffers of uploaded
 * experts (two layers) counted on the card. nLayers 0: it fits, or flags decide.
 */
function autoHostLayers(hp: HParams, tensors: readonly PlanTensor[], f: PlacementFlags, compiled: { re: RegExp; host: boolean }[], m: PlanMachine, c: PlanContext): { nLayers: number; note: string } {
  if (!m.card || f.cpuMoe || (f.nCpuMoe ?? 0) > 0) return { nLayers: 0, note: "" };
  if (tensors.some((t) => expertLayer(t.name) !== null && compiled.some((o) => o.re.test(t.name)))) return { nLayers: 0, note: "" };
  const budget = Math.min(m.card.freeBytes, f.cardBudgetBytes ?? Infinity);
  const layerExperts = new Array<number>(hp.nLayer).fill(0);
  let dense = 0;
  for (const t of tensors) {
    const el = expertLayer(t.name);
    if (el !== null && el < hp.nLayer) layerExperts[el] += t.bytes;
    else dense += t.bytes;
  }
  const ctx = cardContextBytes(hp, c);
  const total = (n: number) => {
    let e = 0, stage = 0;
    for (let l = n; l < hp.nLayer; l++) e += layerExperts[l];
    for (let l = 0; l < n; l++) stage = Math.max(stage, layerExperts[l]);
    return dense + e + ctx + 2 * stage + CARD_MARGIN;
  };
  if (total(0) <= budget) return { nLayers: 0, note: "" };
  for (let n = 1; n <= hp.nLayer; n++)
    if (total(n) <= budget)
      return { nLayers: n, note: ` (the card's ${gib(budget)} hold the experts of ${hp.nLayer - n} layers beside the dense weights and the context: the first ${n} layers' experts stay in host memory)` };
  throw new PlanError(`the model's dense weights do not fit the card even with every routed expert in host memory: dense ${gib(dense)} + KV cache and buffers ${gib(ctx)} ` +
    `(${c.nSlots} slot(s) of ${c.nCtxSlot} positions) + two layers of staged experts ${gib(2 * Math.max(...layerExperts))} + ${gib(CARD_MARGIN)} kept free = ${gib(total(hp.nLayer))} ` +
    `> ${f.cardBudgetBytes !== undefined && f.cardBudgetBytes < m.card.freeBytes ? `the --card-budget of ${gib(budget)}` : `the card's ${gib(budget)} free`}; give a smaller context (-c) or run on the CPU (-ngl 0)`);
}

/** Where llama's flags put a tensor when a card runs the model (null: no flag decides; the card). */
function flagTier(name: string, hp: HParams, f: PlacementFlags, compiled: { re: RegExp; host: boolean }[]): "card" | "host" | null {
  for (const o of compiled) if (o.re.test(name)) return o.host ? "host" : "card";
  const el = expertLayer(name);
  if (el !== null && (f.cpuMoe || el < (f.nCpuMoe ?? 0))) return "host";
  const ngl = f.nGpuLayers ?? "auto";
  if (typeof ngl === "number" && ngl >= 0) {
    const start = Math.max(hp.nLayer + 1 - ngl, 0); // llama's first layer on the card; the output is layer nLayer
    const l = layerOf(name);
    const idx = l ?? (/^(output|output_norm)\./.test(name) ? hp.nLayer : -1); // token_embd: llama keeps it on the host
    if (idx >= 0 && idx < start) return "host";
  }
  return null;
}

/** An -ot pattern's regular expression; refused by name where it is not one. */
export function overridePattern(pattern: string, buffer: string): RegExp {
  try {
    return new RegExp(pattern);
  } catch (e) {
    throw new PlanError(`-ot ${pattern}=${buffer}: the pattern is not a valid regular expression (${(e as Error).message})`);
  }
}

/** -ot buffers: CPU (any case, CPU_Mapped...) keeps a tensor on the host; CUDA0 the card. */
export function compileOverrides(list: readonly { pattern: string; buffer: string }[]): { re: RegExp; host: boolean }[] {
  return list.map(({ pattern, buffer }) => {
    const re = overridePattern(pattern, buffer);
    const b = buffer.toUpperCase();
    if (b.startsWith("CPU")) return { re, host: true };
    if (/^CUDA0$/.test(b)) return { re, host: false };
    throw new PlanError(`-ot ${pattern}=${buffer}: unknown buffer type '${buffer}'; this build has CPU and CUDA0`);
  });
}

function emptyTier(): TierBytes {
  return { dense: 0, experts: 0, nExperts: 0 };
}

/** Add a tensor to a tier; a layer's experts are counted once (at its down tensor). */
function add(t: TierBytes, name: string, bytes: number, nExpert: number): void {
  if (expertLayer(name) !== null) {
    t.experts += bytes;
    if (name.includes(".ffn_down_exps.")) t.nExperts += nExpert;
  } else t.dense += bytes;
}

/** The smallest RAM cache of the NVMe tier: a token's picks for MIN_CACHE_LAYERS layers, of experts of `unit` bytes. */
function minExpertCache(hp: HParams, unit: number): number {
  return unit * hp.nExpertUsed * MIN_CACHE_LAYERS;
}

/** The first layers (by index) whose experts fit `room` beside the smallest cache of the others, and their bytes. */
function layersInRam(layerBytes: ReadonlyMap<number, number>, room: number, minCache: number): { inRam: Set<number>; ram: number } {
  const inRam = new Set<number>();
  let ram = 0;
  for (const [l, bytes] of [...layerBytes.entries()].sort((x, y) => x[0] - y[0])) {
    if (ram + bytes + minCache > room) break;
    inRam.add(l);
    ram += bytes;
  }
  return { inRam, ram };
}

/**
 * With a card: the host experts do not fit the host budget. The first host layers' experts stay in
 * host memory while the rest of the budget still holds the smallest cache of the others, which go to
 * the disk tier (read from the file on demand by the host experts' CPU context) with that rest as
 * their RAM cache. A layer in host memory keeps what only host memory gives beside the card (the
 * card's share of a token's picks copied from it, prompts' uploads, promotion); under uniform routing
 * the bytes read from disk a token are the same as with every host layer behind one cache of the whole
 * budget. Refused naming every term when even the smallest cache does not fit.
 */
function spillHostExperts(plan: LoadPlan, hp: HParams, tensors: readonly PlanTensor[], hostBudget: number, budgetText: string): void {
  const h = plan.host, nLayers = h.nExperts / Math.max(1, hp.nExpert);
  const unit = h.experts / Math.max(1, h.nExperts), minCache = minExpertCache(hp, unit);
  if (hostBudget < minCache)
    throw new PlanError(`${plan.line}\nthe host experts ${gib(h.experts)} (${nLayers} layers) > the host budget ${gib(hostBudget)} (${budgetText}), and read from disk ` +
      `they need at least the smallest expert cache ${gib(minCache)} (${hp.nExpertUsed} experts of ${(unit / MiB).toFixed(1)} MiB x ${MIN_CACHE_LAYERS} layers) ` +
      `> the host budget ${gib(hostBudget)}: keep fewer experts on the host (--n-cpu-moe N) or give a larger --host-budget`);
  const layerBytes = new Map<number, number>();
  for (const t of tensors) {
    const l = expertLayer(t.name);
    if (l !== null && plan.where.get(t.name) === "host") layerBytes.set(l, (layerBytes.get(l) ?? 0) + t.bytes);
  }
  const { inRam, ram } = layersInRam(layerBytes, hostBudget, minCache);
  const host = emptyTier();
  for (const t of tensors) {
    const l = expertLayer(t.name);
    if (l === null || plan.where.get(t.name) !== "host") continue;
    if (inRam.has(l)) add(host, t.name, t.bytes, hp.nExpert);
    else {
      plan.where.set(t.name, "disk");
      add(plan.disk, t.name, t.bytes, hp.nExpert);
    }
  }
  h.experts = host.experts;
  h.nExperts = host.nExperts;
  plan.expertRamBytes = Math.floor(hostBudget - ram);
}

/**
 * The plan of a load. `backend` is what chooseBackend decided (the CPU, or the card);
 * `cardContextBytes` is the card's KV cache and buffers when the card runs it.
 */
export function planLoad(
  hp: HParams, tensors: readonly PlanTensor[], backend: "cpu" | "cuda", flags: PlacementFlags, m: PlanMachine, c: PlanContext,
): LoadPlan {
  let f = flags;
  const where = new Map<string, Tier>();
  const card = emptyTier(), host = emptyTier(), disk = emptyTier();
  const compiled = compileOverrides(f.overrides ?? []);
  const hostAvail = Math.min(m.hostAvailableBytes, f.hostBudgetBytes ?? Infinity);
  const hostBudget = Math.max(0, hostAvail - (f.hostBudgetBytes !== undefined && f.hostBudgetBytes < m.hostAvailableBytes ? 0 : HOST_RESERVE));
  const budgetText = f.hostBudgetBytes !== undefined ? `--host-budget ${Math.round(f.hostBudgetBytes / MiB)} MiB` : `${gib(m.hostAvailableBytes)} available less ${gib(HOST_RESERVE)} kept free`;

  if (backend === "cuda") {
    const auto = autoHostLayers(hp, tensors, f, compiled, m, c);
    if (auto.nLayers > 0) f = { ...f, nCpuMoe: auto.nLayers };
    const denseHost: string[] = [];
    const expertTier = new Map<number, Set<Tier>>(); // a layer's expert tensors share one tier
    for (const t of tensors) {
      const tier = flagTier(t.name, hp, f, compiled) === "host" ? "host" : "card";
      where.set(t.name, tier);
      add(tier === "card" ? card : host, t.name, t.bytes, hp.nExpert);
      const el = expertLayer(t.name);
      if (el !== null) expertTier.set(el, (expertTier.get(el) ?? new Set<Tier>()).add(tier));
      else if (tier === "host") denseHost.push(t.name);
    }
    const plan: LoadPlan = { backend, card, host: { ...host, context: 0, budget: hostBudget }, disk, where, line: "", autoHostLayers: auto.nLayers || undefined };
    plan.line = planLine(plan, m) + auto.note;
    if (denseHost.length > 0)
      throw new PlanError(`${plan.line}\nthe flags keep ${denseHost.length} dense tensors (${gib(host.dense)}, e.g. ${denseHost[0]}) in host memory beside the card; ` +
        "computing dense tensors on the host beside the card is not implemented yet (routed experts may stay there: --cpu-moe, --n-cpu-moe, -ot ...exps=CPU): " +
        "use -ngl all to put the dense weights on the card, or -ngl 0 to run it all on the CPU");
    const split = [...expertTier.entries()].filter(([, s]) => s.size > 1).map(([l]) => l);
    if (split.length > 0)
      throw new PlanError(`${plan.line}\nlayer ${split[0]} has some of its routed-expert tensors on the host and some on the card; ` +
        "bloomery keeps a layer's gate, up and down experts together: place them with one -ot pattern (e.g. blk\\.N\\.ffn_.*_exps=CPU)");
    if (host.experts > hostBudget) {
      spillHostExperts(plan, hp, tensors, hostBudget, budgetText);
      plan.line = planLine(plan, m) + auto.note;
    }
    return plan;
  }

  // the CPU: dense weights and the context first, then routed experts while the budget lasts
  const context = cpuContextBytes(hp, c);
  // draft-mtp's MTP layer: its own tensors are mapped and prefaulted beside the target's dense weights
  let dense = c.mtp?.weightBytes ?? 0;
  host.dense += dense;
  const experts: PlanTensor[] = [];
  for (const t of tensors) {
    if (expertLayer(t.name) === null) {
      dense += t.bytes;
      where.set(t.name, "host");
      host.dense += t.bytes;
    } else experts.push(t);
  }
  const expertBytes = experts.reduce((s, t) => s + t.bytes, 0);
  const fixed = dense + context;
  if (fixed > hostBudget)
    throw new PlanError(`the model does not fit host memory: dense weights ${gib(dense)} + KV cache and buffers ${gib(context)} ` +
      `(${c.nSlots} slot(s) of ${c.nCtxSlot} positions${mtpText(c)}) = ${gib(fixed)} > the host budget ${gib(hostBudget)} (${budgetText}); ` +
      `give a smaller context (-c) or fewer slots (-np)${c.mtp ? ", or --spec-type none" : ""}`);
  const room = hostBudget - fixed;
  let expertRamBytes: number | undefined;
  if (expertBytes <= room) {
    for (const t of experts) {
      where.set(t.name, "host");
      add(host, t.name, t.bytes, hp.nExpert);
    }
  } else {
    // a layer's experts are one unit each (gate, up and down of one expert); the cache must
    // hold a token's picks for a few layers
    const unit = expertBytes / Math.max(1, hp.nLayer * hp.nExpert);
    const minCache = minExpertCache(hp, unit);
    if (room < minCache)
      throw new PlanError(`the model does not fit host memory even with its experts read from disk: dense weights ${gib(dense)} + KV cache and buffers ${gib(context)} ` +
        `+ the smallest expert cache ${gib(minCache)} (${hp.nExpertUsed} experts of ${(unit / MiB).toFixed(1)} MiB x ${MIN_CACHE_LAYERS} layers) = ${gib(fixed + minCache)} ` +
        `> the host budget ${gib(hostBudget)} (${budgetText})${mtpText(c).replace(/^; /, " (")}${c.mtp ? ")" : ""}`);
    // as beside a card (spillHostExperts): the first layers' experts stay in host memory while the rest
    // of the room still holds the smallest cache of the others, which are read from disk into it (the
    // bytes read a token the same under uniform routing; the layers in memory skip the cache's lookups)
    const layerBytes = new Map<number, number>();
    for (const t of experts) layerBytes.set(expertLayer(t.name)!, (layerBytes.get(expertLayer(t.name)!) ?? 0) + t.bytes);
    const { inRam, ram } = layersInRam(layerBytes, room, minCache);
    expertRamBytes = Math.floor(room - ram);
    for (const t of experts) {
      const tier = inRam.has(expertLayer(t.name)!) ? host : disk;
      where.set(t.name, tier === host ? "host" : "disk");
      add(tier, t.name, t.bytes, hp.nExpert);
    }
  }
  const plan: LoadPlan = { backend, card, host: { ...host, context, budget: hostBudget }, disk, where, line: "", expertRamBytes };
  plan.line = planLine(plan, m);
  return plan;
}

/** What the sums hold of draft-mtp's MTP layer, as the refusals say it. */
function mtpText(c: PlanContext): string {
  if (!c.mtp) return "";
  const all = mtpBytes(c.mtp, { ...c, nThreads: c.nThreads ?? 1 });
  return `; with draft-mtp's MTP layer ${gib(all)}: its tensors ${gib(c.mtp.weightBytes)}, KV cache and buffers ${gib(all - c.mtp.weightBytes)}`;
}

/** The one stderr line of a plan. */
export function planLine(p: LoadPlan, m: PlanMachine): string {
  const parts: string[] = [];
  if (p.backend === "cuda" && m.card)
    parts.push(`card ${m.card.name}: dense ${gib(p.card.dense)} + ${p.card.nExperts} experts ${gib(p.card.experts)}`);
  const h = p.host;
  const hostTotal = h.dense + h.experts + h.context;
  if (p.backend === "cpu" || hostTotal > 0)
    parts.push(`host: dense ${gib(h.dense)} + ${h.nExperts} experts ${gib(h.experts)}${h.context ? ` + KV and buffers ${gib(h.context)}` : ""} = ${gib(hostTotal)} of ${gib(h.budget)}`);
  if (p.disk.nExperts > 0)
    parts.push(`disk: ${p.disk.nExperts} experts ${gib(p.disk.experts)} read on demand into a ${gib(p.expertRamBytes ?? 0)} RAM cache`);
  return `placement: ${parts.join("; ")}`;
}
