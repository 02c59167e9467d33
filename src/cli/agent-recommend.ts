// bloomery CLI: `--recommend [--json]`: this machine's cards, RAM and CPU, which known models fit
// and, for each, the fastest quant and placement that fits with the command that starts it.
// Placement order: a card (all layers on it), then the CPU. Quant order: Q4_K_M, Q6_K, Q8_0 (fewest
// bytes read per token first), IQ4_XS only when none of those fits.
import { GgufFile } from "../gguf/index.ts";
import { formatBytes } from "../hf/index.ts";
import type { Machine } from "./agent-machine.ts";
import { commandLine } from "./agent-exit.ts";
import {
  decodeBytesPerToken, fitContext, geometryFromGguf, geometryFromKnown, gib, needAt, CARD_MARGIN, HOST_MARGIN, MIN_FIT_CTX,
  type FitOptions, type Geometry,
} from "./agent-sizes.ts";
import { DEMO_NAME, FALLBACK_QUANTS, KNOWN_MODELS, PREFERRED_QUANTS, type KnownModel, type KnownQuant } from "./known-models.ts";

/** Where a model runs: all of it on one card, or on the CPU. */
export interface Placement {
  kind: "cuda" | "cpu";
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
  /** the model would fit a card with its experts in host RAM (not implemented yet) */
  fits_with_experts_in_ram: boolean;
  quants: QuantReport[];
}

export interface RecommendReport {
  machine: Machine;
  /** placements not implemented yet, so never recommended */
  not_implemented: { experts_in_host_ram: string };
  models: ModelReport[];
}

export const EXPERTS_IN_RAM_NOTE =
  "keeping experts in host RAM beside the card (--cpu-moe, --n-cpu-moe, -ot) is not implemented yet: a model runs all on one card or all on the CPU";

/** The placements of this machine, fastest first: usable cards by free memory, then the CPU. */
export function placementsOf(m: Machine): Placement[] {
  const cards = m.cuda.usable ? m.cards.filter((c) => c.supported).sort((a, b) => b.free_bytes - a.free_bytes) : [];
  return [
    ...cards.map((c): Placement => ({ kind: "cuda", device: c.index, name: c.name, available_bytes: c.free_bytes })),
    { kind: "cpu", name: "CPU", available_bytes: m.ram.usable_bytes },
  ];
}

export const placementLabel = (p: Placement) => (p.kind === "cuda" ? `cuda:${p.device}` : "cpu");

/** Flags that put a model where `p` says. */
export function placementFlags(p: Placement): string[] {
  if (p.kind === "cpu") return ["-ngl", "0"];
  return p.device ? ["-ngl", "all", "-dev", `CUDA${p.device}`] : ["-ngl", "all"];
}

/** The command that starts a known model's quant at a placement and context. */
export function startCommand(m: KnownModel, quant: string, p: Placement, nCtx: number): string {
  const model = m.repo === null ? ["--demo"] : ["-hf", `${m.repo}:${quant}`];
  return commandLine([...model, ...placementFlags(p), "-c", String(nCtx)]);
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
      const f = fitContext(geometry, where, p.available_bytes, { ...fit, exact: false });
      return {
        placement: placementLabel(p),
        fits: f !== undefined,
        n_ctx: f?.nCtx ?? 0,
        n_slots: f?.nSlots ?? 0,
        need_bytes: f ? f.need.total : smallestNeed(geometry, where, fit),
        available_bytes: p.available_bytes,
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
    rec = {
      quant: q.quant, placement: pf.placement, device_name: p.name, n_ctx: pf.n_ctx, n_slots: pf.n_slots,
      need_bytes: pf.need_bytes, available_bytes: pf.available_bytes, command: startCommand(model, q.quant, p, pf.n_ctx),
    };
    const skipped = places.slice(0, pi).map((s) => `${s.name} (${gib(s.available_bytes)} free)`);
    why = `${q.quant} ${p.kind === "cuda" ? `all on ${p.name}` : "on the CPU"} with ${pf.n_ctx} tokens of context needs ${gib(pf.need_bytes)} of ${gib(pf.available_bytes)}` +
      (skipped.length ? `; it does not fit ${skipped.join(", ")}` : "");
    break;
  }
  if (!rec) {
    const smallest = [...quants].sort((a, b) => a.file_bytes - b.file_bytes)[0];
    why = smallest
      ? `even ${smallest.quant} (${gib(smallest.file_bytes)}) with ${Math.min(MIN_FIT_CTX, model.nCtxTrain)} tokens of context does not fit: ` +
        places.map((p, i) => `${p.name} needs ${gib(smallest.placements[i].need_bytes)}, has ${gib(p.available_bytes)}`).join("; ")
      : "no quant of it is known";
  }
  return {
    name: model.name, aliases: model.aliases, description: model.description, repo: model.repo, n_ctx_train: model.nCtxTrain,
    thinking: model.thinking, fits: rec !== null, recommended: rec, why,
    fits_with_experts_in_ram: rec?.placement.startsWith("cuda") ? false : fitsWithExpertsInRam(mq, m, fit),
    quants,
  };
}

/** The need at the smallest context a fitted start accepts (what running it would take at the least). */
function smallestNeed(g: Geometry, where: "card" | "host", fit: Omit<FitOptions, "exact">): number {
  return needAt(g, where, Math.min(MIN_FIT_CTX, g.hp.nCtxTrain), { ...fit, exact: false }).need.total;
}

/** Would the preferred quant fit a card with its experts in host RAM (a placement not implemented yet)? */
function fitsWithExpertsInRam(mq: ModelQuants, m: Machine, fit: Omit<FitOptions, "exact">): boolean {
  const cards = placementsOf(m).filter((p) => p.kind === "cuda");
  if (cards.length === 0) return false;
  const q = mq.quants.find((x) => x.quant.name === PREFERRED_QUANTS[0]) ?? mq.quants[0];
  if (!q) return false;
  const g = q.geometry;
  const rest: Geometry = { ...g, weightBytes: g.weightBytes - g.expertBytes, cardWeightBytes: g.cardWeightBytes - g.expertBytes, expertBytes: 0 };
  const onCard = fitContext(rest, "card", cards[0].available_bytes, { ...fit, exact: false });
  return onCard !== undefined && g.expertBytes + HOST_MARGIN <= m.ram.usable_bytes;
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
    not_implemented: { experts_in_host_ram: EXPERTS_IN_RAM_NOTE },
    models: models.map((mq) => reportModel(mq, machine, fit)),
  };
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
    x.name, x.fits ? "yes" : "no", x.recommended?.quant ?? "-", x.recommended?.placement ?? "-",
    x.recommended ? String(x.recommended.n_ctx) : "-", x.recommended ? formatBytes(x.recommended.need_bytes) : "-",
  ]);
  const head = ["model", "fits", "quant", "where", "context", "needs"];
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i].length)));
  const fmt = (row: string[]) => row.map((c, i) => c.padEnd(w[i])).join("  ").trimEnd();
  lines.push(fmt(head));
  for (const row of rows) lines.push(fmt(row));
  lines.push("");
  for (const x of r.models) lines.push(x.recommended ? `${x.name}:\n  ${x.recommended.command}` : `${x.name}: ${x.why}`);
  lines.push("", `note: ${r.not_implemented.experts_in_host_ram}`);
  lines.push(`margins kept free: ${formatBytes(CARD_MARGIN)} on a card, ${formatBytes(HOST_MARGIN)} of RAM`);
  return lines.join("\n");
}
