// bloomery models: the MTP (next-token prediction) layer a Qwen hybrid file appends (nextn_predict_layers = 1;
// llama.cpp's qwen35moe.cpp load_block_mtp and its MTP graph), run as speculative decoding's draft (draft-mtp):
// at position p it takes the token there and the target's final hidden state at p - 1 (after output_norm),
// each RMS-normalised (enorm, hnorm), concatenated embedding first, projected by eh_proj; then a gated
// full-attention block (its own KV cache layer) with routed and shared experts, the layer's shared_head_norm
// (else output_norm) and the LM head (shared_head_head, else the target's output). The normalised state before
// the head is the hidden state its next draft step takes. Also the synth writer of that layer.
import { GgufError, type GgufFile } from "../gguf/index.ts";
import { mtpInputOp, OpKind, type OpSpec } from "./ops.ts";
import { hybridAttnOps, hybridHparams, hybridMoeOps, hybridRope, writeHybridAttn, writeHybridMoe, type HybridForm } from "./qwen-hybrid.ts";
import type { Shape, SynthTensors } from "./synth-types.ts";
import type { HParams } from "./types.ts";

/** The MTP layers the file appends (nextn_predict_layers; 0: none). */
export function mtpLayers(f: GgufFile, form: HybridForm): number {
  return f.u32(`${form.arch}.nextn_predict_layers`, 0);
}

/** The MTP layer's index (block_count - 1) when the file has the one this engine runs, else why not. */
function mtpLayer(f: GgufFile, form: HybridForm): number {
  const n = mtpLayers(f, form);
  if (n === 0) throw new GgufError(f.path, `${form.arch}: the file has no MTP layer (nextn_predict_layers is 0 or absent): draft-mtp needs one`);
  if (n !== 1) throw new GgufError(f.path, `${form.arch}: ${n} MTP layers (nextn_predict_layers); draft-mtp runs files with one`);
  const il = f.u32(`${form.arch}.block_count`) - 1;
  if (!f.tensor(`blk.${il}.nextn.eh_proj.weight`)) throw new GgufError(f.path, `${form.arch}: nextn_predict_layers is 1 but blk.${il}.nextn.eh_proj.weight is missing`);
  return il;
}

/**
 * The MTP layer's sizes as a model of one layer: one KV cache layer, no recurrent state; the query rows
 * wide enough for the gated q and for the MTP input's concatenated rows (2 x n_embd).
 */
export function hybridMtpHparams(f: GgufFile, form: HybridForm): HParams {
  mtpLayer(f, form);
  const { deltanet: _dn, ...hp } = hybridHparams(f, form);
  return { ...hp, nLayer: 1, kvLayers: 1, rsLayers: 0, rsDim: 0, qDim: Math.max(2 * hp.nHead * hp.headDim, 2 * hp.nEmbd) };
}

/** The MTP layer's program: MTP input, the gated attention block, the MoE block, the head. */
export function hybridMtpProgram(f: GgufFile, hp: HParams, form: HybridForm): OpSpec[] {
  const il = mtpLayer(f, form), E = hp.nEmbd, p = `blk.${il}.nextn.`;
  const need = (n: string, ne: number[]) => (f.requireTensor(`${p}${n}`, ne), `${p}${n}`);
  const opt = (n: string, ne: number[]) => (f.tensor(`${p}${n}`) ? need(n, ne) : undefined);
  // the block's sizes are the main layers' (hp.nLayer counts the MTP model's one layer: the ssm keys read fine)
  const target = hybridHparams(f, form);
  const rope = hybridRope(f, target, form);
  const head = opt("shared_head_head.weight", [E, hp.nVocab]) ?? (f.tensor("output.weight") ? "output.weight" : "token_embd.weight");
  f.requireTensor(head, [E, hp.nVocab]);
  const norm = opt("shared_head_norm.weight", [E]) ?? (f.requireTensor("output_norm.weight", [E]), "output_norm.weight");
  return [
    mtpInputOp(il, {
      embed: opt("embed_tokens.weight", [E, hp.nVocab]) ?? "token_embd.weight",
      enorm: need("enorm.weight", [E]), hnorm: need("hnorm.weight", [E]), eh_proj: need("eh_proj.weight", [2 * E, E]),
    }, hp.eps),
    ...hybridAttnOps(f, hp, il, 0, rope),
    ...hybridMoeOps(f, hp, form, il),
    { kind: OpKind.Output, layer: -1, params: { kind: 0, eps: hp.eps }, tensors: { norm, head } },
  ];
}

/** Writes the MTP layer (index t.nLayer, after the main ones) in llama.cpp's names and layout (synth). */
export function writeHybridMtp(sh: Shape, t: SynthTensors): void {
  const i = t.nLayer, p = `blk.${i}.`, E = sh.nEmbd;
  t.mat(`${p}nextn.eh_proj.weight`, "nextn_eh_proj", i, [2 * E, E]);
  t.ones(`${p}nextn.enorm.weight`, [E]);
  t.ones(`${p}nextn.hnorm.weight`, [E]);
  t.ones(`${p}nextn.shared_head_norm.weight`, [E]);
  t.ones(`${p}attn_norm.weight`, [E]);
  writeHybridAttn(sh, t, i, 0.02);
  writeHybridMoe(sh, t, i, 0.02);
}
