// bloomery engine: bl_ctx_params (ffi/bloomery.h) for a model's sizes - the one layout every
// native context takes (the CPU backend, a card's context, the host experts' CPU context).
import { CTX_PARAM_SLOTS, Slots } from "../../ffi/layout.ts";
import { kvWidths, qWidth, type HParams } from "../models/types.ts";

export interface CtxShape {
  nSlots: number;
  nCtxSlot: number;
  maxTokens: number;
  /** the context's threads (default 1: a card's context has none) */
  nThreads?: number;
  /** KV cache layers (default the model's; 0: no KV cache) */
  kvLayers?: number;
  /** the CPU's exact reference path */
  exact?: boolean;
}

/** Context parameters in bl_ctx_params' slot order. */
export function ctxParams(hp: HParams, o: CtxShape): Slots {
  const p = new Slots(CTX_PARAM_SLOTS);
  const kv = kvWidths(hp);
  const vals = [hp.nEmbd, hp.nVocab, o.maxTokens, o.nThreads ?? 1, o.kvLayers ?? hp.kvLayers, o.nSlots, o.nCtxSlot,
    kv.k, kv.v, qWidth(hp), hp.nFf, hp.nExpert, o.exact ? 1 : 0, hp.rsLayers ?? 0, hp.rsDim ?? 0];
  vals.forEach((v, i) => p.setInt(i, v));
  return p;
}
