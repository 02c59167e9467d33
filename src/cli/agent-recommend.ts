// bloomery CLI: `--recommend [--json]`: this machine's cards, RAM and CPU, which known models fit
// and, for each, the fastest quant and placement that fits with the command that starts it.
// Placement order: a card (all layers on it); a card with the routed experts of its first layers in
// host RAM (--n-cpu-moe N, or --cpu-moe: the fewest layers that leave a 32k context, else the fewest
// that fit); then the CPU. Quant order: Q4_K_M, Q6_K, Q8_0 (fewest bytes read per token first),
// IQ4_XS only when none of those fits.
import { GgufFile } from "../gguf/index.ts";
import { cardSplit } from "./agent-card-share.ts";
import { formatBytes } from "../hf/index.ts";
import type { Machine } from "./agent-machine.ts";
import { commandLine } from "./agent-exit.ts";
import {
  decodeBytesPerToken, fitContext, geometryFromGguf, geometryFromKnown, gib, needAt, CARD_MARGIN, HOST_MARGIN, MIN_FIT_CTX,
  type FitOptions, type FittedContext, type Geometry,
} from "./agent-sizes.ts";
import { DEMO_NAME, FALLBACK_QUANTS, KNOWN_MODELS, PREFERRED_QUANTS, type KnownModel, type KnownQuant } from "./known-models.ts";

/** Where a model runs: all of it on one card, on a card with routed experts in host RAM (hybrid), or on the CPU. */
export interface Placement {
  kind: "cuda" | "cpu";
  /** on a card, some layers' routed experts in host RAM (their number is chosen per quant) */
  hybrid?: boolean;
  /** CUDA device index (cuda only) */
  device?: number;
  /** the card's name, or "CPU" */
  name: string;
  /** bytes the model may use there (card: free memory; host: usable RAM) */
  available_bytes: number;
}

export interface PlacementFit {
  placement: string;
  fits: boolean;
  /** largest context that fits (0 when none does) */
  n_ctx: number;
  n_slots: number;
  /** weights + KV cache + work buffers at n_ctx (at the smallest context tried when nothing fits) */
  need_bytes: number;
  available_bytes: number;
  /** hybrid: the first layers whose routed experts stay in host RAM (--n-cpu-moe; every layer: --cpu-moe), 0 otherwise */
  host_expert_layers: number;
  /** hybrid: the bytes of those experts in host RAM */
  host_bytes: number;
}

export interface QuantReport {
  quant: string;
  file_bytes: number;
  /** bytes read per generated token (non-expert weights and the experts one token uses): lower is faster */
  decode_bytes_per_token: number;
  placements: PlacementFit[];
}

export interface Recommendation {
  quant: string;
  /** "cuda:0" or "cpu" */
  placement: string;
  device_name: string;
  n_ctx: number;
  n_slots: number;
  need_bytes: number;
  available_bytes: number;
  /** the first layers whose routed experts stay in host RAM beside the card (0: all on the card, or the CPU) */
  host_expert_layers: number;
  host_bytes: number;
  command: string;
}

export interface ModelReport {
  name: string;
  aliases: string[];
  description: string;
  repo: string | null;
  n_ctx_train: number;
  thinking: boolean;
  fits: boolean;
  recommended: Recommendation | null;
  /** why this choice, or why nothing fits */
  why: string;
  /** the model fits a card with (some of) its routed experts in host RAM (--cpu-moe, --n-cpu-moe N) */
  fits_with_experts_in_ram: boolean;
  quants: QuantReport[];
}

export interface RecommendReport {
  machine: Machine;
  /** placements not implemented yet, so never recommended */
  not_implemented: { dense_tensors_on_host: string };
  models: ModelReport[];
}

/** What placement does not do yet (docs/placement.md); routed experts in host RAM beside a card it does. */
export const PLACEMENT_NOT_IMPLEMENTED =
  "dense tensors (attention, norms, the output) on the host beside a card (-ngl below every layer, -ot of attention weights) are not implemented yet; " +
  "routed experts in host RAM beside a card are (--cpu-moe, --n-cpu-moe N, -ot ...exps=CPU), and --recommend proposes them when a model does not fit the card";

/** The placements of this machine, fastest first: usable cards by free memory, then each with experts in host RAM, then the CPU. */
export function placementsOf(m: Machine): Placement[] {
  const cards = m.cuda.usable ? m.cards.filter((c) => c.supported).sort((a, b) => b.free_bytes - a.free_bytes) : [];
  const on = cards.map((c): Placement => ({ kind: "cuda", device: c.index, name: c.name, available_bytes: c.free_bytes }));
  return [...on, ...on.map((p) => ({ ...p, hybrid: true })), { kind: "cpu", name: "CPU", available_bytes: m.ram.usable_bytes }];
}

export const placementLabel = (p: Placement) => (p.kind === "cuda" ? `cuda:${p.device}${p.hybrid ? "+host" : ""}` : "cpu");

/** The flag that keeps the routed experts of the first `layers` of `nLayer` layers in host RAM. */
export function hostExpertFlags(layers: number, nLayer: number): string[] {
  if (layers <= 0) return [];
  return layers >= nLayer ? ["--cpu-moe"] : ["--n-cpu-moe", String(layers)];
}

/** Flags that put a model where `p` says (with `hostLayers` of its layers' experts in host RAM on a hybrid card). */
export function placementFlags(p: Placement, hostLayers = 0, nLayer = 0): string[] {
  if (p.kind === "cpu") return ["-ngl", "0"];
  const card = p.device ? ["-ngl", "all", "-dev", `CUDA${p.device}`] : ["-ngl", "all"];
  return p.hybrid ? [...card, ...hostExpertFlags(hostLayers, nLayer)] : card;
}

/** The command that starts a known model's quant at a placement and context. */
export function startCommand(m: KnownModel, quant: string, p: Placement, nCtx: number, hostLayers = 0, nLayer = 0): string {
  const model = m.repo === null ? ["--demo"] : ["-hf", `${m.repo}:${quant}`];
  return commandLine([...model, ...placementFlags(p, hostLayers, nLayer), "-c", String(nCtx)]);
}

/** The context a hybrid start aims for (a coding agent's first turn fits), when the card leaves room for it. */
const HYBRID_TARGET_CTX = 32768;

/**
 * A card with the routed experts of its first N layers in host RAM (the plan at load places them:
 * agent-card-share.ts): the fewest N whose fit leaves the target context (32k, or the training
 * context if smaller), else the fewest that fits at all; the host must hold those experts.
 */
function hybridFit(g: Geometry, p: Placement, m: Machine, fit: Omit<FitOptions, "exact">): { f: FittedContext; layers: number; hostBytes: number } | undefined {
  const L = Math.max(1, g.hp.nLayer);
  const pm = { card: { name: p.name, freeBytes: p.available_bytes }, hostAvailableBytes: m.ram.usable_bytes };
  const memo = new Map<number, FittedContext | undefined>();
  const hostBytes = (n: number) => Math.ceil((g.expertBytes * n) / L);
  const at = (n: number): FittedContext | undefined => {
    if (memo.has(n)) return memo.get(n);
    const flags = n >= L ? { cpuMoe: true } : { nCpuMoe: n };
    const f = hostBytes(n) + HOST_MARGIN > m.ram.usable_bytes ? undefined : fitContext(g, "card", p.available_bytes, { ...fit, exact: false, split: cardSplit(g, flags, pm) });
    memo.set(n, f);
    return f;
  };
  const fewest = (ok: (f: FittedContext | undefined) => boolean): number | undefined => {
    if (!ok(at(L))) return undefined;
    let lo = 1, hi = L;
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      if (ok(at(mid))) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  const target = Math.min(HYBRID_TARGET_CTX, g.hp.nCtxTrain);
  const n = fewest((f) => f !== undefined && f.nCtx >= target) ?? fewest((f) => f !== undefined);
  if (n === undefined) return undefined;
  return { f: at(n)!, layers: n, hostBytes: hostBytes(n) };
}

/** One model's quants: geometry for each (undefined when unknown). */
export interface ModelQuants {
  model: KnownModel;
  quants: { quant: KnownQuant; geometry: Geometry }[];
}

/** A known model's fit on every placement of `m`, and the recommendation. */
export function reportModel(mq: ModelQuants, m: Machine, fit: Omit<FitOptions, "exact">): ModelReport {
  const { model } = mq;
  const places = placementsOf(m);
  const quants: QuantReport[] = mq.quants.map(({ quant, geometry }) => ({
    quant: quant.name,
    file_bytes: quant.bytes,
    decode_bytes_per_token: decodeBytesPerToken(geometry),
    placements: places.map((p): PlacementFit => {
      const where = p.kind === "cuda" ? "card" : "host";
      if (p.hybrid) {
        const h = hybridFit(geometry, p, m, fit);
        return {
          placement: placementLabel(p), fits: h !== undefined, n_ctx: h?.f.nCtx ?? 0, n_slots: h?.f.nSlots ?? 0,
          need_bytes: h ? h.f.need.total : 0, available_bytes: p.available_bytes, host_expert_layers: h?.layers ?? 0, host_bytes: h?.hostBytes ?? 0,
        };
      }
      const f = fitContext(geometry, where, p.available_bytes, { ...fit, exact: false });
      return {
        placement: placementLabel(p),
        fits: f !== undefined,
        n_ctx: f?.nCtx ?? 0,
        n_slots: f?.nSlots ?? 0,
        need_bytes: f ? f.need.total : smallestNeed(geometry, where, fit),
        available_bytes: p.available_bytes,
        host_expert_layers: 0,
        host_bytes: 0,
      };
    }),
  }));
  const order = [...PREFERRED_QUANTS, ...FALLBACK_QUANTS] as readonly string[];
  const ranked = quants.filter((q) => order.includes(q.quant)).sort((a, b) => order.indexOf(a.quant) - order.indexOf(b.quant));
  // the demo offers one quant outside the lists
  const candidates = ranked.length > 0 ? ranked : quants;
  let rec: Recommendation | null = null;
  let why = "";
  for (const [pi, p] of places.entries()) {
    const q = candidates.find((c) => c.placements[pi].fits);
    if (!q) continue;
    const pf = q.placements[pi];
    const nLayer = mq.quants[0]?.geometry.hp.nLayer ?? 0;
    rec = {
      quant: q.quant, placement: pf.placement, device_name: p.name, n_ctx: pf.n_ctx, n_slots: pf.n_slots,
      need_bytes: pf.need_bytes, available_bytes: pf.available_bytes, host_expert_layers: pf.host_expert_layers, host_bytes: pf.host_bytes,
      command: startCommand(model, q.quant, p, pf.n_ctx, pf.host_expert_layers, nLayer),
    };
    const skipped = places.slice(0, pi).filter((s) => !s.hybrid).map((s) => `${s.name} (${gib(s.available_bytes)} free)`);
    const flag = hostExpertFlags(pf.host_expert_layers, nLayer).join(" ");
    const onWhat = p.kind === "cpu" ? "on the CPU"
      : p.hybrid ? `on ${p.name} with the routed experts of ${pf.host_expert_layers >= nLayer ? "every layer" : `its first ${pf.host_expert_layers} of ${nLayer} layers`} in host RAM (${flag}: ${gib(pf.host_bytes)} there)`
      : `all on ${p.name}`;
    why = `${q.quant} ${onWhat} with ${pf.n_ctx} tokens of context needs ${gib(pf.need_bytes)} of ${gib(pf.available_bytes)}${p.hybrid ? " on the card" : ""}` +
      (skipped.length ? `; it does not fit ${p.hybrid ? "all on " : ""}${skipped.join(", ")}` : "");
    break;
  }
  if (!rec) {
    const smallest = [...quants].sort((a, b) => a.file_bytes - b.file_bytes)[0];
    why = smallest
      ? `even ${smallest.quant} (${gib(smallest.file_bytes)}) with ${Math.min(MIN_FIT_CTX, model.nCtxTrain)} tokens of context does not fit: ` +
        places.flatMap((p, i) => (p.hybrid ? [] : [`${p.name} needs ${gib(smallest.placements[i].need_bytes)}, has ${gib(p.available_bytes)}`])).join("; ") +
        (places.some((p) => p.hybrid) ? `; nor with its routed experts in host RAM beside a card (${gib(smallest.file_bytes)} of weights against ${gib(m.ram.usable_bytes)} of RAM and the card)` : "")
      : "no quant of it is known";
  }
  return {
    name: model.name, aliases: model.aliases, description: model.description, repo: model.repo, n_ctx_train: model.nCtxTrain,
    thinking: model.thinking, fits: rec !== null, recommended: rec, why,
    fits_with_experts_in_ram: quants.some((q) => q.placements.some((p) => p.fits && p.host_expert_layers > 0)),
    quants,
  };
}

/** The need at the smallest context a fitted start accepts (what running it would take at the least). */
function smallestNeed(g: Geometry, where: "card" | "host", fit: Omit<FitOptions, "exact">): number {
  return needAt(g, where, Math.min(MIN_FIT_CTX, g.hp.nCtxTrain), { ...fit, exact: false }).need.total;
}

/** Geometries of every known model's quants; the demo's from its file (extracted once to the cache). */
export function knownModelQuants(demoPath: () => string): { models: ModelQuants[]; notes: string[] } {
  const notes: string[] = [];
  const models: ModelQuants[] = [];
  for (const model of KNOWN_MODELS) {
    if (model.name === DEMO_NAME) {
      try {
        const path = demoPath();
        const f = GgufFile.open(path);
        const geometry = geometryFromGguf(f);
        models.push({ model: { ...model, nCtxTrain: geometry.hp.nCtxTrain }, quants: [{ quant: { name: "Q8_0", bytes: f.totalBytes }, geometry }] });
      } catch (e) {
        notes.push(`${DEMO_NAME}: ${e instanceof Error ? e.message : String(e)}`);
      }
      continue;
    }
    const quants: ModelQuants["quants"] = [];
    for (const quant of model.quants) {
      const geometry = geometryFromKnown(model, quant);
      if (geometry) quants.push({ quant, geometry });
    }
    models.push({ model, quants });
  }
  return { models, notes };
}

export function recommend(machine: Machine, models: ModelQuants[], fit: Omit<FitOptions, "exact">): RecommendReport {
  return {
    machine,
    not_implemented: { dense_tensors_on_host: PLACEMENT_NOT_IMPLEMENTED },
    models: models.map((mq) => reportModel(mq, machine, fit)),
  };
}

/** The table's "where": the card, the card with N layers' experts in host RAM, or the CPU. */
function where(r: Recommendation): string {
  return r.host_expert_layers > 0 ? `${r.placement.replace("+host", "")} + experts of ${r.host_expert_layers} layers in RAM` : r.placement;
}

/** The short human table. */
export function recommendText(r: RecommendReport): string {
  const m = r.machine;
  const lines: string[] = [];
  const ram = `RAM ${formatBytes(m.ram.usable_bytes)} usable of ${formatBytes(m.ram.total_bytes)}${m.ram.cgroup_limit_bytes !== null ? ` (cgroup limit ${formatBytes(m.ram.cgroup_limit_bytes)})` : ""}`;
  const isa = m.cpu.avx512 ? "AVX-512" : m.cpu.avx2 ? "AVX2" : "no AVX2";
  lines.push(`CPU: ${m.cpu.cores} cores (${isa}); ${ram}`);
  if (m.cards.length === 0) lines.push(`cards: none (${m.cuda.reason || "no CUDA device"})`);
  for (const c of m.cards) lines.push(`card ${c.index}: ${c.name}, compute ${c.compute_capability}, ${formatBytes(c.free_bytes)} free of ${formatBytes(c.total_bytes)}${c.supported ? "" : " (no code for it in this build)"}`);
  lines.push("");
  const rows = r.models.map((x) => [
    x.name, x.fits ? "yes" : "no", x.recommended?.quant ?? "-", x.recommended ? where(x.recommended) : "-",
    x.recommended ? String(x.recommended.n_ctx) : "-", x.recommended ? formatBytes(x.recommended.need_bytes) : "-",
  ]);
  const head = ["model", "fits", "quant", "where", "context", "needs"];
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i].length)));
  const fmt = (row: string[]) => row.map((c, i) => c.padEnd(w[i])).join("  ").trimEnd();
  lines.push(fmt(head));
  for (const row of rows) lines.push(fmt(row));
  lines.push("");
  for (const x of r.models) lines.push(x.recommended ? `${x.name}:\n  ${x.recommended.command}` : `${x.name}: ${x.why}`);
  lines.push("", `note: ${r.not_implemented.dense_tensors_on_host}`);
  lines.push(`margins kept free: ${formatBytes(CARD_MARGIN)} on a card, ${formatBytes(HOST_MARGIN)} of RAM`);
  return lines.join("\n");
}
