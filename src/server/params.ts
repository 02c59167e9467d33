// bloomery server: a request's generation fields -> the engine's GenerateRequest settings, with
// llama-server's defaults (from the server's flags), aliases, clamps and refusals
// (tools/server/server-schema.cpp): soft limits clamp, hard limits answer 400 naming the field.
import type { ServerOptions } from "../cli/flags.ts";
import type { DraftOverrides, SamplingParams } from "../engine/protocol.ts";
import { parseLogitBiasField, parseSamplersField, resolveSamplingParams } from "../sampling/index.ts";
import { badField, shownValue } from "./errors.ts";

const INT32_MAX = 2 ** 31 - 1;

/** Everything about one generation that comes from request fields (the prompt aside). */
export interface GenSettings {
  params: SamplingParams;
  nPredict: number;
  stop: string[];
  ignoreEos: boolean;
  nProbs: number;
  postSamplingProbs: boolean;
  cachePrompt: boolean;
  idSlot: number;
  returnTokens: boolean;
  timingsPerToken: boolean;
  stream: boolean;
  includeUsage: boolean;
  /** completions per prompt (`n` / `n_cmpl`), at most the slot count */
  nCmpl: number;
  nKeep: number;
  minKeep: number;
  dynatempRange: number;
  dynatempExponent: number;
  responseFields: string[];
  /** speculative.n_max / n_min / p_min where the request gives them (the server's flags otherwise) */
  draft: DraftOverrides;
}

/** The model facts parsing needs. */
export interface ParamContext {
  opts: ServerOptions;
  nVocab: number;
  nSlots: number;
  /** tokens of a text (no specials added), for string keys of logit_bias */
  encode(text: string): number[];
}

type Body = Record<string, unknown>;

function has(b: Body, k: string): boolean {
  return b[k] !== undefined && b[k] !== null;
}

/** First present of several names (llama's aliases), with the name found. */
function pick(b: Body, names: string[]): [string, unknown] | undefined {
  for (const n of names) if (has(b, n)) return [n, b[n]];
  return undefined;
}

function num(b: Body, names: string | string[], def: number): { v: number; name: string } {
  const ns = typeof names === "string" ? [names] : names;
  const p = pick(b, ns);
  if (!p) return { v: def, name: ns[0] };
  if (typeof p[1] !== "number" || !Number.isFinite(p[1])) throw badField(p[0], `expected a number, got ${shownValue(p[1])}`);
  return { v: p[1], name: p[0] };
}

/** Soft limit: clamped, as llama does for the sampling knobs. */
function soft(b: Body, names: string | string[], def: number, lo: number, hi: number): number {
  return Math.max(lo, Math.min(hi, num(b, names, def).v));
}

/** Hard limit: an integer in [lo, hi] or a 400. */
function hard(b: Body, names: string | string[], def: number, lo: number, hi: number): number {
  const { v, name } = num(b, names, def);
  if (!Number.isInteger(v)) throw badField(name, `expected an integer, got ${v}`);
  if (v < lo || v > hi) throw badField(name, `Value must be between ${lo} <= value <= ${hi}, but got ${v}`);
  return v;
}

function bool(b: Body, name: string, def: boolean): boolean {
  if (!has(b, name)) return def;
  const v = b[name];
  if (typeof v !== "boolean") throw badField(name, `expected a boolean, got ${shownValue(v)}`);
  return v;
}

/** `stop`: a string or an array of strings; empty strings are dropped. */
export function readStop(v: unknown): string[] {
  if (v === undefined || v === null) return [];
  if (typeof v === "string") return v === "" ? [] : [v];
  if (Array.isArray(v)) {
    return v.map((s, i) => {
      if (typeof s !== "string") throw badField(`stop[${i}]`, "expected a string");
      return s;
    }).filter((s) => s !== "");
  }
  throw badField("stop", "expected a string or an array of strings");
}

function wrapSampling<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof Error && e.name === "SamplingParamError") {
      const x = e as Error & { field: string; detail: string };
      throw badField(x.field, x.detail);
    }
    throw e;
  }
}

/** Reads the generation fields of a request body (llama's names; null = absent). */
export function readGenSettings(b: Body, ctx: ParamContext): GenSettings {
  const o = ctx.opts;
  const nPredict = hard(b, ["n_predict", "max_completion_tokens", "max_tokens"], o.nPredict, -1, INT32_MAX);
  const seedV = num(b, "seed", o.seed);
  if (!Number.isInteger(seedV.v) || seedV.v < -1 || seedV.v > 4294967295) throw badField("seed", `expected an integer in [-1, 4294967295], got ${seedV.v}`);
  let dryBase = num(b, "dry_base", o.dryBase).v;
  if (dryBase < 1) dryBase = o.dryBase;
  let breakers = [...o.drySequenceBreakers];
  if (has(b, "dry_sequence_breakers")) {
    const v = b.dry_sequence_breakers;
    if (!Array.isArray(v) || v.length === 0 || v.some((s) => typeof s !== "string")) {
      throw badField("dry_sequence_breakers", "dry_sequence_breakers must be a non-empty array of strings");
    }
    breakers = v as string[];
  }
  const samplers = has(b, "samplers") ? wrapSampling(() => parseSamplersField(b.samplers)) : [...o.samplers];
  const ignoreEos = bool(b, "ignore_eos", o.ignoreEos);
  const bias = has(b, "logit_bias") ? wrapSampling(() => parseLogitBiasField(b.logit_bias, ctx.nVocab, ctx.encode)) : [];
  const banned = new Set(bias.filter((x) => x.bias === -Infinity).map((x) => x.id)).size;
  if (banned >= ctx.nVocab) throw badField("logit_bias", `bans every token of the vocabulary (${banned} of ${ctx.nVocab}); nothing could be generated`);
  const mirostat = Math.round(soft(b, "mirostat", 0, 0, 2)) as 0 | 1 | 2;
  const nProbs = Math.min(hard(b, ["n_probs", "logprobs"], 0, 0, INT32_MAX), ctx.nVocab);
  const postSamplingProbs = bool(b, "post_sampling_probs", false);
  const minKeep = hard(b, "min_keep", 0, 0, INT32_MAX);
  const dynatempRange = num(b, "dynatemp_range", 0).v;
  const dynatempExponent = num(b, "dynatemp_exponent", 1).v;
  const raw: SamplingParams = {
    temperature: soft(b, "temperature", o.temperature, 0, Infinity),
    topK: Math.trunc(soft(b, "top_k", o.topK, 0, INT32_MAX)),
    topP: soft(b, "top_p", o.topP, 0, 1),
    minP: soft(b, "min_p", o.minP, 0, 1),
    typicalP: num(b, "typical_p", o.typicalP).v,
    topNSigma: num(b, "top_n_sigma", -1).v,
    repeatPenalty: num(b, "repeat_penalty", o.repeatPenalty).v,
    repeatLastN: hard(b, "repeat_last_n", o.repeatLastN, 0, INT32_MAX),
    presencePenalty: num(b, "presence_penalty", o.presencePenalty).v,
    frequencyPenalty: num(b, "frequency_penalty", o.frequencyPenalty).v,
    dryMultiplier: num(b, "dry_multiplier", o.dryMultiplier).v,
    dryBase,
    dryAllowedLength: hard(b, "dry_allowed_length", o.dryAllowedLength, 0, INT32_MAX),
    dryPenaltyLastN: hard(b, "dry_penalty_last_n", o.dryPenaltyLastN, 0, INT32_MAX),
    drySequenceBreakers: breakers,
    xtcProbability: soft(b, "xtc_probability", o.xtcProbability, 0, 1),
    xtcThreshold: soft(b, "xtc_threshold", o.xtcThreshold, 0, 1),
    mirostat,
    mirostatTau: num(b, "mirostat_tau", 5).v,
    mirostatEta: num(b, "mirostat_eta", 0.1).v,
    seed: seedV.v,
    logitBias: bias,
    samplers,
    dynatempRange,
    dynatempExponent,
    minKeep,
    adaptiveTarget: -1,
    adaptiveDecay: 0.9,
    ignoreEos,
    nProbs,
    postSamplingProbs,
  };
  if (raw.repeatPenalty <= 0) throw badField("repeat_penalty", `must be greater than 0, got ${raw.repeatPenalty}`);
  const params = wrapSampling(() => resolveSamplingParams(raw));
  const so = b.stream_options;
  const includeUsage = so !== null && typeof so === "object" ? bool(so as Body, "include_usage", false) : false;
  const responseFields = has(b, "response_fields") ? (b.response_fields as string[]) : [];
  return {
    params,
    nPredict,
    stop: readStop(b.stop),
    ignoreEos,
    nProbs,
    postSamplingProbs,
    cachePrompt: bool(b, "cache_prompt", o.cachePrompt),
    idSlot: hard(b, "id_slot", -1, -1, Math.max(0, ctx.nSlots - 1)),
    returnTokens: bool(b, "return_tokens", false),
    timingsPerToken: bool(b, "timings_per_token", false),
    stream: bool(b, "stream", false),
    includeUsage,
    nCmpl: hard(b, ["n_cmpl", "n"], 1, 1, ctx.nSlots),
    nKeep: hard(b, "n_keep", 0, -1, INT32_MAX),
    minKeep,
    dynatempRange,
    dynatempExponent,
    responseFields,
    draft: readDraft(b, o),
  };
}

/**
 * llama-server's speculative.n_max, n_min, p_min (server-schema.cpp: n_max at least 0, n_min within 0 .. n_max,
 * p_min clamped to 0 .. 1); a field the request does not give keeps the server's flag.
 */
function readDraft(b: Body, o: ServerOptions): DraftOverrides {
  const d: DraftOverrides = {};
  const given = (k: string) => has(b, k);
  if (given("speculative.n_max") || given("speculative.n_min")) {
    const nMax = Math.max(0, hard(b, "speculative.n_max", o.specDraftNMax, -INT32_MAX, INT32_MAX));
    const nMin = Math.max(0, Math.min(nMax, hard(b, "speculative.n_min", o.specDraftNMin, -INT32_MAX, INT32_MAX)));
    if (given("speculative.n_max")) d.nMax = nMax;
    d.nMin = nMin;
  }
  if (given("speculative.p_min")) d.pMin = soft(b, "speculative.p_min", o.specDraftPMin, 0, 1);
  return d;
}

/** llama's `generation_settings` / `/props` params object for a request's settings. */
export function settingsJson(s: GenSettings, extra: { grammar?: string; chatFormat?: string; reasoningFormat?: string; eogIds?: number[] }, onlyMetrics = false): Record<string, unknown> {
  const p = s.params;
  const base: Record<string, unknown> = {
    seed: p.seed === -1 ? 4294967295 : p.seed,
    temperature: p.temperature,
    dynatemp_range: s.dynatempRange,
    dynatemp_exponent: s.dynatempExponent,
    top_k: p.topK,
    top_p: p.topP,
    min_p: p.minP,
    top_n_sigma: p.topNSigma,
    xtc_probability: p.xtcProbability,
    xtc_threshold: p.xtcThreshold,
    typical_p: p.typicalP,
    repeat_last_n: p.repeatLastN,
    repeat_penalty: p.repeatPenalty,
    presence_penalty: p.presencePenalty,
    frequency_penalty: p.frequencyPenalty,
    dry_multiplier: p.dryMultiplier,
    dry_base: p.dryBase,
    dry_allowed_length: p.dryAllowedLength,
    dry_penalty_last_n: p.dryPenaltyLastN,
    ...(onlyMetrics ? {} : { dry_sequence_breakers: p.drySequenceBreakers }),
    mirostat: p.mirostat,
    mirostat_tau: p.mirostatTau,
    mirostat_eta: p.mirostatEta,
    ...(onlyMetrics ? {} : { stop: s.stop }),
    max_tokens: s.nPredict,
    n_predict: s.nPredict,
    n_keep: s.nKeep,
    ignore_eos: s.ignoreEos,
    stream: s.stream,
    // llama-server's JSON: a ban (-inf) is null; ignore_eos shows as a ban of every end-of-generation token
    ...(onlyMetrics ? {} : {
      logit_bias: [
        ...p.logitBias.map(({ id, bias }) => ({ bias: Number.isFinite(bias) ? bias : null, token: id })),
        ...(s.ignoreEos ? (extra.eogIds ?? []).map((id) => ({ bias: null, token: id })) : []),
      ],
    }),
    n_probs: s.nProbs,
    min_keep: s.minKeep,
    ...(onlyMetrics ? {} : { grammar: extra.grammar ?? "" }),
    chat_format: extra.chatFormat ?? "Content-only",
    reasoning_format: extra.reasoningFormat ?? "none",
    samplers: p.samplers,
    timings_per_token: s.timingsPerToken,
    post_sampling_probs: s.postSamplingProbs,
  };
  if (s.draft.nMax !== undefined) base["speculative.n_max"] = s.draft.nMax;
  if (s.draft.nMin !== undefined) base["speculative.n_min"] = s.draft.nMin;
  if (s.draft.pMin !== undefined) base["speculative.p_min"] = s.draft.pMin;
  return base;
}
