// `bloomery-serve perplexity`: the --kl-divergence-base file in llama.cpp's layout (what
// llama-perplexity --kl-divergence-base writes and --kl-divergence reads): "_logits_", then int32
// n_ctx, n_vocab, n_chunk, the n_chunk * n_ctx evaluated token ids (int32), then for each chunk its
// n_ctx - 1 - n_ctx/2 scored rows, each packed as perplexity-score.ts's packRow writes it
// (packedRowLength(n_vocab) uint16). Little-endian, as llama writes it on the machines it runs on.
import { closeSync, fstatSync, openSync, readSync, writeSync } from "node:fs";
import { packedRowLength } from "./perplexity-score.ts";

const MAGIC = "_logits_";
const HEADER_BYTES = 8 + 3 * 4;

/** Rows scored in a chunk of n_ctx tokens (positions n_ctx/2 .. n_ctx-2 predict the next token). */
export function scoredRows(nCtx: number): number {
  return nCtx - 1 - Math.floor(nCtx / 2);
}

/** A chunk's packed rows: the uint16 view and the f32 view of the same memory. */
export class PackedChunk {
  readonly q: Uint16Array;
  readonly qf: Float32Array;
  readonly rowLength: number;
  constructor(nCtx: number, nVocab: number) {
    this.rowLength = packedRowLength(nVocab);
    this.q = new Uint16Array(scoredRows(nCtx) * this.rowLength);
    this.qf = new Float32Array(this.q.buffer);
  }
  get bytes(): Uint8Array {
    return new Uint8Array(this.q.buffer);
  }
}

export class LogitsFileError extends Error {
  override readonly name = "LogitsFileError";
}

/** Writes a logits file: the header and tokens at open, then one chunk of packed rows at a time. */
export class LogitsWriter {
  private fd: number;
  constructor(readonly path: string, nCtx: number, nVocab: number, nChunk: number, tokens: Int32Array) {
    try {
      this.fd = openSync(path, "w");
    } catch (e) {
      throw new LogitsFileError(`failed to open ${path} for writing: ${e instanceof Error ? e.message : String(e)}`);
    }
    const h = new DataView(new ArrayBuffer(HEADER_BYTES));
    for (let i = 0; i < 8; i++) h.setUint8(i, MAGIC.charCodeAt(i));
    h.setInt32(8, nCtx, true);
    h.setInt32(12, nVocab, true);
    h.setInt32(16, nChunk, true);
    this.write(new Uint8Array(h.buffer));
    const t = tokens.subarray(0, nChunk * nCtx);
    this.write(new Uint8Array(t.buffer, t.byteOffset, t.byteLength));
  }
  private write(b: Uint8Array): void {
    let off = 0;
    while (off < b.length) off += writeSync(this.fd, b, off, b.length - off);
  }
  writeChunk(c: PackedChunk): void {
    this.write(c.bytes);
  }
  close(): void {
    closeSync(this.fd);
  }
}

/** A logits file opened for reading: its header and tokens, then one chunk of packed rows at a time. */
export class LogitsReader {
  readonly nCtx: number;
  readonly nVocab: number;
  readonly nChunk: number;
  readonly tokens: Int32Array;
  /** chunks whose rows are all in the file (n_chunk unless the file was cut short) */
  readonly completeChunks: number;
  private fd: number;
  private pos: number;

  constructor(readonly path: string) {
    try {
      this.fd = openSync(path, "r");
    } catch (e) {
      throw new LogitsFileError(`failed to open ${path}: ${e instanceof Error ? e.message : String(e)}`);
    }
    try {
      const h = new Uint8Array(HEADER_BYTES);
      if (readSync(this.fd, h, 0, 8, 0) !== 8 || String.fromCharCode(...h.subarray(0, 8)) !== MAGIC)
        throw new LogitsFileError(`${path} does not look like a file containing log-probabilities`);
      if (readSync(this.fd, h, 8, 12, 8) !== 12) throw new LogitsFileError(`failed reading n_ctx, n_vocab, n_chunk from ${path}`);
      const v = new DataView(h.buffer);
      this.nCtx = v.getInt32(8, true);
      this.nVocab = v.getInt32(12, true);
      this.nChunk = v.getInt32(16, true);
      if (this.nCtx < 3 || this.nVocab < 1 || this.nChunk < 1)
        throw new LogitsFileError(`${path}: implausible header (n_ctx ${this.nCtx}, n_vocab ${this.nVocab}, n_chunk ${this.nChunk})`);
      const head = HEADER_BYTES + 4 * this.nCtx * this.nChunk;
      const chunkBytes = 2 * packedRowLength(this.nVocab) * scoredRows(this.nCtx);
      const size = fstatSync(this.fd).size;
      if (size < head) throw new LogitsFileError(`failed reading evaluation tokens from ${path}`);
      if (size > head + chunkBytes * this.nChunk)
        throw new LogitsFileError(`${path} holds ${size} bytes, more than its header (n_ctx ${this.nCtx}, n_vocab ${this.nVocab}, n_chunk ${this.nChunk}) says (${head + chunkBytes * this.nChunk})`);
      this.completeChunks = Math.floor((size - head) / chunkBytes);
      this.tokens = new Int32Array(this.nCtx * this.nChunk);
      this.pos = HEADER_BYTES;
      this.read(new Uint8Array(this.tokens.buffer), "evaluation tokens");
    } catch (e) {
      closeSync(this.fd);
      throw e;
    }
  }

  private read(b: Uint8Array, what: string): void {
    let off = 0;
    while (off < b.length) {
      const n = readSync(this.fd, b, off, b.length - off, this.pos);
      if (n <= 0) throw new LogitsFileError(`failed reading ${what} from ${this.path}`);
      off += n;
      this.pos += n;
    }
  }

  /** The next chunk's packed rows into c (chunk is its index, for the message on a short file). */
  readChunk(c: PackedChunk, chunk: number): void {
    this.read(c.bytes, `log-probs for chunk ${chunk}`);
  }

  close(): void {
    closeSync(this.fd);
  }
}
