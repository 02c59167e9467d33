// bloomery models: the ops a model family composes its forward pass from (ffi/bloomery.h's op list).
// An op names its tensors (GGUF names) by role and carries its parameter struct's fields; the
// engine resolves the names through the plan and lays the ops out for the backends.
import { Act, Gating, HeadMap, OpKind, RopeType, type ParamName, type Role } from "../../ffi/layout.ts";
import type { GgufFile } from "../gguf/index.ts";

export { Act, Gating, HeadMap, OpKind, RopeType };

/** One op of a program: kind, the model layer it belongs to (-1: none), parameters, tensors by role. */
export interface OpSpec<K extends OpKind = OpKind> {
  kind: K;
  layer: number;
  params: Record<string, number>;
  tensors: Partial<Record<Role<K>, string>>;
}

export interface RopeParams {
  type: RopeType;
  nRot: number;
  base: number;
  freqScale: number;
  extFactor: number;
  attnFactor: number;
  betaFast: number;
  betaSlow: number;
  origCtx: number;
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
    extFactor: yarn ? 1 : 0,
    attnFactor: f.f32(`${arch}.rope.scaling.attn_factor`, 1),
    betaFast: f.f32(`${arch}.rope.scaling.yarn_beta_fast`, 32),
    betaSlow: f.f32(`${arch}.rope.scaling.yarn_beta_slow`, 1),
    origCtx: f.u32(`${arch}.rope.scaling.original_context_length`, nCtxTrain),
  };
}

type Params<S extends "norm" | "attn" | "router" | "experts" | "ffn" | "mla" | "deltanet"> = Partial<Record<ParamName<S>, number>>;

export function embedOp(tokEmbd: string): OpSpec<OpKind.Embed> {
  return { kind: OpKind.Embed, layer: -1, params: {}, tensors: { tokens: tokEmbd } };
}

/** An MTP layer's input: x = eh_proj [rmsnorm(embed[tokens]) * enorm; rmsnorm(hidden_in) * hnorm] (bl_batch hidden_in). */
export function mtpInputOp(layer: number, tensors: Partial<Record<Role<OpKind.Mtp_in>, string>>, eps: number): OpSpec<OpKind.Mtp_in> {
  const params: Params<"norm"> = { kind: 0, eps };
  return { kind: OpKind.Mtp_in, layer, params, tensors };
}

/** h = rmsnorm(x) * weight. */
export function normOp(layer: number, weight: string, eps: number): OpSpec<OpKind.Norm> {
  const params: Params<"norm"> = { kind: 0, eps };
  return { kind: OpKind.Norm, layer, params, tensors: { weight } };
}

export interface AttentionOpts {
  layer: number;
  /** the KV cache layer (default: layer) */
  kvLayer?: number;
  nHead: number;
  nHeadKv: number;
  headDim: number;
  /** epsilon of the per-head Q/K norms */
  eps: number;
  rope: RopeParams;
  /** sliding window (0 or absent: every position) */
  window?: number;
  /** softmax scale (0 or absent: 1 / sqrt(head_dim)) */
  scale?: number;
  /** q's rows hold each head's query then its output gate; the output times sigmoid(gate) (Qwen3-Next, Qwen3.5) */
  gate?: boolean;
  tensors: Partial<Record<Role<OpKind.Attn>, string>>;
}

/** GQA attention on h over the KV cache, residual added (Q/K norms, biases, sinks as the tensors say). */
export function attentionOp(o: AttentionOpts): OpSpec<OpKind.Attn> {
  const params: Params<"attn"> = {
    kv_layer: o.kvLayer ?? o.layer, n_head: o.nHead, n_head_kv: o.nHeadKv, head_dim: o.headDim, window: o.window ?? 0,
    eps: o.eps, scale: o.scale ?? 0,
    rope_type: o.rope.type, rope_n_rot: o.rope.nRot, rope_orig_ctx: o.rope.origCtx, rope_base: o.rope.base,
    rope_freq_scale: o.rope.freqScale, rope_ext_factor: o.rope.extFactor, rope_attn_factor: o.rope.attnFactor,
    rope_beta_fast: o.rope.betaFast, rope_beta_slow: o.rope.betaSlow, gate: o.gate ? 1 : 0,
  };
  return { kind: OpKind.Attn, layer: o.layer, params, tensors: o.tensors };
}

export interface MlaOpts {
  layer: number;
  /** the KV cache layer (default: layer) */
  kvLayer?: number;
  nHead: number;
  /** the latent's size (kv_lora_rank) */
  kvLora: number;
  /** a query / key head's dims without rotation (qk_nope_head_dim) */
  nope: number;
  /** a value head's dims */
  vDim: number;
  /** epsilon of the q_a and kv_a norms */
  eps: number;
  /** softmax scale (0 or absent: 1 / sqrt(nope + rope.nRot)) */
  scale?: number;
  /** nRot: the rotated dims of a query head and of the shared key part */
  rope: RopeParams;
  tensors: Partial<Record<Role<OpKind.Mla>, string>>;
}

/** Multi-head latent attention on h over the latent KV cache, residual added (bloomery.h's bl_mla_params). */
export function mlaOp(o: MlaOpts): OpSpec<OpKind.Mla> {
  const params: Params<"mla"> = {
    kv_layer: o.kvLayer ?? o.layer, n_head: o.nHead, kv_lora: o.kvLora, nope: o.nope, v_dim: o.vDim, eps: o.eps, scale: o.scale ?? 0,
    rope_type: o.rope.type, rope_n_rot: o.rope.nRot, rope_orig_ctx: o.rope.origCtx, rope_base: o.rope.base,
    rope_freq_scale: o.rope.freqScale, rope_ext_factor: o.rope.extFactor, rope_attn_factor: o.rope.attnFactor,
    rope_beta_fast: o.rope.betaFast, rope_beta_slow: o.rope.betaSlow,
  };
  return { kind: OpKind.Mla, layer: o.layer, params, tensors: o.tensors };
}

export interface DeltaNetOpts {
  layer: number;
  /** the recurrent state layer (the context's rs_layers) */
  rsLayer: number;
  nKHeads: number;
  nVHeads: number;
  headK: number;
  headV: number;
  convKernel: number;
  headMap: HeadMap;
  eps: number;
  tensors: Partial<Record<Role<OpKind.Deltanet>, string>>;
}

/** The gated delta-net linear attention on h over the slot's recurrent state, residual added (bl_deltanet_params). */
export function deltanetOp(o: DeltaNetOpts): OpSpec<OpKind.Deltanet> {
  const params: Params<"deltanet"> = {
    rs_layer: o.rsLayer, n_k_heads: o.nKHeads, n_v_heads: o.nVHeads, head_k: o.headK, head_v: o.headV, conv_kernel: o.convKernel,
    head_map: o.headMap, eps: o.eps,
  };
  return { kind: OpKind.Deltanet, layer: o.layer, params, tensors: o.tensors };
}

/** A delta-net layer's shape: what its state and its work space are sized by. */
export type DeltaNetShape = Pick<DeltaNetOpts, "nKHeads" | "nVHeads" | "headK" | "headV" | "convKernel">;

/**
 * Floats the CPU's delta-net work space takes for a batch of n tokens (ffi/cpu/deltanet.c, grown to
 * the largest batch and kept): each worker's chunk space (bl_delta_rule_work), the batch's qkv, z,
 * beta and alpha, o and y rows (y as wide as qkv and z with a fused qkvz tensor: the wider of the
 * two is counted), the conv's weights twice and the per-head vectors, the token groups.
 */
export function deltanetWorkFloats(o: DeltaNetShape, n: number, nEmbd: number, nThreads: number, nSlots: number): number {
  const L = 64, r16 = (x: number) => (x + 15) & ~15; // BL_DR_CHUNK; the rule's buffers rounded to 16 floats
  const hk = o.headK, hv = o.headV, nv = o.nVHeads, vd = nv * hv, C = 2 * o.nKHeads * hk + vd;
  const rule = r16(hk * hv) + r16(2 * L * hk) + r16(L * hk) + r16(2 * L * hv) + r16(2 * L * L) + r16(L * hv) + r16(L * L) + r16(L) + r16(2 * L);
  const yw = Math.max(nEmbd, C + vd);
  return nThreads * (r16(2 * n) + rule) + n * (C + 2 * vd + 2 * nv + yw) + 2 * o.convKernel * C + 2 * nv + hv + 2 * n + 1 + nSlots;
}

/** Floats one slot's recurrent state takes in a delta-net layer: the conv's previous inputs, then the state of each v head. */
export function deltanetStateFloats(o: DeltaNetShape): number {
  const C = 2 * o.nKHeads * o.headK + o.nVHeads * o.headV;
  return (o.convKernel - 1) * C + o.nVHeads * o.headV * o.headK;
}

export interface RouterOpts {
  layer: number;
  nExpert: number;
  nUsed: number;
  gating: Gating;
  normTopk: boolean;
  /** routed weights times this (0 or absent: 1) */
  scale?: number;
  nGroup?: number;
  nGroupUsed?: number;
  tensors: Partial<Record<Role<OpKind.Router>, string>>;
}

export function routerOp(o: RouterOpts): OpSpec<OpKind.Router> {
  const params: Params<"router"> = {
    n_expert: o.nExpert, n_used: o.nUsed, gating: o.gating, norm_topk: o.normTopk ? 1 : 0,
    n_group: o.nGroup ?? 0, n_group_used: o.nGroupUsed ?? 0, scale: o.scale ?? 0,
  };
  return { kind: OpKind.Router, layer: o.layer, params, tensors: o.tensors };
}

export interface ExpertsOpts {
  layer: number;
  nExpert: number;
  nUsed: number;
  act: Act;
  alpha?: number;
  limit?: number;
  tensors: Partial<Record<Role<OpKind.Experts>, string>>;
}

/** x += the picks' weighted experts on h (the router before it). */
export function expertsOp(o: ExpertsOpts): OpSpec<OpKind.Experts> {
  const params: Params<"experts"> = {
    n_expert: o.nExpert, n_used: o.nUsed, act: o.act, layer: o.layer, store: 0, store_layer: 0, host: 0,
    alpha: o.alpha ?? 0, limit: o.limit ?? 0,
  };
  return { kind: OpKind.Experts, layer: o.layer, params, tensors: o.tensors };
}

/** x += [sigmoid(h . gate_inp)] * down(act(gate h) * up h): a dense FFN or a shared expert. */
export function ffnOp(layer: number, tensors: Partial<Record<Role<OpKind.Ffn>, string>>, act = Act.Swiglu, alpha = 0, limit = 0): OpSpec<OpKind.Ffn> {
  const params: Params<"ffn"> = { act, alpha, limit };
  return { kind: OpKind.Ffn, layer, params, tensors };
}

/** Final norm and output head (tied to token_embd when the file has no `output`). */
export function outputOp(f: GgufFile, eps: number, norm = "output_norm.weight"): OpSpec<OpKind.Output> {
  const head = f.tensor("output.weight") ? "output.weight" : "token_embd.weight";
  const params: Params<"norm"> = { kind: 0, eps };
  return { kind: OpKind.Output, layer: -1, params, tensors: { norm, head } };
}

/** The names of the routed-expert tensors of a program's EXPERTS ops (gate, up, down). */
export function expertTensors(op: OpSpec): string[] {
  if (op.kind !== OpKind.Experts) return [];
  const t = (op as OpSpec<OpKind.Experts>).tensors;
  return [t.gate, t.up, t.down].filter((n): n is string => !!n);
}
