// bloomery models: gpt-oss (gpt-oss-20b, gpt-oss-120b; GGUF `gpt-oss`): GQA attention with QKV and
// output biases, a learned sink logit per head, sliding-window (128) layers alternating with full
// ones (even layers windowed), NEOX RoPE with YaRN; routed experts chosen by their router logits
// (with a bias) and weighted by a softmax over the chosen, gpt-oss's clamped SwiGLU with biases.
import type { GgufFile } from "../gguf/index.ts";
import { GgufError } from "../gguf/index.ts";
import { Act, attentionOp, embedOp, expertsOp, Gating, normOp, outputOp, routerOp, ropeParams, RopeType, type OpSpec } from "./ops.ts";
import { gqaMoeHParams } from "./moe-hparams.ts";
import type { Shape, SynthFamily, SynthTensors } from "./synth-types.ts";
import type { HfConfig, HfFamily, HfKvSink, HfTensor, HParams, ModelFamily } from "./types.ts";

const A = "gpt-oss";
/** gpt-oss's SwiGLU constants (llama.cpp's and the reference implementation's; the file does not carry them) */
const SWIGLU_ALPHA = 1.702, SWIGLU_LIMIT = 7.0;

function hparams(f: GgufFile): HParams {
  return gqaMoeHParams(f, A);
}

/** Which layers attend through the sliding window: `attention.sliding_window_pattern` (an array of
 * flags, or n: every layer but each n-th), else llama's gpt-oss default of 2 (the even layers). */
function windowed(f: GgufFile, nLayer: number): boolean[] {
  const key = `${A}.attention.sliding_window_pattern`;
  const raw = f.has(key) ? f.raw(key) : undefined;
  if (Array.isArray(raw) || ArrayBuffer.isView(raw)) {
    const a = Array.from(raw as ArrayLike<number | boolean>, (v) => !!v);
    if (a.length < nLayer) throw new GgufError(f.path, `gpt-oss: ${key} has ${a.length} entries for ${nLayer} layers`);
    return a.slice(0, nLayer);
  }
  const n = raw === undefined ? 2 : Number(raw);
  return Array.from({ length: nLayer }, (_, il) => n === 0 || il % n < n - 1);
}

function program(f: GgufFile, hp: HParams): OpSpec[] {
  const E = hp.nEmbd, qd = hp.nHead * hp.headDim, kd = hp.nHeadKv * hp.headDim, F = hp.nFf, X = hp.nExpert;
  const rope = ropeParams(f, A, RopeType.Neox, hp.headDim, hp.nCtxTrain);
  const swaBase = f.f32(`${A}.rope.freq_base_swa`, rope.base);
  const window = f.u32(`${A}.attention.sliding_window`);
  if (window < 1) throw new GgufError(f.path, `gpt-oss: attention.sliding_window ${window}`);
  const swa = windowed(f, hp.nLayer);
  const wScale = f.f32(`${A}.expert_weights_scale`, 0);
  const ops: OpSpec[] = [embedOp("token_embd.weight")];
  for (let i = 0; i < hp.nLayer; i++) {
    const p = `blk.${i}.`;
    const need = (n: string, ne: number[]) => (f.requireTensor(`${p}${n}`, ne), `${p}${n}`);
    ops.push(normOp(i, need("attn_norm.weight", [E]), hp.eps));
    ops.push(attentionOp({
      layer: i, nHead: hp.nHead, nHeadKv: hp.nHeadKv, headDim: hp.headDim, eps: hp.eps,
      rope: swa[i] ? { ...rope, base: swaBase } : rope, window: swa[i] ? window : 0,
      tensors: {
        q: need("attn_q.weight", [E, qd]), k: need("attn_k.weight", [E, kd]), v: need("attn_v.weight", [E, kd]),
        o: need("attn_output.weight", [qd, E]),
        bq: need("attn_q.bias", [qd]), bk: need("attn_k.bias", [kd]), bv: need("attn_v.bias", [kd]), bo: need("attn_output.bias", [E]),
        sinks: need("attn_sinks.weight", [hp.nHead]),
      },
    }));
    ops.push(normOp(i, need("post_attention_norm.weight", [E]), hp.eps));
    ops.push(routerOp({
      layer: i, nExpert: X, nUsed: hp.nExpertUsed, gating: Gating.SoftmaxWeight, normTopk: false, scale: wScale,
      tensors: { w: need("ffn_gate_inp.weight", [E, X]), b: need("ffn_gate_inp.bias", [X]) },
    }));
    ops.push(expertsOp({
      layer: i, nExpert: X, nUsed: hp.nExpertUsed, act: Act.SwigluOai, alpha: SWIGLU_ALPHA, limit: SWIGLU_LIMIT,
      tensors: {
        gate: need("ffn_gate_exps.weight", [E, F, X]), up: need("ffn_up_exps.weight", [E, F, X]), down: need("ffn_down_exps.weight", [F, E, X]),
        bgate: need("ffn_gate_exps.bias", [F, X]), bup: need("ffn_up_exps.bias", [F, X]), bdown: need("ffn_down_exps.bias", [E, X]),
      },
    }));
  }
  f.requireTensor("output_norm.weight", [E]);
  if (f.tensor("output.weight")) f.requireTensor("output.weight", [E, hp.nVocab]);
  ops.push(outputOp(f, hp.eps));
  return ops;
}

const base = { arch: A, ropeBase: 150000, eps: 1e-5, nVocab: 201088, nCtxTrain: 131072, nEmbd: 2880, nHead: 64, nHeadKv: 8, headDim: 64, nExpertUsed: 4, nFfExp: 2880, nFf: 2880 };
/** the real files' sliding window and YaRN (factor 32 over 4,096 positions) */
const WINDOW = 128, YARN_FACTOR = 32, YARN_ORIG = 4096;

const synth: SynthFamily = {
  shapes: {
    "gpt-oss-20b": { ...base, name: "gpt-oss-20b", nLayer: 24, nExpert: 32 },
    "gpt-oss-120b": { ...base, name: "gpt-oss-120b", nLayer: 36, nExpert: 128 },
    // a small shape for tests: whole MXFP4 / Q8_0 blocks, a real byte-level vocabulary; rows of 320
    // (2.5 slices of 128, as 2,880 is 22.5: the tensor-core products' last slice is half a slice)
    "test-gpt-oss": { ...base, name: "test-gpt-oss", nLayer: 2, nEmbd: 320, nHead: 4, nHeadKv: 2, headDim: 64, nExpert: 8, nExpertUsed: 2, nFfExp: 320, nFf: 320, nVocab: 1024, nCtxTrain: 4096 },
  },
  write(sh: Shape, t: SynthTensors): void {
    const w = t.w, n = t.nLayer;
    w.u32(`${A}.block_count`, n);
    w.u32(`${A}.context_length`, sh.nCtxTrain);
    w.u32(`${A}.embedding_length`, sh.nEmbd);
    w.u32(`${A}.feed_forward_length`, sh.nFf);
    w.u32(`${A}.attention.head_count`, sh.nHead);
    w.u32(`${A}.attention.head_count_kv`, sh.nHeadKv);
    w.u32(`${A}.attention.key_length`, sh.headDim);
    w.u32(`${A}.attention.value_length`, sh.headDim);
    w.u32(`${A}.attention.sliding_window`, WINDOW);
    w.f32(`${A}.rope.freq_base`, sh.ropeBase);
    w.str(`${A}.rope.scaling.type`, "yarn");
    w.f32(`${A}.rope.scaling.factor`, YARN_FACTOR);
    w.u32(`${A}.rope.scaling.original_context_length`, YARN_ORIG);
    w.f32(`${A}.attention.layer_norm_rms_epsilon`, sh.eps);
    w.u32(`${A}.expert_count`, sh.nExpert);
    w.u32(`${A}.expert_used_count`, sh.nExpertUsed);
    w.u32(`${A}.expert_feed_forward_length`, sh.nFfExp);
    const E = sh.nEmbd, qd = sh.nHead * sh.headDim, kd = sh.nHeadKv * sh.headDim, F = sh.nFfExp, X = sh.nExpert;
    t.mat("token_embd.weight", "token_embd", -1, [E, sh.nVocab], 1.0);
    for (let i = 0; i < n; i++) {
      const p = `blk.${i}.`;
      t.ones(`${p}attn_norm.weight`, [E]);
      t.mat(`${p}attn_q.weight`, "attn_q", i, [E, qd]);
      t.mat(`${p}attn_k.weight`, "attn_k", i, [E, kd]);
      t.mat(`${p}attn_v.weight`, "attn_v", i, [E, kd]);
      t.mat(`${p}attn_output.weight`, "attn_output", i, [qd, E], 0.02 / Math.sqrt(n));
      t.small(`${p}attn_q.bias`, [qd], 0.02);
      t.small(`${p}attn_k.bias`, [kd], 0.02);
      t.small(`${p}attn_v.bias`, [kd], 0.02);
      t.small(`${p}attn_output.bias`, [E], 0.02);
      t.small(`${p}attn_sinks.weight`, [sh.nHead], 0.5);
      t.ones(`${p}post_attention_norm.weight`, [E]);
      t.router(`${p}ffn_gate_inp.weight`, i, E, X);
      t.small(`${p}ffn_gate_inp.bias`, [X], 0.02);
      t.mat(`${p}ffn_gate_exps.weight`, "ffn_gate_exps", i, [E, F, X]);
      t.mat(`${p}ffn_up_exps.weight`, "ffn_up_exps", i, [E, F, X]);
      t.mat(`${p}ffn_down_exps.weight`, "ffn_down_exps", i, [F, E, X], 0.02 / Math.sqrt(n));
      t.small(`${p}ffn_gate_exps.bias`, [F, X], 0.02);
      t.small(`${p}ffn_up_exps.bias`, [F, X], 0.02);
      t.small(`${p}ffn_down_exps.bias`, [E, X], 0.02);
    }
    t.ones("output_norm.weight", [E]);
    t.mat("output.weight", "output", -1, [E, sh.nVocab]);
  },
};

/** Hugging Face's gpt-oss (transformers' GptOssForCausalLM): its config keys and tensor names. */
const hf: HfFamily = {
  architectures: ["GptOssForCausalLM"],
  modelTypes: ["gpt_oss"],
  config(c: HfConfig, put: HfKvSink): void {
    const n = c.int("num_hidden_layers");
    put.u32(`${A}.block_count`, n);
    put.u32(`${A}.context_length`, c.int("max_position_embeddings"));
    put.u32(`${A}.embedding_length`, c.int("hidden_size"));
    put.u32(`${A}.feed_forward_length`, c.int("intermediate_size"));
    put.u32(`${A}.expert_feed_forward_length`, c.int("intermediate_size"));
    put.u32(`${A}.attention.head_count`, c.int("num_attention_heads"));
    put.u32(`${A}.attention.head_count_kv`, c.int("num_key_value_heads"));
    const hd = c.int("head_dim", c.int("hidden_size") / c.int("num_attention_heads"));
    put.u32(`${A}.attention.key_length`, hd);
    put.u32(`${A}.attention.value_length`, hd);
    put.f32(`${A}.attention.layer_norm_rms_epsilon`, c.num("rms_norm_eps"));
    put.u32(`${A}.expert_count`, c.int("num_local_experts"));
    put.u32(`${A}.expert_used_count`, c.int("num_experts_per_tok"));
    put.u32(`${A}.attention.sliding_window`, c.int("sliding_window"));
    const types = c.strs("layer_types");
    if (types) put.bools(`${A}.attention.sliding_window_pattern`, types.map((t) => t === "sliding_attention"));
    const rope = c.obj("rope_parameters") ?? c.obj("rope_scaling");
    put.f32(`${A}.rope.freq_base`, rope?.has("rope_theta") ? rope.num("rope_theta") : c.num("rope_theta"));
    if (rope && rope.str("rope_type", rope.str("type", "default")) === "yarn") {
      put.str(`${A}.rope.scaling.type`, "yarn");
      put.f32(`${A}.rope.scaling.factor`, rope.num("factor"));
      put.u32(`${A}.rope.scaling.original_context_length`, rope.int("original_max_position_embeddings"));
      put.f32(`${A}.rope.scaling.yarn_beta_fast`, rope.num("beta_fast", 32));
      put.f32(`${A}.rope.scaling.yarn_beta_slow`, rope.num("beta_slow", 1));
    }
  },
  tensors(c: HfConfig): HfTensor[] {
    const out: HfTensor[] = [{ name: "token_embd.weight", hf: "model.embed_tokens.weight" }];
    for (let i = 0; i < c.int("num_hidden_layers"); i++) {
      const p = `blk.${i}.`, h = `model.layers.${i}.`;
      const t = (name: string, hfName: string, o: Partial<HfTensor> = {}) => out.push({ name: p + name, hf: h + hfName, ...o });
      t("attn_norm.weight", "input_layernorm.weight", { f32: true });
      for (const [g, x] of [["q", "q"], ["k", "k"], ["v", "v"], ["output", "o"]]) {
        t(`attn_${g}.weight`, `self_attn.${x}_proj.weight`);
        t(`attn_${g}.bias`, `self_attn.${x}_proj.bias`, { f32: true });
      }
      t("attn_sinks.weight", "self_attn.sinks", { f32: true });
      t("post_attention_norm.weight", "post_attention_layernorm.weight", { f32: true });
      t("ffn_gate_inp.weight", "mlp.router.weight", { f32: true });
      t("ffn_gate_inp.bias", "mlp.router.bias", { f32: true });
      // the experts are stored input-major ([experts, in, out], x @ W), gate and up interleaved in one
      // gate_up_proj: the engine's rows are output-major, so they are transposed (a copy at load); the MXFP4
      // form (gate_up_proj_blocks / _scales, as openai ships it) is stored output-major: its rows as they are.
      // mlx-lm's folders (models/gpt_oss.py sanitize) hold gate and up apart, output-major as SwitchLinear's
      // [experts, out, in] (mlp.experts.{gate,up,down}_proj.weight, quantized or not) with their biases beside
      const x = (g: string, o: Partial<HfTensor> = {}) => ({ alt: { hf: `${h}mlp.experts.${g}`, ...o } });
      t("ffn_gate_exps.weight", "mlp.experts.gate_up_proj", { transpose: true, quantTranspose: false, parity: 0, ...x("gate_proj.weight") });
      t("ffn_up_exps.weight", "mlp.experts.gate_up_proj", { transpose: true, quantTranspose: false, parity: 1, ...x("up_proj.weight") });
      t("ffn_down_exps.weight", "mlp.experts.down_proj", { transpose: true, quantTranspose: false, ...x("down_proj.weight") });
      t("ffn_gate_exps.bias", "mlp.experts.gate_up_proj_bias", { parity: 0, f32: true, ...x("gate_proj.bias", { f32: true }) });
      t("ffn_up_exps.bias", "mlp.experts.gate_up_proj_bias", { parity: 1, f32: true, ...x("up_proj.bias", { f32: true }) });
      t("ffn_down_exps.bias", "mlp.experts.down_proj_bias", { f32: true, ...x("down_proj.bias", { f32: true }) });
    }
    out.push({ name: "output_norm.weight", hf: "model.norm.weight", f32: true });
    if (!c.bool("tie_word_embeddings", false)) out.push({ name: "output.weight", hf: "lm_head.weight" });
    return out;
  },
};

export const gptOss: ModelFamily = { archs: [A], hparams, program, synth, hf };
