// bloomery engine: slot state files (llama-server's /slots/{id}?action=save|restore): the token
// ids a slot holds and their KV (then, for a model with recurrent layers, the slot's recurrent state after
// those tokens; and with draft-mtp the MTP layer's own KV and state after them), with a header naming the model so a
// state cannot be restored into another model.
import { closeSync, openSync, readSync, writeSync, fstatSync } from "node:fs";

const MAGIC = "BLSLOT01";

export interface SlotFileHeader {
  model: string;
  n_tokens: number;
  pos_bytes: number;
  /** bytes of the recurrent state after the KV (absent: none) */
  rs_bytes?: number;
  /** bytes of the speculative drafter's own state after those (draft-mtp's MTP KV; absent: none) */
  draft_bytes?: number;
}

export class SlotFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SlotFileError";
  }
}

export function writeSlotFile(path: string, h: SlotFileHeader, tokens: readonly number[], kv: Uint8Array, rs?: Uint8Array, draft?: Uint8Array): number {
  const head = Buffer.from(JSON.stringify(h), "utf8");
  const pre = Buffer.alloc(12);
  pre.write(MAGIC, 0, "latin1");
  pre.writeUInt32LE(head.length, 8);
  const toks = new Uint8Array(Int32Array.from(tokens).buffer);
  const fd = openSync(path, "w");
  let n = 0;
  try {
    for (const b of [pre, head, toks, kv, rs, draft]) {
      if (!b) continue;
      let off = 0;
      while (off < b.length) off += writeSync(fd, b, off, b.length - off);
      n += b.length;
    }
  } finally {
    closeSync(fd);
  }
  return n;
}

export function readSlotFile(path: string, expect: { model: string; posBytes: number; maxTokens: number; rsBytes?: number }): { tokens: number[]; kv: Uint8Array; rs?: Uint8Array; draft?: Uint8Array; bytes: number } {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (e) {
    throw new SlotFileError(`cannot open slot file: ${(e as Error).message}`);
  }
  try {
    const size = fstatSync(fd).size;
    const read = (n: number, at: number) => {
      if (at + n > size) throw new SlotFileError(`slot file ${path} is truncated`);
      const b = new Uint8Array(n);
      let got = 0;
      while (got < n) got += readSync(fd, b, got, n - got, at + got);
      return b;
    };
    const pre = Buffer.from(read(12, 0));
    if (pre.toString("latin1", 0, 8) !== MAGIC) throw new SlotFileError(`${path} is not a bloomery slot file`);
    const hl = pre.readUInt32LE(8);
    if (hl > 1 << 20) throw new SlotFileError(`${path}: header length ${hl} is absurd`);
    let h: SlotFileHeader;
    try {
      h = JSON.parse(Buffer.from(read(hl, 12)).toString("utf8"));
    } catch {
      throw new SlotFileError(`${path}: header is not valid JSON`);
    }
    if (h.model !== expect.model) throw new SlotFileError(`slot file was saved from model '${h.model}', this server runs '${expect.model}'`);
    if (h.pos_bytes !== expect.posBytes) throw new SlotFileError(`slot file KV layout (${h.pos_bytes} bytes a position) does not match this server (${expect.posBytes})`);
    if (!Number.isInteger(h.n_tokens) || h.n_tokens < 0 || h.n_tokens > expect.maxTokens) throw new SlotFileError(`slot file holds ${h.n_tokens} tokens; the slot context is ${expect.maxTokens}`);
    const tokBytes = read(h.n_tokens * 4, 12 + hl);
    const tokens = Array.from(new Int32Array(tokBytes.buffer));
    const rsBytes = h.rs_bytes ?? 0;
    if (rsBytes !== (expect.rsBytes ?? 0)) {
      throw new SlotFileError(`slot file's recurrent state (${rsBytes} bytes) does not match this model's (${expect.rsBytes ?? 0} bytes a slot)`);
    }
    const kv = read(h.n_tokens * h.pos_bytes, 12 + hl + h.n_tokens * 4);
    const end = 12 + hl + h.n_tokens * (4 + h.pos_bytes);
    const rs = rsBytes ? read(rsBytes, end) : undefined;
    const draftBytes = h.draft_bytes ?? 0;
    if (!Number.isInteger(draftBytes) || draftBytes < 0) throw new SlotFileError(`slot file's drafter state of ${draftBytes} bytes is not a size`);
    const draft = draftBytes ? read(draftBytes, end + rsBytes) : undefined;
    if (end + rsBytes + draftBytes !== size) throw new SlotFileError(`slot file ${path} has trailing bytes`);
    return { tokens, kv, rs, draft, bytes: size };
  } finally {
    closeSync(fd);
  }
}
