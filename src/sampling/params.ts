// bloomery sampling: the parameters of a sampler (llama.cpp common_params_sampling and the
// llama-server request fields of tools/server/server-schema.cpp), their defaults, validation,
// and the `samplers` / `logit_bias` request fields as llama-server reads them.
import { SamplingParamError } from "./errors.ts";

/** Sampler stages llama knows, by canonical name (common_sampler_type_to_str). */
export const SAMPLER_STAGES = [
  "penalties",
  "dry",
  "top_n_sigma",
  "top_k",
  "typ_p",
  "top_p",
  "min_p",
  "xtc",
  "temperature",
  "infill",
  "adaptive_p",
] as const;
export type SamplerStageName = (typeof SAMPLER_STAGES)[number];

/** llama's default order. */
export const DEFAULT_SAMPLER_ORDER: readonly SamplerStageName[] = [
  "penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature",
];

/** One logit bias: `bias` is added to the token's logit; -Infinity bans the token. */
export interface LogitBias {
  readonly id: number;
  readonly bias: number;
}

export interface SamplingParams {
  /** <= 0 samples greedily (llama keeps only the largest logit). */
  temperature: number;
  /** Dynamic temperature: the temperature moves in [temperature - range, temperature + range] with the entropy (0 = off). */
  dynatempRange: number;
  dynatempExponent: number;
  /** <= 0: off. */
  topK: number;
  /** >= 1: off. */
  topP: number;
  /** <= 0: off. */
  minP: number;
  /** >= 1: off. */
  typicalP: number;
  /** <= 0: off. */
  topNSigma: number;
  /** Stages that cut keep at least this many tokens (0 = no floor). */
  minKeep: number;
  /** 1: off. Divides positive logits of recent tokens, multiplies negative ones. */
  repeatPenalty: number;
  /** Window of the repetition penalties: 0 off, -1 the whole history. */
  repeatLastN: number;
  presencePenalty: number;
  frequencyPenalty: number;
  /** 0: off. */
  dryMultiplier: number;
  /** < 1: DRY off. */
  dryBase: number;
  dryAllowedLength: number;
  /** Window of DRY: 0 off, -1 the whole history. */
  dryPenaltyLastN: number;
  drySequenceBreakers: string[];
  /** 0: off. */
  xtcProbability: number;
  /** > 0.5: off. */
  xtcThreshold: number;
  /** 0 off, 1 Mirostat, 2 Mirostat 2.0 (they replace the stage list: temperature then Mirostat). */
  mirostat: 0 | 1 | 2;
  mirostatTau: number;
  mirostatEta: number;
  /** Adaptive-p target probability (negative: the stage only samples); used when "adaptive_p" is in `samplers`. */
  adaptiveTarget: number;
  adaptiveDecay: number;
  /** Stage order; duplicates run twice, as in llama. */
  samplers: SamplerStageName[];
  /** -1 (or 0xFFFFFFFF): a random seed, reported by the sampler. */
  seed: number;
  logitBias: LogitBias[];
  /** Ban the end-of-generation tokens. */
  ignoreEos: boolean;
  /** Report the top n tokens with probabilities for every sampled token (0 = off). */
  nProbs: number;
  /** Probabilities after the sampling chain (true) or the softmax of the raw logits (false, llama's default). */
  postSamplingProbs: boolean;
}

export const DEFAULT_SAMPLING_PARAMS: Readonly<SamplingParams> = Object.freeze({
  temperature: 0.8,
  dynatempRange: 0,
  dynatempExponent: 1,
  topK: 40,
  topP: 0.95,
  minP: 0.05,
  typicalP: 1,
  topNSigma: -1,
  minKeep: 0,
  repeatPenalty: 1,
  repeatLastN: 64,
  presencePenalty: 0,
  frequencyPenalty: 0,
  dryMultiplier: 0,
  dryBase: 1.75,
  dryAllowedLength: 2,
  dryPenaltyLastN: 64,
  drySequenceBreakers: ["\n", ":", "\"", "*"],
  xtcProbability: 0,
  xtcThreshold: 0.1,
  mirostat: 0,
  mirostatTau: 5,
  mirostatEta: 0.1,
  adaptiveTarget: -1,
  adaptiveDecay: 0.9,
  samplers: [...DEFAULT_SAMPLER_ORDER],
  seed: -1,
  logitBias: [],
  ignoreEos: false,
  nProbs: 0,
  postSamplingProbs: false,
});

/** llama-server's request field for each parameter (error messages name these). */
export const REQUEST_FIELD: Record<keyof SamplingParams, string> = {
  temperature: "temperature",
  dynatempRange: "dynatemp_range",
  dynatempExponent: "dynatemp_exponent",
  topK: "top_k",
  topP: "top_p",
  minP: "min_p",
  typicalP: "typical_p",
  topNSigma: "top_n_sigma",
  minKeep: "min_keep",
  repeatPenalty: "repeat_penalty",
  repeatLastN: "repeat_last_n",
  presencePenalty: "presence_penalty",
  frequencyPenalty: "frequency_penalty",
  dryMultiplier: "dry_multiplier",
  dryBase: "dry_base",
  dryAllowedLength: "dry_allowed_length",
  dryPenaltyLastN: "dry_penalty_last_n",
  drySequenceBreakers: "dry_sequence_breakers",
  xtcProbability: "xtc_probability",
  xtcThreshold: "xtc_threshold",
  mirostat: "mirostat",
  mirostatTau: "mirostat_tau",
  mirostatEta: "mirostat_eta",
  adaptiveTarget: "adaptive_target",
  adaptiveDecay: "adaptive_decay",
  samplers: "samplers",
  seed: "seed",
  logitBias: "logit_bias",
  ignoreEos: "ignore_eos",
  nProbs: "n_probs",
  postSamplingProbs: "post_sampling_probs",
};

const FINITE: (keyof SamplingParams)[] = [
  "temperature", "dynatempRange", "dynatempExponent", "topP", "minP", "typicalP", "topNSigma",
  "presencePenalty", "frequencyPenalty", "dryMultiplier", "dryBase", "xtcProbability", "xtcThreshold",
  "mirostatTau", "mirostatEta", "adaptiveTarget", "adaptiveDecay",
];
const INTEGER: [keyof SamplingParams, number, number][] = [
  ["topK", -(2 ** 31), 2 ** 31 - 1],
  ["minKeep", 0, 2 ** 31 - 1],
  ["repeatLastN", -1, 2 ** 31 - 1],
  ["dryAllowedLength", 0, 2 ** 31 - 1],
  ["dryPenaltyLastN", -1, 2 ** 31 - 1],
  ["nProbs", 0, 2 ** 31 - 1],
  ["seed", -1, 2 ** 32 - 1],
];

function fail(key: keyof SamplingParams, detail: string): never {
  throw new SamplingParamError(REQUEST_FIELD[key], detail);
}

/**
 * Complete parameters from defaults and `over`, checked: numbers finite, integers in range,
 * llama's refusals (repeat_penalty finite and > 0, mirostat 0..2). Throws SamplingParamError.
 */
export function resolveSamplingParams(over: Partial<SamplingParams> = {}): SamplingParams {
  const p: SamplingParams = { ...DEFAULT_SAMPLING_PARAMS, ...stripUndefined(over) };
  for (const key of FINITE) {
    const v = p[key];
    if (typeof v !== "number" || !Number.isFinite(v)) fail(key, `must be a finite number, got ${String(v)}`);
  }
  for (const [key, lo, hi] of INTEGER) {
    const v = p[key];
    if (typeof v !== "number" || !Number.isInteger(v) || v < lo || v > hi) fail(key, `must be an integer in [${lo}, ${hi}], got ${String(v)}`);
  }
  const rp = p.repeatPenalty;
  if (typeof rp !== "number" || !Number.isFinite(rp) || rp <= 0 || !Number.isFinite(1 / rp))
    fail("repeatPenalty", `must be finite and greater than 0, got ${String(rp)}`);
  if (p.mirostat !== 0 && p.mirostat !== 1 && p.mirostat !== 2) fail("mirostat", `must be 0, 1 or 2, got ${String(p.mirostat)}`);
  if (p.adaptiveTarget > 1) fail("adaptiveTarget", `must be at most 1, got ${p.adaptiveTarget}`);
  if (typeof p.ignoreEos !== "boolean") fail("ignoreEos", "must be a boolean");
  if (typeof p.postSamplingProbs !== "boolean") fail("postSamplingProbs", "must be a boolean");
  if (!Array.isArray(p.drySequenceBreakers) || p.drySequenceBreakers.some((s) => typeof s !== "string"))
    fail("drySequenceBreakers", "must be an array of strings");
  if (!Array.isArray(p.samplers)) fail("samplers", "must be an array of sampler names");
  for (const s of p.samplers)
    if (!(SAMPLER_STAGES as readonly string[]).includes(s)) fail("samplers", `unknown sampler "${String(s)}"`);
  if (!Array.isArray(p.logitBias)) fail("logitBias", "must be an array of {id, bias}");
  for (const b of p.logitBias) {
    if (!b || typeof b !== "object" || !Number.isInteger(b.id) || b.id < 0) fail("logitBias", `bad token id ${String(b?.id)}`);
    if (typeof b.bias !== "number" || Number.isNaN(b.bias) || b.bias === Infinity)
      fail("logitBias", `bias of token ${b.id} must be a number or -Infinity, got ${String(b.bias)}`);
  }
  p.samplers = [...p.samplers];
  p.drySequenceBreakers = [...p.drySequenceBreakers];
  p.logitBias = p.logitBias.map((b) => ({ id: b.id, bias: b.bias }));
  return p;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}

/** llama's one-letter sampler codes (common_sampler_type_to_chr). */
const SAMPLER_CHARS: Record<string, SamplerStageName> = {
  d: "dry", k: "top_k", y: "typ_p", p: "top_p", s: "top_n_sigma", m: "min_p", t: "temperature", x: "xtc",
  i: "infill", e: "penalties", a: "adaptive_p",
};

const SAMPLER_ALIASES: Map<string, SamplerStageName> = (() => {
  const m = new Map<string, SamplerStageName>();
  for (const name of SAMPLER_STAGES) {
    m.set(name, name);
    if (name.includes("_")) {
      m.set(name.replaceAll("_", "-"), name);
      m.set(name.replaceAll("_", ""), name);
    }
  }
  m.set("nucleus", "top_p");
  m.set("temp", "temperature");
  m.set("typ", "typ_p");
  return m;
})();

/**
 * llama-server's `samplers` request field: an array of sampler names (case-insensitive, with
 * llama's aliases: "top-k", "topk", "nucleus", "temp", "typ", ...) or one string of letters
 * ("edskypmxt"). Like llama, names and letters it does not know are left out (reported to
 * `onUnknown`); a value of another shape throws SamplingParamError.
 */
export function parseSamplersField(x: unknown, onUnknown?: (name: string) => void): SamplerStageName[] {
  const out: SamplerStageName[] = [];
  if (typeof x === "string") {
    for (const ch of x) {
      const s = SAMPLER_CHARS[ch];
      if (s) out.push(s);
      else onUnknown?.(ch);
    }
    return out;
  }
  if (Array.isArray(x)) {
    for (const el of x) {
      if (typeof el !== "string") throw new SamplingParamError("samplers", `expected an array of strings, found ${JSON.stringify(el) ?? typeof el}`);
      const s = SAMPLER_ALIASES.get(el.toLowerCase());
      if (s) out.push(s);
      else onUnknown?.(el);
    }
    return out;
  }
  throw new SamplingParamError("samplers", "expected an array of sampler names or a string of sampler letters");
}

/**
 * llama-server's `logit_bias` request field: an array of [token, bias] pairs or an object
 * mapping token to bias; a bias is a number, or `false` to ban the token. Tokens are ids, or
 * strings whose tokens (by `encode`) all get the bias. Like llama, ids outside [0, nVocab),
 * malformed pairs and other bias values are skipped; a value of another shape throws.
 */
export function parseLogitBiasField(x: unknown, nVocab: number, encode?: (text: string) => number[]): LogitBias[] {
  const out: LogitBias[] = [];
  const bias = (v: unknown): number | undefined =>
    typeof v === "number" && !Number.isNaN(v) && v !== Infinity ? v : v === false ? -Infinity : undefined;
  const add = (tok: unknown, v: unknown): void => {
    const b = bias(v);
    if (b === undefined) return;
    if (typeof tok === "number" && Number.isInteger(tok)) {
      if (tok >= 0 && tok < nVocab) out.push({ id: tok, bias: b });
    } else if (typeof tok === "string" && encode) {
      for (const id of encode(tok)) out.push({ id, bias: b });
    }
  };
  if (Array.isArray(x)) {
    for (const el of x) if (Array.isArray(el) && el.length === 2) add(el[0], el[1]);
    return out;
  }
  if (x && typeof x === "object") {
    for (const [key, v] of Object.entries(x as Record<string, unknown>)) {
      if (/^[+-]?\d+$/.test(key)) add(Number.parseInt(key, 10), v);
      else add(key, v);
    }
    return out;
  }
  throw new SamplingParamError("logit_bias", "expected an array of [token, bias] pairs or an object mapping tokens to biases");
}
