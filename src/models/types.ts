// bloomery models: what a model family file provides to the engine: hyper-parameters, the op list of
// the forward pass, and the shapes `synth` writes for it (the real models' names, sizes and tensors).
import type { GgufFile } from "../gguf/index.ts";
import type { OpSpec } from "./ops.ts";
import type { SynthFamily } from "./synth-types.ts";

/** Hyper-parameters the engine needs to size contexts and caches, common to all families. */
export interface HParams {
  arch: string;
  nVocab: number;
  nEmbd: number;
  nLayer: number;
  nCtxTrain: number;
  nHead: number;
  nHeadKv: number;
  headDim: number;
  /** largest FFN / expert hidden size */
  nFf: number;
  nExpert: number;
  nExpertUsed: number;
  eps: number;
  /** layers that have an attention KV cache, in order */
  kvLayers: number;
}

export interface ModelFamily {
  /** `general.architecture` values this family handles */
  archs: string[];
  hparams(f: GgufFile): HParams;
  /** The forward pass as a list of ops; throws a clear error when tensors are missing or misshapen. */
  program(f: GgufFile, hp: HParams): OpSpec[];
  /** The real models `synth` imitates and how their tensors are written (absent: synth does not know the family). */
  synth?: SynthFamily;
}
