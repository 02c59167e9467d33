// bloomery models: what a model family file provides to the engine.
import type { GgufFile } from "../gguf/index.ts";
import type { BlockSpec } from "./blocks.ts";

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
  /** The forward pass as a list of blocks; throws a clear error when tensors are missing. */
  program(f: GgufFile, hp: HParams): BlockSpec[];
}
