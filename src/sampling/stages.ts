// bloomery sampling: the stage list a sampler runs (llama.cpp common/sampling.cpp
// common_sampler_init): the enabled stages of `samplers` in order (a stage whose parameters
// turn it off is left out, as llama builds an empty sampler), then dist or adaptive-p; with
// Mirostat, temperature then Mirostat instead. Also the split into the vocabulary-wide prefix
// that runs natively and the rest that runs on candidates.
import { SamplingParamError } from "./errors.ts";
import type { SamplingParams } from "./params.ts";

export type Stage =
  | { readonly kind: "penalties" }
  | { readonly kind: "dry" }
  | { readonly kind: "nsigma"; readonly n: number }
  | { readonly kind: "top_k"; readonly k: number }
  | { readonly kind: "typical"; readonly p: number }
  | { readonly kind: "top_p"; readonly p: number }
  | { readonly kind: "min_p"; readonly p: number }
  | { readonly kind: "xtc"; readonly prob: number; readonly thr: number }
  | { readonly kind: "temp"; readonly t: number }
  | { readonly kind: "dyntemp"; readonly t: number; readonly delta: number; readonly exponent: number };

export type FinalStage = "dist" | "adaptive_p" | "mirostat1" | "mirostat2";

export interface StagePlan {
  readonly stages: readonly Stage[];
  readonly final: FinalStage;
}

export function penaltiesEnabled(p: SamplingParams): boolean {
  return p.repeatLastN !== 0 && !(p.repeatPenalty === 1 && p.frequencyPenalty === 0 && p.presencePenalty === 0);
}

export function compileStages(p: SamplingParams): StagePlan {
  if (p.mirostat !== 0) {
    const stages: Stage[] = p.temperature === 1 ? [] : [{ kind: "temp", t: p.temperature }];
    return { stages, final: p.mirostat === 1 ? "mirostat1" : "mirostat2" };
  }
  const stages: Stage[] = [];
  let adaptive = false;
  for (const name of p.samplers) {
    switch (name) {
      case "penalties":
        if (penaltiesEnabled(p)) stages.push({ kind: "penalties" });
        break;
      case "dry":
        if (p.dryMultiplier !== 0 && p.dryBase >= 1 && p.dryPenaltyLastN !== 0) stages.push({ kind: "dry" });
        break;
      case "top_n_sigma":
        if (p.topNSigma > 0) stages.push({ kind: "nsigma", n: p.topNSigma });
        break;
      case "top_k":
        if (p.topK > 0) stages.push({ kind: "top_k", k: p.topK });
        break;
      case "typ_p":
        if (p.typicalP < 1) stages.push({ kind: "typical", p: p.typicalP });
        break;
      case "top_p":
        if (p.topP < 1) stages.push({ kind: "top_p", p: p.topP });
        break;
      case "min_p":
        if (p.minP > 0) stages.push({ kind: "min_p", p: p.minP });
        break;
      case "xtc":
        if (p.xtcProbability > 0 && p.xtcThreshold <= 0.5) stages.push({ kind: "xtc", prob: p.xtcProbability, thr: p.xtcThreshold });
        break;
      case "temperature":
        if (p.dynatempRange > 0)
          stages.push({ kind: "dyntemp", t: p.temperature, delta: p.dynatempRange, exponent: p.dynatempExponent });
        else if (p.temperature !== 1) stages.push({ kind: "temp", t: p.temperature });
        break;
      case "adaptive_p":
        adaptive = true;
        break;
      case "infill":
        throw new SamplingParamError("samplers", "the infill sampler is not supported");
    }
  }
  return { stages, final: adaptive ? "adaptive_p" : "dist" };
}

/** Whether a stage can run in the native vocabulary-wide prefix. */
export function nativeCapable(s: Stage): boolean {
  return s.kind === "penalties" || s.kind === "dry" || s.kind === "nsigma" || (s.kind === "temp" && s.t > 0);
}

/** Length of the leading run of stages that run natively. */
export function nativePrefixLength(stages: readonly Stage[]): number {
  let n = 0;
  while (n < stages.length && nativeCapable(stages[n])) n++;
  return n;
}

/**
 * Where the first stage that reads probabilities of the whole set sits, and the temperature
 * divisor in force there (so the first native pass can bring those statistics along), or
 * undefined when a cutting stage comes first.
 */
export function firstStatsDivisor(stages: readonly Stage[], from: number, startDiv: number, final: FinalStage): number | undefined {
  let div = startDiv;
  for (let i = from; i < stages.length; i++) {
    const s = stages[i];
    if (s.kind === "temp") {
      if (s.t <= 0) return undefined;
      div *= s.t;
      continue;
    }
    if (s.kind === "top_p" || s.kind === "typical" || s.kind === "xtc" || s.kind === "dyntemp") return div;
    return undefined;
  }
  return final === "dist" || final === "mirostat2" ? div : undefined;
}
