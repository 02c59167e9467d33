// bloomery sampling: public surface of the sampler (llama-server's sampling chain over native candidates).
export { SamplingError, SamplingParamError } from "./errors.ts";
export {
  DEFAULT_SAMPLER_ORDER, DEFAULT_SAMPLING_PARAMS, REQUEST_FIELD, SAMPLER_STAGES, parseLogitBiasField, parseSamplersField,
  resolveSamplingParams, type LogitBias, type SamplerStageName, type SamplingParams,
} from "./params.ts";
export { Sampler, type SampleOptions, type SampleResult, type SamplerVocab } from "./sampler.ts";
export type { TokenProb } from "./final.ts";
export { nativeArgmax, nativeCandidates, type NativeCandidates, type NativeOp, type RowStats } from "./native.ts";
export { dryBreakers, dryBreakersFromTokens, dryPenalties, type DryBreakers, type DryParams, type DryVocab } from "./dry.ts";
export { Mt19937, resolveSeed } from "./rng.ts";
