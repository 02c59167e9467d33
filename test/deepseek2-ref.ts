// Test helper: a plain reference forward pass of a small deepseek2 GGUF (F16 / F32 tensors), written from
// transformers' DeepseekV3 modelling (modeling_deepseek_v3.py, modeling_rope_utils.py's YaRN), not from
// bloomery's kernels or llama.cpp's graph: MLA in its decompressed form (each head's keys and values
// expanded from the latent through k_b and v_b, then ordinary causal attention), q through its LoRA or a
// plain q, YaRN with DeepSeek's mscale on the softmax scale, the sigmoid router with its correction bias
// and group-limited top-k (or softmax routing without groups, V2's), shared experts, leading dense layers.
// Float64 throughout; no cache (each call runs the whole sequence).
import { closeSync, openSync, readSync } from "node:fs";
import { check, cpu } from "../ffi/cpu.ts";
import { GgmlType, GgufFile } from "../src/gguf/index.ts";

const A = "deepseek2";

export function tensorF64(f: GgufFile, fd: number, name: string): Float64Array {
  const t = f.tensors.get(name);
  if (!t) throw new Error(`reference: ${name} missing`);
  const raw = new Uint8Array(t.nbytes);
  readSync(fd, raw, 0, t.nbytes, t.fileOffset);
  const n = t.ne.reduce((p, d) => p * d, 1);
  let v: Float32Array;
  if (t.type === GgmlType.F32) v = new Float32Array(raw.buffer, 0, n);
  else {
    v = new Float32Array(n);
    check(cpu().bl_dequantize(t.type, raw, v, n), `dequantize ${name}`);
  }
  return Float64Array.from(v);
}

/** y = W x for a GGUF matrix of rows of `cols` (W's rows from `off`). */
export function matvec(w: Float64Array, x: ArrayLike<number>, rows: number, cols: number, off = 0): Float64Array {
  const y = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    const b = off + r * cols;
    for (let i = 0; i < cols; i++) s += w[b + i] * x[i];
    y[r] = s;
  }
  return y;
}

/** RMSNorm of x times w, in float64. */
export function rmsnorm(x: ArrayLike<number>, w: Float64Array, eps: number): Float64Array {
  let ss = 0;
  for (let i = 0; i < x.length; i++) ss += x[i] * x[i];
  const sc = 1 / Math.sqrt(ss / x.length + eps);
  return Float64Array.from({ length: x.length }, (_, i) => x[i] * sc * w[i]);
}

export const silu = (v: number) => v / (1 + Math.exp(-v));
export const sigmoid = (v: number) => 1 / (1 + Math.exp(-v));

/** Indices of the k largest (ties to the lower index, as torch.topk on CPU in practice). */
function topk(v: ArrayLike<number>, k: number): number[] {
  return Array.from({ length: v.length }, (_, i) => i).sort((a, b) => v[b] - v[a] || a - b).slice(0, k);
}

/** A GGUF file's tensors as float64, each read once (the references' weights). */
export class GgufF64 {
  protected readonly f: GgufFile;
  private readonly fd: number;
  private readonly cache = new Map<string, Float64Array>();

  constructor(path: string) {
    this.f = GgufFile.open(path);
    this.fd = openSync(path, "r");
  }

  close(): void {
    closeSync(this.fd);
  }

  protected t(name: string): Float64Array {
    let v = this.cache.get(name);
    if (!v) this.cache.set(name, (v = tensorF64(this.f, this.fd, name)));
    return v;
  }

  protected has(name: string): boolean {
    return this.f.tensors.has(name);
  }
}

export class DeepseekRef extends GgufF64 {
  readonly E: number;
  readonly V: number;
  /** the last forward's smallest routing margin (between the last group or expert kept and the first
   * dropped): below a backend's error, its choice may differ there and the logits with it */
  minGap = Infinity;

  constructor(path: string) {
    super(path);
    this.E = this.f.u32(`${A}.embedding_length`);
    this.V = this.f.tensors.get("token_embd.weight")!.ne[1];
  }

  /** cos / sin angles of the rope part (HF's inv_freq, YaRN's blend when the file asks) and its attention factor. */
  private rope(nr: number): { invFreq: Float64Array; attnFactor: number; softmaxMul: number } {
    const f = this.f, base = f.f32(`${A}.rope.freq_base`, 10000);
    const ext = Float64Array.from({ length: nr / 2 }, (_, i) => 1 / base ** ((2 * i) / nr));
    if (f.str(`${A}.rope.scaling.type`, "none") !== "yarn") return { invFreq: ext, attnFactor: 1, softmaxMul: 1 };
    const factor = f.f32(`${A}.rope.scaling.factor`);
    const orig = f.u32(`${A}.rope.scaling.original_context_length`);
    const betaFast = f.f32(`${A}.rope.scaling.yarn_beta_fast`, 32), betaSlow = f.f32(`${A}.rope.scaling.yarn_beta_slow`, 1);
    // the converter writes 0.1 x mscale_all_dim; the configs' mscale is 1 (V3, K2) or mscale_all_dim (V2-Lite's 0.707)
    const mscaleAll = f.has(`${A}.rope.scaling.yarn_log_multiplier`) ? f.f32(`${A}.rope.scaling.yarn_log_multiplier`) / 0.1 : 0;
    const mscale = mscaleAll && Math.abs(mscaleAll - 1) > 1e-6 ? mscaleAll : 1;
    const getMscale = (s: number, m = 1) => (s <= 1 ? 1 : 0.1 * m * Math.log(s) + 1);
    const attnFactor = mscaleAll ? getMscale(factor, mscale) / getMscale(factor, mscaleAll) : getMscale(factor);
    const corr = (rot: number) => (nr * Math.log(orig / (rot * 2 * Math.PI))) / (2 * Math.log(base));
    const low = Math.max(Math.floor(corr(betaFast)), 0), high = Math.min(Math.ceil(corr(betaSlow)), nr - 1);
    const invFreq = ext.map((e, i) => {
      const ramp = Math.min(1, Math.max(0, (i - low) / (high === low ? 0.001 : high - low)));
      const extrapolation = 1 - ramp;
      return (e / factor) * (1 - extrapolation) + e * extrapolation;
    });
    const sm = mscaleAll ? getMscale(factor, mscaleAll) : 1;
    return { invFreq, attnFactor, softmaxMul: sm * sm };
  }

  /** The logits of every position of `tokens` (from position 0), through the first `layers` layers (all). */
  forward(tokens: number[], layers?: number): Float64Array[] {
    const f = this.f, E = this.E, T = tokens.length;
    this.minGap = Infinity;
    const eps = f.f32(`${A}.attention.layer_norm_rms_epsilon`);
    const nLayer = layers ?? f.u32(`${A}.block_count`) - f.u32(`${A}.nextn_predict_layers`, 0);
    const H = f.u32(`${A}.attention.head_count`), kvl = f.u32(`${A}.attention.kv_lora_rank`);
    const nr = f.u32(`${A}.rope.dimension_count`), qh = f.u32(`${A}.attention.key_length_mla`), vd = f.u32(`${A}.attention.value_length_mla`);
    const nope = qh - nr, ql = this.has("blk.0.attn_q_a.weight") ? f.u32(`${A}.attention.q_lora_rank`) : 0;
    const nDense = f.u32(`${A}.leading_dense_block_count`, 0), nFf = f.u32(`${A}.feed_forward_length`);
    const X = f.u32(`${A}.expert_count`), K = f.u32(`${A}.expert_used_count`), F = f.u32(`${A}.expert_feed_forward_length`);
    const S = F * f.u32(`${A}.expert_shared_count`, 0);
    const nGroup = f.u32(`${A}.expert_group_count`, 0), nGroupUsed = f.u32(`${A}.expert_group_used_count`, 0);
    const sigmoidGate = f.u32(`${A}.expert_gating_func`, 1) === 2, norm = f.bool(`${A}.expert_weights_norm`, false);
    const routedScale = f.f32(`${A}.expert_weights_scale`, 0) || 1;
    const { invFreq, attnFactor, softmaxMul } = this.rope(nr);
    const scale = softmaxMul / Math.sqrt(qh);
    const rot = (v: Float64Array, off: number, pos: number) => {
      for (let i = 0; i < nr / 2; i++) {
        const th = pos * invFreq[i], c = Math.cos(th) * attnFactor, s = Math.sin(th) * attnFactor;
        const a = v[off + 2 * i], b = v[off + 2 * i + 1];
        v[off + 2 * i] = a * c - b * s;
        v[off + 2 * i + 1] = a * s + b * c;
      }
    };
    const emb = this.t("token_embd.weight");
    const x = tokens.map((tok) => emb.slice(tok * E, (tok + 1) * E));
    const mlp = (h: Float64Array, p: string, sfx: string, n: number, off = 0) => {
      const g = matvec(this.t(`${p}ffn_gate${sfx}.weight`), h, n, E, off * n * E), u = matvec(this.t(`${p}ffn_up${sfx}.weight`), h, n, E, off * n * E);
      const a = g.map((gv, i) => silu(gv) * u[i]);
      return matvec(this.t(`${p}ffn_down${sfx}.weight`), a, E, n, off * n * E);
    };
    for (let l = 0; l < nLayer; l++) {
      const p = `blk.${l}.`;
      // attention
      const q: Float64Array[] = [], kv: Float64Array[] = [];
      for (let t = 0; t < T; t++) {
        const h = rmsnorm(x[t], this.t(`${p}attn_norm.weight`), eps);
        const qt = ql
          ? matvec(this.t(`${p}attn_q_b.weight`), rmsnorm(matvec(this.t(`${p}attn_q_a.weight`), h, ql, E), this.t(`${p}attn_q_a_norm.weight`), eps), H * qh, ql)
          : matvec(this.t(`${p}attn_q.weight`), h, H * qh, E);
        for (let hh = 0; hh < H; hh++) rot(qt, hh * qh + nope, t);
        const c = matvec(this.t(`${p}attn_kv_a_mqa.weight`), h, kvl + nr, E);
        const lat = rmsnorm(c.subarray(0, kvl), this.t(`${p}attn_kv_a_norm.weight`), eps);
        c.set(lat, 0);
        rot(c, kvl, t);
        q.push(qt);
        kv.push(c);
      }
      const kb = this.t(`${p}attn_k_b.weight`), vb = this.t(`${p}attn_v_b.weight`);
      // decompressed keys and values: k_nope[h][i] = sum_j k_b[h][j][i] latent[j]; v[h][r] = sum_j v_b[h][r][j] latent[j]
      const kn: Float64Array[] = [], vv: Float64Array[] = [];
      for (let t = 0; t < T; t++) {
        const k = new Float64Array(H * nope);
        for (let hh = 0; hh < H; hh++)
          for (let j = 0; j < kvl; j++) {
            const lj = kv[t][j], b = (hh * kvl + j) * nope;
            for (let i = 0; i < nope; i++) k[hh * nope + i] += kb[b + i] * lj;
          }
        kn.push(k);
        const v = new Float64Array(H * vd);
        for (let hh = 0; hh < H; hh++) v.set(matvec(vb, kv[t].subarray(0, kvl), vd, kvl, hh * vd * kvl), hh * vd);
        vv.push(v);
      }
      for (let t = 0; t < T; t++) {
        const o = new Float64Array(H * vd);
        for (let hh = 0; hh < H; hh++) {
          const sc = new Float64Array(t + 1);
          let mx = -Infinity;
          for (let s = 0; s <= t; s++) {
            let d = 0;
            for (let i = 0; i < nope; i++) d += q[t][hh * qh + i] * kn[s][hh * nope + i];
            for (let i = 0; i < nr; i++) d += q[t][hh * qh + nope + i] * kv[s][kvl + i];
            sc[s] = d * scale;
            mx = Math.max(mx, sc[s]);
          }
          let z = 0;
          for (let s = 0; s <= t; s++) z += (sc[s] = Math.exp(sc[s] - mx));
          for (let s = 0; s <= t; s++) for (let i = 0; i < vd; i++) o[hh * vd + i] += (sc[s] / z) * vv[s][hh * vd + i];
        }
        const y = matvec(this.t(`${p}attn_output.weight`), o, E, H * vd);
        for (let i = 0; i < E; i++) x[t][i] += y[i];
      }
      // the FFN half
      for (let t = 0; t < T; t++) {
        const h = rmsnorm(x[t], this.t(`${p}ffn_norm.weight`), eps);
        let y: Float64Array;
        if (l < nDense) y = mlp(h, p, "", nFf);
        else {
          const logits = matvec(this.t(`${p}ffn_gate_inp.weight`), h, X, E);
          let scores: Float64Array;
          if (sigmoidGate) scores = logits.map(sigmoid);
          else {
            const m = Math.max(...logits);
            const e = logits.map((v) => Math.exp(v - m)), z = e.reduce((a, b) => a + b, 0);
            scores = e.map((v) => v / z);
          }
          const choice = Float64Array.from(scores);
          if (this.has(`${p}exp_probs_b.bias`)) {
            const b = this.t(`${p}exp_probs_b.bias`);
            for (let e = 0; e < X; e++) choice[e] += b[e];
          }
          if (nGroup > 1) {
            const per = X / nGroup;
            const gs = Array.from({ length: nGroup }, (_, g) => topk(choice.subarray(g * per, (g + 1) * per), 2).reduce((a, i) => a + choice[g * per + i], 0));
            const keep = new Set(topk(gs, nGroupUsed));
            const g2 = [...gs].sort((a, b) => b - a);
            this.minGap = Math.min(this.minGap, g2[nGroupUsed - 1] - g2[nGroupUsed]);
            for (let e = 0; e < X; e++) if (!keep.has(Math.floor(e / per))) choice[e] = -Infinity;
          }
          const idx = topk(choice, K);
          const c2 = [...choice].sort((a, b) => b - a);
          if (K < X) this.minGap = Math.min(this.minGap, c2[K - 1] - c2[K]);
          let w = idx.map((e) => scores[e]);
          if (norm) {
            const s = w.reduce((a, b) => a + b, 0);
            w = w.map((v) => v / s);
          }
          y = new Float64Array(E);
          idx.forEach((e, k) => {
            const ye = mlp(h, p, "_exps", F, e);
            for (let i = 0; i < E; i++) y[i] += w[k] * routedScale * ye[i];
          });
          if (S) {
            const ys = mlp(h, p, "_shexp", S);
            for (let i = 0; i < E; i++) y[i] += ys[i];
          }
        }
        for (let i = 0; i < E; i++) x[t][i] += y[i];
      }
    }
    const head = this.has("output.weight") ? this.t("output.weight") : emb;
    return x.map((xt) => matvec(head, rmsnorm(xt, this.t("output_norm.weight"), eps), this.V, E));
  }
}
