// bloomery synth: the real models `synth` imitates (gathered from the family files) and the
// tensor-type rules of each quantization mix (llama-quantize's choices, ../shared/SPEC.md).
import { GgmlType } from "../gguf/index.ts";
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
  ...LOW_MIXES,
};
