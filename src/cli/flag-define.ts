// Helpers to write flag tables tersely: a refused-flag constructor and llama's on/off/auto value kinds.

import type { ElemKind, FlagDef, FlagValue } from "./flag-types.ts";

/** The camelCase key of a flag: from its first double-dash spelling (`--ctx-size` -> `ctxSize`). */
export function keyOf(names: readonly string[]): string {
  const long = names.find((n) => n.startsWith("--")) ?? names[0];
  return long.replace(/^-+/, "").replace(/[-.+]+([a-z0-9])/gi, (_, c: string) => c.toUpperCase());
}

export interface RefuseOptions {
  /** Value placeholder; a flag with a hint takes a value (read as a string). */
  readonly hint?: string;
  readonly env?: string;
  /** Negated spellings: the flag is a negatable boolean. */
  readonly neg?: readonly string[];
  /** A value accepted as a no-op because bloomery behaves that way anyway. */
  readonly accepts?: FlagValue;
  readonly default?: FlagValue;
  readonly defaultText?: string;
}

/** A flag llama-server knows that bloomery recognises and refuses with `reason`. */
export function refuse(group: string, names: readonly string[], reason: string, help: string, opts: RefuseOptions = {}): FlagDef {
  return {
    names,
    negNames: opts.neg,
    value: opts.neg ? { type: "bool" } : opts.hint !== undefined ? { type: "string" } : { type: "none" },
    hint: opts.hint,
    env: opts.env,
    key: keyOf(names),
    default: opts.default,
    defaultText: opts.defaultText,
    help,
    group,
    support: opts.accepts !== undefined ? { refused: reason, accepts: opts.accepts } : { refused: reason },
  };
}

/** llama's `[on|off|auto]` value: the truthy and falsey words map to on / off, `-1` to auto. */
export const ON_OFF_AUTO: ElemKind = {
  type: "enum",
  values: ["on", "off", "auto"],
  aliases: { enabled: "on", true: "on", "1": "on", disabled: "off", false: "off", "0": "off", "-1": "auto" },
  caseInsensitive: true,
};

/** ggml type names llama accepts for the KV cache (`-ctk`, `-ctv`). */
export const KV_CACHE_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"] as const;

/** Sampler names in llama's default order, and the other spellings llama accepts for them. */
export const SAMPLER_NAMES = [
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
export const DEFAULT_SAMPLERS = ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"];

function samplerAliases(): Record<string, string> {
  const out: Record<string, string> = { nucleus: "top_p", temp: "temperature", typ: "typ_p" };
  for (const name of SAMPLER_NAMES) {
    if (!name.includes("_")) continue;
    out[name.replaceAll("_", "-")] = name;
    out[name.replaceAll("_", "")] = name;
  }
  return out;
}

export const SAMPLER_KIND: ElemKind = {
  type: "enum",
  values: SAMPLER_NAMES,
  aliases: samplerAliases(),
  caseInsensitive: true,
  supported: SAMPLER_NAMES.filter((s) => s !== "infill"),
  refusedReason: "the infill sampler is not supported yet",
};
