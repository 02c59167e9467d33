// bloomery models: the Qwen hybrids' Hugging Face checkpoint folders (transformers' Qwen3NextForCausalLM and
// Qwen3_5MoeForCausalLM): their config keys as the GGUF keys qwen-hybrid.ts reads, and their tensors as llama.cpp's
// converter lays them out, with the values the model has: the (1 + weight) norms and ssm_a = -exp(A_log) computed
// in f32 (the converter computes them in the checkpoint's dtype, rounding them to f16). Qwen3.5's v heads are
// reordered from grouped by k head to tiled (the converter's _reorder_v_heads); Qwen3-Next's fused in_proj_qkvz
// and in_proj_ba map as stored (ssm_in, ssm_ba).
// hybridFamily assembles a family file's ModelFamily from its form, synth shapes and these names.
import { GgufError } from "../gguf/index.ts";
import { hybridHparams, hybridNotes, hybridProgram, writeHybrid, type HybridForm } from "./qwen-hybrid.ts";
import { hybridMtpHparams, hybridMtpProgram, mtpLayers } from "./qwen-hybrid-mtp.ts";
import type { Shape, SynthTensors } from "./synth-types.ts";
import type { HfConfig, HfFamily, HfKvSink, HfTensor, ModelFamily } from "./types.ts";

/** A v head's position in the tiled order from its grouped index (k head g, j-th of its r): j * nk + g. */
function tiledOrder(nk: number, r: number, width: number, base = 0): number[] {
  const out: number[] = [];
  for (let h = 0; h < nk * r; h++) {
    const g = h % nk, j = Math.floor(h / nk);
    for (let i = 0; i < width; i++) out.push(base + (g * r + j) * width + i);
  }
  return out;
}

export function hybridHf(form: HybridForm, architectures: string[], modelTypes: string[]): HfFamily {
  const A = form.arch;
  return {
    architectures,
    modelTypes,
    // mlx-lm's sanitize of these models (mlx_lm/models/qwen3_next.py) stores the (1 + w) norms as 1 + w,
    // moves conv1d's axes and stacks the experts: a mapping of its own, not written yet (read as this
    // family's would be, its norms would be off by one): refused by name
    mlxRefusal: `a ${modelTypes[0]} folder written by mlx-lm (its norm weights stored as 1 + w, conv1d moved, the experts as switch_mlp) is not implemented yet; serve the Hugging Face folder or a GGUF`,
    config(c: HfConfig, put: HfKvSink): void {
      const n = c.int("num_hidden_layers");
      put.u32(`${A}.block_count`, n);
      put.u32(`${A}.context_length`, c.int("max_position_embeddings"));
      put.u32(`${A}.embedding_length`, c.int("hidden_size"));
      if (c.has("intermediate_size")) put.u32(`${A}.feed_forward_length`, c.int("intermediate_size"));
      put.u32(`${A}.attention.head_count`, c.int("num_attention_heads"));
      put.u32(`${A}.attention.head_count_kv`, c.int("num_key_value_heads"));
      const hd = c.int("head_dim", c.int("hidden_size") / c.int("num_attention_heads"));
      put.u32(`${A}.attention.key_length`, hd);
      put.u32(`${A}.attention.value_length`, hd);
      put.f32(`${A}.attention.layer_norm_rms_epsilon`, c.num("rms_norm_eps"));
      const rope = c.obj("rope_parameters");
      put.f32(`${A}.rope.freq_base`, rope?.has("rope_theta") ? rope.num("rope_theta") : c.num("rope_theta", 10000));
      if (rope && rope.str("rope_type", "default") !== "default") throw new GgufError("config.json", `rope_type '${rope.str("rope_type")}' of a ${A} folder is not supported yet`);
      const partial = rope?.has("partial_rotary_factor") ? rope.num("partial_rotary_factor") : c.num("partial_rotary_factor", 0.25);
      put.u32(`${A}.rope.dimension_count`, Math.round(hd * partial));
      put.u32(`${A}.expert_count`, c.int("num_experts"));
      put.u32(`${A}.expert_used_count`, c.int("num_experts_per_tok"));
      put.u32(`${A}.expert_feed_forward_length`, c.int("moe_intermediate_size"));
      put.u32(`${A}.expert_shared_feed_forward_length`, c.int("shared_expert_intermediate_size"));
      if (!c.bool("norm_topk_prob", true)) throw new GgufError("config.json", `${A}: norm_topk_prob false is not supported (the routed weights are renormalised)`);
      put.u32(`${A}.ssm.conv_kernel`, c.int("linear_conv_kernel_dim"));
      put.u32(`${A}.ssm.state_size`, c.int("linear_key_head_dim"));
      put.u32(`${A}.ssm.group_count`, c.int("linear_num_key_heads"));
      put.u32(`${A}.ssm.time_step_rank`, c.int("linear_num_value_heads"));
      put.u32(`${A}.ssm.inner_size`, c.int("linear_value_head_dim") * c.int("linear_num_value_heads"));
      const types = c.strs("layer_types");
      const interval = c.int("full_attention_interval", 4);
      put.bools(`${A}.attention.recurrent_layers`, types ? types.map((t) => t === "linear_attention") : Array.from({ length: n }, (_, i) => (i + 1) % interval !== 0));
      put.u32(`${A}.full_attention_interval`, interval);
    },
    tensors(c: HfConfig): HfTensor[] {
      const n = c.int("num_hidden_layers"), X = c.int("num_experts");
      const nk = c.int("linear_num_key_heads"), nv = c.int("linear_num_value_heads"), hk = c.int("linear_key_head_dim");
      const hv = c.int("linear_value_head_dim"), r = nv / nk, qk = nk * hk;
      const types = c.strs("layer_types");
      const interval = c.int("full_attention_interval", 4);
      const tiled = !form.fusedBa && r > 1; // Qwen3.5: the converter's v-head reordering
      const vRows = (base: number, width: number) => (tiled ? { gather: [...Array(base).keys(), ...tiledOrder(nk, r, width, base)] } : {});
      const vLast = (width: number) => (tiled ? { gatherLast: tiledOrder(nk, r, width) } : {});
      const out: HfTensor[] = [{ name: "token_embd.weight", hf: "model.embed_tokens.weight" }];
      const norm = (name: string, hf: string): HfTensor => ({ name, hf, f32: true, add: 1 });
      for (let i = 0; i < n; i++) {
        const p = `blk.${i}.`, h = `model.layers.${i}.`, la = `${h}linear_attn.`;
        out.push(norm(`${p}attn_norm.weight`, `${h}input_layernorm.weight`), norm(`${p}post_attention_norm.weight`, `${h}post_attention_layernorm.weight`));
        const recurrent = types ? types[i] === "linear_attention" : (i + 1) % interval !== 0;
        if (recurrent) {
          if (form.fusedBa) {
            out.push({ name: `${p}ssm_in.weight`, hf: `${la}in_proj_qkvz.weight` }, { name: `${p}ssm_ba.weight`, hf: `${la}in_proj_ba.weight` });
          } else {
            out.push({ name: `${p}attn_qkv.weight`, hf: `${la}in_proj_qkv.weight`, ...vRows(2 * qk, hv) });
            out.push({ name: `${p}attn_gate.weight`, hf: `${la}in_proj_z.weight`, ...vRows(0, hv) });
            out.push({ name: `${p}ssm_beta.weight`, hf: `${la}in_proj_b.weight`, ...vRows(0, 1) });
            out.push({ name: `${p}ssm_alpha.weight`, hf: `${la}in_proj_a.weight`, ...vRows(0, 1) });
          }
          const C = 2 * qk + nv * hv;
          out.push({ name: `${p}ssm_conv1d.weight`, hf: `${la}conv1d.weight`, view: [C, c.int("linear_conv_kernel_dim")], f32: true, ...vRows(2 * qk, hv) });
          out.push({ name: `${p}ssm_dt.bias`, hf: `${la}dt_bias`, f32: true, ...vLast(1) });
          out.push({ name: `${p}ssm_a`, hf: `${la}A_log`, f32: true, negExp: true, ...vLast(1) });
          out.push({ name: `${p}ssm_norm.weight`, hf: `${la}norm.weight`, f32: true });
          out.push({ name: `${p}ssm_out.weight`, hf: `${la}out_proj.weight`, ...vLast(hv) });
        } else {
          for (const [g, x] of [["q", "q"], ["k", "k"], ["v", "v"], ["output", "o"]]) out.push({ name: `${p}attn_${g}.weight`, hf: `${h}self_attn.${x}_proj.weight` });
          out.push(norm(`${p}attn_q_norm.weight`, `${h}self_attn.q_norm.weight`), norm(`${p}attn_k_norm.weight`, `${h}self_attn.k_norm.weight`));
        }
        out.push({ name: `${p}ffn_gate_inp.weight`, hf: `${h}mlp.gate.weight`, f32: true });
        for (const g of ["gate", "up", "down"]) {
          out.push({ name: `${p}ffn_${g}_exps.weight`, hf: Array.from({ length: X }, (_, e) => `${h}mlp.experts.${e}.${g}_proj.weight`) });
          out.push({ name: `${p}ffn_${g}_shexp.weight`, hf: `${h}mlp.shared_expert.${g}_proj.weight` });
        }
        out.push({ name: `${p}ffn_gate_inp_shexp.weight`, hf: `${h}mlp.shared_expert_gate.weight`, f32: true });
      }
      out.push(norm("output_norm.weight", "model.norm.weight"));
      if (!c.bool("tie_word_embeddings", false)) out.push({ name: "output.weight", hf: "lm_head.weight" });
      return out;
    },
  };
}

/** A Qwen hybrid family (qwen35moe, qwen3next): its form, synth shapes and Hugging Face names. */
export function hybridFamily(form: HybridForm, shapes: Record<string, Shape>, hfArchs: string[], hfTypes: string[]): ModelFamily {
  return {
    archs: [form.arch],
    hparams: (f) => hybridHparams(f, form),
    program: (f, hp) => hybridProgram(f, hp, form),
    notes: (f) => hybridNotes(f, form),
    mtp: { has: (f) => mtpLayers(f, form) > 0, hparams: (f) => hybridMtpHparams(f, form), program: (f, hp) => hybridMtpProgram(f, hp, form) },
    synth: { shapes, write: (sh: Shape, t: SynthTensors) => writeHybrid(form, sh, t) },
    hf: hybridHf(form, hfArchs, hfTypes),
  };
}
