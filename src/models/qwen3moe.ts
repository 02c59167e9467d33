// bloomery models: qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): per-head Q/K RMSNorm then NEOX
// RoPE, GQA attention, softmax top-k routed SwiGLU experts with renormalised weights.
import type { GgufFile } from "../gguf/index.ts";
import { GgufError } from "../gguf/index.ts";
import { attentionBlock, embedBlock, moeBlock, outputBlock, ropeParams, RopeType, type BlockSpec } from "./blocks.ts";
import type { HParams, ModelFamily } from "./types.ts";

function hparams(f: GgufFile): HParams {
  const a = "qwen3moe";
  const nLayer = f.u32(`${a}.block_count`);
  const nEmbd = f.u32(`${a}.embedding_length`);
  const nHead = f.u32(`${a}.attention.head_count`);
  const nHeadKv = f.u32(`${a}.attention.head_count_kv`, nHead);
  const headDim = f.u32(`${a}.attention.key_length`, nEmbd / nHead);
  const vLen = f.u32(`${a}.attention.value_length`, headDim);
  if (vLen !== headDim) throw new GgufError(f.path, `attention.value_length ${vLen} differs from key_length ${headDim}`);
  const emb = f.requireTensor("token_embd.weight");
  const hp: HParams = {
    arch: a,
    nVocab: emb.ne[1],
    nEmbd,
    nLayer,
    nCtxTrain: f.u32(`${a}.context_length`),
    nHead,
    nHeadKv,
    headDim,
    nFf: f.u32(`${a}.expert_feed_forward_length`),
    nExpert: f.u32(`${a}.expert_count`),
    nExpertUsed: f.u32(`${a}.expert_used_count`),
    eps: f.f32(`${a}.attention.layer_norm_rms_epsilon`),
    kvLayers: nLayer,
  };
  const bad = (what: string) => { throw new GgufError(f.path, `qwen3moe: ${what}`); };
  if (nLayer < 1 || nLayer > 1024) bad(`block_count ${nLayer} is out of range`);
  if (nHead < 1 || nHeadKv < 1 || nHead % nHeadKv !== 0) bad(`head_count ${nHead} is not a multiple of head_count_kv ${nHeadKv}`);
  if (headDim < 2 || headDim > 1024 || headDim % 2) bad(`key_length ${headDim} is not an even size up to 1024`);
  if (hp.nExpert < 1 || hp.nExpertUsed < 1 || hp.nExpertUsed > hp.nExpert) bad(`expert_used_count ${hp.nExpertUsed} of ${hp.nExpert} experts`);
  if (emb.ne[0] !== nEmbd) bad(`token_embd has rows of ${emb.ne[0]}, embedding_length is ${nEmbd}`);
  return hp;
}

function program(f: GgufFile, hp: HParams): BlockSpec[] {
  const rope = ropeParams(f, hp.arch, RopeType.Neox, hp.headDim, hp.nCtxTrain);
  const E = hp.nEmbd, qd = hp.nHead * hp.headDim, kd = hp.nHeadKv * hp.headDim, F = hp.nFf, X = hp.nExpert;
  const blocks: BlockSpec[] = [embedBlock("token_embd.weight")];
  for (let i = 0; i < hp.nLayer; i++) {
    const p = `blk.${i}.`;
    f.requireTensor(`${p}attn_norm.weight`, [E]);
    f.requireTensor(`${p}attn_q.weight`, [E, qd]);
    f.requireTensor(`${p}attn_k.weight`, [E, kd]);
    f.requireTensor(`${p}attn_v.weight`, [E, kd]);
    f.requireTensor(`${p}attn_output.weight`, [qd, E]);
    f.requireTensor(`${p}attn_q_norm.weight`, [hp.headDim]);
    f.requireTensor(`${p}attn_k_norm.weight`, [hp.headDim]);
    f.requireTensor(`${p}ffn_norm.weight`, [E]);
    f.requireTensor(`${p}ffn_gate_inp.weight`, [E, X]);
    f.requireTensor(`${p}ffn_gate_exps.weight`, [E, F, X]);
    f.requireTensor(`${p}ffn_up_exps.weight`, [E, F, X]);
    f.requireTensor(`${p}ffn_down_exps.weight`, [F, E, X]);
    blocks.push(attentionBlock({ layer: i, prefix: p, nHead: hp.nHead, nHeadKv: hp.nHeadKv, headDim: hp.headDim, eps: hp.eps, rope, qkNorm: true }));
    blocks.push(moeBlock({ prefix: p, nExpert: X, nExpertUsed: hp.nExpertUsed, eps: hp.eps, normTopk: true }));
  }
  f.requireTensor("output_norm.weight", [E]);
  if (f.tensor("output.weight")) f.requireTensor("output.weight", [E, hp.nVocab]);
  blocks.push(outputBlock(f, hp.eps));
  return blocks;
}

export const qwen3moe: ModelFamily = { archs: ["qwen3moe"], hparams, program };
