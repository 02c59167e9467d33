// bloomery models: the MTP (next-token prediction) layer a Qwen hybrid file appends (nextn_predict_layers = 1;
// llama.cpp's qwen35moe.cpp load_block_mtp and its MTP graph), run as speculative decoding's draft (draft-mtp):
// at position p it takes the token there and the target's final hidden state at p - 1 (after output_norm),
// each RMS-normalised (enorm, hnorm), concatenated embedding first, projected by eh_proj; then a gated
// full-attention block (its own KV cache layer) with routed and shared experts, the layer's shared_head_norm
// (else output_norm) and the LM head (shared_head_head, else the target's output). The normalised state before
// the head is the hidden state its next draft step takes. Also the synth writer of that layer.
import type { GgufFile } from "../gguf/index.ts";
import { mtpLayer, mtpOps } from "./mtp-layer.ts";
import type { OpSpec } from "./ops.ts";
import { hybridAttnOps, hybridHparams, hybridMoeOps, hybridRope, writeHybridAttn, writeHybridMoe, type HybridForm } from "./qwen-hybrid.ts";
import type { Shape, SynthTensors } from "./synth-types.ts";
import type { HParams } from "./types.ts";

/** The MTP layers the file appends (nextn_predict_layers; 0: none). */
export function mtpLayers(f: GgufFile, form: HybridForm): number {
  return f.u32(`${form.arch}.nextn_predict_layers`, 0);
}

/**
 * The MTP layer's sizes as a model of one layer: one KV cache layer, no recurrent state; the query rows
 * wide enough for the gated q and for the MTP input's concatenated rows (2 x n_embd).
 */
export function hybridMtpHparams(f: GgufFile, form: HybridForm): HParams {
  mtpLayer(f, form.arch);
  const { deltanet: _dn, ...hp } = hybridHparams(f, form);
  return { ...hp, nLayer: 1, kvLayers: 1, rsLayers: 0, rsDim: 0, qDim: Math.max(2 * hp.nHead * hp.headDim, 2 * hp.nEmbd) };
}

/** The MTP layer's program: MTP input, the gated attention block, the MoE block, the head. */
export function hybridMtpProgram(f: GgufFile, hp: HParams, form: HybridForm): OpSpec[] {
  const il = mtpLayer(f, form.arch);
  // the block's sizes are the main layers' (hp.nLayer counts the MTP model's one layer: the ssm keys read fine)
  const rope = hybridRope(f, hybridHparams(f, form), form);
  return mtpOps(f, hp, il, [...hybridAttnOps(f, hp, il, 0, rope), ...hybridMoeOps(f, hp, form, il)]);
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
