// bloomery server: request counters and the Prometheus text of GET /metrics (llama-server's
// `llamacpp:` metric names), and admission: how many generations may run or wait at once.
import type { DoneEvent, EngineStats } from "../engine/protocol.ts";
import { ApiError } from "./errors.ts";

export class Metrics {
  readonly startTime = Math.floor(Date.now() / 1000);
  promptTokens = 0;
  promptCached = 0;
  promptMs = 0;
  predictedTokens = 0;
  predictedMs = 0;
  nTokensMax = 0;
  requests = 0;
  // window since the last scrape (llama averages its gauges over it)
  private bucketPromptTokens = 0;
  private bucketPromptMs = 0;
  private bucketPredTokens = 0;
  private bucketPredMs = 0;

  /** Count one finished generation. */
  record(d: DoneEvent): void {
    const t = d.timings;
    this.promptTokens += t.prompt_n;
    this.promptCached += t.cache_n;
    this.promptMs += t.prompt_ms;
    this.predictedTokens += t.predicted_n;
    this.predictedMs += t.predicted_ms;
    this.bucketPromptTokens += t.prompt_n;
    this.bucketPromptMs += t.prompt_ms;
    this.bucketPredTokens += t.predicted_n;
    this.bucketPredMs += t.predicted_ms;
    this.nTokensMax = Math.max(this.nTokensMax, d.tokensEvaluated + d.tokensPredicted);
  }

  /** The Prometheus exposition text; resets the averaging window. */
  render(st: EngineStats): string {
    const rate = (n: number, ms: number) => (ms > 0 ? (n * 1000) / ms : 0);
    const counters: [string, string, number][] = [
      ["prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", this.promptTokens],
      ["prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", this.promptCached],
      ["prompt_seconds_total", "Total time spent processing prompts", this.promptMs / 1000],
      ["tokens_predicted_total", "Number of generation tokens processed", this.predictedTokens],
      ["tokens_predicted_seconds_total", "Total time spent generating tokens", this.predictedMs / 1000],
      ["n_decode_total", "Total number of forward passes (llama_decode() calls in llama-server)", st.nDecode],
      ["n_tokens_max", "Largest observed sequence length (prompt + generation)", this.nTokensMax],
      ["requests_total", "Number of generating requests received", this.requests],
      // llama-server's speculative decoding counters (--spec-type ngram-simple drafts)
      ["spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", st.specDrafted],
      ["spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model", st.specAccepted],
      ["spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps", st.specSteps],
    ];
    const gauges: [string, string, number][] = [
      ["prompt_tokens_seconds", "Average prompt throughput in tokens/s", rate(this.bucketPromptTokens, this.bucketPromptMs)],
      ["predicted_tokens_seconds", "Average generation throughput in tokens/s", rate(this.bucketPredTokens, this.bucketPredMs)],
      ["requests_processing", "Number of requests processing", st.slotsBusy],
      ["requests_deferred", "Number of requests deferred", st.queued],
      ["n_busy_slots_per_decode", "Average number of busy slots per forward pass", st.nDecode > 0 ? st.busySlotsDecoded / st.nDecode : 0],
    ];
    this.bucketPromptTokens = this.bucketPromptMs = this.bucketPredTokens = this.bucketPredMs = 0;
    let out = "";
    const add = (type: string, items: [string, string, number][]) => {
      for (const [name, help, v] of items) {
        out += `# HELP llamacpp:${name} ${help}\n# TYPE llamacpp:${name} ${type}\nllamacpp:${name} ${formatValue(v)}\n`;
      }
    };
    add("counter", counters);
    add("gauge", gauges);
    // the prompt cache and the experts' disk tier (bloomery's own; llama-server has no such metrics)
    const cache: [string, string, string, number][] = [
      ["prompt_cache_hits_total", "counter", "Prompts started from a prompt-cache entry", st.cacheHits],
      ["prompt_cache_misses_total", "counter", "Prompts that found no prompt-cache entry", st.cacheMisses],
      ["prompt_cache_tokens_restored_total", "counter", "Tokens restored from the prompt cache", st.cachedTokensRestored],
      ["prompt_cache_entries", "gauge", "Entries in the prompt cache", st.cacheEntries],
      ["prompt_cache_bytes", "gauge", "Bytes held by the prompt cache", st.cacheBytes],
      ["prompt_cache_card_bytes", "gauge", "Bytes of the prompt cache held in card memory", st.cacheCardBytes],
    ];
    const ex = st.experts;
    if (ex) {
      cache.push(
        ["expert_cache_lookups_total", "counter", "Routed experts the MoE blocks needed from the disk tier's RAM cache", ex.lookups],
        ["expert_cache_hits_total", "counter", "Of those, found resident", ex.hits],
        ["expert_cache_misses_total", "counter", "Of those, read from the file", ex.misses],
        ["expert_cache_read_bytes_total", "counter", "Bytes read from the file for experts", ex.bytesRead],
        ["expert_cache_evictions_total", "counter", "Experts evicted from the RAM cache", ex.evictions],
        ["expert_cache_resident", "gauge", "Experts resident in the RAM cache", ex.resident],
        ["expert_cache_slots", "gauge", "Experts the RAM cache holds at most", ex.slots],
      );
    }
    const hx = st.hostExperts;
    if (hx) {
      cache.push(
        ["host_expert_layers", "gauge", "Layers whose routed experts stay in host RAM beside the card", hx.blocks],
        ["host_expert_cpu_calls_total", "counter", "Host-expert layers run on the CPU (whole, or a token's share of the picks)", hx.hookRuns],
        ["host_expert_cpu_seconds_total", "counter", "Time those CPU runs took", hx.hookUs / 1e6],
        ["host_expert_uploads_total", "counter", "Host-expert layers uploaded to the card for a prompt batch", hx.uploadRuns],
        ["host_expert_upload_bytes_total", "counter", "Bytes of host experts uploaded", hx.uploadBytes],
        ["host_expert_upload_min_tokens", "gauge", "Batches of at least this many tokens upload (the cost model)", hx.uploadMin],
        ["host_expert_card_share", "gauge", "Of a token's picks in a host layer, how many the card reads from host RAM", hx.cardShare],
        ["host_expert_promote_slots", "gauge", "Card slots a host layer for promoted experts (0: promotion off)", hx.promoteSlots],
        ["host_expert_promoted_total", "counter", "Experts moved into card slots", hx.promoted],
        ["host_expert_resident_picks_total", "counter", "One-token picks found in card slots", hx.residentPicks],
        ["host_expert_picks_total", "counter", "One-token picks of host layers while promotion is on", hx.picks],
      );
    }
    for (const [name, type, help, v] of cache) out += `# HELP bloomery:${name} ${help}\n# TYPE bloomery:${name} ${type}\nbloomery:${name} ${formatValue(v)}\n`;
    return out;
  }
}

function formatValue(v: number): string {
  if (Number.isInteger(v)) return String(v);
  return String(Number(v.toPrecision(6)));
}

/**
 * Generations admitted at once: the slots plus a bounded wait queue. Past it a request gets
 * 503 unavailable_error with Retry-After (the engine would otherwise queue without bound).
 */
export class Admission {
  active = 0;
  constructor(
    readonly slots: number,
    readonly maxQueue: number,
  ) {}

  get waiting(): number {
    return Math.max(0, this.active - this.slots);
  }

  get processing(): number {
    return Math.min(this.active, this.slots);
  }

  /** Reserve room for `n` generations or throw the 503 (a 400 when `n` could never fit, however idle the server). */
  acquire(n: number): void {
    if (n > this.slots + this.maxQueue) {
      throw new ApiError(
        "invalid_request_error",
        `the request asks for ${n} generations at once (prompts x n), more than this server can ever hold: ${this.slots} slots and ${this.maxQueue} queue places; send fewer prompts or choices per request`,
      );
    }
    if (this.active + n > this.slots + this.maxQueue) {
      throw new ApiError(
        "unavailable_error",
        `the server is busy: ${this.processing} of ${this.slots} slots are working and ${this.waiting} requests are waiting (queue limit ${this.maxQueue}); retry later`,
        {},
        503,
        { "Retry-After": "1" },
      );
    }
    this.active += n;
  }

  release(n = 1): void {
    this.active = Math.max(0, this.active - n);
  }
}
