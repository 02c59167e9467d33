// bloomery engine: the messages between HTTP handlers (main thread) and the engine worker.
import type { SpecConfig } from "./spec-ngram.ts";
import type { PlacementFlags } from "./plan.ts";
import type { ExpertStats } from "./expert-store.ts";
import type { HostExpertStats } from "./cuda-backend.ts";
import type { PlacementState } from "./placement-types.ts";
import type { SamplingParams } from "../sampling/index.ts";

export type { SamplingParams };

export interface GenerateRequest {
  id: number;
  prompt: number[];
  /** sampling settings (unset fields take llama's defaults) */
  params: Partial<SamplingParams>;
  /** -1: until EOS or the context is full */
  nPredict: number;
  stop: string[];
  ignoreEos: boolean;
  /** GBNF grammar constraining the output */
  grammar?: string;
  /** special tokens written into the output text all the same (llama-server's preserved_tokens: the chat format's markers) */
  preservedTokens?: number[];
  /** report this many top candidates with probabilities for each token */
  nProbs: number;
  idSlot: number;
  cachePrompt: boolean;
  /** llama-server's per-request speculative.n_max / n_min / p_min (absent: the server's --spec-draft-* settings) */
  draft?: DraftOverrides;
}

/** A request's speculative-decoding settings over the server's (every spec type: the draft's longest and shortest length; p_min for draft models and draft-mtp). */
export interface DraftOverrides {
  nMax?: number;
  nMin?: number;
  pMin?: number;
}

export interface TokenProb {
  id: number;
  token: string;
  logprob: number;
  bytes: number[];
}

/** One generated token's worth of output. */
export interface TokenEvent {
  id: number;
  token: number;
  /** text completed by this token (a stop string and partial UTF-8 are held back) */
  text: string;
  /** probabilities of the chosen token and the top candidates, when asked */
  probs?: { id: number; token: string; logprob: number; bytes: number[]; top: TokenProb[] };
}

export type StopType = "eos" | "limit" | "word" | "cancel" | "none";

export interface Timings {
  prompt_n: number;
  prompt_ms: number;
  prompt_per_token_ms: number;
  prompt_per_second: number;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_token_ms: number;
  predicted_per_second: number;
  cache_n: number;
  /** speculative decoding (llama-server's fields, present when the request drafted): tokens drafted, and accepted */
  draft_n?: number;
  draft_n_accepted?: number;
}

export interface DoneEvent {
  id: number;
  stopType: StopType;
  stoppingWord: string;
  /** the remaining held-back text, released at the end (empty when a stop word matched) */
  text: string;
  tokensPredicted: number;
  tokensEvaluated: number;
  tokensCached: number;
  truncated: boolean;
  idSlot: number;
  timings: Timings;
  error?: { message: string; type: string; code: number };
}

export interface ModelInfo {
  path: string;
  arch: string;
  name: string;
  nVocab: number;
  nCtxTrain: number;
  nEmbd: number;
  nParams: number;
  sizeBytes: number;
  nCtx: number;
  nCtxSlot: number;
  nSlots: number;
  backend: string;
  chatTemplate: string;
  bosToken: string;
  eosToken: string;
  fileType: string;
  /** the speculative decoding the engine runs (draft-mtp on by default included; none where off) */
  specType?: string;
}

export type ToWorker =
  | { type: "load"; path: string; options: EngineOptions }
  | { type: "generate"; req: GenerateRequest }
  | { type: "cancel"; id: number }
  | { type: "slots" }
  | { type: "stats" }
  | { type: "placement"; previews: boolean }
  | { type: "slot-action"; reqId: number; action: "save" | "restore" | "erase"; slot: number; path?: string }
  | { type: "shutdown" };

export type FromWorker =
  | { type: "loaded"; info: ModelInfo }
  | { type: "load-error"; message: string }
  | { type: "tokens"; events: TokenEvent[] }
  | { type: "done"; done: DoneEvent }
  | { type: "slots"; slots: SlotInfo[] }
  | { type: "stats"; stats: EngineStats }
  | { type: "placement"; state: PlacementState }
  | { type: "slot-action"; reqId: number; result?: Record<string, number>; error?: { message: string; type: string; code: number } }
  | { type: "log"; message: string };

/** Counters for /metrics and logs. */
export interface EngineStats {
  slots: number;
  slotsBusy: number;
  queued: number;
  cacheEntries: number;
  cacheBytes: number;
  cacheHits: number;
  cacheMisses: number;
  cachedTokensRestored: number;
  /** prompt-cache bytes held in card memory */
  cacheCardBytes: number;
  /** forward passes run, and the busy slots they served in total */
  nDecode: number;
  busySlotsDecoded: number;
  /** forward passes that returned the rows' best candidates, not the rows (the samplers allowed it) */
  topKSteps: number;
  /** speculative decoding: draft tokens verified, accepted, and the verification steps */
  specDrafted: number;
  specAccepted: number;
  specSteps: number;
  /** a recurrent model's speculation: slot states put back to the snapshot before a verification (part of a
   * draft rejected), the accepted tokens taken again after them, and those passes' milliseconds */
  specRollbacks?: number;
  specRetaken?: number;
  specRetakeMs?: number;
  /** the milliseconds spent taking snapshots and putting them back */
  specSnapMs?: number;
  /** speculation on by default (spec-guard.ts): whether the steps draft now, the mode changes, and the last measured ms a token drafting and not (0: not yet) */
  specGuard?: { drafting: boolean; switches: number; msPerTokenOn: number; msPerTokenOff: number };
  /** the routed experts' RAM cache (the disk tier), when the model has one */
  experts?: ExpertStats;
  /** the routed experts kept in host RAM beside a card, when some are */
  hostExperts?: HostExpertStats;
}

export interface EngineOptions {
  nCtx: number;
  nSlots: number;
  nThreads: number;
  nThreadsBatch: number;
  batchSize: number;
  ubatchSize: number;
  cacheRamMiB: number;
  exact?: boolean;
  /** llama's -ngl: 0 = CPU; > 0, "auto", "all" = the CUDA card when present */
  nGpuLayers?: number | "auto" | "all";
  /** CUDA device index */
  device?: number;
  /** placement flags and budgets (plan.ts) */
  placement?: PlacementFlags;
  /** --batch-invariant: the card's exact mode */
  batchInvariant?: boolean;
  /** --promote-slots: card slots a host-expert layer (0 = off) */
  promoteSlots?: number;
  /** --spec-type and its settings (speculative decoding; none by default) */
  spec?: SpecConfig;
}

export interface SlotInfo {
  id: number;
  n_ctx: number;
  is_processing: boolean;
  id_task: number;
  n_past: number;
  n_cached: number;
}
