// bloomery models: the shared blocks a model family composes its forward pass from. A block
// names its tensors (GGUF names) by role; the engine resolves them through the plan.
import type { FloatField, IntField } from "../../ffi/layout.ts";
import type { GgufFile } from "../gguf/index.ts";

export enum BlockKind { Embed = 1, Attention = 2, Moe = 3, Ffn = 4, Output = 5 }
export enum RopeType { Normal = 0, Neox = 2 }

export interface BlockSpec {
  kind: BlockKind;
  ints: Partial<Record<IntField, number>>;
  floats: Partial<Record<FloatField, number>>;
  /** GGUF tensor names by role index (bloomery.h BL_ATTN_* / BL_MOE_* ...); undefined = absent */
  tensors: (string | undefined)[];
}

export interface RopeParams {
  type: RopeType;
  nRot: number;
  base: number;
  freqScale: number;
  yarnExtFactor: number;
  yarnAttnFactor: number;
  yarnBetaFast: number;
  yarnBetaSlow: number;
  yarnOrigCtx: number;
}

/** RoPE settings from `<arch>.rope.*` keys as llama reads them (YaRN when the file asks). */
export function ropeParams(f: GgufFile, arch: string, type: RopeType, nRot: number, nCtxTrain: number): RopeParams {
  const base = f.f32(`${arch}.rope.freq_base`, 10000);
  const scalingType = f.str(`${arch}.rope.scaling.type`, "none");
  let factor = f.f32(`${arch}.rope.scaling.factor`, 0);
  const linear = f.has(`${arch}.rope.scale_linear`) ? f.f32(`${arch}.rope.scale_linear`) : 0;
  if (!factor && linear) factor = linear;
  const freqScale = factor > 0 ? 1 / factor : 1;
  const yarn = scalingType === "yarn";
  if (!["none", "linear", "yarn"].includes(scalingType)) {
    throw new Error(`${f.path}: rope scaling type '${scalingType}' is not supported (none, linear, yarn are)`);
  }
  return {
    type,
    nRot,
    base,
    freqScale,
    yarnExtFactor: yarn ? 1 : 0,
    yarnAttnFactor: f.f32(`${arch}.rope.scaling.attn_factor`, 1),
    yarnBetaFast: f.f32(`${arch}.rope.scaling.yarn_beta_fast`, 32),
    yarnBetaSlow: f.f32(`${arch}.rope.scaling.yarn_beta_slow`, 1),
    yarnOrigCtx: f.u32(`${arch}.rope.scaling.original_context_length`, nCtxTrain),
  };
}

export function embedBlock(tokEmbd: string): BlockSpec {
  return { kind: BlockKind.Embed, ints: {}, floats: {}, tensors: [tokEmbd] };
}

export interface AttentionOpts {
  layer: number;
  prefix: string; // "blk.N."
  nHead: number;
  nHeadKv: number;
  headDim: number;
  eps: number;
  rope: RopeParams;
  qkNorm: boolean;
  bias?: boolean;
  attnScale?: number;
}

/** Pre-norm GQA attention with optional per-head Q/K norm and QKV bias, residual added. */
export function attentionBlock(o: AttentionOpts): BlockSpec {
  const p = o.prefix;
  return {
    kind: BlockKind.Attention,
    ints: {
      layer: o.layer, n_head: o.nHead, n_head_kv: o.nHeadKv, head_dim: o.headDim, n_rot: o.rope.nRot,
      rope_type: o.rope.type, yarn_orig_ctx: o.rope.yarnOrigCtx,
    },
    floats: {
      eps: o.eps, rope_base: o.rope.base, rope_freq_scale: o.rope.freqScale, attn_scale: o.attnScale ?? 0,
      yarn_ext_factor: o.rope.yarnExtFactor, yarn_attn_factor: o.rope.yarnAttnFactor,
      yarn_beta_fast: o.rope.yarnBetaFast, yarn_beta_slow: o.rope.yarnBetaSlow,
    },
    tensors: [
      `${p}attn_norm.weight`, `${p}attn_q.weight`, `${p}attn_k.weight`, `${p}attn_v.weight`, `${p}attn_output.weight`,
      o.qkNorm ? `${p}attn_q_norm.weight` : undefined, o.qkNorm ? `${p}attn_k_norm.weight` : undefined,
      o.bias ? `${p}attn_q.bias` : undefined, o.bias ? `${p}attn_k.bias` : undefined, o.bias ? `${p}attn_v.bias` : undefined,
    ],
  };
}

export interface MoeOpts {
  prefix: string;
  nExpert: number;
  nExpertUsed: number;
  eps: number;
  normTopk: boolean;
  weightsScale?: number;
}

/** Pre-norm routed experts: softmax router, top-k (renormalised), SwiGLU experts, residual. */
export function moeBlock(o: MoeOpts): BlockSpec {
  const p = o.prefix;
  return {
    kind: BlockKind.Moe,
    ints: { n_expert: o.nExpert, n_expert_used: o.nExpertUsed, norm_topk: o.normTopk ? 1 : 0, gating: 0 },
    floats: { eps: o.eps, expert_weights_scale: o.weightsScale ?? 0 },
    tensors: [`${p}ffn_norm.weight`, `${p}ffn_gate_inp.weight`, `${p}ffn_gate_exps.weight`, `${p}ffn_up_exps.weight`, `${p}ffn_down_exps.weight`],
  };
}

/** Pre-norm dense SwiGLU FFN, residual added. */
export function ffnBlock(prefix: string, eps: number): BlockSpec {
  return {
    kind: BlockKind.Ffn, ints: {}, floats: { eps },
    tensors: [`${prefix}ffn_norm.weight`, `${prefix}ffn_gate.weight`, `${prefix}ffn_up.weight`, `${prefix}ffn_down.weight`],
  };
}

/** Final norm and output head (tied to token_embd when the file has no `output`). */
export function outputBlock(f: GgufFile, eps: number): BlockSpec {
  const head = f.tensor("output.weight") ? "output.weight" : "token_embd.weight";
  return { kind: BlockKind.Output, ints: {}, floats: { eps }, tensors: ["output_norm.weight", head] };
}
