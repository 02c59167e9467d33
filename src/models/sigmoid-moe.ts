// bloomery models: the MoE layers DeepSeek V3 and GLM-4.5 share (llama.cpp's deepseek2 and glm4moe): the
// router's keys (gating function, selection bias `exp_probs_b`, expert groups, normalised and scaled
// weights), shared experts, leading dense layers, and the MTP (next-token prediction) layers their files
// append after the main ones - counted in block_count, never part of the forward pass (one is a draft
// for speculative decoding: mtp-layer.ts).
import type { GgufFile } from "../gguf/index.ts";
import { GgufError } from "../gguf/index.ts";
import type { HfConfig, HfKvSink, HfTensor } from "./types.ts";
import type { SynthTensors } from "./synth-types.ts";
import { Act, expertsOp, ffnOp, Gating, normOp, routerOp, type OpSpec } from "./ops.ts";

/** What a sigmoid-router MoE family reads from `<arch>.*` keys. */
export interface MoeKeys {
  /** layers of the forward pass (block_count less the MTP layers) */
  nLayer: number;
  /** MTP layers after them (nextn_predict_layers) */
  nNextn: number;
  /** leading dense layers (leading_dense_block_count) */
  nDense: number;
  /** shared experts a MoE layer (expert_shared_count; their FFN is nShared * nFfExp wide) */
  nShared: number;
  nFfExp: number;
  nExpert: number;
  nExpertUsed: number;
  gating: Gating;
  normTopk: boolean;
  /** routed weights times this (expert_weights_scale; 0: 1) */
  scale: number;
  nGroup: number;
  nGroupUsed: number;
}

/** llama.cpp's expert_gating_func values (llama-hparams.h): 1 softmax, 2 sigmoid, 3 softmax over the chosen. */
function gatingOf(f: GgufFile, key: string, fallback: Gating): Gating {
  const v = f.u32(key, 0);
  switch (v) {
    case 0: return fallback;
    case 1: return Gating.Softmax;
    case 2: return Gating.Sigmoid;
    case 3: return Gating.SoftmaxWeight;
    default: throw new GgufError(f.path, `${key} ${v} is not supported (1 softmax, 2 sigmoid and 3 softmax-over-the-chosen are)`);
  }
}

export function moeKeys(f: GgufFile, a: string, fallbackGating: Gating): MoeKeys {
  const bad = (what: string): never => { throw new GgufError(f.path, `${a}: ${what}`); };
  const blockCount = f.u32(`${a}.block_count`);
  const nNextn = f.u32(`${a}.nextn_predict_layers`, 0);
  if (nNextn >= blockCount) bad(`nextn_predict_layers ${nNextn} leaves no layer of block_count ${blockCount}`);
  const k: MoeKeys = {
    nLayer: blockCount - nNextn,
    nNextn,
    nDense: f.u32(`${a}.leading_dense_block_count`, 0),
    nShared: f.u32(`${a}.expert_shared_count`, 0),
    nFfExp: f.u32(`${a}.expert_feed_forward_length`),
    nExpert: f.u32(`${a}.expert_count`),
    nExpertUsed: f.u32(`${a}.expert_used_count`),
    gating: gatingOf(f, `${a}.expert_gating_func`, fallbackGating),
    normTopk: f.bool(`${a}.expert_weights_norm`, false),
    scale: f.f32(`${a}.expert_weights_scale`, 0),
    nGroup: f.u32(`${a}.expert_group_count`, 0),
    nGroupUsed: f.u32(`${a}.expert_group_used_count`, 0),
  };
  if (k.nLayer < 1 || k.nLayer > 1024) bad(`block_count ${blockCount} is out of range`);
  if (k.nDense > k.nLayer) bad(`leading_dense_block_count ${k.nDense} is more than the ${k.nLayer} layers`);
  if (k.nExpert < 1 || k.nExpertUsed < 1 || k.nExpertUsed > k.nExpert || k.nExpertUsed > 64) bad(`expert_used_count ${k.nExpertUsed} of ${k.nExpert} experts`);
  if (k.nGroup > 1 && (k.nExpert % k.nGroup !== 0 || k.nGroup > 64 || k.nGroupUsed < 1 || k.nGroupUsed > k.nGroup)) {
    bad(`expert_group_count ${k.nGroup} (${k.nGroupUsed} used) does not divide ${k.nExpert} experts`);
  }
  if (k.nGroup > 1 && k.gating !== Gating.Sigmoid) bad(`expert groups with gating ${k.gating} (bloomery groups the sigmoid router only)`);
  return k;
}

/**
 * The FFN half of layer i after its attention: the norm (`normName`), then a dense FFN for the leading
 * dense layers, else the router (its selection bias when the file has one), the routed experts and the
 * shared expert on the same normalised rows (an FFN op after EXPERTS reads the h the norm wrote).
 */
export function ffnHalf(f: GgufFile, k: MoeKeys, i: number, nEmbd: number, nFfDense: number, eps: number, normName: string): OpSpec[] {
  const p = `blk.${i}.`;
  const need = (n: string, ne: number[]) => (f.requireTensor(`${p}${n}`, ne), `${p}${n}`);
  const E = nEmbd, X = k.nExpert, F = k.nFfExp;
  const ops: OpSpec[] = [normOp(i, need(`${normName}.weight`, [E]), eps)];
  if (i < k.nDense) {
    ops.push(ffnOp(i, { gate: need("ffn_gate.weight", [E, nFfDense]), up: need("ffn_up.weight", [E, nFfDense]), down: need("ffn_down.weight", [nFfDense, E]) }));
    return ops;
  }
  if (f.tensor(`${p}ffn_gate_up_exps.weight`)) {
    throw new GgufError(f.path, `${p}ffn_gate_up_exps.weight: merged gate and up experts are not supported yet (convert with separate ffn_gate_exps and ffn_up_exps)`);
  }
  const corr = f.tensor(`${p}exp_probs_b.bias`) ? need("exp_probs_b.bias", [X]) : undefined;
  if (corr && k.gating !== Gating.Sigmoid) {
    throw new GgufError(f.path, `${p}exp_probs_b.bias: a selection bias beside gating ${Gating[k.gating]} (the file lacks expert_gating_func = 2: it was converted before llama.cpp wrote that key; reconvert it)`);
  }
  ops.push(routerOp({
    layer: i, nExpert: X, nUsed: k.nExpertUsed, gating: k.gating, normTopk: k.normTopk, scale: k.scale,
    nGroup: k.nGroup > 1 ? k.nGroup : 0, nGroupUsed: k.nGroup > 1 ? k.nGroupUsed : 0,
    tensors: { w: need("ffn_gate_inp.weight", [E, X]), corr },
  }));
  ops.push(expertsOp({
    layer: i, nExpert: X, nUsed: k.nExpertUsed, act: Act.Swiglu,
    tensors: { gate: need("ffn_gate_exps.weight", [E, F, X]), up: need("ffn_up_exps.weight", [E, F, X]), down: need("ffn_down_exps.weight", [F, E, X]) },
  }));
  if (k.nShared > 0) {
    const S = F * k.nShared;
    ops.push(ffnOp(i, { gate: need("ffn_gate_shexp.weight", [E, S]), up: need("ffn_up_shexp.weight", [E, S]), down: need("ffn_down_shexp.weight", [S, E]) }));
  }
  return ops;
}

/**
 * The load's line about the MTP layers a file appends (llama.cpp's nextn.* tensors and a whole layer
 * after the main ones): not part of the forward pass; one such layer is what --spec-type draft-mtp runs
 * as a speculative draft (mtp-layer.ts), more than one is not run at all.
 */
export function nextnNotes(f: GgufFile, a: string, k: MoeKeys): string[] {
  if (!k.nNextn) return [];
  let bytes = 0, n = 0;
  for (const t of f.tensors.values()) {
    const m = /^blk\.(\d+)\./.exec(t.name);
    if (m && Number(m[1]) >= k.nLayer) (bytes += t.nbytes), n++;
  }
  const layers = k.nNextn === 1 ? `layer blk.${k.nLayer}` : `layers blk.${k.nLayer}-${k.nLayer + k.nNextn - 1}`;
  const what = `${a}: the file's MTP (next-token prediction) ${layers} (nextn_predict_layers ${k.nNextn}; ${n} tensors, ${(bytes / 2 ** 20).toFixed(1)} MiB)`;
  return [k.nNextn === 1
    ? `${what} is not part of the forward pass; --spec-type draft-mtp runs it as a speculative draft (mtp-layer.ts)`
    : `${what} is not used: draft-mtp runs files with one MTP layer; the model runs without them`];
}

/** The MoE keys of a Hugging Face config (DeepSeek V3 / GLM-4.5 names) as the GGUF keys moeKeys reads. */
export function hfMoeConfig(a: string, c: HfConfig, put: HfKvSink): void {
  put.u32(`${a}.leading_dense_block_count`, c.int("first_k_dense_replace", 0));
  put.u32(`${a}.expert_shared_count`, c.int("n_shared_experts", 0));
  put.u32(`${a}.expert_feed_forward_length`, c.int("moe_intermediate_size"));
  put.u32(`${a}.expert_count`, c.int("n_routed_experts"));
  put.u32(`${a}.expert_used_count`, c.int("num_experts_per_tok"));
  put.u32(`${a}.expert_group_count`, c.int("n_group", 1));
  put.u32(`${a}.expert_group_used_count`, c.int("topk_group", 1));
  put.f32(`${a}.expert_weights_scale`, c.num("routed_scaling_factor", 1));
  put.bool(`${a}.expert_weights_norm`, c.bool("norm_topk_prob", false));
  // both families score by a sigmoid (scoring_func "sigmoid" in DeepSeek V3's config; GLM's is implied)
  const scoring = c.str("scoring_func", "sigmoid");
  put.u32(`${a}.expert_gating_func`, scoring === "sigmoid" ? 2 : scoring === "softmax" ? 1 : 0);
  // a folder's MTP layers (num_nextn_predict_layers) sit past num_hidden_layers and are not part of the
  // forward pass: block_count stays the main layers', and no next-token-prediction layer is declared
  put.u32(`${a}.nextn_predict_layers`, 0);
}

/** The FFN half of layer i by HF names: dense, or routed experts (stacked by a copy) with a shared one. */
export function hfFfnHalf(c: HfConfig, i: number, normName: string): HfTensor[] {
  const p = `blk.${i}.`, h = `model.layers.${i}.`;
  const out: HfTensor[] = [{ name: `${p}${normName}.weight`, hf: `${h}post_attention_layernorm.weight`, f32: true }];
  const t = (name: string, hf: string | string[], o: Partial<HfTensor> = {}) => out.push({ name: p + name, hf, ...o });
  if (i < c.int("first_k_dense_replace", 0)) {
    for (const g of ["gate", "up", "down"]) t(`ffn_${g}.weight`, `${h}mlp.${g}_proj.weight`);
    return out;
  }
  const X = c.int("n_routed_experts");
  t("ffn_gate_inp.weight", `${h}mlp.gate.weight`, { f32: true });
  t("exp_probs_b.bias", `${h}mlp.gate.e_score_correction_bias`, { f32: true });
  // stored one tensor per expert: the engine's experts are one [experts, rows, cols] tensor, so stacked
  // (mlx's folders hold them stacked already, as mlp.switch_mlp.*)
  for (const g of ["gate", "up", "down"]) t(`ffn_${g}_exps.weight`, Array.from({ length: X }, (_, e) => `${h}mlp.experts.${e}.${g}_proj.weight`), { alt: { hf: `${h}mlp.switch_mlp.${g}_proj.weight` } });
  if (c.int("n_shared_experts", 0) > 0) for (const g of ["gate", "up", "down"]) t(`ffn_${g}_shexp.weight`, `${h}mlp.shared_experts.${g}_proj.weight`);
  return out;
}

/**
 * synth: layer i's FFN part (prefix p): a leading dense FFN (i < nDense, nFf wide) or the router with
 * its selection bias, the routed experts (X of F) and the shared expert (S wide), and for an MTP layer
 * (i >= nLayer) its own nextn tensors. n: the layers of the forward pass (the output scale's).
 */
export function synthMoeFfn(t: SynthTensors, p: string, i: number, s: { n: number; nDense: number; E: number; nFf: number; F: number; X: number; S: number }): void {
  const { n, E, F, X, S } = s, down = 0.02 / Math.sqrt(n);
  if (i < s.nDense) {
    t.mat(`${p}ffn_gate.weight`, "ffn_gate", i, [E, s.nFf]);
    t.mat(`${p}ffn_up.weight`, "ffn_up", i, [E, s.nFf]);
    t.mat(`${p}ffn_down.weight`, "ffn_down", i, [s.nFf, E], down);
    return;
  }
  t.router(`${p}ffn_gate_inp.weight`, i, E, X);
  t.small(`${p}exp_probs_b.bias`, [X], 0.02);
  t.mat(`${p}ffn_gate_exps.weight`, "ffn_gate_exps", i, [E, F, X]);
  t.mat(`${p}ffn_up_exps.weight`, "ffn_up_exps", i, [E, F, X]);
  t.mat(`${p}ffn_down_exps.weight`, "ffn_down_exps", i, [F, E, X], down);
  t.mat(`${p}ffn_gate_shexp.weight`, "ffn_gate_shexp", i, [E, S]);
  t.mat(`${p}ffn_up_shexp.weight`, "ffn_up_shexp", i, [E, S]);
  t.mat(`${p}ffn_down_shexp.weight`, "ffn_down_shexp", i, [S, E], down);
  if (i >= n) {
    // an MTP layer's own tensors (llama.cpp's nextn.*): never read by the forward pass
    t.mat(`${p}nextn.eh_proj.weight`, "nextn_eh_proj", i, [2 * E, E]);
    t.ones(`${p}nextn.enorm.weight`, [E]);
    t.ones(`${p}nextn.hnorm.weight`, [E]);
    t.ones(`${p}nextn.shared_head_norm.weight`, [E]);
  }
}
