// bloomery server: small pieces every response format shares: ids, the build fingerprint, finish
// reasons, usage and timings, probability entries (llama-server's shapes).
import type { DoneEvent, TokenEvent } from "../engine/protocol.ts";

export const BUILD_INFO = "bloomery-0.1.0";

const ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** 32 random letters and digits (llama's random_string). */
export function randomString(n = 32): string {
  const bytes = crypto.getRandomValues(new Uint8Array(n));
  let s = "";
  for (const b of bytes) s += ALNUM[b % ALNUM.length];
  return s;
}

export function chatCompletionId(): string {
  return `chatcmpl-${randomString()}`;
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

/** OpenAI finish_reason: stop for EOS or a stop word, length otherwise. */
export function finishReason(d: DoneEvent, toolCalls = false): "stop" | "length" | "tool_calls" {
  if (d.stopType === "eos" || d.stopType === "word") return toolCalls ? "tool_calls" : "stop";
  return "length";
}

/** llama's stop_type: eos | word | limit | none (a cancelled generation reports none). */
export function stopTypeName(d: DoneEvent): "eos" | "word" | "limit" | "none" {
  return d.stopType === "cancel" ? "none" : d.stopType;
}

export function timingsJson(d: DoneEvent): Record<string, number> {
  const t = d.timings;
  return {
    cache_n: t.cache_n,
    prompt_n: t.prompt_n,
    prompt_ms: t.prompt_ms,
    prompt_per_token_ms: t.prompt_per_token_ms,
    prompt_per_second: t.prompt_per_second,
    predicted_n: t.predicted_n,
    predicted_ms: t.predicted_ms,
    predicted_per_token_ms: t.predicted_per_token_ms,
    predicted_per_second: t.predicted_per_second,
    // llama-server's, only when the request drafted (speculative decoding)
    ...(t.draft_n ? { draft_n: t.draft_n, draft_n_accepted: t.draft_n_accepted ?? 0 } : {}),
  };
}

/** Timings summed over several generations (n choices). */
export function sumTimings(ds: DoneEvent[]): DoneEvent {
  if (ds.length === 1) return ds[0];
  const t = ds.map((d) => d.timings);
  const s = (k: keyof DoneEvent["timings"]) => t.reduce((a, x) => a + (x[k] ?? 0), 0);
  const drafted = s("draft_n");
  const promptN = s("prompt_n"), promptMs = s("prompt_ms"), predN = s("predicted_n"), predMs = s("predicted_ms");
  return {
    ...ds[0],
    tokensPredicted: ds.reduce((a, d) => a + d.tokensPredicted, 0),
    tokensEvaluated: ds.reduce((a, d) => a + d.tokensEvaluated, 0),
    tokensCached: ds.reduce((a, d) => a + d.tokensCached, 0),
    timings: {
      cache_n: s("cache_n"),
      prompt_n: promptN,
      prompt_ms: promptMs,
      prompt_per_token_ms: promptN ? promptMs / promptN : 0,
      prompt_per_second: promptMs ? (promptN * 1000) / promptMs : 0,
      predicted_n: predN,
      predicted_ms: predMs,
      predicted_per_token_ms: predN ? predMs / predN : 0,
      predicted_per_second: predMs ? (predN * 1000) / predMs : 0,
      ...(drafted ? { draft_n: drafted, draft_n_accepted: s("draft_n_accepted") } : {}),
    },
  };
}

/** OpenAI usage of one or more generations. */
export function usageJson(ds: DoneEvent[]): Record<string, unknown> {
  const prompt = ds.reduce((a, d) => a + d.tokensEvaluated, 0);
  const completion = ds.reduce((a, d) => a + d.tokensPredicted, 0);
  const cached = ds.reduce((a, d) => a + d.tokensCached, 0);
  return { completion_tokens: completion, prompt_tokens: prompt, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: cached } };
}

/** The most negative float: llama writes it for a log-probability of zero (JSON has no -inf). */
const LOWEST = -3.4028234663852886e38;

function logOrLowest(x: number): number {
  return Number.isFinite(x) ? x : LOWEST;
}

/**
 * One token's probability entry: {id, token, bytes, logprob, top_logprobs} (or prob/top_probs
 * with post_sampling_probs), as llama-server's probs_vector_to_json.
 */
export function probEntry(e: TokenEvent, post: boolean): Record<string, unknown> | null {
  const p = e.probs;
  if (!p) return null;
  const val = (lp: number) => (post ? Math.exp(lp) : logOrLowest(lp));
  return {
    id: p.id,
    token: p.token,
    bytes: p.bytes,
    [post ? "prob" : "logprob"]: val(p.logprob),
    [post ? "top_probs" : "top_logprobs"]: p.top.map((t) => ({ id: t.id, token: t.token, bytes: t.bytes, [post ? "prob" : "logprob"]: val(t.logprob) })),
  };
}

export function probEntries(events: TokenEvent[], post: boolean): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const e of events) {
    const x = probEntry(e, post);
    if (x) out.push(x);
  }
  return out;
}

/** response_fields: keep only the listed (slash-nested) paths, keyed by the path. */
export function pickFields(paths: string[], obj: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const path of paths) {
    let cur: unknown = obj;
    let ok = true;
    for (const k of path.split("/")) {
      if (ok && cur !== null && typeof cur === "object" && !Array.isArray(cur) && k in (cur as Record<string, unknown>)) cur = (cur as Record<string, unknown>)[k];
      else ok = false;
    }
    if (ok) out[path] = cur;
  }
  return out;
}

/**
 * timings_per_token while streaming: measured here, at the HTTP layer, from the request's start
 * to its first token (prompt) and from there on (generation); the final chunk has the engine's.
 */
export class LiveTimings {
  private readonly t0 = performance.now();
  private tFirst = 0;

  tokens(nPrompt: number, nPredicted: number): Record<string, number> {
    const now = performance.now();
    if (this.tFirst === 0) this.tFirst = now;
    const promptMs = this.tFirst - this.t0;
    const predMs = now - this.tFirst;
    return {
      cache_n: 0,
      prompt_n: nPrompt,
      prompt_ms: promptMs,
      prompt_per_token_ms: nPrompt ? promptMs / nPrompt : 0,
      prompt_per_second: promptMs ? (nPrompt * 1000) / promptMs : 0,
      predicted_n: nPredicted,
      predicted_ms: predMs,
      predicted_per_token_ms: nPredicted ? predMs / nPredicted : 0,
      predicted_per_second: predMs ? (nPredicted * 1000) / predMs : 0,
    };
  }
}
