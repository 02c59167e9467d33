// bloomery models: deepseek2 (DeepSeek V3 and R1, Kimi K2, DeepSeek V2 and GLM-4.7-Flash; llama.cpp's
// deepseek2.cpp): multi-head latent attention (the MLA op: q through its LoRA q_a / q_a_norm / q_b, or a
// plain q in the lite models; a latent KV cache of kv_lora + rope values a position; k_b absorbed into
// the queries, v_b out of the latent), NORMAL RoPE on the rope part with YaRN and DeepSeek's mscale
// (llama.cpp's yarn_attn_factor for deepseek2 and its kq_scale), leading dense SwiGLU layers, then MoE
// layers: a sigmoid router (expert_gating_func 2) choosing by score plus exp_probs_b within the best
// expert groups, weights normalised and scaled, and shared experts on the same normalised rows. The files
// are the MLA-split conversions (attn_k_b / attn_v_b, llama.cpp of April 2025 on); an older one with
// attn_kv_b is refused by name. The MTP layer after the main ones (nextn_predict_layers) is not part of the
// forward pass: --spec-type draft-mtp runs it as a speculative draft (mtp-layer.ts).
import type { GgufFile } from "../gguf/index.ts";
import { GgufError } from "../gguf/index.ts";
import { embedOp, Gating, mlaOp, normOp, outputOp, ropeParams, RopeType, type OpSpec, type RopeParams } from "./ops.ts";
import { ffnHalf, hfFfnHalf, hfMoeConfig, moeKeys, nextnNotes, synthMoeFfn } from "./sigmoid-moe.ts";
import { mtpHook, type LayerOps } from "./mtp-layer.ts";
import type { Shape, SynthFamily, SynthTensors } from "./synth-types.ts";
import type { HfConfig, HfFamily, HfKvSink, HfTensor, HParams, ModelFamily } from "./types.ts";

const A = "deepseek2";

/** What deepseek2 reads beyond HParams. */
interface MlaKeys {
  qLora: number;
  kvLora: number;
  nope: number;
  nRot: number;
  vDim: number;
}

function mlaKeys(f: GgufFile): MlaKeys {
  const bad = (what: string): never => { throw new GgufError(f.path, `${A}: ${what}`); };
  if (f.tensor("blk.0.attn_kv_b.weight") && !f.tensor("blk.0.attn_k_b.weight")) {
    bad("blk.0.attn_kv_b.weight: this file predates llama.cpp's MLA split (attn_k_b / attn_v_b, April 2025); reconvert it with a current convert_hf_to_gguf.py");
  }
  if (f.f32(`${A}.attention.temperature_scale`, 0) !== 0) bad("attention temperature scaling (attention.temperature_scale, Mistral-Large's) is not supported");
  const kvLora = f.u32(`${A}.attention.kv_lora_rank`);
  const nRot = f.u32(`${A}.rope.dimension_count`);
  const keyLen = f.u32(`${A}.attention.key_length`), valLen = f.u32(`${A}.attention.value_length`);
  const keyMla = f.u32(`${A}.attention.key_length_mla`, keyLen), valMla = f.u32(`${A}.attention.value_length_mla`, valLen);
  // q's form by the tensors, as llama.cpp's lite models (V2-Lite, Kanana-2, GigaChat3) ignore q_lora_rank: its
  // LoRA (attn_q_a / _norm / q_b) where blk.0 has it, else a plain attn_q
  const qa = f.tensor("blk.0.attn_q_a.weight");
  const k: MlaKeys = { qLora: qa ? f.u32(`${A}.attention.q_lora_rank`, qa.ne[1]) : 0, kvLora, nope: keyMla - nRot, nRot, vDim: valMla };
  if (keyLen !== kvLora + nRot || valLen !== kvLora) {
    bad(`attention.key_length ${keyLen} / value_length ${valLen} are not kv_lora_rank + rope (${kvLora + nRot}) / kv_lora_rank (${kvLora}): not an MLA conversion`);
  }
  if (nRot < 2 || nRot % 2 || k.nope < 1 || k.vDim < 1 || kvLora + nRot > 1024) bad(`MLA sizes: rope ${nRot}, nope ${k.nope}, v ${k.vDim}, kv_lora ${kvLora}`);
  return k;
}

function fallbackGating(f: GgufFile, nLayer: number): Gating {
  // llama.cpp: V2 / V2.5 files without expert_gating_func route by softmax; GLM-4.7-Flash's by sigmoid
  const vocab = f.u32(`${A}.vocab_size`, 0);
  return (nLayer === 47 || nLayer === 48) && vocab === 154880 ? Gating.Sigmoid : Gating.Softmax;
}

function keys(f: GgufFile) {
  const blockCount = f.u32(`${A}.block_count`);
  return moeKeys(f, A, fallbackGating(f, blockCount - f.u32(`${A}.nextn_predict_layers`, 0)));
}

function hparams(f: GgufFile): HParams {
  const k = keys(f), m = mlaKeys(f);
  const nEmbd = f.u32(`${A}.embedding_length`);
  const nHead = f.u32(`${A}.attention.head_count`);
  const nHeadKv = f.u32(`${A}.attention.head_count_kv`, 1);
  const bad = (what: string): never => { throw new GgufError(f.path, `${A}: ${what}`); };
  if (nHeadKv !== 1) bad(`attention.head_count_kv ${nHeadKv}: an MLA conversion has one latent KV head`);
  const emb = f.requireTensor("token_embd.weight");
  if (emb.ne[0] !== nEmbd) bad(`token_embd has rows of ${emb.ne[0]}, embedding_length is ${nEmbd}`);
  if (nHead < 1 || nHead > 1024) bad(`head_count ${nHead}`);
  return {
    arch: A,
    nVocab: emb.ne[1],
    nEmbd,
    nLayer: k.nLayer,
    nCtxTrain: f.u32(`${A}.context_length`),
    nHead,
    // the latent KV cache: one head of kv_lora + rope values (K), the values being its latent part
    nHeadKv: 1,
    headDim: m.kvLora + m.nRot,
    kvVDim: 0,
    qDim: nHead * m.vDim,
    nFf: Math.max(k.nDense ? f.u32(`${A}.feed_forward_length`) : 0, k.nFfExp * Math.max(1, k.nShared)),
    nExpert: k.nExpert,
    nExpertUsed: k.nExpertUsed,
    eps: f.f32(`${A}.attention.layer_norm_rms_epsilon`),
    kvLayers: k.nLayer,
  };
}

/**
 * RoPE's attn_factor and the softmax scale as llama.cpp gives them for deepseek2: llama-context.cpp sets
 * yarn_attn_factor from the YaRN factor and `rope.scaling.yarn_log_multiplier` (stored as 0.1 x
 * mscale_all_dim: [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]), cancelling ggml's own 1 + 0.1 ln(factor); deepseek2.cpp
 * undoes that to pre-scale kq_scale by mscale^2 over sqrt(nope + rope).
 */
export function deepseekScales(rope: RopeParams, logMulKey: number | undefined, qkHead: number): { attnFactor: number; scale: number } {
  const fr = Math.fround;
  const logMul = logMulKey !== undefined ? fr(fr(logMulKey) / fr(0.1)) : 0;
  const factor = 1 / rope.freqScale;
  const getMscale = (s: number, m: number) => (s <= 1 ? 1 : 0.1 * m * Math.log(s) + 1);
  let attnFactor = rope.attnFactor;
  if (rope.extFactor !== 0) {
    let y: number;
    if (logMul !== 0) {
      const msad = logMul;
      const msc = msad !== 1 ? msad : 1; // deepseek2's special case (DeepSeek-V2-Lite's config)
      y = getMscale(factor, msc) / getMscale(factor, msad);
    } else {
      y = getMscale(factor, 1);
    }
    y *= 1 / (1 + 0.1 * Math.log(factor));
    attnFactor = y * rope.attnFactor;
  }
  const org = attnFactor * (1 + 0.1 * Math.log(1 / rope.freqScale));
  const mscale = org * (1 + 0.1 * logMul * Math.log(1 / rope.freqScale));
  return { attnFactor, scale: (mscale * mscale) / Math.sqrt(qkHead) };
}

/** Layer i's ops (its latent attention on KV cache layer kvLayer, then its FFN half): the forward pass's and the MTP layer's. */
function layerBuilder(f: GgufFile, hp: HParams): LayerOps {
  const k = keys(f), m = mlaKeys(f);
  const E = hp.nEmbd, H = hp.nHead, dq = H * (m.nope + m.nRot);
  const base = ropeParams(f, A, RopeType.Normal, m.nRot, hp.nCtxTrain);
  const logMulKey = f.has(`${A}.rope.scaling.yarn_log_multiplier`) ? f.f32(`${A}.rope.scaling.yarn_log_multiplier`) : undefined;
  const { attnFactor, scale } = deepseekScales(base, logMulKey, m.nope + m.nRot);
  const rope = { ...base, attnFactor };
  const nFfDense = k.nDense ? f.u32(`${A}.feed_forward_length`) : 0;
  return (i, kvLayer) => {
    const p = `blk.${i}.`;
    const need = (n: string, ne: number[]) => (f.requireTensor(`${p}${n}`, ne), `${p}${n}`);
    const q = m.qLora
      ? { q_a: need("attn_q_a.weight", [E, m.qLora]), q_a_norm: need("attn_q_a_norm.weight", [m.qLora]), q_b: need("attn_q_b.weight", [m.qLora, dq]) }
      : { q: need("attn_q.weight", [E, dq]) };
    return [
      normOp(i, need("attn_norm.weight", [E]), hp.eps),
      mlaOp({
        layer: i, kvLayer, nHead: H, kvLora: m.kvLora, nope: m.nope, vDim: m.vDim, eps: hp.eps, scale, rope,
        tensors: {
          ...q,
          kv_a: need("attn_kv_a_mqa.weight", [E, m.kvLora + m.nRot]), kv_a_norm: need("attn_kv_a_norm.weight", [m.kvLora]),
          k_b: need("attn_k_b.weight", [m.nope, m.kvLora, H]), v_b: need("attn_v_b.weight", [m.kvLora, m.vDim, H]),
          o: need("attn_output.weight", [H * m.vDim, E]),
        },
      }),
      ...ffnHalf(f, k, i, E, nFfDense, hp.eps, "ffn_norm"),
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

const mla = { qLora: 1536, kvLora: 512, nope: 128, rope: 64, v: 128 };
const v3 = {
  arch: A, nLayer: 61, nEmbd: 7168, nHead: 128, nHeadKv: 1, headDim: 576, kvVDim: 0, qDim: 128 * 128, nExpert: 256, nExpertUsed: 8,
  nFfExp: 2048, nFf: 18432, nVocab: 129280, nCtxTrain: 163840, ropeBase: 10000, eps: 1e-6, mla,
  moe: { nDense: 3, nShared: 1, scale: 2.5, nGroup: 8, nGroupUsed: 4, nextn: 0 },
  yarn: { factor: 40, orig: 4096, logMul: 0.1, betaFast: 32, betaSlow: 1 },
};

const synth: SynthFamily = {
  shapes: {
    "deepseek-v3": { ...v3, name: "DeepSeek-V3" },
    "deepseek-r1": { ...v3, name: "DeepSeek-R1" },
    "kimi-k2": {
      ...v3, name: "Kimi-K2", nHead: 64, qDim: 64 * 128, nExpert: 384, nVocab: 163840, nCtxTrain: 131072, ropeBase: 50000,
      moe: { nDense: 1, nShared: 1, scale: 2.827, nGroup: 1, nGroupUsed: 1, nextn: 0 }, yarn: { factor: 32, orig: 4096, logMul: 0.1, betaFast: 1, betaSlow: 1 },
    },
    // a small shape for tests: whole K-quant blocks where llama-quantize would use them (k_b's rows of nope
    // fall back to Q5_0, as in the real files), two expert groups, YaRN with DeepSeek's log multiplier
    "test-deepseek2": {
      arch: A, name: "test-deepseek2", nLayer: 3, nEmbd: 256, nHead: 4, nHeadKv: 1, headDim: 288, kvVDim: 0, qDim: 4 * 64, nExpert: 8, nExpertUsed: 2,
      nFfExp: 256, nFf: 512, nVocab: 1024, nCtxTrain: 4096, ropeBase: 10000, eps: 1e-6,
      mla: { qLora: 256, kvLora: 256, nope: 64, rope: 32, v: 64 },
      moe: { nDense: 1, nShared: 1, scale: 2.5, nGroup: 2, nGroupUsed: 1, nextn: 0 }, yarn: { factor: 4, orig: 1024, logMul: 0.1, betaFast: 32, betaSlow: 1 },
    },
  },
  write(sh: Shape, t: SynthTensors): void {
    const w = t.w, n = t.nLayer, mo = sh.moe!, ml = sh.mla!;
    const nDense = Math.min(mo.nDense, Math.max(0, n - 1)); // a cut (--layers) keeps at least one MoE layer
    w.u32(`${A}.block_count`, n + mo.nextn);
    w.u32(`${A}.context_length`, sh.nCtxTrain);
    w.u32(`${A}.embedding_length`, sh.nEmbd);
    w.u32(`${A}.feed_forward_length`, sh.nFf);
    w.u32(`${A}.attention.head_count`, sh.nHead);
    w.u32(`${A}.attention.head_count_kv`, 1);
    w.f32(`${A}.rope.freq_base`, sh.ropeBase);
    w.f32(`${A}.attention.layer_norm_rms_epsilon`, sh.eps);
    w.u32(`${A}.expert_used_count`, sh.nExpertUsed);
    w.u32(`${A}.expert_group_count`, mo.nGroup);
    w.u32(`${A}.expert_group_used_count`, mo.nGroupUsed);
    w.u32(`${A}.attention.key_length`, ml.kvLora + ml.rope);
    w.u32(`${A}.attention.value_length`, ml.kvLora);
    w.u32(`${A}.leading_dense_block_count`, nDense);
    w.u32(`${A}.vocab_size`, sh.nVocab);
    w.u32(`${A}.attention.q_lora_rank`, ml.qLora);
    w.u32(`${A}.attention.kv_lora_rank`, ml.kvLora);
    w.u32(`${A}.attention.key_length_mla`, ml.nope + ml.rope);
    w.u32(`${A}.attention.value_length_mla`, ml.v);
    w.u32(`${A}.expert_feed_forward_length`, sh.nFfExp);
    w.u32(`${A}.expert_count`, sh.nExpert);
    w.u32(`${A}.expert_shared_count`, mo.nShared);
    w.f32(`${A}.expert_weights_scale`, mo.scale);
    w.bool(`${A}.expert_weights_norm`, true);
    w.u32(`${A}.expert_gating_func`, 2);
    w.u32(`${A}.rope.dimension_count`, ml.rope);
    if (sh.yarn) {
      w.str(`${A}.rope.scaling.type`, "yarn");
      w.f32(`${A}.rope.scaling.factor`, sh.yarn.factor);
      w.u32(`${A}.rope.scaling.original_context_length`, sh.yarn.orig);
      if (sh.yarn.betaFast !== undefined) w.f32(`${A}.rope.scaling.yarn_beta_fast`, sh.yarn.betaFast);
      if (sh.yarn.betaSlow !== undefined) w.f32(`${A}.rope.scaling.yarn_beta_slow`, sh.yarn.betaSlow);
      if (sh.yarn.logMul !== undefined) w.f32(`${A}.rope.scaling.yarn_log_multiplier`, sh.yarn.logMul);
    }
    if (mo.nextn) w.u32(`${A}.nextn_predict_layers`, mo.nextn);
    const E = sh.nEmbd, H = sh.nHead, F = sh.nFfExp, X = sh.nExpert, S = F * mo.nShared, dq = H * (ml.nope + ml.rope);
    t.mat("token_embd.weight", "token_embd", -1, [E, sh.nVocab], 1.0);
    for (let i = 0; i < n + mo.nextn; i++) {
      const p = `blk.${i}.`;
      t.ones(`${p}attn_norm.weight`, [E]);
      t.mat(`${p}attn_q_a.weight`, "attn_q_a", i, [E, ml.qLora]);
      t.ones(`${p}attn_q_a_norm.weight`, [ml.qLora]);
      t.mat(`${p}attn_q_b.weight`, "attn_q_b", i, [ml.qLora, dq]);
      t.mat(`${p}attn_kv_a_mqa.weight`, "attn_kv_a_mqa", i, [E, ml.kvLora + ml.rope]);
      t.ones(`${p}attn_kv_a_norm.weight`, [ml.kvLora]);
      t.mat(`${p}attn_k_b.weight`, "attn_k_b", i, [ml.nope, ml.kvLora, H]);
      t.mat(`${p}attn_v_b.weight`, "attn_v_b", i, [ml.kvLora, ml.v, H]);
      t.mat(`${p}attn_output.weight`, "attn_output", i, [H * ml.v, E], 0.02 / Math.sqrt(n));
      t.ones(`${p}ffn_norm.weight`, [E]);
      synthMoeFfn(t, p, i, { n, nDense, E, nFf: sh.nFf, F, X, S });
    }
    t.ones("output_norm.weight", [E]);
    t.mat("output.weight", "output", -1, [E, sh.nVocab]);
  },
};

/** Hugging Face's DeepSeek V3 (transformers' DeepseekV3ForCausalLM): its config keys and tensor names. */
const hf: HfFamily = {
  architectures: ["DeepseekV3ForCausalLM"],
  modelTypes: ["deepseek_v3"],
  config(c: HfConfig, put: HfKvSink): void {
    put.u32(`${A}.block_count`, c.int("num_hidden_layers"));
    put.u32(`${A}.context_length`, c.int("max_position_embeddings"));
    put.u32(`${A}.embedding_length`, c.int("hidden_size"));
    put.u32(`${A}.feed_forward_length`, c.int("intermediate_size"));
    put.u32(`${A}.attention.head_count`, c.int("num_attention_heads"));
    put.u32(`${A}.attention.head_count_kv`, 1); // MLA: one latent K/V row shared by the heads
    const kvLora = c.int("kv_lora_rank"), rot = c.int("qk_rope_head_dim"), nope = c.int("qk_nope_head_dim"), v = c.int("v_head_dim");
    put.u32(`${A}.attention.key_length`, kvLora + rot);
    put.u32(`${A}.attention.value_length`, kvLora);
    put.u32(`${A}.attention.key_length_mla`, nope + rot);
    put.u32(`${A}.attention.value_length_mla`, v);
    put.u32(`${A}.attention.kv_lora_rank`, kvLora);
    if (c.has("q_lora_rank")) put.u32(`${A}.attention.q_lora_rank`, c.int("q_lora_rank"));
    put.u32(`${A}.rope.dimension_count`, rot);
    put.u32(`${A}.vocab_size`, c.int("vocab_size"));
    put.f32(`${A}.attention.layer_norm_rms_epsilon`, c.num("rms_norm_eps"));
    const rope = c.obj("rope_parameters") ?? c.obj("rope_scaling");
    put.f32(`${A}.rope.freq_base`, rope?.has("rope_theta") ? rope.num("rope_theta") : c.num("rope_theta", 10000));
    const type = rope ? rope.str("rope_type", rope.str("type", "default")) : "default";
    if (type === "yarn") {
      put.str(`${A}.rope.scaling.type`, "yarn");
      put.f32(`${A}.rope.scaling.factor`, rope!.num("factor"));
      put.u32(`${A}.rope.scaling.original_context_length`, rope!.int("original_max_position_embeddings"));
      put.f32(`${A}.rope.scaling.yarn_beta_fast`, rope!.num("beta_fast", 32));
      put.f32(`${A}.rope.scaling.yarn_beta_slow`, rope!.num("beta_slow", 1));
      put.f32(`${A}.rope.scaling.yarn_log_multiplier`, 0.1 * rope!.num("mscale_all_dim", 0));
    } else if (type !== "default") throw new GgufError("config.json", `rope_type '${type}' of a DeepSeek V3 folder is not supported yet`);
    hfMoeConfig(A, c, put);
  },
  tensors(c: HfConfig): HfTensor[] {
    const H = c.int("num_attention_heads"), kvLora = c.int("kv_lora_rank"), nope = c.int("qk_nope_head_dim"), v = c.int("v_head_dim");
    const out: HfTensor[] = [{ name: "token_embd.weight", hf: "model.embed_tokens.weight" }];
    for (let i = 0; i < c.int("num_hidden_layers"); i++) {
      const p = `blk.${i}.`, h = `model.layers.${i}.self_attn.`;
      const t = (name: string, hfName: string, o: Partial<HfTensor> = {}) => out.push({ name: p + name, hf: h + hfName, ...o });
      out.push({ name: `${p}attn_norm.weight`, hf: `model.layers.${i}.input_layernorm.weight`, f32: true });
      if (c.has("q_lora_rank")) {
        t("attn_q_a.weight", "q_a_proj.weight");
        t("attn_q_a_norm.weight", "q_a_layernorm.weight", { f32: true });
        t("attn_q_b.weight", "q_b_proj.weight");
      } else t("attn_q.weight", "q_proj.weight");
      t("attn_kv_a_mqa.weight", "kv_a_proj_with_mqa.weight");
      t("attn_kv_a_norm.weight", "kv_a_layernorm.weight", { f32: true });
      // kv_b_proj holds each head's K (nope) rows then its V rows: split per head (a copy), K transposed;
      // mlx-lm's folders hold the split already (models/deepseek_v3.py sanitize: embed_q [heads, kv_lora,
      // nope], unembed_out [heads, v, kv_lora], MultiLinear's [heads, out, in]): the engine's rows as stored
      t("attn_k_b.weight", "kv_b_proj.weight", { view: [H, nope + v, kvLora], rows: [0, nope], transpose: true, alt: { hf: `${h}embed_q.weight` } });
      t("attn_v_b.weight", "kv_b_proj.weight", { view: [H, nope + v, kvLora], rows: [nope, v], alt: { hf: `${h}unembed_out.weight` } });
      t("attn_output.weight", "o_proj.weight");
      out.push(...hfFfnHalf(c, i, "ffn_norm"));
    }
    out.push({ name: "output_norm.weight", hf: "model.norm.weight", f32: true });
    if (!c.bool("tie_word_embeddings", false)) out.push({ name: "output.weight", hf: "lm_head.weight" });
    return out;
  },
};

export const deepseek2: ModelFamily = {
  archs: [A], hparams, program, synth, hf,
  mtp: mtpHook(A, hparams, (f) => layerBuilder(f, hparams(f))),
  notes: (f) => nextnNotes(f, A, keys(f)),
};
