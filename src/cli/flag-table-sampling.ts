// llama-server's sampling flags (llama.cpp common/arg.cpp, "sampling params"): server-wide defaults for requests.

import { DEFAULT_SAMPLERS, SAMPLER_KIND, refuse } from "./flag-define.ts";
import type { FlagDef, FlagValue } from "./flag-types.ts";

const G = "sampling";

const NOT_YET = (what: string): string => `${what} sampling is not supported yet`;
const PER_REQUEST = (field: string): string => `a server-wide ${field} is not supported yet; send "${field}" with each request`;

function positive(v: FlagValue): string | undefined {
  return typeof v === "number" && v > 0 ? undefined : "a number greater than 0";
}

export const SAMPLING_FLAGS: readonly FlagDef[] = [
  {
    names: ["--samplers"], hint: "SAMPLERS", key: "samplers", default: DEFAULT_SAMPLERS,
    value: { type: "list", of: SAMPLER_KIND, split: ";,", trim: true, dropEmpty: true },
    help: "samplers applied in this order, separated by ';'", group: G, support: "supported",
  },
  {
    names: ["-s", "--seed"], value: { type: "int", min: -1, max: 4294967295 }, hint: "SEED", key: "seed", default: -1,
    defaultText: "-1, a random seed", help: "random seed (-1 picks one at random)", group: G, support: "supported",
  },
  refuse(G, ["--sampler-seq", "--sampling-seq"], "the one-letter sampler sequence is not supported; use --samplers", "samplers as one letter each (e.g. edskypmxt)", { hint: "SEQUENCE" }),
  {
    names: ["--ignore-eos"], value: { type: "none" }, key: "ignoreEos", default: false,
    help: "keep generating past the end-of-stream token", group: G, support: "supported",
  },
  {
    names: ["--temp", "--temperature"], value: { type: "float" }, hint: "N", env: "LLAMA_ARG_TEMPERATURE", key: "temperature", default: 0.8,
    help: "temperature; 0 or less samples greedily", group: G, support: "supported",
  },
  {
    names: ["--top-k"], value: { type: "int" }, hint: "N", env: "LLAMA_ARG_TOP_K", key: "topK", default: 40,
    help: "keep the K most likely tokens (0 = off)", group: G, support: "supported",
  },
  {
    names: ["--top-p"], value: { type: "float" }, hint: "N", env: "LLAMA_ARG_TOP_P", key: "topP", default: 0.95,
    help: "nucleus sampling: keep the likeliest tokens up to this probability mass (1.0 = off)", group: G, support: "supported",
  },
  {
    names: ["--min-p"], value: { type: "float" }, hint: "N", env: "LLAMA_ARG_MIN_P", key: "minP", default: 0.05,
    help: "drop tokens less likely than this fraction of the likeliest one (0.0 = off)", group: G, support: "supported",
  },
  refuse(G, ["--top-nsigma", "--top-n-sigma"], NOT_YET("top-n-sigma"), "top-n-sigma sampling (-1 = off)", { hint: "N", default: -1 }),
  {
    names: ["--xtc-probability"], value: { type: "float", min: 0, max: 1 }, hint: "N", key: "xtcProbability", default: 0,
    help: "XTC: chance of removing the top choices (0.0 = off)", group: G, support: "supported",
  },
  {
    names: ["--xtc-threshold"], value: { type: "float" }, hint: "N", key: "xtcThreshold", default: 0.1,
    help: "XTC: probability a token needs to count as a top choice (above 0.5 = off)", group: G, support: "supported",
  },
  {
    names: ["--typical", "--typical-p"], value: { type: "float" }, hint: "N", key: "typicalP", default: 1,
    help: "locally typical sampling, parameter p (1.0 = off)", group: G, support: "supported",
  },
  {
    names: ["--repeat-last-n"], value: { type: "int", min: 0 }, hint: "N", key: "repeatLastN", default: 64,
    help: "how many recent tokens the repetition penalties look at (0 = off)", group: G, support: "supported",
  },
  {
    names: ["--repeat-penalty"], value: { type: "float" }, hint: "N", env: "LLAMA_ARG_REPEAT_PENALTY", key: "repeatPenalty", default: 1,
    check: positive, help: "penalty for repeating recent tokens (1.0 = off)", group: G, support: "supported",
  },
  {
    names: ["--presence-penalty"], value: { type: "float" }, hint: "N", env: "LLAMA_ARG_PRESENCE_PENALTY", key: "presencePenalty", default: 0,
    help: "penalty for tokens already present (0.0 = off)", group: G, support: "supported",
  },
  {
    names: ["--frequency-penalty"], value: { type: "float" }, hint: "N", env: "LLAMA_ARG_FREQUENCY_PENALTY", key: "frequencyPenalty", default: 0,
    help: "penalty growing with how often a token appeared (0.0 = off)", group: G, support: "supported",
  },
  {
    names: ["--dry-multiplier"], value: { type: "float", min: 0 }, hint: "N", key: "dryMultiplier", default: 0,
    help: "DRY repetition penalty strength (0.0 = off)", group: G, support: "supported",
  },
  {
    names: ["--dry-base"], value: { type: "float", min: 1 }, hint: "N", key: "dryBase", default: 1.75,
    help: "DRY: base of the penalty's exponential growth (at least 1)", group: G, support: "supported",
  },
  {
    names: ["--dry-allowed-length"], value: { type: "int", min: 0 }, hint: "N", key: "dryAllowedLength", default: 2,
    help: "DRY: repeated sequences up to this length go unpenalised", group: G, support: "supported",
  },
  {
    names: ["--dry-penalty-last-n"], value: { type: "int", min: -1 }, hint: "N", key: "dryPenaltyLastN", default: 64,
    help: "DRY: how many recent tokens are scanned (0 = off, -1 = the whole context)", group: G, support: "supported",
  },
  {
    names: ["--dry-sequence-breaker"], value: { type: "list", of: { type: "string", nonEmpty: true }, none: "none" }, hint: "STRING",
    key: "drySequenceBreakers", default: ["\n", ":", '"', "*"], defaultText: "'\\n', ':', '\"', '*'", repeat: "append",
    help: "DRY: add a sequence breaker (the first one replaces the defaults; none clears them); repeatable",
    group: G, support: "supported",
  },
  refuse(G, ["--adaptive-target"], NOT_YET("adaptive-p"), "adaptive-p: aim for tokens near this probability (negative = off)", { hint: "N", default: -1 }),
  refuse(G, ["--adaptive-decay"], NOT_YET("adaptive-p"), "adaptive-p: decay of the target adaptation (0.0 to 0.99)", { hint: "N", default: 0.9 }),
  refuse(G, ["--dynatemp-range"], NOT_YET("dynamic temperature"), "dynamic temperature range (0.0 = off)", { hint: "N", default: 0 }),
  refuse(G, ["--dynatemp-exp"], NOT_YET("dynamic temperature"), "dynamic temperature exponent", { hint: "N", default: 1 }),
  refuse(G, ["--mirostat"], NOT_YET("Mirostat"), "Mirostat version: 0 off, 1 Mirostat, 2 Mirostat 2.0", { hint: "N", default: 0 }),
  refuse(G, ["--mirostat-lr"], NOT_YET("Mirostat"), "Mirostat learning rate (eta)", { hint: "N", default: 0.1 }),
  refuse(G, ["--mirostat-ent"], NOT_YET("Mirostat"), "Mirostat target entropy (tau)", { hint: "N", default: 5 }),
  refuse(G, ["-l", "--logit-bias"], PER_REQUEST("logit_bias"), "change one token's likelihood: TOKEN_ID+BIAS or TOKEN_ID-BIAS", { hint: "TOKEN_ID(+/-)BIAS" }),
  refuse(G, ["--grammar"], PER_REQUEST("grammar"), "GBNF grammar constraining every generation", { hint: "GRAMMAR" }),
  refuse(G, ["--grammar-file"], PER_REQUEST("grammar"), "file holding a GBNF grammar", { hint: "FNAME" }),
  refuse(G, ["-j", "--json-schema"], PER_REQUEST("json_schema"), "JSON schema constraining every generation", { hint: "SCHEMA" }),
  refuse(G, ["-jf", "--json-schema-file"], PER_REQUEST("json_schema"), "file holding a JSON schema", { hint: "FILE" }),
  refuse(G, ["-bs", "--backend-sampling"], "backend sampling is not supported (bloomery always samples natively)", "sample on the compute backend (experimental)", { env: "LLAMA_ARG_BACKEND_SAMPLING" }),
];
