// `bloomery-serve bench -npl`: running one batched decode test as llama-batched-bench runs it - N
// sequences (a slot each), every one its own prompt of -p tokens, all prompts in one logical batch
// (decode calls of -b tokens, forwards of -ub, logits of each sequence's last prompt row), then -n
// steps that advance all N sequences by one token in one forward pass (-tgs: one after another).

import type { Backend } from "../engine/backend.ts";
import type { Model } from "../engine/model.ts";
import { counterMarks, lcg, reportCounters, type BenchBase, type BenchRunner } from "./bench-run.ts";

/** How the next token of a sequence is chosen: at random (llama-batched-bench; the benchmark), or the argmax of its logits (greedy; a check). */
export type TokenPick = "random" | "greedy";

export interface BatchedDecoderOptions {
  /** sequences (slots 0..nSeq-1 of the backend) */
  nSeq: number;
  /** logical batch of one decode call (-b); each is split into forwards of the backend's maxTokens (-ub) */
  nBatch: number;
  pick: TokenPick;
  /** seed of the random tokens (default 1234, as the one-sequence tests) */
  seed?: number;
  /** every logits row the decoder reads: its sequence, the position of the token it follows, the row (valid only during the call) */
  onLogits?: (seq: number, pos: number, row: Float32Array) => void;
}

/** Thrown when a batched test's parameters cannot run (a bad sequence count, prompts that do not match the sequences). */
export class BatchedBenchError extends Error {
  override readonly name = "BatchedBenchError";
}

function argmax(row: Float32Array): number {
  let best = 0, bv = row[0];
  for (let i = 1; i < row.length; i++) if (row[i] > bv) { bv = row[i]; best = i; }
  return best;
}

/** Several sequences of one backend decoded together: prompts in one logical batch, then batched steps. */
export class BatchedDecoder {
  private readonly rand: () => number;
  private readonly logits: Float32Array;
  private readonly ub: number;

  constructor(
    private readonly be: Backend,
    private readonly nVocab: number,
    private readonly o: BatchedDecoderOptions,
  ) {
    if (!Number.isInteger(o.nSeq) || o.nSeq < 1 || o.nSeq > be.nSlots) throw new BatchedBenchError(`batched decode of ${o.nSeq} sequences: the context has ${be.nSlots} slot(s)`);
    if (!Number.isInteger(o.nBatch) || o.nBatch < 1) throw new BatchedBenchError(`batched decode: a logical batch of ${o.nBatch} tokens`);
    this.rand = lcg(o.seed ?? 1234);
    this.ub = Math.max(1, Math.min(be.maxTokens, o.nBatch));
    // a forward has at most one output row per sequence, and at most ub rows
    this.logits = new Float32Array(Math.min(this.ub, o.nSeq) * nVocab);
  }

  /** A random token id (llama-batched-bench draws them with rand()). */
  token(): number {
    return this.rand() % this.nVocab;
  }

  /** n random tokens for each sequence. */
  randomPrompts(n: number): Int32Array[] {
    return Array.from({ length: this.o.nSeq }, () => Int32Array.from({ length: n }, () => this.token()));
  }

  /**
   * One logical batch: decode calls of -b tokens, each forwards of -ub tokens; `out` marks rows
   * whose logits are read. Returns each sequence's next token (from its last marked row; a random
   * one for sequences without one, or in random mode).
   */
  private decode(tokens: Int32Array, pos: Int32Array, seq: Int32Array, out: Uint8Array): Int32Array {
    const next = Int32Array.from({ length: this.o.nSeq }, () => -1);
    const V = this.nVocab, n = tokens.length;
    for (let b0 = 0; b0 < n; b0 += this.o.nBatch) {
      const bEnd = Math.min(n, b0 + this.o.nBatch);
      for (let s = b0; s < bEnd; s += this.ub) {
        const e = Math.min(bEnd, s + this.ub);
        const rows: number[] = [];
        for (let i = s; i < e; i++) if (out[i]) rows.push(i - s);
        this.be.forward({
          tokens: tokens.subarray(s, e), pos: pos.subarray(s, e), seq: seq.subarray(s, e),
          outRows: Int32Array.from(rows), logits: this.logits.subarray(0, rows.length * V),
        });
        rows.forEach((r, k) => {
          const row = this.logits.subarray(k * V, (k + 1) * V), q = seq[s + r];
          this.o.onLogits?.(q, pos[s + r], row);
          if (this.o.pick === "greedy") next[q] = argmax(row);
        });
      }
    }
    for (let q = 0; q < next.length; q++) if (next[q] < 0 || this.o.pick === "random") next[q] = this.token();
    return next;
  }

  /** Each sequence's prompt (prompts[q] for slot q) at positions pos0.., all in one logical batch; each sequence's next token. */
  prefill(prompts: readonly Int32Array[], pos0: number): Int32Array {
    if (prompts.length !== this.o.nSeq) throw new BatchedBenchError(`prefill: ${prompts.length} prompts for ${this.o.nSeq} sequences`);
    const n = prompts.reduce((a, p) => a + p.length, 0);
    const tokens = new Int32Array(n), pos = new Int32Array(n), seq = new Int32Array(n), out = new Uint8Array(n);
    let k = 0;
    prompts.forEach((p, q) => {
      for (let i = 0; i < p.length; i++, k++) {
        tokens[k] = p[i];
        pos[k] = pos0 + i;
        seq[k] = q;
      }
      if (p.length) out[k - 1] = 1;
    });
    return this.decode(tokens, pos, seq, out);
  }

  /** One step: tokens[q] of every sequence q at position pos, in one forward (more when -ub is below the sequences); the next tokens. */
  step(tokens: Int32Array, pos: number): Int32Array {
    const N = this.o.nSeq;
    if (tokens.length !== N) throw new BatchedBenchError(`step: ${tokens.length} tokens for ${N} sequences`);
    return this.decode(tokens, new Int32Array(N).fill(pos), Int32Array.from({ length: N }, (_, q) => q), new Uint8Array(N).fill(1));
  }

  /**
   * n decode steps from each sequence's first token at position pos0: all sequences in each step,
   * or (separate) one sequence's n steps after another's. Returns each sequence's n next tokens.
   */
  generate(first: Int32Array, pos0: number, n: number, separate = false): Int32Array[] {
    const N = this.o.nSeq;
    const made = Array.from({ length: N }, () => new Int32Array(n));
    if (!separate) {
      let cur = first;
      for (let i = 0; i < n; i++) {
        cur = this.step(cur, pos0 + i);
        for (let q = 0; q < N; q++) made[q][i] = cur[q];
      }
      return made;
    }
    for (let q = 0; q < N; q++) {
      let tok = first[q];
      for (let i = 0; i < n; i++) {
        const nx = this.decode(Int32Array.of(tok), Int32Array.of(pos0 + i), Int32Array.of(q), Uint8Array.of(1));
        tok = nx[q];
        made[q][i] = tok;
      }
    }
    return made;
  }
}

/** One batched decode test: a base's parameters, the prompt and generated tokens of each sequence, the sequences. */
export interface BatchedTest extends BenchBase {
  nPrompt: number;
  nGen: number;
  nPl: number;
}

/** The timed parts of each run, in nanoseconds. */
export interface BatchedSamples {
  ppNs: number[];
  tgNs: number[];
  /** the backend that ran it ("CPU", "CUDA") */
  backend: string;
}

/** llama-batched-bench's N_KV: the positions the test fills (a depth counted in each sequence). */
export const batchedNKv = (t: Pick<BatchedTest, "nPl" | "nPrompt" | "nGen" | "nDepth">): number => t.nPl * (t.nDepth + t.nPrompt + t.nGen);

export function batchedName(t: Pick<BatchedTest, "nPl" | "nPrompt" | "nGen" | "nDepth">): string {
  return `pp${t.nPrompt}+tg${t.nGen} x${t.nPl}${t.nDepth > 0 ? ` @ d${t.nDepth}` : ""}`;
}

const profiling = (): boolean => {
  const v = process.env.BLOOMERY_CUDA_PROFILE;
  return v !== undefined && v !== "" && v[0] !== "0";
};

/**
 * Runs a batched test `reps` times after an optional warm-up (the prompts and one batched step):
 * each run new random prompts at the test's positions (the depth, filled once, stays), timed
 * apart from the decode steps. With BLOOMERY_CUDA_PROFILE on a card, the context's per-section
 * profile (decode steps of up to 8 tokens apart from larger batches) prints when it closes, after
 * a line naming the test.
 */
export function runBatched(runner: BenchRunner, t: BatchedTest, reps: number, warmup: boolean, separate: boolean): BatchedSamples {
  if (!Number.isInteger(t.nPl) || t.nPl < 1) throw new BatchedBenchError(`a batched test needs 1 or more sequences (got ${t.nPl})`);
  if (t.nGen < 1) throw new BatchedBenchError(`a batched test needs decode steps (-n ${t.nGen})`);
  const m: Model = runner.modelFor(t, { nSlots: t.nPl, nCtx: t.nDepth + t.nPrompt + t.nGen, maxTokens: Math.min(t.nUbatch, t.nBatch) });
  const be = runner.backendFor(m, t, t.nPl, t.nDepth + t.nPrompt + t.nGen);
  const backend = be.name;
  try {
    const dec = new BatchedDecoder(be, m.hp.nVocab, { nSeq: t.nPl, nBatch: t.nBatch, pick: "random" });
    if (t.nDepth > 0) dec.prefill(dec.randomPrompts(t.nDepth), 0); // positions below the test's are never rewritten
    const pos = t.nDepth + t.nPrompt;
    if (warmup) dec.step(dec.prefill(dec.randomPrompts(t.nPrompt), t.nDepth), pos);
    const marks = counterMarks(m, be);
    const ppNs: number[] = [], tgNs: number[] = [];
    for (let r = 0; r < reps; r++) {
      const prompts = dec.randomPrompts(t.nPrompt);
      const t0 = performance.now();
      const first = dec.prefill(prompts, t.nDepth);
      const t1 = performance.now();
      dec.generate(first, pos, t.nGen, separate);
      const t2 = performance.now();
      ppNs.push(Math.round((t1 - t0) * 1e6));
      tgNs.push(Math.round((t2 - t1) * 1e6));
    }
    reportCounters(m, be, marks, batchedName(t), reps * t.nPl * (t.nPrompt + t.nGen));
    if (backend === "CUDA" && profiling()) process.stderr.write(`bench: cuda profile of ${batchedName(t)}${separate ? " (-tgs)" : ""} (${reps} run(s)${warmup ? " and the warm-up" : ""}) follows\n`);
    return { ppNs, tgNs, backend };
  } finally {
    be.close();
  }
}
