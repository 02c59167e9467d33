// bloomery models: glm4moe (GLM-4.5, GLM-4.5-Air, GLM-4.6, GLM-4.7; llama.cpp's glm4-moe.cpp): GQA attention
// with QKV biases, per-head Q/K RMSNorm when the file has them (GLM-4.5; not Air), partial NEOX RoPE (the
// first rope.dimension_count dims of a head), leading dense SwiGLU layers, then MoE layers: a sigmoid
// router choosing by its scores plus a selection bias (exp_probs_b), weights normalised and scaled
// (expert_weights_norm / _scale), expert groups when the file has more than one, and a shared expert on the
// same normalised rows. The next-token-prediction (MTP) layer the files append (nextn_predict_layers) is
// not part of the forward pass: --spec-type draft-mtp runs it as a speculative draft (mtp-layer.ts).
import type { GgufFile } from "../gguf/index.ts";
import { GgufError } from "../gguf/index.ts";
import { attentionOp, embedOp, Gating, normOp, outputOp, ropeParams, RopeType, type OpSpec } from "./ops.ts";
import { ffnHalf, hfFfnHalf, hfMoeConfig, moeKeys, nextnNotes, synthMoeFfn } from "./sigmoid-moe.ts";
import { mtpHook, type LayerOps } from "./mtp-layer.ts";
import type { Shape, SynthFamily, SynthTensors } from "./synth-types.ts";
import type { HfConfig, HfFamily, HfKvSink, HfTensor, HParams, ModelFamily } from "./types.ts";

const A = "glm4moe";

function hparams(f: GgufFile): HParams {
  const k = moeKeys(f, A, Gating.Sigmoid);
  const nEmbd = f.u32(`${A}.embedding_length`);
  const nHead = f.u32(`${A}.attention.head_count`);
  const nHeadKv = f.u32(`${A}.attention.head_count_kv`, nHead);
  const headDim = f.u32(`${A}.attention.key_length`, nEmbd / nHead);
  const vLen = f.u32(`${A}.attention.value_length`, headDim);
  const bad = (what: string): never => { throw new GgufError(f.path, `${A}: ${what}`); };
  if (vLen !== headDim) bad(`attention.value_length ${vLen} differs from key_length ${headDim}`);
  const emb = f.requireTensor("token_embd.weight");
  const hp: HParams = {
    arch: A,
    nVocab: emb.ne[1],
    nEmbd,
    nLayer: k.nLayer,
    nCtxTrain: f.u32(`${A}.context_length`),
    nHead,
    nHeadKv,
    headDim,
    nFf: Math.max(k.nDense ? f.u32(`${A}.feed_forward_length`) : 0, k.nFfExp * Math.max(1, k.nShared)),
    nExpert: k.nExpert,
    nExpertUsed: k.nExpertUsed,
    eps: f.f32(`${A}.attention.layer_norm_rms_epsilon`),
    kvLayers: k.nLayer,
  };
  if (nHead < 1 || nHeadKv < 1 || nHead % nHeadKv !== 0) bad(`head_count ${nHead} is not a multiple of head_count_kv ${nHeadKv}`);
  if (headDim < 2 || headDim > 1024 || headDim % 2) bad(`key_length ${headDim} is not an even size up to 1024`);
  if (emb.ne[0] !== nEmbd) bad(`token_embd has rows of ${emb.ne[0]}, embedding_length is ${nEmbd}`);
  return hp;
}

/** Layer i's ops (its attention on KV cache layer kvLayer, then its FFN half): the forward pass's and the MTP layer's. */
function layerBuilder(f: GgufFile, hp: HParams): LayerOps {
  const k = moeKeys(f, A, Gating.Sigmoid);
  const E = hp.nEmbd, qd = hp.nHead * hp.headDim, kd = hp.nHeadKv * hp.headDim;
  const nRot = f.u32(`${A}.rope.dimension_count`, hp.headDim);
  if (nRot < 2 || nRot > hp.headDim || nRot % 2) throw new GgufError(f.path, `${A}: rope.dimension_count ${nRot} of a head of ${hp.headDim}`);
  const sections = f.has(`${A}.rope.dimension_sections`) ? f.raw(`${A}.rope.dimension_sections`) : undefined;
  if (sections && ArrayBuffer.isView(sections) && Number((sections as Int32Array)[0]) > 0 && Number((sections as Int32Array)[1]) > 0) {
    throw new GgufError(f.path, `${A}: multi-section RoPE (rope.dimension_sections, GLM-4.5V's vision form) is not supported`);
  }
  const rope = ropeParams(f, A, RopeType.Neox, nRot, hp.nCtxTrain);
  const nFfDense = k.nDense ? f.u32(`${A}.feed_forward_length`) : 0;
  return (i, kvLayer) => {
    const p = `blk.${i}.`;
    const need = (n: string, ne: number[]) => (f.requireTensor(`${p}${n}`, ne), `${p}${n}`);
    const opt = (n: string, ne: number[]) => (f.tensor(`${p}${n}`) ? need(n, ne) : undefined);
    return [
      normOp(i, need("attn_norm.weight", [E]), hp.eps),
      attentionOp({
        layer: i, kvLayer, nHead: hp.nHead, nHeadKv: hp.nHeadKv, headDim: hp.headDim, eps: hp.eps, rope,
        tensors: {
          q: need("attn_q.weight", [E, qd]), k: need("attn_k.weight", [E, kd]), v: need("attn_v.weight", [E, kd]), o: need("attn_output.weight", [qd, E]),
          bq: opt("attn_q.bias", [qd]), bk: opt("attn_k.bias", [kd]), bv: opt("attn_v.bias", [kd]),
          q_norm: opt("attn_q_norm.weight", [hp.headDim]), k_norm: opt("attn_k_norm.weight", [hp.headDim]),
        },
      }),
      ...ffnHalf(f, k, i, E, nFfDense, hp.eps, "post_attention_norm"),
    ];
  };
}

function program(f: GgufFile, hp: HParams): OpSpec[] {
  const layer = layerBuilder(f, hp), E = hp.nEmbd;
  const ops: OpSpec[] = [embedOp("token_embd.weight")];
  for (let i = 0; i < hp.nLayer; i++) ops.push(...layer(i, i));
  f.requireTensor("output_norm.weight", [E]);
  if (f.tensor("output.weight")) f.requireTensor("output.weight", [E, hp.nVocab]);
  ops.push(outputOp(f, hp.eps));
  return ops;
}

const base = { arch: A, ropeBase: 1e6, eps: 1e-5, nVocab: 151552, nCtxTrain: 131072, nHead: 96, nHeadKv: 8, headDim: 128, nRot: 64, nExpertUsed: 8 };

const synth: SynthFamily = {
  shapes: {
    "glm-4.5": { ...base, name: "GLM-4.5", nLayer: 92, nEmbd: 5120, nExpert: 160, nFfExp: 1536, nFf: 12288, qkNorm: true,
      moe: { nDense: 3, nShared: 1, scale: 2.5, nGroup: 1, nGroupUsed: 1, nextn: 1 } },
    "glm-4.5-air": { ...base, name: "GLM-4.5-Air", nLayer: 46, nEmbd: 4096, nExpert: 128, nFfExp: 1408, nFf: 10944, qkNorm: false,
      moe: { nDense: 1, nShared: 1, scale: 1, nGroup: 1, nGroupUsed: 1, nextn: 1 } },
    // a small shape for tests: whole K-quant blocks, a real byte-level vocabulary, an MTP layer after the main ones
    "test-glm4moe": { ...base, name: "test-glm4moe", nLayer: 3, nEmbd: 256, nHead: 4, nHeadKv: 2, headDim: 64, nRot: 32, nExpert: 8, nExpertUsed: 2,
      nFfExp: 256, nFf: 512, nVocab: 1024, nCtxTrain: 4096, qkNorm: true, moe: { nDense: 1, nShared: 1, scale: 2.5, nGroup: 1, nGroupUsed: 1, nextn: 1 } },
  },
  write(sh: Shape, t: SynthTensors): void {
    const w = t.w, n = t.nLayer, m = sh.moe!;
    // a cut (--layers) keeps at least one MoE layer
    const nDense = Math.min(m.nDense, Math.max(0, n - 1));
    w.u32(`${A}.block_count`, n + m.nextn);
    w.u32(`${A}.context_length`, sh.nCtxTrain);
    w.u32(`${A}.embedding_length`, sh.nEmbd);
    w.u32(`${A}.feed_forward_length`, sh.nFf);
    w.u32(`${A}.attention.head_count`, sh.nHead);
    w.u32(`${A}.attention.head_count_kv`, sh.nHeadKv);
    w.f32(`${A}.rope.freq_base`, sh.ropeBase);
    w.f32(`${A}.attention.layer_norm_rms_epsilon`, sh.eps);
    w.u32(`${A}.expert_count`, sh.nExpert);
    w.u32(`${A}.expert_used_count`, sh.nExpertUsed);
    w.u32(`${A}.expert_group_count`, m.nGroup);
    w.u32(`${A}.expert_group_used_count`, m.nGroupUsed);
    w.u32(`${A}.attention.key_length`, sh.headDim);
    w.u32(`${A}.attention.value_length`, sh.headDim);
    w.u32(`${A}.rope.dimension_count`, sh.nRot ?? sh.headDim);
    w.u32(`${A}.expert_feed_forward_length`, sh.nFfExp);
    w.u32(`${A}.expert_shared_count`, m.nShared);
    w.u32(`${A}.leading_dense_block_count`, nDense);
    w.u32(`${A}.expert_gating_func`, 2);
    w.f32(`${A}.expert_weights_scale`, m.scale);
    w.bool(`${A}.expert_weights_norm`, true);
    w.u32(`${A}.nextn_predict_layers`, m.nextn);
    const E = sh.nEmbd, qd = sh.nHead * sh.headDim, kd = sh.nHeadKv * sh.headDim, F = sh.nFfExp, X = sh.nExpert, S = F * m.nShared;
    t.mat("token_embd.weight", "token_embd", -1, [E, sh.nVocab], 1.0);
    for (let i = 0; i < n + m.nextn; i++) {
      const p = `blk.${i}.`;
      t.ones(`${p}attn_norm.weight`, [E]);
      t.mat(`${p}attn_q.weight`, "attn_q", i, [E, qd]);
      t.mat(`${p}attn_k.weight`, "attn_k", i, [E, kd]);
      t.mat(`${p}attn_v.weight`, "attn_v", i, [E, kd]);
      t.mat(`${p}attn_output.weight`, "attn_output", i, [qd, E], 0.02 / Math.sqrt(n));
      t.small(`${p}attn_q.bias`, [qd], 0.02);
      t.small(`${p}attn_k.bias`, [kd], 0.02);
      t.small(`${p}attn_v.bias`, [kd], 0.02);
      if (sh.qkNorm) {
        t.ones(`${p}attn_q_norm.weight`, [sh.headDim]);
        t.ones(`${p}attn_k_norm.weight`, [sh.headDim]);
      }
      t.ones(`${p}post_attention_norm.weight`, [E]);
      synthMoeFfn(t, p, i, { n, nDense, E, nFf: sh.nFf, F, X, S });
    }
    t.ones("output_norm.weight", [E]);
    t.mat("output.weight", "output", -1, [E, sh.nVocab]);
  },
};

/** Hugging Face's GLM-4.5 family (transformers' Glm4MoeForCausalLM): its config keys and tensor names. */
const hf: HfFamily = {
  architectures: ["Glm4MoeForCausalLM"],
  modelTypes: ["glm4_moe"],
  config(c: HfConfig, put: HfKvSink): void {
    put.u32(`${A}.block_count`, c.int("num_hidden_layers"));
    put.u32(`${A}.context_length`, c.int("max_position_embeddings"));
    put.u32(`${A}.embedding_length`, c.int("hidden_size"));
    put.u32(`${A}.feed_forward_length`, c.int("intermediate_size"));
    put.u32(`${A}.attention.head_count`, c.int("num_attention_heads"));
    put.u32(`${A}.attention.head_count_kv`, c.int("num_key_value_heads"));
    const hd = c.int("head_dim", c.int("hidden_size") / c.int("num_attention_heads"));
    put.u32(`${A}.attention.key_length`, hd);
    put.u32(`${A}.attention.value_length`, hd);
    put.f32(`${A}.attention.layer_norm_rms_epsilon`, c.num("rms_norm_eps"));
    const rope = c.obj("rope_parameters");
    put.f32(`${A}.rope.freq_base`, rope?.has("rope_theta") ? rope.num("rope_theta") : c.num("rope_theta", 10000));
    if (rope && rope.str("rope_type", "default") !== "default") throw new GgufError("config.json", `rope_type '${rope.str("rope_type")}' of a GLM-4.5 folder is not supported yet`);
    const partial = rope?.has("partial_rotary_factor") ? rope.num("partial_rotary_factor") : c.num("partial_rotary_factor", 1);
    put.u32(`${A}.rope.dimension_count`, Math.round(hd * partial));
    hfMoeConfig(A, c, put);
  },
  tensors(c: HfConfig): HfTensor[] {
    const out: HfTensor[] = [{ name: "token_embd.weight", hf: "model.embed_tokens.weight" }];
    const qkNorm = c.bool("use_qk_norm", false);
    for (let i = 0; i < c.int("num_hidden_layers"); i++) {
      const p = `blk.${i}.`, h = `model.layers.${i}.`;
      out.push({ name: `${p}attn_norm.weight`, hf: `${h}input_layernorm.weight`, f32: true });
      for (const [g, x] of [["q", "q"], ["k", "k"], ["v", "v"], ["output", "o"]]) {
        out.push({ name: `${p}attn_${g}.weight`, hf: `${h}self_attn.${x}_proj.weight` });
        if (g !== "output" && c.bool("attention_bias", false)) out.push({ name: `${p}attn_${g}.bias`, hf: `${h}self_attn.${x}_proj.bias`, f32: true });
      }
      if (qkNorm) for (const x of ["q", "k"]) out.push({ name: `${p}attn_${x}_norm.weight`, hf: `${h}self_attn.${x}_norm.weight`, f32: true });
      out.push(...hfFfnHalf(c, i, "post_attention_norm"));
    }
    out.push({ name: "output_norm.weight", hf: "model.norm.weight", f32: true });
    if (!c.bool("tie_word_embeddings", false)) out.push({ name: "output.weight", hf: "lm_head.weight" });
    return out;
  },
};

export const glm4moe: ModelFamily = {
  hf,
  archs: [A], hparams, program, synth,
  mtp: mtpHook(A, hparams, (f) => layerBuilder(f, hparams(f))),
  notes: (f) => nextnNotes(f, A, moeKeys(f, A, Gating.Sigmoid)),
};
