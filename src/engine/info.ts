// bloomery engine: the model facts the server reports (/props, /v1/models).
import { FILE_TYPE_NAMES } from "../gguf/index.ts";
import type { Model } from "./model.ts";
import type { ModelInfo } from "./protocol.ts";

export function modelInfo(m: Model, path: string): ModelInfo {
  const g = m.gguf;
  let nParams = 0;
  for (const t of g.tensors.values()) nParams += t.ne.reduce((a, b) => a * b, 1);
  let sizeBytes = 0;
  for (const t of g.tensors.values()) sizeBytes += t.nbytes;
  const tok = m.tokenizer;
  const ft = g.has("general.file_type") ? g.u32("general.file_type") : -1;
  return {
    path,
    arch: m.hp.arch,
    name: g.str("general.name", ""),
    nVocab: m.hp.nVocab,
    nCtxTrain: m.hp.nCtxTrain,
    nEmbd: m.hp.nEmbd,
    nParams,
    sizeBytes,
    nCtx: m.backend.nCtxSlot * m.backend.nSlots,
    nCtxSlot: m.backend.nCtxSlot,
    nSlots: m.backend.nSlots,
    backend: m.backend.name,
    chatTemplate: g.str("tokenizer.chat_template", ""),
    bosToken: tok.bos !== undefined ? tok.tokenText(tok.bos) : "",
    eosToken: tok.eos !== undefined ? tok.tokenText(tok.eos) : "",
    fileType: FILE_TYPE_NAMES[ft] ?? (ft >= 0 ? `type ${ft}` : "unknown"),
  };
}
