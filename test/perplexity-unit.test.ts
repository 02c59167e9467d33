// `perplexity`'s parts without a model: the chunk layout and the decode calls it makes on a
// recording backend (BOS, positions, sequences, the rows asked for), one row's arithmetic
// (negative log-likelihood, llama's packed uint16 row, KL divergence), llama's statistics, and the
// logits file's byte layout.
import { describe, expect, test, beforeAll } from "bun:test";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Backend, Batch } from "../src/engine/backend.ts";
import { ChunkEvaluator, chunkLayout } from "../src/cli/perplexity-eval.ts";
import { LogitsFileError, LogitsReader, LogitsWriter, PackedChunk, scoredRows } from "../src/cli/perplexity-logits.ts";
import { covariance, kldRow, KldSums, meanAndUncertainty, median, packedRowLength, packRow, percentile, pplEstimate, rowNll } from "../src/cli/perplexity-score.ts";
import { fg, fx, kldStats, kldStatsText } from "../src/cli/perplexity-report.ts";
import { parsePerplexityArgs, PERPLEXITY_TABLE } from "../src/cli/perplexity-flags.ts";
import { checkTable } from "../src/cli/flag-parse.ts";
import { FlagError } from "../src/cli/flag-types.ts";

let dir: string;
beforeAll(() => { dir = mkdtempSync(join(tmpdir(), "bloomery-ppl-unit-")); });

/** A backend that records each forward and writes logits that name the row: [seq, pos, token, 0...]. */
class Recorder implements Backend {
  readonly name = "REC";
  calls: { tokens: number[]; pos: number[]; seq: number[]; out: number[] }[] = [];
  constructor(readonly maxTokens: number, readonly nSlots: number, readonly nCtxSlot: number, private readonly V: number) {}
  forward(b: Batch): void {
    expect(b.tokens.length).toBeLessThanOrEqual(this.maxTokens);
    this.calls.push({ tokens: [...b.tokens], pos: [...b.pos], seq: [...b.seq], out: [...b.outRows] });
    b.outRows.forEach((r, k) => {
      b.logits.fill(0, k * this.V, (k + 1) * this.V);
      b.logits[k * this.V] = b.seq[r];
      b.logits[k * this.V + 1] = b.pos[r];
      b.logits[k * this.V + 2] = b.tokens[r];
    });
  }
  kvPosBytes(): number { return 0; }
  kvSave(): void { throw new Error("not used"); }
  kvLoad(): void { throw new Error("not used"); }
  kvCopy(): void { throw new Error("not used"); }
  close(): void {}
}

describe("the command line", () => {
  test("the table is well formed; llama-perplexity's defaults; the server's placement flags", () => {
    expect(() => checkTable(PERPLEXITY_TABLE)).not.toThrow();
    const p = parsePerplexityArgs(["-m", "m.gguf", "-f", "t.txt"], {})!;
    expect(p).toMatchObject({ nCtx: 512, nBatch: 2048, nUbatch: 512, chunks: -1, outputType: 0, klDivergence: false, nGpuLayers: "auto", cpuMoe: false, promoteSlots: undefined });
    const q = parsePerplexityArgs(["-m", "m.gguf", "--kl-divergence-base", "b.kld", "--kl-divergence", "-c", "1024", "-b", "512", "--chunks", "9", "-ngl", "99", "--cpu-moe", "-ot", "blk\\.0\\.ffn_.*_exps=CPU", "-dev", "CUDA1", "--card-budget", "24576"], {})!;
    expect(q).toMatchObject({ nCtx: 1024, nBatch: 512, chunks: 9, nGpuLayers: 99, cpuMoe: true, device: 1, cardBudgetMiB: 24576, logitsFile: "b.kld", klDivergence: true, file: undefined });
    expect(q.overrides).toEqual([{ pattern: "blk\\.0\\.ffn_.*_exps", buffer: "CPU" }]);
    expect(parsePerplexityArgs(["-m", "m.gguf", "-f", "t.txt", "-dev", "none"], {})!.nGpuLayers).toBe(0);
    expect(parsePerplexityArgs(["-m", "m.gguf", "-f", "t.txt", "--save-all-logits", "x"], {})).toMatchObject({ logitsFile: "x", klDivergence: false });
  });

  test("what is refused", () => {
    expect(() => parsePerplexityArgs(["-f", "t.txt"], {})).toThrow(FlagError);
    expect(() => parsePerplexityArgs(["-m", "m.gguf", "-f", "t.txt", "-c", "0"], {})).toThrow("perplexity tool requires '--ctx-size' > 0");
    expect(() => parsePerplexityArgs(["-m", "m.gguf", "-f", "t.txt", "--ppl-stride", "256"], {})).toThrow(/strided perplexity/);
    expect(() => parsePerplexityArgs(["-m", "m.gguf", "-f", "t.txt", "--winogrande"], {})).toThrow(/only the perplexity and KL-divergence modes/);
    expect(() => parsePerplexityArgs(["-m", "m.gguf", "-f", "t.txt", "-dev", "CUDA0,CUDA1"], {})).toThrow(/one card/);
  });
});

describe("chunk layout and decode calls", () => {
  test("llama's n_seq, n_batch and batches a chunk", () => {
    expect(chunkLayout(512, 2048)).toEqual({ nCtx: 512, nSeq: 4, nBatch: 2048, numBatches: 1, first: 256, nRows: 255 });
    expect(chunkLayout(512, 1100)).toMatchObject({ nSeq: 2, nBatch: 1024, numBatches: 1 });
    expect(chunkLayout(512, 512)).toMatchObject({ nSeq: 1, nBatch: 512, numBatches: 1 });
    expect(chunkLayout(512, 300)).toMatchObject({ nSeq: 1, nBatch: 300, numBatches: 2 });
    expect(chunkLayout(17, 4)).toMatchObject({ nSeq: 1, nBatch: 4, numBatches: 5, first: 8, nRows: 8 });
    expect(scoredRows(512)).toBe(255);
  });

  for (const [nCtx, nBatch, maxTokens, bos] of [[32, 128, 40, 99], [32, 20, 7, undefined], [33, 33, 33, 7]] as const) {
    test(`-c ${nCtx} -b ${nBatch}, forwards of ${maxTokens}, bos ${bos}: every chunk evaluated once from position 0, only its scored rows asked for`, () => {
      const V = 6, layout = chunkLayout(nCtx, nBatch), nChunk = 5;
      const be = new Recorder(maxTokens, layout.nSeq, nCtx, V);
      const tokens = Int32Array.from({ length: nChunk * nCtx + 3 }, (_, i) => 1000 + i);
      const ev = new ChunkEvaluator(be, V, layout, bos);
      const rows: [number, number][] = [];
      for (let i = 0; i < nChunk; i += layout.nSeq) {
        const seen = be.calls.length;
        ev.group(tokens, i, Math.min(layout.nSeq, nChunk - i), (c, row, l, o) => {
          rows.push([c, row]);
          // the row handed on is the one the backend computed for that chunk and position
          expect(l[o] + i).toBe(c);
          expect(l[o + 1]).toBe(layout.first + row);
          expect(l[o + 2]).toBe(layout.first + row === 0 && bos !== undefined ? bos : tokens[c * nCtx + layout.first + row]);
        });
        // each chunk of the group: positions 0..nCtx-1 in its own sequence, its tokens, BOS first
        const got = new Map<number, Map<number, number>>();
        for (const call of be.calls.slice(seen)) {
          call.tokens.forEach((t, k) => {
            const s = call.seq[k];
            if (!got.has(s)) got.set(s, new Map());
            expect(got.get(s)!.has(call.pos[k])).toBe(false);
            got.get(s)!.set(call.pos[k], t);
          });
          // rows asked for: exactly the scored positions
          const want = call.pos.map((p, k) => (p >= layout.first && p <= nCtx - 2 ? k : -1)).filter((k) => k >= 0);
          expect(call.out).toEqual(want);
        }
        expect(got.size).toBe(Math.min(layout.nSeq, nChunk - i));
        for (const [s, m] of got) {
          expect(m.size).toBe(nCtx);
          for (let p = 0; p < nCtx; p++) expect(m.get(p)).toBe(p === 0 && bos !== undefined ? bos : tokens[(i + s) * nCtx + p]);
        }
      }
      // rows in chunk order, each once
      expect(rows).toEqual(Array.from({ length: nChunk * layout.nRows }, (_, k) => [Math.floor(k / layout.nRows), k % layout.nRows]));
      expect(ev.evaluated).toBe(nChunk * nCtx);
    });
  }
});

/** A row of logits with a spread like a model's (some far below the top). */
function row(V: number, seed: number): Float32Array {
  let s = seed >>> 0;
  const r = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32);
  return Float32Array.from({ length: V }, () => (r() - 0.5) * 40);
}

describe("one row's arithmetic", () => {
  test("rowNll is -log softmax of the token", () => {
    const l = row(1000, 1);
    let m = -Infinity;
    for (const x of l) m = Math.max(m, x);
    let z = 0;
    for (const x of l) z += Math.exp(x - m);
    for (const t of [0, 17, 999]) expect(rowNll(l, 0, 1000, t)).toBeCloseTo(-(l[t] - m - Math.log(z)), 5);
    // a row at an offset reads the same
    const two = new Float32Array(2000);
    two.set(l, 1000);
    expect(rowNll(two, 1000, 1000, 17)).toBe(rowNll(l, 0, 1000, 17));
  });

  test("packRow: llama's record (scale, smallest log-prob kept, 16-bit steps, ties to even) and the same nll", () => {
    const V = 1001, l = row(V, 2), nv = packedRowLength(V);
    expect(nv).toBe(1006);
    const q = new Uint16Array(2 * nv), qf = new Float32Array(q.buffer);
    const nll = packRow(l, 0, V, 5, q, qf, nv);
    expect(nll).toBeCloseTo(rowNll(l, 0, V, 5), 4);
    expect(q.subarray(0, nv).every((x) => x === 0)).toBe(true);
    const scale = qf[nv / 2], minLp = qf[nv / 2 + 1];
    let max = -Infinity, z = 0;
    for (const x of l) max = Math.max(max, x);
    for (const x of l) z += Math.exp(x - max);
    const lse = max + Math.log(z);
    expect(scale).toBeCloseTo(16 / 65535, 9);
    for (let i = 0; i < V; i++) {
      const lp = l[i] - lse;
      const back = scale * q[nv + 4 + i] + minLp;
      if (lp > minLp) expect(Math.abs(back - lp)).toBeLessThanOrEqual(scale * 0.5001 + 1e-6);
      else expect(q[nv + 4 + i]).toBe(0);
    }
    expect(q[nv + 4 + V]).toBe(0); // the pad of an odd vocabulary
    // the steps are llama's nearest_int of the f32 product: ties go to even
    const f = Math.fround;
    for (let i = 0; i < V; i++) {
      if (!(l[i] > f(max - 16))) continue;
      const y = f(f(1 / scale) * f(l[i] - f(max - 16)));
      const bits = new Int32Array(new Float32Array([f(y + 12582912)]).buffer)[0];
      expect(q[nv + 4 + i]).toBe((bits & 0x7fffff) - 0x400000);
    }
    const top = new Float32Array([0, 16]);
    packRow(top, 0, 2, 0, q, qf, 0);
    expect(q[5]).toBe(65535);
  });

  test("kldRow: a row against its own record is ~0 with the same top token; against another row it is the KL divergence", () => {
    const V = 800, a = row(V, 3), b = row(V, 4), nv = packedRowLength(V);
    const q = new Uint16Array(nv), qf = new Float32Array(q.buffer);
    packRow(a, 0, V, 9, q, qf, 0);
    const s = new KldSums(), kld = new Float32Array(2), dp = new Float32Array(2);
    kldRow(a, 0, V, 9, q, qf, 0, s, kld, dp, 0);
    expect(Math.abs(kld[0])).toBeLessThan(1e-4);
    expect(Math.abs(dp[0])).toBeLessThan(1e-4);
    expect(s.nSameTop).toBe(1);
    expect(s.sumNll).toBeCloseTo(s.sumNllBase, 3);
    kldRow(b, 0, V, 9, q, qf, 0, s, kld, dp, 1);
    // the exact KL(P_a || P_b) over the tokens the record keeps (within 16 of a's top)
    const lsm = (x: Float32Array) => {
      let m = -Infinity;
      for (const v of x) m = Math.max(m, v);
      let z = 0;
      for (const v of x) z += Math.exp(v - m);
      return Array.from(x, (v) => v - m - Math.log(z));
    };
    const la = lsm(a), lb = lsm(b);
    let want = 0;
    for (let i = 0; i < V; i++) if (la[i] > -16) want += Math.exp(la[i]) * (la[i] - lb[i]);
    expect(kld[1]).toBeCloseTo(want, 2);
    expect(kld[1]).toBeGreaterThan(1);
    expect(dp[1]).toBeCloseTo(Math.exp(lb[9]) - Math.exp(la[9]), 4);
    expect(s.count).toBe(2);
  });
});

describe("statistics", () => {
  test("llama's final estimate: exp(mean nll) +/- exp(mean) * standard error", () => {
    const v = [1.5, 2, 0.25, 3, 1, 1.75];
    const n = v.length, s = v.reduce((a, b) => a + b), s2 = v.reduce((a, b) => a + b * b);
    const e = pplEstimate(s, s2, n);
    const m = s / n, sd = Math.sqrt((s2 / n - m * m) / (n - 1));
    expect(e.value).toBeCloseTo(Math.exp(m), 12);
    expect(e.err).toBeCloseTo(sd * Math.exp(m), 12);
    expect(Number.isNaN(pplEstimate(6, 6, 6).err)).toBe(true); // no spread: llama prints its error line
  });

  test("mean and uncertainty, covariance, percentile and median as llama computes them", () => {
    expect(meanAndUncertainty(10, 30, 5)).toEqual({ value: 2, err: 0 }); // 10 values or fewer: no uncertainty
    const u = meanAndUncertainty(66, 506, 11);
    expect(u.value).toBe(6);
    expect(u.err).toBeCloseTo(Math.sqrt((506 / 11 - 36) / 10), 12);
    expect(covariance(1, 1, 1, 9)).toBe(0);
    expect(covariance(10, 20, 30, 10)).toBeCloseTo((3 - 2) / 9, 12);
    const v = Float32Array.from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(percentile(v, 0.5)).toBeCloseTo(4.5, 5);
    expect(percentile(v, 0.999)).toBeCloseTo(8.991, 4);
    expect(percentile(v, 0)).toBe(0);
    expect(percentile(v, 1)).toBe(9);
    expect(median(v)).toBe(4.5);
    expect(median(v.subarray(0, 9))).toBe(4);
  });

  test("printf-style numbers and the closing statistics' lines", () => {
    expect(fx(5.81784, 4)).toBe("5.8178");
    expect(fx(0.0861, 5, 10)).toBe("   0.08610");
    expect(fx(NaN, 3, 6)).toBe("   nan");
    expect(fx(Infinity, 2)).toBe("inf");
    expect(fg(75.44399)).toBe("75.444");
    expect(fg(0.5)).toBe("0.5");
    const s = new KldSums();
    const V = 50, nv = packedRowLength(V), q = new Uint16Array(nv), qf = new Float32Array(q.buffer);
    const k = new Float32Array(120), d = new Float32Array(120);
    for (let i = 0; i < 120; i++) {
      const a = row(V, 100 + i);
      packRow(a, 0, V, i % V, q, qf, 0);
      kldRow(a, 0, V, i % V, q, qf, 0, s, k, d, i);
    }
    k.sort();
    d.sort();
    const text = kldStatsText(kldStats(s, k, d));
    expect(text).toContain("====== Perplexity statistics ======\nMean PPL(Q)                   : ");
    expect(text).toMatch(/\n\n====== KL divergence statistics ======\nMean    KLD:  [ -]0\.0000\d\d ±   0\.0000\d\d\nMaximum KLD:   0\.0000\d\d\n99\.9%   KLD: /);
    expect(text).toContain("\n 0.1%   KLD: ");
    expect(text).toContain("\n75.0%   Δp: ");
    expect(text).toMatch(/\nRMS Δp    : +\d+\.\d{3} ± +\d+\.\d{3} %\nSame top p: 100\.000 ± 0\.000 %\n$/);
  });
});

describe("the logits file", () => {
  test("llama's byte layout, written and read back", () => {
    const nCtx = 8, V = 5, nChunk = 2, path = join(dir, "small.kld");
    const tokens = Int32Array.from({ length: nCtx * nChunk + 5 }, (_, i) => i + 1);
    const w = new LogitsWriter(path, nCtx, V, nChunk, tokens);
    const c = new PackedChunk(nCtx, V);
    expect(c.rowLength).toBe(10);
    expect(c.q.length).toBe(3 * 10);
    for (let ch = 0; ch < nChunk; ch++) {
      c.q.forEach((_, i) => { c.q[i] = ch * 100 + i; });
      w.writeChunk(c);
    }
    w.close();
    const b = readFileSync(path);
    expect(b.length).toBe(8 + 12 + 4 * nCtx * nChunk + 2 * 2 * 3 * 10);
    expect(b.subarray(0, 8).toString()).toBe("_logits_");
    expect([b.readInt32LE(8), b.readInt32LE(12), b.readInt32LE(16)]).toEqual([nCtx, V, nChunk]);
    expect(b.readInt32LE(20)).toBe(1);
    expect(b.readInt32LE(20 + 4 * 15)).toBe(16);
    expect(b.readUInt16LE(20 + 64 + 2 * 31)).toBe(101);
    const r = new LogitsReader(path);
    expect([r.nCtx, r.nVocab, r.nChunk, r.completeChunks]).toEqual([nCtx, V, nChunk, nChunk]);
    expect([...r.tokens]).toEqual([...tokens.subarray(0, 16)]);
    const back = new PackedChunk(nCtx, V);
    r.readChunk(back, 0);
    expect(back.q[7]).toBe(7);
    r.readChunk(back, 1);
    expect(back.q[7]).toBe(107);
    expect(() => r.readChunk(back, 2)).toThrow("failed reading log-probs for chunk 2");
    r.close();
  });

  test("a file cut short counts its complete chunks; other files are refused", () => {
    const path = join(dir, "small.kld"), full = readFileSync(path);
    writeFileSync(join(dir, "cut.kld"), full.subarray(0, full.length - 7));
    const r = new LogitsReader(join(dir, "cut.kld"));
    expect(r.completeChunks).toBe(1);
    r.close();
    writeFileSync(join(dir, "long.kld"), Buffer.concat([full, Buffer.from([1, 2])]));
    expect(() => new LogitsReader(join(dir, "long.kld"))).toThrow(/more than its header/);
    writeFileSync(join(dir, "bad.kld"), Buffer.from("_notlog_" + "x".repeat(40)));
    expect(() => new LogitsReader(join(dir, "bad.kld"))).toThrow(LogitsFileError);
    expect(() => new LogitsReader(join(dir, "bad.kld"))).toThrow("does not look like a file containing log-probabilities");
    writeFileSync(join(dir, "short.kld"), full.subarray(0, 30));
    expect(() => new LogitsReader(join(dir, "short.kld"))).toThrow("failed reading evaluation tokens");
    expect(() => new LogitsReader(join(dir, "missing.kld"))).toThrow(/failed to open/);
  });
});
