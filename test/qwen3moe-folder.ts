// Test helper: the tiny qwen3moe GGUF written out as transformers lays out a Qwen3MoeForCausalLM checkpoint
// (per-expert tensors, F16 matrices and F32 norms as the GGUF has them, config.json, tokenizer.json with the
// Qwen2 split regex, tokenizer_config.json): the qwen3moe folder the safetensors tests start from.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { GgufFile } from "../src/gguf/index.ts";
import { writeTokenizerFiles } from "../scripts/gguf-folder.ts";

/** The GGUF written as a transformers Qwen3-MoE folder (F16 matrices, F32 norms, as the GGUF has them). */
export function exportFolder(g: GgufFile, out: string): void {
  mkdirSync(out, { recursive: true });
  const n = g.u32("qwen3moe.block_count"), X = g.u32("qwen3moe.expert_count");
  const parts: { name: string; dtype: string; shape: number[]; data: Uint8Array }[] = [];
  const bytes = (name: string) => {
    const t = g.tensor(name)!;
    return { t, b: new Uint8Array(readFileSync(t.file).subarray(t.fileOffset, t.fileOffset + t.nbytes)) };
  };
  const put = (gg: string, hf: string) => {
    const { t, b } = bytes(gg);
    parts.push({ name: hf, dtype: t.type === 0 ? "F32" : "F16", shape: [...t.ne].reverse(), data: b });
  };
  put("token_embd.weight", "model.embed_tokens.weight");
  for (let i = 0; i < n; i++) {
    const p = `blk.${i}.`, h = `model.layers.${i}.`;
    put(`${p}attn_norm.weight`, `${h}input_layernorm.weight`);
    for (const [gx, x] of [["q", "q"], ["k", "k"], ["v", "v"], ["output", "o"]]) put(`${p}attn_${gx}.weight`, `${h}self_attn.${x}_proj.weight`);
    put(`${p}attn_q_norm.weight`, `${h}self_attn.q_norm.weight`);
    put(`${p}attn_k_norm.weight`, `${h}self_attn.k_norm.weight`);
    put(`${p}ffn_norm.weight`, `${h}post_attention_layernorm.weight`);
    put(`${p}ffn_gate_inp.weight`, `${h}mlp.gate.weight`);
    for (const gx of ["gate", "up", "down"]) {
      const { t, b } = bytes(`${p}ffn_${gx}_exps.weight`);
      const each = b.length / X;
      for (let e = 0; e < X; e++) parts.push({ name: `${h}mlp.experts.${e}.${gx}_proj.weight`, dtype: "F16", shape: [t.ne[1], t.ne[0]], data: b.subarray(e * each, (e + 1) * each) });
    }
  }
  put("output_norm.weight", "model.norm.weight");
  const tied = !g.tensor("output.weight");
  if (!tied) put("output.weight", "lm_head.weight");
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let off = 0;
  for (const q of parts) {
    header[q.name] = { dtype: q.dtype, shape: q.shape, data_offsets: [off, off + q.data.length] };
    off += q.data.length;
  }
  const hb = new TextEncoder().encode(JSON.stringify(header));
  const file = new Uint8Array(8 + hb.length + off);
  new DataView(file.buffer).setBigUint64(0, BigInt(hb.length), true);
  file.set(hb, 8);
  let at = 8 + hb.length;
  for (const q of parts) {
    file.set(q.data, at);
    at += q.data.length;
  }
  writeFileSync(join(out, "model.safetensors"), file);
  const k = (s: string) => g.u32(`qwen3moe.${s}`);
  writeFileSync(join(out, "config.json"), JSON.stringify({
    architectures: ["Qwen3MoeForCausalLM"], model_type: "qwen3_moe", num_hidden_layers: n, max_position_embeddings: k("context_length"),
    hidden_size: k("embedding_length"), intermediate_size: k("feed_forward_length"), moe_intermediate_size: k("expert_feed_forward_length"),
    num_attention_heads: k("attention.head_count"), num_key_value_heads: k("attention.head_count_kv"), head_dim: k("attention.key_length"),
    rms_norm_eps: 1e-6, num_experts: X, num_experts_per_tok: k("expert_used_count"), norm_topk_prob: true,
    rope_parameters: { rope_theta: g.f32("qwen3moe.rope.freq_base"), rope_type: "default" }, tie_word_embeddings: tied, vocab_size: g.tensor("token_embd.weight")!.ne[1],
  }));
  writeTokenizerFiles(g, out);
}

