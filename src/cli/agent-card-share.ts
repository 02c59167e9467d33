// bloomery CLI: the card's share of a model's weights for sizing before the load, from the plan at
// load itself (src/engine/plan.ts): the routed experts that --cpu-moe, --n-cpu-moe, -ot ...=CPU or
// the plan's automatic host layers keep in host memory are not on the card, and two layers of them
// are staged there. A function of the context, since the automatic host layers depend on it.
import { expertLayer, planLoad, type PlacementFlags, type PlanContext, type PlanMachine, type PlanTensor } from "../engine/plan.ts";
import type { Geometry } from "./agent-sizes.ts";

export interface CardShare {
  /** tensors the plan keeps off the card (routed experts in host memory, or read from the file by the CPU) */
  host: ReadonlySet<string>;
  /** layers whose routed experts stay in host memory */
  hostLayers: number;
  /** of those, the layers the plan moved itself because the card is too small (LoadPlan.autoHostLayers) */
  autoHostLayers: number;
  /** the card's weight arena: every tensor on the card, each rounded up to 256 bytes */
  cardWeightBytes: number;
  /** one staging buffer: the largest host layer's experts (each tensor rounded up to 256); the card has two */
  stageBytes: number;
}

/** The card's share at a context; undefined when every tensor is on the card. Throws PlanError when the plan refuses. */
export type CardSplit = (c: PlanContext) => CardShare | undefined;

const align256 = (n: number) => Math.ceil(n / 256) * 256;

/**
 * The tensors the plan places: the file's, or for a known model's shape (no file yet) stand-ins
 * with its sizes - the embedding, each layer's dense part, and each layer's gate, up and down experts.
 */
export function planTensors(g: Geometry): PlanTensor[] {
  if (g.gguf) return [...g.gguf.tensors.values()].map((t) => ({ name: t.name, bytes: t.nbytes }));
  const L = Math.max(1, g.hp.nLayer);
  const dense = Math.max(0, g.weightBytes - g.expertBytes - g.embdBytes);
  const out: PlanTensor[] = [{ name: "token_embd.weight", bytes: g.embdBytes }];
  for (let l = 0; l < L; l++) {
    out.push({ name: `blk.${l}.attn.weight`, bytes: Math.floor(dense / L) });
    for (const r of ["gate", "up", "down"]) out.push({ name: `blk.${l}.ffn_${r}_exps.weight`, bytes: Math.floor(g.expertBytes / (3 * L)) });
  }
  return out;
}

/** The card's share as the plan at load would make it with these flags on this machine (memoized by context). */
export function cardSplit(g: Geometry, flags: PlacementFlags, m: PlanMachine): CardSplit {
  if (!m.card) return () => undefined;
  const tensors = planTensors(g);
  const memo = new Map<string, CardShare | undefined>();
  return (c) => {
    const key = `${c.nSlots}x${c.nCtxSlot}/${c.maxTokens}`;
    if (memo.has(key)) return memo.get(key);
    const plan = planLoad(g.hp, tensors, "cuda", flags, m, c);
    const host = new Set<string>();
    const layerBytes = new Map<number, number>();
    let card = 0;
    for (const t of tensors) {
      const tier = plan.where.get(t.name);
      if (tier !== "host" && tier !== "disk") {
        card += align256(t.bytes);
        continue;
      }
      host.add(t.name);
      const l = expertLayer(t.name);
      if (l !== null) layerBytes.set(l, (layerBytes.get(l) ?? 0) + align256(t.bytes));
    }
    const share = host.size === 0 ? undefined : {
      host, hostLayers: layerBytes.size, autoHostLayers: plan.autoHostLayers ?? 0, cardWeightBytes: card,
      stageBytes: Math.max(0, ...layerBytes.values()),
    };
    memo.set(key, share);
    return share;
  };
}
