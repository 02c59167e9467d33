// bloomery synth: the 1.5-3.5 bit quantization mixes (the grid types IQ1_S .. IQ3_S, Q2_K, Q3_K),
// with llama-quantize's type rules for a mixture-of-experts model (src/llama-quant.cpp's
// llama_tensor_get_type, Sept. 2026), simplified to what a tensor's role and layer decide: the output
// head, the token embedding, attn_v (expert_count >= 4: Q4_K), the first eighth of the layers'
// ffn_down (the experts' too) and attn_output. The rules for exactly 8 experts (attn_k / attn_v as
// Q8_0), for grouped-query counts and for an importance matrix are left out: a synthetic file has
// no imatrix, and these mixes are for the large MoE models (DeepSeek, Kimi, GLM, Qwen3) that have
// more experts. The file type ids are llama_ftype's.
import { GgmlType } from "../gguf/index.ts";
import type { QuantMix } from "./synth-shapes.ts";

interface LowRule {
  fileType: number;
  base: GgmlType;
  output: GgmlType;
  embd: GgmlType;
  attnV: GgmlType;
  /** ffn_down of layers i < n / 8 */
  earlyDown?: GgmlType;
  /** ffn_down of the other layers */
  down?: GgmlType;
  attnOut?: GgmlType;
  attnQK?: GgmlType;
}

function lowMix(name: string, r: LowRule): QuantMix {
  return {
    name,
    fileType: r.fileType,
    typeOf(role, i, n) {
      if (role === "output") return r.output;
      if (role === "token_embd") return r.embd;
      if (role === "attn_v") return r.attnV;
      if (role === "attn_output" && r.attnOut !== undefined) return r.attnOut;
      if ((role === "attn_q" || role === "attn_k") && r.attnQK !== undefined) return r.attnQK;
      if (role.startsWith("ffn_down")) {
        if (r.earlyDown !== undefined && i < Math.floor(n / 8)) return r.earlyDown;
        if (r.down !== undefined) return r.down;
      }
      return r.base;
    },
  };
}

const T = GgmlType;

export const LOW_MIXES: Record<string, QuantMix> = {
  IQ1_S: lowMix("IQ1_S", { fileType: 24, base: T.IQ1_S, output: T.Q5_K, embd: T.Q2_K, attnV: T.Q4_K, earlyDown: T.Q2_K, attnOut: T.IQ2_XXS }),
  IQ1_M: lowMix("IQ1_M", { fileType: 31, base: T.IQ1_M, output: T.Q5_K, embd: T.Q2_K, attnV: T.Q4_K, earlyDown: T.Q2_K, attnOut: T.IQ2_XXS }),
  IQ2_XXS: lowMix("IQ2_XXS", { fileType: 19, base: T.IQ2_XXS, output: T.Q5_K, embd: T.Q2_K, attnV: T.Q4_K, earlyDown: T.Q2_K }),
  IQ2_XS: lowMix("IQ2_XS", { fileType: 20, base: T.IQ2_XS, output: T.Q5_K, embd: T.Q2_K, attnV: T.Q4_K, earlyDown: T.Q2_K }),
  // llama's IQ2_S mix is of IQ2_XS tensors, its IQ2_M of IQ2_S ones
  IQ2_S: lowMix("IQ2_S", { fileType: 28, base: T.IQ2_XS, output: T.Q5_K, embd: T.IQ3_S, attnV: T.Q4_K, earlyDown: T.IQ3_S, attnOut: T.IQ3_S }),
  IQ2_M: lowMix("IQ2_M", { fileType: 29, base: T.IQ2_S, output: T.Q5_K, embd: T.IQ3_S, attnV: T.Q4_K, earlyDown: T.IQ3_S, attnOut: T.IQ3_S }),
  IQ3_XXS: lowMix("IQ3_XXS", {
    fileType: 23, base: T.IQ3_XXS, output: T.Q5_K, embd: T.IQ3_S, attnV: T.Q4_K, earlyDown: T.Q4_K, down: T.Q3_K, attnOut: T.IQ3_S, attnQK: T.IQ2_S,
  }),
  IQ3_S: lowMix("IQ3_S", { fileType: 26, base: T.IQ3_S, output: T.Q6_K, embd: T.IQ3_S, attnV: T.Q4_K }),
  Q2_K: lowMix("Q2_K", { fileType: 10, base: T.Q2_K, output: T.Q6_K, embd: T.Q2_K, attnV: T.Q4_K, down: T.Q3_K, attnOut: T.Q3_K }),
  Q3_K_M: lowMix("Q3_K_M", { fileType: 12, base: T.Q3_K, output: T.Q6_K, embd: T.Q3_K, attnV: T.Q4_K, down: T.Q4_K, attnOut: T.Q4_K }),
};
