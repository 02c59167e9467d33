// bloomery sampling: the model's own sampling defaults (GGUF general.sampling.*, which llama.cpp's
// converter writes from a checkpoint's generation_config.json, and which a checkpoint folder gives from
// that file directly), taken for the options the user did not set, as llama-server's
// common_init_sampler_from_model does; a request's own fields still win over both.
import type { ServerOptionKey, ServerOptions } from "../cli/flags.ts";

/** general.sampling.<key> -> the server option it sets, and whether it is an integer. */
const KEYS: readonly [string, ServerOptionKey, boolean][] = [
  ["top_k", "topK", true],
  ["top_p", "topP", false],
  ["min_p", "minP", false],
  ["xtc_probability", "xtcProbability", false],
  ["xtc_threshold", "xtcThreshold", false],
  ["temp", "temperature", false],
  ["penalty_last_n", "repeatLastN", true],
  ["penalty_repeat", "repeatPenalty", false],
];

/** The options the model's metadata sets (those not given explicitly), and a line saying which. */
export function modelSamplingDefaults(raw: (key: string) => unknown, explicit: ReadonlySet<ServerOptionKey>): { defaults: Partial<ServerOptions>; line?: string } {
  const defaults: Record<string, number> = {};
  const said: string[] = [];
  for (const [key, opt, int] of KEYS) {
    const v = raw(`general.sampling.${key}`);
    if (typeof v !== "number" || !Number.isFinite(v) || explicit.has(opt)) continue;
    let x = int ? Math.trunc(v) : Math.fround(v);
    if (opt === "temperature") x = Math.max(0, x); // clamped as the flag is
    defaults[opt] = x;
    said.push(`${key} ${+x.toPrecision(6)}`);
  }
  return { defaults: defaults as Partial<ServerOptions>, line: said.length ? `sampling defaults from the model: ${said.join(", ")} (a flag or a request field given wins)` : undefined };
}
