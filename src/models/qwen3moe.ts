// bloomery models: qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): per-head Q/K RMSNorm then NEOX
// RoPE, GQA attention, softmax top-k routed SwiGLU experts with renormalised weights.
import type { GgufFile } from "../gguf/index.ts";
import { GgufError } from "../gguf/index.ts";
import { Act, attentionOp, embedOp, expertsOp, Gating, normOp, outputOp, routerOp, ropeParams, RopeType, type OpSpec } from "./ops.ts";
import { gqaMoeHParams } from "./moe-hparams.ts";
import type { Shape, SynthFamily, SynthTensors } from "./synth-types.ts";
import type { HfConfig, HfFamily, HfKvSink, HfTensor, HParams, ModelFamily } from "./types.ts";

function hparams(f: GgufFile): HParams {
  return gqaMoeHParams(f, "qwen3moe");
}

function program(f: GgufFile, hp: HParams): OpSpec[] {
  const rope = ropeParams(f, hp.arch, RopeType.Neox, hp.headDim, hp.nCtxTrain);
  const E = hp.nEmbd, qd = hp.nHead * hp.headDim, kd = hp.nHeadKv * hp.headDim, F = hp.nFf, X = hp.nExpert;
  const ops: OpSpec[] = [embedOp("token_embd.weight")];
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
    ops.push(normOp(i, `${p}attn_norm.weight`, hp.eps));
    ops.push(attentionOp({
      layer: i, nHead: hp.nHead, nHeadKv: hp.nHeadKv, headDim: hp.headDim, eps: hp.eps, rope,
      tensors: {
        q: `${p}attn_q.weight`, k: `${p}attn_k.weight`, v: `${p}attn_v.weight`, o: `${p}attn_output.weight`,
        q_norm: `${p}attn_q_norm.weight`, k_norm: `${p}attn_k_norm.weight`,
      },
    }));
    ops.push(normOp(i, `${p}ffn_norm.weight`, hp.eps));
    ops.push(routerOp({ layer: i, nExpert: X, nUsed: hp.nExpertUsed, gating: Gating.Softmax, normTopk: true, tensors: { w: `${p}ffn_gate_inp.weight` } }));
    ops.push(expertsOp({
      layer: i, nExpert: X, nUsed: hp.nExpertUsed, act: Act.Swiglu,
      tensors: { gate: `${p}ffn_gate_exps.weight`, up: `${p}ffn_up_exps.weight`, down: `${p}ffn_down_exps.weight` },
    }));
  }
  f.requireTensor("output_norm.weight", [E]);
  if (f.tensor("output.weight")) f.requireTensor("output.weight", [E, hp.nVocab]);
  ops.push(outputOp(f, hp.eps));
  return ops;
}

const base = { arch: "qwen3moe", ropeBase: 1e6, eps: 1e-6, nVocab: 151936 };

const synth: SynthFamily = {
  shapes: {
    "qwen3-30b-a3b": { ...base, name: "Qwen3-30B-A3B", nLayer: 48, nEmbd: 2048, nHead: 32, nHeadKv: 4, headDim: 128, nExpert: 128, nExpertUsed: 8, nFfExp: 768, nFf: 6144, nCtxTrain: 262144 },
    "qwen3-235b-a22b": { ...base, name: "Qwen3-235B-A22B", nLayer: 94, nEmbd: 4096, nHead: 64, nHeadKv: 4, headDim: 128, nExpert: 128, nExpertUsed: 8, nFfExp: 1536, nFf: 12288, nCtxTrain: 262144 },
    // small shapes for tests: whole K-quant blocks, a real byte-level vocabulary
    "test-moe": { ...base, name: "test-moe", nLayer: 2, nEmbd: 256, nHead: 4, nHeadKv: 2, headDim: 64, nExpert: 8, nExpertUsed: 2, nFfExp: 256, nFf: 512, nVocab: 1024, nCtxTrain: 4096 },
    "test-moe-wide": { ...base, name: "test-moe-wide", nLayer: 3, nEmbd: 512, nHead: 8, nHeadKv: 2, headDim: 64, nExpert: 16, nExpertUsed: 4, nFfExp: 512, nFf: 1024, nVocab: 2048, nCtxTrain: 8192 },
  },
  write(sh: Shape, t: SynthTensors): void {
    const a = sh.arch, w = t.w, n = t.nLayer;
    w.u32(`${a}.block_count`, n);
    w.u32(`${a}.context_length`, sh.nCtxTrain);
    w.u32(`${a}.embedding_length`, sh.nEmbd);
    w.u32(`${a}.feed_forward_length`, sh.nFf);
    w.u32(`${a}.attention.head_count`, sh.nHead);
    w.u32(`${a}.attention.head_count_kv`, sh.nHeadKv);
    w.u32(`${a}.attention.key_length`, sh.headDim);
    w.u32(`${a}.attention.value_length`, sh.headDim);
    w.f32(`${a}.rope.freq_base`, sh.ropeBase);
    w.f32(`${a}.attention.layer_norm_rms_epsilon`, sh.eps);
    w.u32(`${a}.expert_count`, sh.nExpert);
    w.u32(`${a}.expert_used_count`, sh.nExpertUsed);
    w.u32(`${a}.expert_feed_forward_length`, sh.nFfExp);
    const E = sh.nEmbd, qd = sh.nHead * sh.headDim, kd = sh.nHeadKv * sh.headDim, F = sh.nFfExp, X = sh.nExpert;
    t.mat("token_embd.weight", "token_embd", -1, [E, sh.nVocab], 1.0);
    for (let i = 0; i < n; i++) {
      const p = `blk.${i}.`;
      t.ones(`${p}attn_norm.weight`, [E]);
      t.mat(`${p}attn_q.weight`, "attn_q", i, [E, qd]);
      t.mat(`${p}attn_k.weight`, "attn_k", i, [E, kd]);
      t.mat(`${p}attn_v.weight`, "attn_v", i, [E, kd]);
      t.mat(`${p}attn_output.weight`, "attn_output", i, [qd, E], 0.02 / Math.sqrt(n));
      t.ones(`${p}attn_q_norm.weight`, [sh.headDim]);
      t.ones(`${p}attn_k_norm.weight`, [sh.headDim]);
      t.ones(`${p}ffn_norm.weight`, [E]);
      t.router(`${p}ffn_gate_inp.weight`, i, E, X);
      t.mat(`${p}ffn_gate_exps.weight`, "ffn_gate_exps", i, [E, F, X]);
      t.mat(`${p}ffn_up_exps.weight`, "ffn_up_exps", i, [E, F, X]);
      t.mat(`${p}ffn_down_exps.weight`, "ffn_down_exps", i, [F, E, X], 0.02 / Math.sqrt(n));
    }
    t.ones("output_norm.weight", [E]);
    t.mat("output.weight", "output", -1, [E, sh.nVocab]);
  },
};

/** Hugging Face's Qwen3-MoE (transformers' Qwen3MoeForCausalLM): its config keys and tensor names. */
const hf: HfFamily = {
  architectures: ["Qwen3MoeForCausalLM"],
  modelTypes: ["qwen3_moe"],
  config(c: HfConfig, put: HfKvSink): void {
    const a = "qwen3moe";
    put.u32(`${a}.block_count`, c.int("num_hidden_layers"));
    put.u32(`${a}.context_length`, c.int("max_position_embeddings"));
    put.u32(`${a}.embedding_length`, c.int("hidden_size"));
    put.u32(`${a}.feed_forward_length`, c.int("intermediate_size"));
    put.u32(`${a}.expert_feed_forward_length`, c.int("moe_intermediate_size"));
    put.u32(`${a}.attention.head_count`, c.int("num_attention_heads"));
    put.u32(`${a}.attention.head_count_kv`, c.int("num_key_value_heads"));
    const hd = c.int("head_dim", c.int("hidden_size") / c.int("num_attention_heads"));
    put.u32(`${a}.attention.key_length`, hd);
    put.u32(`${a}.attention.value_length`, hd);
    put.f32(`${a}.attention.layer_norm_rms_epsilon`, c.num("rms_norm_eps"));
    put.u32(`${a}.expert_count`, c.int("num_experts"));
    put.u32(`${a}.expert_used_count`, c.int("num_experts_per_tok"));
    const rope = c.obj("rope_parameters");
    put.f32(`${a}.rope.freq_base`, rope?.has("rope_theta") ? rope.num("rope_theta") : c.num("rope_theta"));
    const type = rope ? rope.str("rope_type", "default") : "default";
    if (type !== "default") throw new GgufError("config.json", `rope_type '${type}' of a Qwen3-MoE folder is not supported yet`);
    if (!c.bool("norm_topk_prob", true)) throw new GgufError("config.json", "norm_topk_prob false is not supported for Qwen3-MoE (the family normalises the chosen experts' weights)");
  },
  tensors(c: HfConfig): HfTensor[] {
    const out: HfTensor[] = [{ name: "token_embd.weight", hf: "model.embed_tokens.weight" }];
    const X = c.int("num_experts");
    for (let i = 0; i < c.int("num_hidden_layers"); i++) {
      const p = `blk.${i}.`, h = `model.layers.${i}.`;
      const t = (name: string, hfName: string | string[], o: Partial<HfTensor> = {}) => out.push({ name: p + name, hf: hfName, ...o });
      t("attn_norm.weight", `${h}input_layernorm.weight`, { f32: true });
      for (const [g, x] of [["q", "q"], ["k", "k"], ["v", "v"], ["output", "o"]]) t(`attn_${g}.weight`, `${h}self_attn.${x}_proj.weight`);
      t("attn_q_norm.weight", `${h}self_attn.q_norm.weight`, { f32: true });
      t("attn_k_norm.weight", `${h}self_attn.k_norm.weight`, { f32: true });
      t("ffn_norm.weight", `${h}post_attention_layernorm.weight`, { f32: true });
      t("ffn_gate_inp.weight", `${h}mlp.gate.weight`, { f32: true });
      // stored one tensor per expert: stacked into the engine's [experts, rows, cols] tensor (a copy); mlx-lm's
      // folders hold the stack (models/qwen3_moe.py sanitize: mlp.switch_mlp.{gate,up,down}_proj, [experts, out, in])
      for (const g of ["gate", "up", "down"]) {
        t(`ffn_${g}_exps.weight`, Array.from({ length: X }, (_, e) => `${h}mlp.experts.${e}.${g}_proj.weight`), { alt: { hf: `${h}mlp.switch_mlp.${g}_proj.weight` } });
      }
    }
    out.push({ name: "output_norm.weight", hf: "model.norm.weight", f32: true });
    if (!c.bool("tie_word_embeddings", false)) out.push({ name: "output.weight", hf: "lm_head.weight" });
    return out;
  },
};

export const qwen3moe: ModelFamily = { archs: ["qwen3moe"], hparams, program, synth, hf };
