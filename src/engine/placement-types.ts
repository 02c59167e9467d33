// bloomery engine: the JSON of the live placement picture (GET /placement/state, docs/api.md) - types
// only, with no imports, so the web UI's browser code (src/server/webui/client) reads the same ones.

/** Where a layer's routed experts live: the card, host RAM, or the file read into a RAM cache (plan.ts's Tier). */
export type ExpertTier = "card" | "host" | "disk";

export interface PlacementLayer {
  /** the block index (blk.N) */
  layer: number;
  /** where its routed experts live (the load's plan) */
  tier: ExpertTier;
  n_expert: number;
  /** each expert's picks since load ((token, pick) pairs); null when the backend does not count them */
  picks: number[] | null;
  /** the same picks decayed with a half-life of heat_half_life_ms: how often each was picked lately */
  heat: number[] | null;
}

export interface PlacementStep {
  t_ms: number;
  tokens: number;
  prompt_tokens: number;
  seqs: number;
  ms: number;
  card_ms: number;
  cpu_ms: number;
  copy_ms: number;
  copy_bytes: number;
  disk_bytes: number;
  promoted: number;
}

export interface PlacementCacheEntry {
  n_tokens: number;
  bytes: number;
  where: "card" | "host";
  used_at_ms: number;
  /** the entry's first tokens as text (absent with --no-slots, which hides prompts) */
  preview?: string;
}

/** The whole picture; the endpoint's JSON (docs/api.md). */
export interface PlacementState {
  object: "bloomery.placement";
  time_ms: number;
  backend: string;
  n_layer: number;
  n_expert: number;
  n_expert_used: number;
  /** the load's placement line and its bytes per tier (null when the load was not planned) */
  plan: { line: string; card: TierTotals; host: TierTotals; disk: TierTotals } | null;
  picks: { available: boolean; reason?: string; heat_half_life_ms: number; total: number };
  layers: PlacementLayer[];
  /** promotion of host experts into card slots (null: no host experts beside a card) */
  promotion: { slots: number; promoted_total: number; resident_picks_total: number; picks_total: number; events: { t_ms: number; promoted: number }[] } | null;
  /** the disk tier's RAM cache (null: none) */
  expert_cache: { slots: number; resident: number; lookups: number; hits: number; misses: number; read_bytes: number; evictions: number } | null;
  prompt_cache: { entries: PlacementCacheEntry[]; bytes: number; card_bytes: number; hits: number; misses: number; tokens_restored: number };
  steps: { total: number; recent: PlacementStep[] };
  engine: { n_decode: number; slots: number; slots_busy: number; queued: number };
}

export interface TierTotals {
  dense_bytes: number;
  expert_bytes: number;
  n_experts: number;
}
