// bloomery engine: the live placement picture (GET /placement/state, the web UI's placement page):
// per MoE layer where its routed experts live (the plan's tier: card, host RAM, disk cache) and
// how often each expert was picked lately (the backend's cumulative picks, decayed here), what
// promotion moved, the prompt cache's entries, and the last steps' time split between the card,
// the CPU and the copies. Built in the engine worker from what the engine already counts.
import type { Model } from "./model.ts";
import type { PromptCache } from "./prompt-cache.ts";
import type { StepLog, StepRecord } from "./step-log.ts";
import type { EngineStats } from "./protocol.ts";
import type { Tier } from "./plan.ts";
import { expertTensors } from "../models/ops.ts";
import type { PlacementLayer, PlacementState, PlacementStep, TierTotals } from "./placement-types.ts";

export type { PlacementState } from "./placement-types.ts";

/** Half-life of the heat: picks count half after this long. */
export const HEAT_HALF_LIFE_MS = 10_000;
/** Tokens of a prompt cache entry shown as its preview (its start). */
const PREVIEW_TOKENS = 24;

/** A MoE layer of the model: its block index, its experts' tier and count (from the routed-expert tensors). */
interface MoeLayer {
  layer: number;
  tier: Tier;
  nExpert: number;
}

const layersOf = new WeakMap<Model, MoeLayer[]>();

/** The model's MoE layers (scanned once a model: the tensor index does not change). */
function moeLayers(m: Model): MoeLayer[] {
  const known = layersOf.get(m);
  if (known) return known;
  // the program's EXPERTS ops in program order (Backend.expertPicks' rows), each tier from the plan of its tensors
  const fallback: Tier = m.experts ? "disk" : m.backend.name === "CPU" ? "host" : "card";
  const out = m.program.expertOps().map((i) => {
    const op = m.program.ops[i];
    const names = expertTensors(op);
    return { layer: op.layer, tier: (names.length ? m.plan?.where.get(names[0]) : undefined) ?? fallback, nExpert: op.params.n_expert ?? m.hp.nExpert };
  });
  layersOf.set(m, out);
  return out;
}

/** Picks decayed over wall time: read-time decay, so any number of readers see the same heat. */
export class ExpertHeat {
  private heat: Float64Array | undefined;
  private last: Float64Array | undefined;
  private at = 0;

  constructor(private readonly halfLifeMs = HEAT_HALF_LIFE_MS) {}

  /** The heat now, given the cumulative picks now (a new length starts over). */
  update(cum: Float64Array, now: number): Float64Array {
    if (!this.heat || !this.last || this.heat.length !== cum.length) {
      this.heat = Float64Array.from(cum);
      this.last = Float64Array.from(cum);
      this.at = now;
      return this.heat;
    }
    const f = Math.pow(0.5, Math.max(0, now - this.at) / this.halfLifeMs);
    for (let i = 0; i < cum.length; i++) {
      this.heat[i] = this.heat[i] * f + Math.max(0, cum[i] - this.last[i]);
      this.last[i] = cum[i];
    }
    this.at = now;
    return this.heat;
  }
}

const NOT_COUNTED: Record<string, string> = {
  CUDA: "not reported by this backend yet: the card's routers do not count picks per expert (the CPU's do)",
};

function stepJson(r: StepRecord): PlacementStep {
  const f = (x: number) => Math.round(x * 1000) / 1000;
  return {
    t_ms: r.t, tokens: r.tokens, prompt_tokens: r.promptTokens, seqs: r.seqs, ms: f(r.ms), card_ms: f(r.cardMs), cpu_ms: f(r.cpuMs),
    copy_ms: f(r.copyMs), copy_bytes: r.copyBytes, disk_bytes: r.diskBytes, promoted: r.promoted,
  };
}

const tierTotals = (t: { dense: number; experts: number; nExperts: number }): TierTotals => ({ dense_bytes: t.dense, expert_bytes: t.experts, n_experts: t.nExperts });

export interface PlacementSources {
  model: Model;
  cache: PromptCache;
  steps: StepLog;
  stats: EngineStats;
  heat: ExpertHeat;
}

/** The picture now. previews: include the prompt cache entries' text (off with --no-slots). */
export function placementState(s: PlacementSources, previews: boolean, now = Date.now()): PlacementState {
  const m = s.model, st = s.stats;
  const layers = moeLayers(m);
  const cum = m.backend.expertPicks?.();
  // layer-major, a row of the largest expert count a MoE layer (Backend.expertPicks)
  const stride = Math.max(0, ...layers.map((l) => l.nExpert));
  const expected = layers.length * stride;
  const counted = cum !== undefined && cum.length === expected;
  const heat = counted ? s.heat.update(cum, now) : undefined;
  let total = 0;
  const out: PlacementLayer[] = layers.map((l, i) => {
    const o = i * stride;
    const picks = counted ? Array.from(cum.subarray(o, o + l.nExpert)) : null;
    if (picks) total += picks.reduce((a, b) => a + b, 0);
    const h = heat ? Array.from(heat.subarray(o, o + l.nExpert), (x) => Math.round(x * 100) / 100) : null;
    return { layer: l.layer, tier: l.tier, n_expert: l.nExpert, picks, heat: h };
  });
  const reason = counted ? undefined
    : cum !== undefined ? `the backend reported ${cum.length} counts for ${layers.length} layers of ${stride} experts; ignored`
    : NOT_COUNTED[m.backend.name] ?? `not reported by this backend yet (${m.backend.name})`;
  const recent = s.steps.list();
  const hx = st.hostExperts;
  const ex = st.experts;
  const plan = m.plan;
  return {
    object: "bloomery.placement",
    time_ms: now,
    backend: m.backend.name,
    n_layer: m.hp.nLayer,
    n_expert: m.hp.nExpert,
    n_expert_used: m.hp.nExpertUsed,
    plan: plan ? { line: plan.line, card: tierTotals(plan.card), host: tierTotals(plan.host), disk: tierTotals(plan.disk) } : null,
    picks: { available: counted, ...(reason ? { reason } : {}), heat_half_life_ms: HEAT_HALF_LIFE_MS, total },
    layers: out,
    promotion: hx ? {
      slots: hx.promoteSlots, promoted_total: hx.promoted, resident_picks_total: hx.residentPicks, picks_total: hx.picks,
      events: recent.filter((r) => r.promoted > 0).map((r) => ({ t_ms: r.t, promoted: r.promoted })),
    } : null,
    expert_cache: ex ? { slots: ex.slots, resident: ex.resident, lookups: ex.lookups, hits: ex.hits, misses: ex.misses, read_bytes: ex.bytesRead, evictions: ex.evictions } : null,
    prompt_cache: {
      entries: s.cache.list().map((e) => ({
        n_tokens: e.tokens.length, bytes: e.kv.bytes, where: e.kv.where, used_at_ms: e.usedAt,
        ...(previews ? { preview: preview(m, e.tokens) } : {}),
      })),
      bytes: st.cacheBytes, card_bytes: st.cacheCardBytes, hits: st.cacheHits, misses: st.cacheMisses, tokens_restored: st.cachedTokensRestored,
    },
    steps: { total: s.steps.count, recent: recent.map(stepJson) },
    engine: { n_decode: st.nDecode, slots: st.slots, slots_busy: st.slotsBusy, queued: st.queued },
  };
}

function preview(m: Model, tokens: readonly number[]): string {
  try {
    const text = m.tokenizer.decode(tokens.slice(0, PREVIEW_TOKENS));
    return tokens.length > PREVIEW_TOKENS ? `${text}…` : text;
  } catch {
    return "";
  }
}
