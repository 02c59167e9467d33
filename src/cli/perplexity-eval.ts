// `bloomery-serve perplexity`: llama-perplexity's evaluation protocol on a backend: the text's
// tokens cut into chunks of n_ctx, each chunk evaluated from position 0 in its own sequence (the
// first token replaced by BOS when the vocabulary adds one), -b tokens a decode call (whole chunks
// side by side in as many sequences as -b holds, else pieces of one chunk), forwards of the
// backend's batch size, and only the logits of the scored positions (n_ctx/2 .. n_ctx-2) asked
// for and handed on, one row at a time, in chunk order.
import type { Backend } from "../engine/backend.ts";
import { scoredRows } from "./perplexity-logits.ts";

/** How chunks go into decode calls (llama's n_seq, n_batch, num_batches). */
export interface ChunkLayout {
  nCtx: number;
  /** chunks side by side in one decode call (each its own sequence) */
  nSeq: number;
  /** tokens a decode call (-b, capped to n_seq * n_ctx) */
  nBatch: number;
  /** decode calls a chunk takes (1 when n_seq > 1) */
  numBatches: number;
  /** the first scored position */
  first: number;
  /** scored rows a chunk */
  nRows: number;
}

/** llama-perplexity's layout for -c nCtx and -b nBatch: floor(b / c) chunks a call, at least one. */
export function chunkLayout(nCtx: number, nBatchAsked: number): ChunkLayout {
  const nSeq = Math.max(1, Math.floor(nBatchAsked / nCtx));
  const nBatch = Math.min(nBatchAsked, nSeq * nCtx);
  return { nCtx, nSeq, nBatch, numBatches: Math.ceil(nCtx / nBatch), first: Math.floor(nCtx / 2), nRows: scoredRows(nCtx) };
}

/** Receives a scored row: chunk index, row (0 .. nRows-1; position first + row), logits[offset .. offset + n_vocab). */
export type RowSink = (chunk: number, row: number, logits: Float32Array, offset: number) => void;

export class ChunkEvaluator {
  private readonly tok: Int32Array;
  private readonly pos: Int32Array;
  private readonly seq: Int32Array;
  private readonly out: Int32Array;
  private readonly outChunk: Int32Array;
  private readonly outRow: Int32Array;
  private readonly logits: Float32Array;
  /** tokens evaluated so far */
  evaluated = 0;
  /** milliseconds in the backend's forwards (the rest of a run is the rows' arithmetic) */
  forwardMs = 0;

  constructor(
    private readonly be: Backend,
    private readonly nVocab: number,
    readonly layout: ChunkLayout,
    /** the BOS id when the vocabulary adds one (it replaces each chunk's first token) */
    private readonly bos: number | undefined,
  ) {
    if (be.nSlots < layout.nSeq) throw new Error(`perplexity: the backend has ${be.nSlots} sequences; the layout needs ${layout.nSeq}`);
    if (be.nCtxSlot < layout.nCtx) throw new Error(`perplexity: the backend's context is ${be.nCtxSlot} tokens; a chunk is ${layout.nCtx}`);
    const n = layout.nSeq * Math.min(layout.nBatch, layout.nCtx);
    this.tok = new Int32Array(n);
    this.pos = new Int32Array(n);
    this.seq = new Int32Array(n);
    const f = Math.min(be.maxTokens, n);
    this.out = new Int32Array(f);
    this.outChunk = new Int32Array(f);
    this.outRow = new Int32Array(f);
    this.logits = new Float32Array(Math.min(f, layout.nSeq * layout.nRows) * nVocab);
  }

  /** Evaluates chunks i .. i+n-1 of tokens (chunk c is tokens[c*nCtx ..)), each scored row to sink. */
  group(tokens: Int32Array, i: number, n: number, sink: RowSink): void {
    const { nCtx, nBatch, numBatches, first } = this.layout;
    const last = nCtx - 2;
    for (let j = 0; j < numBatches; j++) {
      const size = Math.min(nCtx - j * nBatch, nBatch);
      // the decode call: the n chunks' tokens side by side, chunk-major
      let m = 0;
      for (let s = 0; s < n; s++) {
        const base = (i + s) * nCtx + j * nBatch;
        for (let k = 0; k < size; k++, m++) {
          this.tok[m] = j === 0 && k === 0 && this.bos !== undefined ? this.bos : tokens[base + k];
          this.pos[m] = j * nBatch + k;
          this.seq[m] = s;
        }
      }
      // in forwards of the backend's batch size, asking only for the scored rows
      for (let f0 = 0; f0 < m; f0 += this.be.maxTokens) {
        const c = Math.min(this.be.maxTokens, m - f0);
        let r = 0;
        for (let t = 0; t < c; t++) {
          const p = this.pos[f0 + t];
          if (p < first || p > last) continue;
          this.out[r] = t;
          this.outChunk[r] = i + this.seq[f0 + t];
          this.outRow[r] = p - first;
          r++;
        }
        const t0 = performance.now();
        this.be.forward({
          tokens: this.tok.subarray(f0, f0 + c), pos: this.pos.subarray(f0, f0 + c), seq: this.seq.subarray(f0, f0 + c),
          outRows: this.out.subarray(0, r), logits: this.logits.subarray(0, r * this.nVocab),
        });
        this.forwardMs += performance.now() - t0;
        this.evaluated += c;
        for (let k = 0; k < r; k++) sink(this.outChunk[k], this.outRow[k], this.logits, k * this.nVocab);
      }
    }
  }
}
