// bloomery engine: a model checked at load, so a broken file is refused with a clear message instead
// of loading, answering /health ok and then failing every request. Two checks, both generic (they read
// the GgufFile and the family's HParams, not a family's code): the tensors' shapes and types against
// the hyper-parameters and the vocabulary (checkModelFile, before anything is mapped), and one token's
// forward pass through the loaded backend, whose logits must all be finite (checkForward).
import { closeSync, openSync, readSync } from "node:fs";
import { GgmlType, GgufError, safeText, typeName, type GgufFile, type GgufTensorInfo } from "../gguf/index.ts";
import type { HParams } from "../models/types.ts";

/** A model refused by the load checks (a GgufError: exit E_BAD_MODEL; its message says "model check:"). */
export class ModelCheckError extends GgufError {
  constructor(file: string, detail: string) {
    super(file, `model check: ${detail}`);
    this.name = "ModelCheckError";
  }
}

/** Whether an error message (as the engine worker sends it) is a model check's refusal. */
export function isModelCheckMessage(message: string): boolean {
  return /: model check: /.test(message);
}

const LAYER_RE = /^blk\.(\d+)\./;

/** Bytes past the last tensor from which the file's tail is reported (never read: weights.ts prefaults only tensors). */
const TAIL_NOTE_BYTES = 64 << 20;

function shape(t: GgufTensorInfo): string {
  return `${typeName(t.type)} [${t.ne.join(", ")}]`;
}

/**
 * The shape and type checks: throws ModelCheckError naming every fault found (up to a few), returns
 * notes (lines worth a log) otherwise.
 */
export function checkModelFile(f: GgufFile, hp: HParams): string[] {
  const faults: string[] = [];
  const E = hp.nEmbd;
  const t = (name: string) => f.tensor(name);
  const want = (name: string, ok: (x: GgufTensorInfo) => boolean, what: string) => {
    const x = t(name);
    if (x && !ok(x)) faults.push(`${name} is ${shape(x)}: ${what}`);
  };

  // the vocabulary: one embedding row (and one output row) per token
  const tokens = f.raw("tokenizer.ggml.tokens");
  const nTok = Array.isArray(tokens) ? tokens.length : undefined;
  if (nTok !== undefined && nTok !== hp.nVocab) {
    faults.push(`the vocabulary has ${nTok} tokens (tokenizer.ggml.tokens) but token_embd.weight has ${hp.nVocab} rows: every token needs exactly one row`);
  }
  want("token_embd.weight", (x) => x.ne[0] === E, `its rows should hold embedding_length ${E} values`);
  want("output.weight", (x) => x.ne[0] === E && x.ne[1] === hp.nVocab, `the output projection should be [${E}, ${hp.nVocab}] (embedding_length, vocabulary)`);
  want("output_norm.weight", (x) => x.ne[0] === E && x.ne.length === 1, `a norm of embedding_length ${E}`);

  // layers: every blk.N must be one of block_count's layers (the key itself: a family may run fewer,
  // as llama.cpp's GLM-4.5 and DeepSeek-V3 files count their next-token-prediction layers in it)
  const arch = f.raw("general.architecture");
  const key = `${typeof arch === "string" ? arch : hp.arch}.block_count`;
  const bc = f.raw(key);
  const blockCount = typeof bc === "number" ? bc : hp.nLayer;
  const extra = new Map<number, number>();
  for (const name of f.tensors.keys()) {
    const m = LAYER_RE.exec(name);
    if (m && Number(m[1]) >= blockCount) extra.set(Number(m[1]), (extra.get(Number(m[1])) ?? 0) + 1);
  }
  if (extra.size) {
    const layers = [...extra.keys()].sort((a, b) => a - b);
    const n = [...extra.values()].reduce((a, b) => a + b, 0);
    const list = layers.length > 4 ? `blk.${layers[0]}.* to blk.${layers[layers.length - 1]}.*` : layers.map((l) => `blk.${l}.*`).join(", ");
    faults.push(`${safeText(key)} is ${blockCount} but the file holds ${n} tensors of ${layers.length} more layer${layers.length > 1 ? "s" : ""} (${list}): block_count is wrong or the file mixes two models`);
  }

  for (let i = 0; i < hp.nLayer && faults.length < 8; i++) {
    const p = `blk.${i}.`;
    for (const n of ["attn_norm", "ffn_norm"]) want(`${p}${n}.weight`, (x) => x.ne[0] === E && x.ne.length === 1, `a norm of embedding_length ${E}`);
    for (const n of ["attn_q_norm", "attn_k_norm"]) want(`${p}${n}.weight`, (x) => x.ne[0] === hp.headDim && x.ne.length === 1, `a per-head norm of key_length ${hp.headDim}`);
    for (const n of ["attn_q", "attn_k", "attn_v"]) want(`${p}${n}.weight`, (x) => x.ne[0] === E, `its rows should read embedding_length ${E} values`);
    want(`${p}attn_output.weight`, (x) => x.ne[1] === E, `it should write embedding_length ${E} values`);
    want(`${p}ffn_gate_inp.weight`, (x) => x.ne[0] === E && x.ne[1] === hp.nExpert, `the router should be [${E}, ${hp.nExpert}] (embedding_length, expert_count)`);
    // gate and up are one SwiGLU pair: the same shape; the experts' kernels compute them together, so the same type too
    for (const [g, u, d, experts] of [["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", true], ["ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", false], ["ffn_gate", "ffn_up", "ffn_down", false]] as const) {
      const gt = t(`${p}${g}.weight`), ut = t(`${p}${u}.weight`), dt = t(`${p}${d}.weight`);
      if (!gt || !ut) continue;
      if (gt.ne.join() !== ut.ne.join()) faults.push(`${p}${g}.weight is ${shape(gt)} and ${p}${u}.weight is ${shape(ut)}: gate and up must have the same shape`);
      else if (experts && gt.type !== ut.type) {
        faults.push(`${p}${g}.weight is ${typeName(gt.type)} and ${p}${u}.weight is ${typeName(ut.type)}: bloomery computes an expert's gate and up in one pass and needs them of one type (a mix is not supported yet; requantize with one type for both)`);
      }
      if (gt.ne[0] !== E) faults.push(`${p}${g}.weight is ${shape(gt)}: its rows should read embedding_length ${E} values`);
      if (experts && gt.ne[2] !== hp.nExpert) faults.push(`${p}${g}.weight is ${shape(gt)}: it should hold expert_count ${hp.nExpert} experts`);
      if (dt && (dt.ne[0] !== gt.ne[1] || dt.ne[1] !== E || (experts && dt.ne[2] !== hp.nExpert))) {
        faults.push(`${p}${d}.weight is ${shape(dt)} beside ${p}${g}.weight ${shape(gt)}: down should be [${gt.ne[1]}, ${E}${experts ? `, ${hp.nExpert}` : ""}]`);
      }
    }
  }
  if (faults.length) {
    const shown = faults.slice(0, 6);
    throw new ModelCheckError(f.path, `${shown.join("; ")}${faults.length > shown.length ? `; and ${faults.length - shown.length} more` : ""}`);
  }

  const notes: string[] = [];
  for (const h of f.headers) {
    const end = h.tensors.reduce((a, x) => Math.max(a, x.fileOffset + x.nbytes), h.dataOffset);
    const tail = h.fileSize - end;
    if (tail >= TAIL_NOTE_BYTES) notes.push(`model check: ${safeText(h.path, 400)} has ${(tail / 2 ** 30).toFixed(2)} GiB after its last tensor; they are not read`);
  }
  return notes;
}

/** What checkForward needs of a loaded model (Model satisfies it). */
export interface ForwardCheckable {
  readonly gguf: GgufFile;
  readonly hp: HParams;
  evalSequence(tokens: ArrayLike<number>, pos0: number, slot?: number): Float32Array;
}

/**
 * One token's forward pass (the beginning-of-sequence token, else id 0, at position 0 of slot 0)
 * through the loaded backend: every logit must be finite, else the model is refused, naming the
 * float tensors that hold NaN or infinity when a scan finds them. The slot's cache holds nothing
 * the scheduler knows of afterwards (it starts every slot empty), so nothing of it is served.
 */
export function checkForward(m: ForwardCheckable, token = bosOf(m)): void {
  const logits = m.evalSequence([token], 0, 0);
  let bad = 0, first = -1;
  for (let i = 0; i < logits.length; i++) {
    if (!Number.isFinite(logits[i])) {
      bad++;
      if (first < 0) first = i;
    }
  }
  if (!bad) return;
  const culprits = nonFiniteFloatTensors(m.gguf);
  const where = culprits.length
    ? `; ${culprits.slice(0, 4).map((c) => `${c.name} holds ${c.count} NaN or infinite values`).join(", ")}${culprits.length > 4 ? ` and ${culprits.length - 4} more tensors do too` : ""}`
    : "; the weights hold NaN or infinity (in a quantized tensor's scales, or overflowing)";
  throw new ModelCheckError(m.gguf.path, `a one-token forward pass (token ${token} at position 0) gives ${bad} NaN or infinite logits of ${logits.length} (the first at token ${first})${where}: the file is damaged or was converted wrongly`);
}

function bosOf(m: ForwardCheckable): number {
  const bos = m.gguf.raw("tokenizer.ggml.bos_token_id");
  return typeof bos === "number" && bos >= 0 && bos < m.hp.nVocab ? bos : 0;
}

/** The F32 and F16 tensors (norms, routers, small matrices up to 64 MiB each) holding NaN or infinity. */
function nonFiniteFloatTensors(f: GgufFile): { name: string; count: number }[] {
  const out: { name: string; count: number }[] = [];
  const fds = new Map<string, number>();
  try {
    for (const t of f.tensors.values()) {
      if ((t.type !== GgmlType.F32 && t.type !== GgmlType.F16) || t.nbytes > 64 << 20 || t.nbytes === 0) continue;
      let fd = fds.get(t.file);
      if (fd === undefined) fds.set(t.file, (fd = openSync(t.file, "r")));
      const buf = new Uint8Array(t.nbytes);
      readSync(fd, buf, 0, t.nbytes, t.fileOffset);
      let count = 0;
      if (t.type === GgmlType.F32) {
        for (const v of new Float32Array(buf.buffer)) if (!Number.isFinite(v)) count++;
      } else {
        for (const h of new Uint16Array(buf.buffer)) if ((h & 0x7c00) === 0x7c00) count++;
      }
      if (count) out.push({ name: t.name, count });
    }
  } finally {
    for (const fd of fds.values()) closeSync(fd);
  }
  return out;
}
