// bloomery engine: the plan of one model split by layers across several cards (llama's `-sm layer`,
// `-ts`, `-dev CUDA0,CUDA1`, `-ot ...=CUDAn`): which card holds each layer, each card's dense weights,
// routed experts, KV cache and buffers against its free memory, the routed experts the flags keep in
// host memory, one placement line a card, and a refusal naming every term of each card that does not
// fit. Planned and reported only: the engine runs a model on one card (the runtime across cards is
// not built yet), so a start that lists several cards says this plan and runs on the first.
import { cardContextBytes, CARD_MARGIN, expertLayer, gib, layerOf, overridePattern, PlanError, type PlanContext, type PlanTensor } from "./plan.ts";
import { kvBytesPerPos, type HParams } from "../models/types.ts";

/** A card the split may use: its CUDA index, name and free bytes. */
export interface SplitCard {
  index: number;
  name: string;
  freeBytes: number;
}

/** The split's flags, in llama's meaning. */
export interface SplitFlags {
  /** -ts: each listed card's proportion of the layers (empty or all zero: by free memory) */
  tensorSplit?: readonly number[];
  /** -sm: layer (the default), none (the main card alone), row (refused: not built) */
  splitMode?: string;
  /** -mg: the card of -sm none, an index into the listed cards */
  mainGpu?: number;
  cpuMoe?: boolean;
  nCpuMoe?: number;
  /** -ot pattern=BUFFER: CPU keeps a tensor in host memory, CUDAn puts it on card n */
  overrides?: readonly { pattern: string; buffer: string }[];
}

/** One card's share of the split. */
export interface CardShare {
  card: SplitCard;
  /** the repeating layers it holds (the output layer is counted as layer nLayer) */
  layers: number[];
  dense: number;
  experts: number;
  nExperts: number;
  /** its KV cache (its layers' share) and buffers */
  context: number;
  total: number;
  fits: boolean;
}

export interface SplitPlan {
  cards: CardShare[];
  host: { experts: number; nExperts: number };
  /** one `placement:` line a card, then the host's when it holds experts */
  lines: string[];
  /** every card that does not fit, each with its terms (undefined: it fits) */
  refusal?: string;
}

/** llama's split points: the proportions (-ts, else each card's free memory) summed and normalised. */
export function splitPoints(cards: readonly SplitCard[], ts: readonly number[] = []): number[] {
  if (ts.length > cards.length) throw new PlanError(`-ts ${ts.join(",")}: ${ts.length} proportions for ${cards.length} card(s)`);
  if (ts.some((x) => !(x >= 0) || !Number.isFinite(x))) throw new PlanError(`-ts ${ts.join(",")}: proportions are numbers of zero or more`);
  const byFree = ts.length === 0 || ts.every((x) => x === 0);
  const raw = cards.map((c, i) => (byFree ? c.freeBytes : (ts[i] ?? 0)));
  const sum = raw.reduce((a, b) => a + b, 0);
  if (!(sum > 0)) throw new PlanError("the split gives every card nothing");
  let acc = 0;
  return raw.map((x) => (acc += x) / sum);
}

/** The card (an index into the points) of layers 0..nLayer (nLayer: the output layer), every layer offloaded, as llama assigns them. */
export function layerCards(nLayer: number, points: readonly number[]): number[] {
  const act = nLayer + 1;
  return Array.from({ length: act }, (_, il) => {
    const f = il / act;
    const j = points.findIndex((p) => p > f); // std::upper_bound
    return j < 0 ? points.length - 1 : j;
  });
}

/** -ot buffers across cards: CPU (any case) the host, CUDAn the card of CUDA index n (one of the listed ones). */
function compileSplitOverrides(list: readonly { pattern: string; buffer: string }[], cards: readonly SplitCard[]): { re: RegExp; to: number | "host" }[] {
  return list.map(({ pattern, buffer }) => {
    const re = overridePattern(pattern, buffer);
    const b = buffer.toUpperCase();
    if (b.startsWith("CPU")) return { re, to: "host" as const };
    const m = /^CUDA(\d+)$/.exec(b);
    const j = m ? cards.findIndex((c) => c.index === Number(m[1])) : -1;
    if (j < 0) throw new PlanError(`-ot ${pattern}=${buffer}: unknown buffer type '${buffer}'; the listed devices are CPU, ${cards.map((c) => `CUDA${c.index}`).join(", ")}`);
    return { re, to: j };
  });
}

/** A tensor's layer in the split: its block; the input with the first layer, output and output_norm the output layer (nLayer). */
function splitLayer(name: string, nLayer: number): number {
  const l = layerOf(name);
  return l !== null ? Math.min(l, nLayer) : name === "token_embd.weight" ? 0 : nLayer;
}

/** Ranges of consecutive layers as text: "0-23, 47". */
function ranges(ls: readonly number[]): string {
  const out: string[] = [];
  for (let i = 0; i < ls.length; ) {
    let j = i;
    while (j + 1 < ls.length && ls[j + 1] === ls[j] + 1) j++;
    out.push(i === j ? `${ls[i]}` : `${ls[i]}-${ls[j]}`);
    i = j + 1;
  }
  return out.join(", ");
}

/**
 * The layer split of a model over `cards` (the listed devices, in -dev's order): each layer and its
 * KV cache on the card llama's rule gives it, the routed experts the flags name in host memory, -ot
 * CUDAn moving a tensor to card n. The KV cache is shared out by the cards' repeating layers; every
 * card holds its own activations' buffers. Refused by name: -sm row (not built), -sm none's -mg past
 * the list.
 */
export function planLayerSplit(hp: HParams, tensors: readonly PlanTensor[], cards: readonly SplitCard[], f: SplitFlags, c: PlanContext): SplitPlan {
  if (cards.length === 0) throw new PlanError("the split lists no card");
  const mode = f.splitMode ?? "layer";
  if (mode === "row" || mode === "tensor") throw new PlanError(`-sm ${mode}: splitting a layer's rows across cards is not built; -sm layer (the default) splits by layers`);
  let use = cards;
  if (mode === "none") {
    const mg = f.mainGpu ?? 0;
    if (mg >= cards.length) throw new PlanError(`-mg ${mg}: ${cards.length} card(s) are listed (-mg counts from 0 among them)`);
    use = [cards[mg]];
  }
  const owner = layerCards(hp.nLayer, splitPoints(use, mode === "none" ? [] : f.tensorSplit));
  const compiled = compileSplitOverrides(f.overrides ?? [], use);
  const share = use.map((card) => ({ card, layers: [] as number[], dense: 0, experts: 0, nExperts: 0, context: 0, total: 0, fits: true }));
  for (let l = 0; l < hp.nLayer; l++) share[owner[l]].layers.push(l);
  const host = { experts: 0, nExperts: 0 };
  for (const t of tensors) {
    const el = expertLayer(t.name);
    let to: number | "host" = owner[splitLayer(t.name, hp.nLayer)];
    const o = compiled.find((x) => x.re.test(t.name));
    if (o) to = o.to;
    else if (el !== null && (f.cpuMoe || el < (f.nCpuMoe ?? 0))) to = "host";
    const counted = el !== null && t.name.includes(".ffn_down_exps.") ? hp.nExpert : 0;
    if (to === "host") {
      if (el === null) throw new PlanError(`the flags keep the dense tensor ${t.name} in host memory beside the cards; computing dense tensors on the host beside a card is not implemented yet`);
      host.experts += t.bytes;
      host.nExperts += counted;
    } else if (el !== null) {
      share[to].experts += t.bytes;
      share[to].nExperts += counted;
    } else share[to].dense += t.bytes;
  }
  const kvAll = c.nSlots * c.nCtxSlot * kvBytesPerPos(hp);
  const buffers = cardContextBytes(hp, c) - kvAll;
  for (const s of share) {
    s.context = Math.round((kvAll * s.layers.length) / Math.max(1, hp.nLayer)) + buffers;
    s.total = s.dense + s.experts + s.context;
    s.fits = s.total + CARD_MARGIN <= s.card.freeBytes;
  }
  const lines = share.map((s, j) =>
    `placement: CUDA${s.card.index} ${s.card.name}: layers ${s.layers.length ? ranges(s.layers) : "none"}${owner[hp.nLayer] === j ? " and the output" : ""}: ` +
    `dense ${gib(s.dense)} + ${s.nExperts} experts ${gib(s.experts)} + KV and buffers ${gib(s.context)} = ${gib(s.total)} of ${gib(s.card.freeBytes)} free`);
  if (host.nExperts > 0) lines.push(`placement: host: ${host.nExperts} experts ${gib(host.experts)}`);
  const short = share.filter((s) => !s.fits);
  const refusal = short.length === 0 ? undefined : short.map((s) =>
    `the split does not fit CUDA${s.card.index} (${s.card.name}): dense weights ${gib(s.dense)} + routed experts ${gib(s.experts)} + KV cache and buffers ${gib(s.context)} ` +
    `(${c.nSlots} slot(s) of ${c.nCtxSlot} positions) = ${gib(s.total)} > the ${gib(s.card.freeBytes)} free less ${gib(CARD_MARGIN)} kept free`).join("; ") +
    ": move layers off it with -ts, keep routed experts in host memory (--n-cpu-moe N), or give a smaller context (-c)";
  return { cards: share, host, lines, refusal };
}
