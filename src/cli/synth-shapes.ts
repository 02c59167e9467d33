// bloomery synth: the real models `synth` imitates (architecture shapes) and the tensor-type
// rules of each quantization mix (llama-quantize's choices, ../shared/SPEC.md).
import { GgmlType } from "../gguf/index.ts";

export interface Shape {
  name: string;
  arch: "qwen3moe";
  nLayer: number;
  nEmbd: number;
  nHead: number;
  nHeadKv: number;
  headDim: number;
  nExpert: number;
  nExpertUsed: number;
  nFfExp: number;
  nFf: number;
  nVocab: number;
  nCtxTrain: number;
  ropeBase: number;
  eps: number;
}

const qwen3 = { arch: "qwen3moe" as const, ropeBase: 1e6, eps: 1e-6, nVocab: 151936 };

export const SHAPES: Record<string, Shape> = {
  "qwen3-30b-a3b": { ...qwen3, name: "Qwen3-30B-A3B", nLayer: 48, nEmbd: 2048, nHead: 32, nHeadKv: 4, headDim: 128, nExpert: 128, nExpertUsed: 8, nFfExp: 768, nFf: 6144, nCtxTrain: 262144 },
  "qwen3-235b-a22b": { ...qwen3, name: "Qwen3-235B-A22B", nLayer: 94, nEmbd: 4096, nHead: 64, nHeadKv: 4, headDim: 128, nExpert: 128, nExpertUsed: 8, nFfExp: 1536, nFf: 12288, nCtxTrain: 262144 },
  // small shapes for tests: whole K-quant blocks, a real byte-level vocabulary
  "test-moe": { ...qwen3, name: "test-moe", nLayer: 2, nEmbd: 256, nHead: 4, nHeadKv: 2, headDim: 64, nExpert: 8, nExpertUsed: 2, nFfExp: 256, nFf: 512, nVocab: 1024, nCtxTrain: 4096 },
  "test-moe-wide": { ...qwen3, name: "test-moe-wide", nLayer: 3, nEmbd: 512, nHead: 8, nHeadKv: 2, headDim: 64, nExpert: 16, nExpertUsed: 4, nFfExp: 512, nFf: 1024, nVocab: 2048, nCtxTrain: 8192 },
};

export type TensorRole = "token_embd" | "output" | "attn_q" | "attn_k" | "attn_v" | "attn_output" | "ffn_gate_exps" | "ffn_up_exps" | "ffn_down_exps";

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
};
