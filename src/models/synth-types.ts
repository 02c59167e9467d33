// bloomery models: what a family file gives `synth` (src/cli/synth.ts): the real models it imitates
// (their shapes) and how one of its models' metadata and tensors are written. synth owns the
// generic parts (the vocabulary, the random fillers, the quant mixes' type rules).
import type { GgufWriter } from "../gguf/index.ts";

/** A real model's architecture sizes (what the quant mixes and the agent's size estimates read). */
export interface Shape {
  name: string;
  arch: string;
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
  /** rotated dims of a head when fewer than headDim (partial rotary) */
  nRot?: number;
  /** per-head Q/K norms (glm4moe: GLM-4.5 has them, Air does not) */
  qkNorm?: boolean;
  /** V's width in the KV cache when not K's (HParams.kvVDim: 0 for latent attention) */
  kvVDim?: number;
  /** the widest query row when not nHead * headDim (HParams.qDim) */
  qDim?: number;
  /** the sigmoid-router MoE families' layout (deepseek2, glm4moe): leading dense layers, shared experts,
   * the routed weights' scale, expert groups (0: none), MTP layers written after the main ones */
  moe?: { nDense: number; nShared: number; scale: number; nGroup: number; nGroupUsed: number; nextn: number };
  /** multi-head latent attention's sizes (deepseek2; nHeadKv 1 and headDim kvLora + rope, as its files say) */
  mla?: { qLora: number; kvLora: number; nope: number; rope: number; v: number };
  /** the Qwen hybrid layout's sizes (qwen3next, qwen35moe: qwen-hybrid.ts's HybridShape) */
  hybrid?: { nKHeads: number; nVHeads: number; headK: number; conv: number; interval: number; nFfShexp: number; nextn?: number };
  /** YaRN context extension as the real model's config has it (factor over orig positions; DeepSeek's log multiplier) */
  yarn?: { factor: number; orig: number; logMul?: number; betaFast?: number; betaSlow?: number };
}

/** What synth hands a family's writer: the writer for metadata, and tensor makers that fill by the quant mix. */
export interface SynthTensors {
  readonly w: GgufWriter;
  /** layers written (the shape's, or --layers) */
  readonly nLayer: number;
  /** a matrix of the mix's type for its GGUF base name (`attn_q`, `ffn_gate_exps`, ...) at a layer (-1: none) */
  mat(name: string, role: string, layer: number, ne: number[], std?: number): void;
  /** an F32 vector of ones (norm weights) */
  ones(name: string, ne: number[]): void;
  /** an F32 tensor of one value (the delta-net's decay rates) */
  fill(name: string, ne: number[], value: number): void;
  /** an F32 tensor of small random values (biases, sinks) */
  small(name: string, ne: number[], std: number): void;
  /** an F32 router of n_embd x n_expert rows, skewed as --skew asks */
  router(name: string, layer: number, nEmbd: number, nExpert: number): void;
}

export interface SynthFamily {
  /** the real models by synth's name (`qwen3-30b-a3b`, ...) */
  shapes: Record<string, Shape>;
  /** writes the architecture's metadata and every tensor of the shape (nLayer from t) */
  write(shape: Shape, t: SynthTensors): void;
}
