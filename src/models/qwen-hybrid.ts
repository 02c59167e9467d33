// bloomery models: the Qwen hybrid layout Qwen3-Next (qwen3next) and Qwen3.5 / 3.6 (qwen35moe) share (llama.cpp's
// qwen3next.cpp and qwen35moe.cpp): gated delta-net linear-attention layers (a recurrent state per slot) with a
// gated full-attention layer every full_attention_interval-th (per-head Q/K norms, partial NEOX RoPE, q's rows
// holding each head's query then its output gate), each followed by a post-attention norm, softmax top-k routed
// SwiGLU experts with renormalised weights and a shared expert under its scalar sigmoid gate. The two differ in
// names only: Qwen3-Next's beta and alpha come fused (ssm_ba, grouped by k head) and its v heads are grouped by
// k head (older files fuse q, k, v and z in one ssm_in), Qwen3.5's are separate (ssm_beta, ssm_alpha) with v heads
// tiled (llama.cpp's converter reorders them);
// Qwen3.5 gives interleaved M-RoPE sections (rope.dimension_sections), which on text (every position component
// the token's position) rotate exactly as plain NEOX RoPE does. An MTP layer the file appends is not run.
import type { GgufFile } from "../gguf/index.ts";
import { GgufError, GgufValueType } from "../gguf/index.ts";
import {
  Act, attentionOp, deltanetOp, deltanetStateFloats, type DeltaNetShape, embedOp, expertsOp, ffnOp, Gating, HeadMap, normOp, outputOp, routerOp, ropeParams,
  RopeType, type OpSpec,
} from "./ops.ts";
import type { Shape, SynthTensors } from "./synth-types.ts";
import { writeHybridMtp } from "./qwen-hybrid-mtp.ts";
import type { HParams } from "./types.ts";

export interface HybridForm {
  arch: string;
  /** beta and alpha fused in one ssm_ba (Qwen3-Next), else ssm_beta and ssm_alpha (Qwen3.5) */
  fusedBa: boolean;
  /** which k head a v head reads */
  headMap: HeadMap;
  /** the file gives interleaved M-RoPE sections (Qwen3.5) */
  mropeSections: boolean;
}

interface Ssm {
  conv: number;
  headK: number;
  nK: number;
  nV: number;
  headV: number;
  recurrent: boolean[];
  nFfExp: number;
  nFfShexp: number;
  /** MTP layers written after the main ones (nextn_predict_layers; 0 or absent: none) */
  nextn?: number;
}

function ssmKeys(f: GgufFile, a: string, nLayer: number): Ssm {
  const bad = (what: string): never => { throw new GgufError(f.path, `${a}: ${what}`); };
  const conv = f.u32(`${a}.ssm.conv_kernel`), headK = f.u32(`${a}.ssm.state_size`), nK = f.u32(`${a}.ssm.group_count`);
  const nV = f.u32(`${a}.ssm.time_step_rank`), inner = f.u32(`${a}.ssm.inner_size`);
  if (nK < 1 || nV < 1 || nV % nK) bad(`ssm.time_step_rank ${nV} (v heads) is not a multiple of ssm.group_count ${nK} (k heads)`);
  if (inner % nV) bad(`ssm.inner_size ${inner} is not a multiple of ${nV} v heads`);
  const headV = inner / nV;
  if (headV !== headK) bad(`v heads of ${headV} and k heads of ${headK}: the delta rule takes equal sizes`);
  if (conv < 1 || conv > 16) bad(`ssm.conv_kernel ${conv} (1..16)`);
  let recurrent: boolean[];
  const raw = f.raw(`${a}.attention.recurrent_layers`);
  if (raw !== undefined) {
    const arr = Array.from(raw as ArrayLike<unknown>, (v) => !!v);
    if (arr.length < nLayer) bad(`attention.recurrent_layers has ${arr.length} entries for ${nLayer} layers`);
    recurrent = arr.slice(0, nLayer);
  } else {
    const every = f.u32(`${a}.full_attention_interval`, 4);
    recurrent = Array.from({ length: nLayer }, (_, i) => (i + 1) % every !== 0);
  }
  const nFfExp = f.u32(`${a}.expert_feed_forward_length`);
  return { conv, headK, nK, nV, headV, recurrent, nFfExp, nFfShexp: f.u32(`${a}.expert_shared_feed_forward_length`, nFfExp) };
}

/** The layers the forward pass runs: block_count less the MTP layers the file appends (nextn_predict_layers). */
function mainLayers(f: GgufFile, a: string): number {
  const blocks = f.u32(`${a}.block_count`), nextn = f.u32(`${a}.nextn_predict_layers`, 0);
  if (nextn >= blocks) throw new GgufError(f.path, `${a}: nextn_predict_layers ${nextn} leaves no layer of block_count ${blocks}`);
  return blocks - nextn;
}

export function hybridHparams(f: GgufFile, form: HybridForm): HParams {
  const A = form.arch;
  const nLayer = mainLayers(f, A);
  const nEmbd = f.u32(`${A}.embedding_length`);
  const nHead = f.u32(`${A}.attention.head_count`);
  const nHeadKv = f.u32(`${A}.attention.head_count_kv`, nHead);
  const headDim = f.u32(`${A}.attention.key_length`, nEmbd / nHead);
  const vLen = f.u32(`${A}.attention.value_length`, headDim);
  const bad = (what: string): never => { throw new GgufError(f.path, `${A}: ${what}`); };
  if (nLayer < 1 || nLayer > 1024) bad(`block_count ${nLayer} is out of range`);
  if (vLen !== headDim) bad(`attention.value_length ${vLen} differs from key_length ${headDim}`);
  if (nHead < 1 || nHeadKv < 1 || nHead % nHeadKv !== 0) bad(`head_count ${nHead} is not a multiple of head_count_kv ${nHeadKv}`);
  if (headDim < 2 || headDim > 1024 || headDim % 2) bad(`key_length ${headDim} is not an even size up to 1024`);
  const s = ssmKeys(f, A, nLayer);
  const emb = f.requireTensor("token_embd.weight");
  if (emb.ne[0] !== nEmbd) bad(`token_embd has rows of ${emb.ne[0]}, embedding_length is ${nEmbd}`);
  const nRs = s.recurrent.filter(Boolean).length;
  const dn: DeltaNetShape = { nKHeads: s.nK, nVHeads: s.nV, headK: s.headK, headV: s.headV, convKernel: s.conv };
  const hp: HParams = {
    arch: A,
    nVocab: emb.ne[1],
    nEmbd,
    nLayer,
    nCtxTrain: f.u32(`${A}.context_length`),
    nHead,
    nHeadKv,
    headDim,
    nFf: Math.max(s.nFfExp, s.nFfShexp),
    nExpert: f.u32(`${A}.expert_count`),
    nExpertUsed: f.u32(`${A}.expert_used_count`),
    eps: f.f32(`${A}.attention.layer_norm_rms_epsilon`),
    // only the full-attention layers keep a KV cache; the delta-net layers a recurrent state
    kvLayers: nLayer - nRs,
    // the gated q rows (query and gate a head) and the delta-net's out rows
    qDim: Math.max(2 * nHead * headDim, s.nV * s.headV),
    rsLayers: nRs,
    rsDim: nRs ? deltanetStateFloats(dn) : 0,
    ...(nRs ? { deltanet: dn } : {}),
  };
  if (hp.nExpert < 1 || hp.nExpertUsed < 1 || hp.nExpertUsed > hp.nExpert) bad(`expert_used_count ${hp.nExpertUsed} of ${hp.nExpert} experts`);
  if (hp.kvLayers < 1) bad("no full-attention layer");
  return hp;
}

/** The layout's RoPE (partial NEOX; Qwen3.5's interleaved M-RoPE sections checked to be text-only). */
export function hybridRope(f: GgufFile, hp: HParams, form: HybridForm) {
  const A = form.arch;
  const nRot = f.u32(`${A}.rope.dimension_count`, hp.headDim);
  if (nRot < 2 || nRot > hp.headDim || nRot % 2) throw new GgufError(f.path, `${A}: rope.dimension_count ${nRot} of a head of ${hp.headDim}`);
  if (form.mropeSections && f.has(`${A}.rope.dimension_sections`)) {
    // interleaved M-RoPE: text positions give every section the token's position, so it is NEOX RoPE; a
    // fourth section would rotate by a position text never sets (llama.cpp's e), which a text model lacks
    const sec = Array.from(f.raw(`${A}.rope.dimension_sections`) as ArrayLike<number>, Number);
    if ((sec[3] ?? 0) > 0) throw new GgufError(f.path, `${A}: a fourth M-RoPE section (${sec.join(", ")}) is not supported`);
  }
  return ropeParams(f, A, RopeType.Neox, nRot, hp.nCtxTrain);
}

type Need = (n: string, ne: number[]) => string;

function needOf(f: GgufFile, i: number): Need {
  const p = `blk.${i}.`;
  return (n, ne) => (f.requireTensor(`${p}${n}`, ne), `${p}${n}`);
}

/** Layer i's gated full attention (its input norm, then the op), over KV cache layer kvLayer. */
export function hybridAttnOps(f: GgufFile, hp: HParams, i: number, kvLayer: number, rope: ReturnType<typeof hybridRope>): OpSpec[] {
  const need = needOf(f, i), E = hp.nEmbd, qd = hp.nHead * hp.headDim, kd = hp.nHeadKv * hp.headDim;
  return [
    normOp(i, need("attn_norm.weight", [E]), hp.eps),
    attentionOp({
      layer: i, kvLayer, nHead: hp.nHead, nHeadKv: hp.nHeadKv, headDim: hp.headDim, eps: hp.eps, rope, gate: true,
      tensors: {
        q: need("attn_q.weight", [E, 2 * qd]), k: need("attn_k.weight", [E, kd]), v: need("attn_v.weight", [E, kd]), o: need("attn_output.weight", [qd, E]),
        q_norm: need("attn_q_norm.weight", [hp.headDim]), k_norm: need("attn_k_norm.weight", [hp.headDim]),
      },
    }),
  ];
}

/** Layer i's post-attention norm, routed experts and gated shared expert. */
export function hybridMoeOps(f: GgufFile, hp: HParams, form: HybridForm, i: number): OpSpec[] {
  const s = ssmKeys(f, form.arch, hp.nLayer), need = needOf(f, i);
  const E = hp.nEmbd, X = hp.nExpert, F = s.nFfExp, S = s.nFfShexp;
  if (f.tensor(`blk.${i}.ffn_gate_up_exps.weight`)) {
    throw new GgufError(f.path, `blk.${i}.ffn_gate_up_exps.weight: merged gate and up experts are not supported yet (convert with separate ffn_gate_exps and ffn_up_exps)`);
  }
  return [
    normOp(i, need("post_attention_norm.weight", [E]), hp.eps),
    routerOp({ layer: i, nExpert: X, nUsed: hp.nExpertUsed, gating: Gating.Softmax, normTopk: true, tensors: { w: need("ffn_gate_inp.weight", [E, X]) } }),
    expertsOp({
      layer: i, nExpert: X, nUsed: hp.nExpertUsed, act: Act.Swiglu,
      tensors: { gate: need("ffn_gate_exps.weight", [E, F, X]), up: need("ffn_up_exps.weight", [E, F, X]), down: need("ffn_down_exps.weight", [F, E, X]) },
    }),
    // the shared expert on the same normalised rows, under sigmoid(h . gate_inp_shexp)
    ffnOp(i, {
      gate: need("ffn_gate_shexp.weight", [E, S]), up: need("ffn_up_shexp.weight", [E, S]), down: need("ffn_down_shexp.weight", [S, E]),
      gate_inp: need("ffn_gate_inp_shexp.weight", [E]),
    }),
  ];
}

export function hybridProgram(f: GgufFile, hp: HParams, form: HybridForm): OpSpec[] {
  const A = form.arch, s = ssmKeys(f, A, hp.nLayer);
  const E = hp.nEmbd;
  const C = 2 * s.nK * s.headK + s.nV * s.headV, vd = s.nV * s.headV;
  const rope = hybridRope(f, hp, form);
  const ops: OpSpec[] = [embedOp("token_embd.weight")];
  let kvLayer = 0, rsLayer = 0;
  for (let i = 0; i < hp.nLayer; i++) {
    const p = `blk.${i}.`;
    const need = needOf(f, i);
    if (s.recurrent[i]) {
      ops.push(normOp(i, need("attn_norm.weight", [E]), hp.eps));
      // older Qwen3-Next files: q, k, v and z in one ssm_in, grouped by k head
      const legacy = form.fusedBa && !!f.tensor(`${p}ssm_in.weight`) && !f.tensor(`${p}attn_qkv.weight`);
      const proj = legacy ? { qkvz: need("ssm_in.weight", [E, C + vd]) } : { qkv: need("attn_qkv.weight", [E, C]), gate: need("attn_gate.weight", [E, vd]) };
      const ba = form.fusedBa ? { ba: need("ssm_ba.weight", [E, 2 * s.nV]) } : { beta: need("ssm_beta.weight", [E, s.nV]), alpha: need("ssm_alpha.weight", [E, s.nV]) };
      ops.push(deltanetOp({
        layer: i, rsLayer: rsLayer++, nKHeads: s.nK, nVHeads: s.nV, headK: s.headK, headV: s.headV, convKernel: s.conv, headMap: form.headMap, eps: hp.eps,
        tensors: {
          ...proj, ...ba, conv: need("ssm_conv1d.weight", [s.conv, C]),
          dt: need("ssm_dt.bias", [s.nV]), a: need("ssm_a", [s.nV]), norm: need("ssm_norm.weight", [s.headV]), out: need("ssm_out.weight", [vd, E]),
        },
      }));
    } else {
      ops.push(...hybridAttnOps(f, hp, i, kvLayer++, rope));
    }
    ops.push(...hybridMoeOps(f, hp, form, i));
  }
  f.requireTensor("output_norm.weight", [E]);
  if (f.tensor("output.weight")) f.requireTensor("output.weight", [E, hp.nVocab]);
  ops.push(outputOp(f, hp.eps));
  return ops;
}

/** The load's line about an MTP layer the file appends (nextn_predict_layers): a draft only with --spec-type draft-mtp. */
export function hybridNotes(f: GgufFile, form: HybridForm): string[] {
  const n = f.u32(`${form.arch}.nextn_predict_layers`, 0);
  return n > 0 ? [`${form.arch}: the file's ${n} MTP layer(s) are not part of the forward pass; --spec-type draft-mtp runs them as a speculative draft (qwen-hybrid-mtp.ts)`] : [];
}

/** A synthetic model's sizes of the hybrid layout (Shape.hybrid). */
export interface HybridShape {
  nKHeads: number;
  nVHeads: number;
  headK: number;
  conv: number;
  interval: number;
  nFfShexp: number;
  /** MTP layers written after the main ones (nextn_predict_layers; 0 or absent: none) */
  nextn?: number;
}

/** Writes a hybrid shape's metadata and tensors (synth), in the real files' names and layout. */
export function writeHybrid(form: HybridForm, sh: Shape, t: SynthTensors): void {
  const A = form.arch, w = t.w, n = t.nLayer, hy = sh.hybrid!;
  const recurrent = Array.from({ length: n }, (_, i) => (i + 1) % hy.interval !== 0);
  // a cut (--layers) short of the first full-attention layer ends with one (every file has at least one)
  if (recurrent.every(Boolean)) recurrent[n - 1] = false;
  const nextn = hy.nextn ?? 0;
  w.u32(`${A}.block_count`, n + nextn);
  if (nextn) w.u32(`${A}.nextn_predict_layers`, nextn);
  w.u32(`${A}.context_length`, sh.nCtxTrain);
  w.u32(`${A}.embedding_length`, sh.nEmbd);
  w.u32(`${A}.feed_forward_length`, sh.nFf);
  w.u32(`${A}.attention.head_count`, sh.nHead);
  w.u32(`${A}.attention.head_count_kv`, sh.nHeadKv);
  w.f32(`${A}.rope.freq_base`, sh.ropeBase);
  w.f32(`${A}.attention.layer_norm_rms_epsilon`, sh.eps);
  w.u32(`${A}.expert_count`, sh.nExpert);
  w.u32(`${A}.expert_used_count`, sh.nExpertUsed);
  w.u32(`${A}.attention.key_length`, sh.headDim);
  w.u32(`${A}.attention.value_length`, sh.headDim);
  w.u32(`${A}.expert_feed_forward_length`, sh.nFfExp);
  w.u32(`${A}.expert_shared_feed_forward_length`, hy.nFfShexp);
  w.u32(`${A}.ssm.conv_kernel`, hy.conv);
  w.u32(`${A}.ssm.state_size`, hy.headK);
  w.u32(`${A}.ssm.group_count`, hy.nKHeads);
  w.u32(`${A}.ssm.time_step_rank`, hy.nVHeads);
  w.u32(`${A}.ssm.inner_size`, hy.nVHeads * hy.headK);
  // llama.cpp's layer array covers the MTP layers too (dense attention: not recurrent)
  w.setArray(`${A}.attention.recurrent_layers`, GgufValueType.BOOL, [...recurrent, ...Array<boolean>(nextn).fill(false)]);
  w.u32(`${A}.full_attention_interval`, hy.interval);
  w.u32(`${A}.rope.dimension_count`, sh.nRot ?? sh.headDim);
  if (form.mropeSections) w.setArray(`${A}.rope.dimension_sections`, GgufValueType.I32, [11, 11, 10, 0]);
  const E = sh.nEmbd;
  const vd = hy.nVHeads * hy.headK, C = 2 * hy.nKHeads * hy.headK + vd;
  t.mat("token_embd.weight", "token_embd", -1, [E, sh.nVocab], 1.0);
  for (let i = 0; i < n; i++) {
    const p = `blk.${i}.`;
    t.ones(`${p}attn_norm.weight`, [E]);
    if (recurrent[i]) {
      t.mat(`${p}attn_qkv.weight`, "attn_qkv", i, [E, C]);
      t.mat(`${p}attn_gate.weight`, "attn_gate", i, [E, vd]);
      if (form.fusedBa) t.mat(`${p}ssm_ba.weight`, "ssm_ba", i, [E, 2 * hy.nVHeads]);
      else {
        t.mat(`${p}ssm_beta.weight`, "ssm_beta", i, [E, hy.nVHeads]);
        t.mat(`${p}ssm_alpha.weight`, "ssm_alpha", i, [E, hy.nVHeads]);
      }
      t.small(`${p}ssm_conv1d.weight`, [hy.conv, C], 0.3);
      t.small(`${p}ssm_dt.bias`, [hy.nVHeads], 0.5);
      t.fill(`${p}ssm_a`, [hy.nVHeads], -1); // -exp(A_log) of A_log 0
      t.ones(`${p}ssm_norm.weight`, [hy.headK]);
      t.mat(`${p}ssm_out.weight`, "ssm_out", i, [vd, E], 0.02 / Math.sqrt(n));
    } else writeHybridAttn(sh, t, i, 0.02 / Math.sqrt(n));
    writeHybridMoe(sh, t, i, 0.02 / Math.sqrt(n));
  }
  if (nextn) writeHybridMtp(sh, t);
  t.ones("output_norm.weight", [E]);
  t.mat("output.weight", "output", -1, [E, sh.nVocab]);
}

/** Writes layer i's gated full attention (synth; out: the output product's scale), as a main layer and the MTP layer take it. */
export function writeHybridAttn(sh: Shape, t: SynthTensors, i: number, out: number): void {
  const p = `blk.${i}.`, E = sh.nEmbd, qd = sh.nHead * sh.headDim, kd = sh.nHeadKv * sh.headDim;
  t.mat(`${p}attn_q.weight`, "attn_q", i, [E, 2 * qd]);
  t.mat(`${p}attn_k.weight`, "attn_k", i, [E, kd]);
  t.mat(`${p}attn_v.weight`, "attn_v", i, [E, kd]);
  t.mat(`${p}attn_output.weight`, "attn_output", i, [qd, E], out);
  t.ones(`${p}attn_q_norm.weight`, [sh.headDim]);
  t.ones(`${p}attn_k_norm.weight`, [sh.headDim]);
}

/** Writes layer i's MoE block: the norm, router, routed and gated shared experts (synth; out: the down products' scale). */
export function writeHybridMoe(sh: Shape, t: SynthTensors, i: number, out: number): void {
  const p = `blk.${i}.`, E = sh.nEmbd, F = sh.nFfExp, X = sh.nExpert, S = sh.hybrid!.nFfShexp;
  t.ones(`${p}post_attention_norm.weight`, [E]);
  t.router(`${p}ffn_gate_inp.weight`, i, E, X);
  t.mat(`${p}ffn_gate_exps.weight`, "ffn_gate_exps", i, [E, F, X]);
  t.mat(`${p}ffn_up_exps.weight`, "ffn_up_exps", i, [E, F, X]);
  t.mat(`${p}ffn_down_exps.weight`, "ffn_down_exps", i, [F, E, X], out);
  t.mat(`${p}ffn_gate_shexp.weight`, "ffn_gate_shexp", i, [E, S]);
  t.mat(`${p}ffn_up_shexp.weight`, "ffn_up_shexp", i, [E, S]);
  t.mat(`${p}ffn_down_shexp.weight`, "ffn_down_shexp", i, [S, E], out);
  t.small(`${p}ffn_gate_inp_shexp.weight`, [E], 0.05);
}
