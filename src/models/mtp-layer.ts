// bloomery models: the MTP (next-token prediction) layer a file appends (nextn_predict_layers 1: llama.cpp's
// nextn.* tensors beside a whole layer blk.N after the main ones), run as speculative decoding's draft
// (draft-mtp, src/engine/spec-mtp.ts) as llama.cpp's MTP graphs and vLLM's DeepseekMTP / Glm4MoeMTP form it:
// at position p the token there and the target's hidden state at p - 1 (after output_norm), each
// RMS-normalised (enorm, hnorm), concatenated embedding first and projected by eh_proj; then the family's
// own block of that layer (its attention on the draft's one KV cache layer, its MoE half); the layer's
// shared_head_norm (else output_norm) and shared_head_head (else the target's head). One copy for every
// family that has one (the Qwen hybrids: qwen-hybrid-mtp.ts; DeepSeek V3 and GLM-4.5: mtpHook).
import { GgufError, type GgufFile } from "../gguf/index.ts";
import { mtpInputOp, OpKind, type OpSpec } from "./ops.ts";
import { qWidth, type HParams, type ModelFamily } from "./types.ts";

/** The ops of a file's layer i (its tensors blk.i.*) on KV cache layer kvLayer. */
export type LayerOps = (i: number, kvLayer: number) => OpSpec[];

/** The MTP layer's index (block_count - 1) when the file has the one draft-mtp runs, else why not. */
export function mtpLayer(f: GgufFile, a: string): number {
  const n = f.u32(`${a}.nextn_predict_layers`, 0);
  if (n === 0) throw new GgufError(f.path, `${a}: the file has no MTP layer (nextn_predict_layers is 0 or absent): draft-mtp needs one`);
  if (n !== 1) throw new GgufError(f.path, `${a}: ${n} MTP layers (nextn_predict_layers); draft-mtp runs files with one`);
  const il = f.u32(`${a}.block_count`) - 1;
  if (!f.tensor(`blk.${il}.nextn.eh_proj.weight`)) throw new GgufError(f.path, `${a}: nextn_predict_layers is 1 but blk.${il}.nextn.eh_proj.weight is missing`);
  return il;
}

/** The draft's program: the MTP input of layer il, the layer's block, the MTP head. */
export function mtpOps(f: GgufFile, hp: HParams, il: number, block: OpSpec[]): OpSpec[] {
  const E = hp.nEmbd, p = `blk.${il}.nextn.`;
  const need = (n: string, ne: number[]) => (f.requireTensor(`${p}${n}`, ne), `${p}${n}`);
  const opt = (n: string, ne: number[]) => (f.tensor(`${p}${n}`) ? need(n, ne) : undefined);
  const head = opt("shared_head_head.weight", [E, hp.nVocab]) ?? (f.tensor("output.weight") ? "output.weight" : "token_embd.weight");
  f.requireTensor(head, [E, hp.nVocab]);
  const norm = opt("shared_head_norm.weight", [E]) ?? (f.requireTensor("output_norm.weight", [E]), "output_norm.weight");
  return [
    mtpInputOp(il, {
      embed: opt("embed_tokens.weight", [E, hp.nVocab]) ?? "token_embd.weight",
      enorm: need("enorm.weight", [E]), hnorm: need("hnorm.weight", [E]), eh_proj: need("eh_proj.weight", [2 * E, E]),
    }, hp.eps),
    ...block,
    { kind: OpKind.Output, layer: -1, params: { kind: 0, eps: hp.eps }, tensors: { norm, head } },
  ];
}

/** A family's `mtp` hook from its layer builder: the MTP layer as a model of one layer (one KV cache layer; room for the 2 x n_embd input rows). */
export function mtpHook(a: string, hparams: (f: GgufFile) => HParams, layers: (f: GgufFile) => LayerOps): NonNullable<ModelFamily["mtp"]> {
  return {
    has: (f) => f.u32(`${a}.nextn_predict_layers`, 0) > 0,
    hparams(f) {
      mtpLayer(f, a);
      const hp = hparams(f);
      return { ...hp, nLayer: 1, kvLayers: 1, qDim: Math.max(qWidth(hp), 2 * hp.nEmbd) };
    },
    program: (f, hp) => {
      const il = mtpLayer(f, a);
      return mtpOps(f, hp, il, layers(f)(il, 0));
    },
  };
}
