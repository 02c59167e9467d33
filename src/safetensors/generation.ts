// bloomery safetensors: generation_config.json as the general.sampling.* metadata llama.cpp's converter
// writes from it (gguf-py's Metadata.load: top_k, top_p, min_p, temperature, repetition_penalty, ...),
// so a folder gives the same default sampling as its converted GGUF would.
import type { KvMap } from "./config.ts";

/** [generation_config key(s), general.sampling key, integer] */
const KEYS: readonly [string[], string, boolean][] = [
  [["top_k"], "top_k", true],
  [["top_p"], "top_p", false],
  [["min_p"], "min_p", false],
  [["xtc_probability"], "xtc_probability", false],
  [["xtc_threshold"], "xtc_threshold", false],
  [["temperature"], "temp", false],
  [["penalty_last_n"], "penalty_last_n", true],
  [["penalty_repeat", "repetition_penalty"], "penalty_repeat", false],
  [["mirostat"], "mirostat", true],
  [["mirostat_tau"], "mirostat_tau", false],
  [["mirostat_eta"], "mirostat_eta", false],
];

/** Writes general.sampling.* for the numbers generation_config.json states (others are ignored, as the converter's loose reading does). */
export function generationKv(gen: Record<string, unknown> | undefined, kv: KvMap): void {
  if (!gen) return;
  for (const [names, key, int] of KEYS) {
    const v = names.map((n) => gen[n]).find((x) => x !== undefined && x !== null);
    if (typeof v !== "number" || !Number.isFinite(v)) continue;
    if (int) {
      if (Number.isInteger(v) && Math.abs(v) < 2 ** 31) kv.i32(`general.sampling.${key}`, v);
    } else kv.f32(`general.sampling.${key}`, v);
  }
  if (typeof gen.sequence === "string") kv.str("general.sampling.sequence", gen.sequence);
}
