// Test helper: a plain reference of a Qwen3.5 MoE file's MTP layer (llama.cpp's qwen35moe.cpp graph_mtp read
// as math, not bloomery's kernels): at each position the token's embedding (nextn.embed_tokens, else
// token_embd) and the given hidden state, each RMS-normalised (enorm, hnorm), concatenated embedding first,
// times eh_proj; a gated full-attention block (per-head Q/K norms, partial NEOX RoPE, q's rows a head's query
// then its gate, causal over the positions given so far, K and V rounded to f16 as the cache keeps them); the
// softmax top-k routed experts with renormalised weights and the shared expert under sigmoid(gate_inp . h);
// shared_head_norm (else output_norm) and the head (shared_head_head, else output). Float64; no batching.
import { GgufF64, matvec, rmsnorm, sigmoid, silu } from "./deepseek2-ref.ts";

const f16 = (v: number) => new Float16Array([v])[0];

export interface MtpStep {
  logits: Float64Array;
  /** the normalised state before the head (the next draft step's hidden input) */
  hidden: Float64Array;
}

export class Qwen35MtpRef extends GgufF64 {
  readonly E: number;
  private readonly il: number;
  private readonly keys: Float64Array[] = [];
  private readonly vals: Float64Array[] = [];

  constructor(path: string) {
    super(path);
    this.E = this.f.u32("qwen35moe.embedding_length");
    this.il = this.f.u32("qwen35moe.block_count") - 1;
  }

  /** The layer at position keys.length (the next one) for token tok and hidden state h. */
  step(tok: number, h: ArrayLike<number>): MtpStep {
    const f = this.f, A = "qwen35moe", E = this.E, p = `blk.${this.il}.`;
    const eps = f.f32(`${A}.attention.layer_norm_rms_epsilon`);
    const nH = f.u32(`${A}.attention.head_count`), nKv = f.u32(`${A}.attention.head_count_kv`), hd = f.u32(`${A}.attention.key_length`);
    const nRot = f.u32(`${A}.rope.dimension_count`), base = f.f32(`${A}.rope.freq_base`);
    const X = f.u32(`${A}.expert_count`), K = f.u32(`${A}.expert_used_count`), F = f.u32(`${A}.expert_feed_forward_length`);
    const S = f.u32(`${A}.expert_shared_feed_forward_length`);
    const V = f.tensors.get("token_embd.weight")!.ne[1];
    const pos = this.keys.length;
    const emb = this.t(this.has(`${p}nextn.embed_tokens.weight`) ? `${p}nextn.embed_tokens.weight` : "token_embd.weight").subarray(tok * E, (tok + 1) * E);
    const cat = new Float64Array(2 * E);
    cat.set(rmsnorm(emb, this.t(`${p}nextn.enorm.weight`), eps), 0);
    cat.set(rmsnorm(h, this.t(`${p}nextn.hnorm.weight`), eps), E);
    const x = matvec(this.t(`${p}nextn.eh_proj.weight`), cat, E, 2 * E);
    // attention
    const a = rmsnorm(x, this.t(`${p}attn_norm.weight`), eps);
    const qf = matvec(this.t(`${p}attn_q.weight`), a, 2 * nH * hd, E);
    const kr = matvec(this.t(`${p}attn_k.weight`), a, nKv * hd, E), vr = matvec(this.t(`${p}attn_v.weight`), a, nKv * hd, E);
    const rope = (v: Float64Array) => {
      const half = nRot / 2, out = v.slice();
      for (let i = 0; i < half; i++) {
        const th = pos * Math.pow(base, (-2 * i) / nRot), c = Math.cos(th), s = Math.sin(th);
        out[i] = v[i] * c - v[i + half] * s;
        out[i + half] = v[i] * s + v[i + half] * c;
      }
      return out;
    };
    const kRow = new Float64Array(nKv * hd), vRow = new Float64Array(nKv * hd);
    for (let g = 0; g < nKv; g++) {
      const k = rope(rmsnorm(kr.subarray(g * hd, (g + 1) * hd), this.t(`${p}attn_k_norm.weight`), eps));
      for (let i = 0; i < hd; i++) { kRow[g * hd + i] = f16(k[i]); vRow[g * hd + i] = f16(vr[g * hd + i]); }
    }
    this.keys.push(kRow);
    this.vals.push(vRow);
    const att = new Float64Array(nH * hd);
    for (let hh = 0; hh < nH; hh++) {
      const q = rope(rmsnorm(qf.subarray(hh * 2 * hd, hh * 2 * hd + hd), this.t(`${p}attn_q_norm.weight`), eps));
      const gate = qf.subarray(hh * 2 * hd + hd, (hh + 1) * 2 * hd);
      const g = Math.floor(hh / (nH / nKv));
      const sc = this.keys.map((kk) => {
        let s = 0;
        for (let i = 0; i < hd; i++) s += q[i] * kk[g * hd + i];
        return s / Math.sqrt(hd);
      });
      const m = Math.max(...sc), w = sc.map((s) => Math.exp(s - m)), z = w.reduce((u, v) => u + v, 0);
      for (let i = 0; i < hd; i++) {
        let o = 0;
        for (let j = 0; j < w.length; j++) o += (w[j] / z) * this.vals[j][g * hd + i];
        att[hh * hd + i] = o * sigmoid(gate[i]);
      }
    }
    const ao = matvec(this.t(`${p}attn_output.weight`), att, E, nH * hd);
    const x1 = x.map((v, i) => v + ao[i]);
    // routed experts and the shared expert on the post-attention norm
    const gIn = rmsnorm(x1, this.t(`${p}post_attention_norm.weight`), eps);
    const rl = matvec(this.t(`${p}ffn_gate_inp.weight`), gIn, X, E);
    const rm = Math.max(...rl), pr = Array.from(rl, (v) => Math.exp(v - rm)), pz = pr.reduce((u, v) => u + v, 0);
    const top = Array.from({ length: X }, (_, i) => i).sort((u, v) => pr[v] - pr[u] || u - v).slice(0, K);
    const ws = top.reduce((u, e) => u + pr[e] / pz, 0);
    const out = x1.slice();
    const ffn = (gate: Float64Array, up: Float64Array, down: Float64Array, n: number, off: number, offD: number, scale: number) => {
      const gg = matvec(gate, gIn, n, E, off), uu = matvec(up, gIn, n, E, off);
      const mid = gg.map((v, i) => silu(v) * uu[i]);
      const d = matvec(down, mid, E, n, offD);
      for (let i = 0; i < E; i++) out[i] += scale * d[i];
    };
    for (const e of top) ffn(this.t(`${p}ffn_gate_exps.weight`), this.t(`${p}ffn_up_exps.weight`), this.t(`${p}ffn_down_exps.weight`), F, e * F * E, e * E * F, pr[e] / pz / ws);
    let sg = 0;
    const gw = this.t(`${p}ffn_gate_inp_shexp.weight`);
    for (let i = 0; i < E; i++) sg += gw[i] * gIn[i];
    ffn(this.t(`${p}ffn_gate_shexp.weight`), this.t(`${p}ffn_up_shexp.weight`), this.t(`${p}ffn_down_shexp.weight`), S, 0, 0, sigmoid(sg));
    const hidden = rmsnorm(out, this.t(this.has(`${p}nextn.shared_head_norm.weight`) ? `${p}nextn.shared_head_norm.weight` : "output_norm.weight"), eps);
    const head = this.has(`${p}nextn.shared_head_head.weight`) ? `${p}nextn.shared_head_head.weight` : this.has("output.weight") ? "output.weight" : "token_embd.weight";
    return { logits: matvec(this.t(head), hidden, V, E), hidden };
  }

  /** The target's head on a normalised state (output, else token_embd): logits from a hidden row. */
  targetLogits(h: ArrayLike<number>): Float64Array {
    const V = this.f.tensors.get("token_embd.weight")!.ne[1];
    return matvec(this.t(this.has("output.weight") ? "output.weight" : "token_embd.weight"), h, V, this.E);
  }
}
