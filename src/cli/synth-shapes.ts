// bloomery synth: the real models `synth` imitates (gathered from the family files) and the
// tensor-type rules of each quantization mix (llama-quantize's choices, ../shared/SPEC.md).
import { GgmlType, TYPE_INFO } from "../gguf/index.ts";
import { FAMILIES } from "../models/registry.ts";
import type { Shape, SynthFamily } from "../models/synth-types.ts";
import { LOW_MIXES } from "./synth-mixes-low.ts";

export type { Shape };

/** Every family's synth shapes by name (the family files own them: src/models/). */
export const SHAPES: Record<string, Shape> = Object.fromEntries(FAMILIES.flatMap((f) => Object.entries(f.synth?.shapes ?? {})));

/** A shape by name and the family that writes it. */
export function synthShape(name: string): { shape: Shape; family: SynthFamily } | undefined {
  for (const f of FAMILIES) {
    const shape = f.synth?.shapes[name];
    if (shape && f.synth) return { shape, family: f.synth };
  }
  return undefined;
}

/** A tensor's GGUF base name (`attn_q`, `ffn_down_exps`, ...): what the mixes choose a type by. */
export type TensorRole = string;

export interface QuantMix {
  name: string;
  fileType: number;
  typeOf(role: TensorRole, layer: number, nLayer: number): GgmlType;
}

/** llama-quantize's "more bits" layers for attn_v and ffn_down in the _M mixes (integer division, as llama). */
export function useMoreBits(i: number, n: number): boolean {
  const e = Math.floor(n / 8), s = Math.floor((7 * n) / 8);
  return i < e || i >= s || (i - e) % 3 === 2;
}

function uniform(name: string, fileType: number, t: GgmlType, output: GgmlType = t): QuantMix {
  return { name, fileType, typeOf: (role) => (role === "output" ? output : t) };
}

export const MIXES: Record<string, QuantMix> = {
  Q4_K_M: {
    name: "Q4_K_M", fileType: 15,
    typeOf(role, i, n) {
      if (role === "output") return GgmlType.Q6_K;
      if ((role === "attn_v" || role === "ffn_down_exps") && useMoreBits(i, n)) return GgmlType.Q6_K;
      return GgmlType.Q4_K;
    },
  },
  Q8_0: uniform("Q8_0", 7, GgmlType.Q8_0),
  Q4_0: uniform("Q4_0", 2, GgmlType.Q4_0, GgmlType.Q6_K),
  Q6_K: uniform("Q6_K", 18, GgmlType.Q6_K),
  IQ4_XS: uniform("IQ4_XS", 30, GgmlType.IQ4_XS, GgmlType.Q6_K),
  F16: uniform("F16", 1, GgmlType.F16),
  BF16: uniform("BF16", 32, GgmlType.BF16),
  MXFP4: {
    name: "MXFP4", fileType: 38,
    typeOf: (role) => (role.endsWith("_exps") ? GgmlType.MXFP4 : GgmlType.Q8_0),
  },
  // as openai's gpt-oss folders ship (MXFP4 experts, BF16 elsewhere): the GGUF twin of such a folder
  // (scripts/gguf-folder.ts writes one from it)
  MXFP4_BF16: {
    name: "MXFP4_BF16", fileType: 38,
    typeOf: (role) => (role.endsWith("_exps") ? GgmlType.MXFP4 : GgmlType.BF16),
  },
  ...LOW_MIXES,
};

/**
 * llama-quantize's fallback for a tensor whose rows do not fill whole blocks of the mix's type
 * (tensor_type_fallback: DeepSeek's attn_k_b, rows of qk_nope 128, under a K-quant): the 256-value
 * types step down to a 32-value one, and F16 where even that does not divide.
 */
export function fallbackType(t: GgmlType, ncols: number): GgmlType {
  const fits = (u: GgmlType) => ncols % TYPE_INFO[u].blockElems === 0;
  if (fits(t)) return t;
  const down: Partial<Record<GgmlType, GgmlType>> = {
    [GgmlType.IQ1_S]: GgmlType.IQ4_NL, [GgmlType.IQ1_M]: GgmlType.IQ4_NL, [GgmlType.IQ2_XXS]: GgmlType.IQ4_NL,
    [GgmlType.IQ2_XS]: GgmlType.IQ4_NL, [GgmlType.IQ2_S]: GgmlType.IQ4_NL, [GgmlType.IQ3_XXS]: GgmlType.IQ4_NL,
    [GgmlType.IQ3_S]: GgmlType.IQ4_NL, [GgmlType.IQ4_XS]: GgmlType.IQ4_NL,
    [GgmlType.Q2_K]: GgmlType.Q4_0, [GgmlType.Q3_K]: GgmlType.Q4_0, [GgmlType.TQ1_0]: GgmlType.Q4_0, [GgmlType.TQ2_0]: GgmlType.Q4_0,
    [GgmlType.Q4_K]: GgmlType.Q5_0, [GgmlType.Q5_K]: GgmlType.Q5_1, [GgmlType.Q6_K]: GgmlType.Q8_0,
  };
  const d = down[t];
  return d !== undefined && fits(d) ? d : GgmlType.F16;
}
