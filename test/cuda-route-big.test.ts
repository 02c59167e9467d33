// The prompt batches' router as a tiled product (CudaFast.routeBig, cuda/router/route_big.cu) against the
// router kernel of decode groups: a 200-token prompt's logits within a stated bound of each other
// (the logits' sums run in another order), the same greedy token wherever the margin is clear, and
// the tiled path giving the same bits on every run (no atomics). Skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, CudaOption, cudaStatus } from "../ffi/cuda.ts";
import type { CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { synth } from "../src/cli/synth.ts";
import { std } from "./logit-math.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-route-big: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-route-big-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Case { model: string; quant: string; layers: number }
const CASES: Case[] = [
  { model: "test-moe", quant: "Q4_K_M", layers: 0 }, // 256 hidden, 8 experts, top-2
  { model: "test-moe-wide", quant: "Q4_K_M", layers: 0 }, // 512 hidden, 16 experts, top-4
  { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 }, // 2048 hidden, 128 experts, top-8
];
const N = 200; // prompt tokens: one prompt batch (past MV_MAX_NT), tiles of tokens with a partial last one
// A row's logits may move by this much (times the spread of all the logits): the router's logits
// differ in their last bits, so do the picks' weights and each expert's share of x.
const ROW_BOUND = 1e-2;
// Rows allowed past it: a token whose k-th and (k+1)-th router logits tie to the last bits may take
// the other expert on one path (measured: printed below).
const FAR_ROWS = 2;

/** The largest |a[i] - b[i]| over row r of V values, and the row's top-2 margin in b. */
function rowStats(a: Float32Array, b: Float32Array, r: number, V: number): { diff: number; argA: number; argB: number; margin: number } {
  let diff = 0, argA = 0, argB = 0, b1 = -Infinity, b2 = -Infinity;
  const o = r * V;
  for (let i = 0; i < V; i++) {
    diff = Math.max(diff, Math.abs(a[o + i] - b[o + i]));
    if (a[o + i] > a[o + argA]) argA = i;
    const v = b[o + i];
    if (v > b1) { b2 = b1; b1 = v; argB = i; } else if (v > b2) b2 = v;
  }
  return { diff, argA, argB, margin: b1 - b2 };
}

gpu("prompt batches' router as a tiled product against the decode groups' router", () => {
  for (const c of CASES) {
    test(`${c.model}:${c.quant}${c.layers ? ` (${c.layers} layers)` : ""}: a ${N}-token prompt within ${ROW_BOUND} x std, the same bits on every run`, async () => {
      const file = join(tmp, `rb-${c.model}-${c.quant}.gguf`);
      await synth({ model: c.model, quant: c.quant, out: file, layers: c.layers, seed: 29 });
      const m = Model.load(file, { nCtx: 256, maxTokens: 256, nGpuLayers: "all" });
      const be = m.backend as CudaBackend;
      try {
        const V = m.hp.nVocab;
        const prompt = Array.from({ length: N }, (_, i) => (i * 7919 + 17) % V);
        be.setOption(CudaOption.fast, CudaFast.default);
        const before = be.stats().routeBig;
        const tiled = m.evalSequence(prompt, 0, 0, true);
        const taken = be.stats().routeBig - before; // launches of the tiled router
        const again = m.evalSequence(prompt, 0, 0, true);
        be.setOption(CudaOption.fast, CudaFast.default & ~CudaFast.routeBig);
        const ref = m.evalSequence(prompt, 0, 0, true);
        expect(tiled.length).toBe(N * V);
        let finite = true, rerun = 0, differ = 0;
        for (let i = 0; i < tiled.length; i++) {
          if (!Number.isFinite(tiled[i])) finite = false;
          if (!(tiled[i] === again[i])) rerun++;
          if (!(tiled[i] === ref[i])) differ++;
        }
        const sd = std(ref);
        let worst = 0, far = 0, clear = 0, agree = 0;
        const farRows: string[] = [];
        for (let r = 0; r < N; r++) {
          const s = rowStats(tiled, ref, r, V);
          worst = Math.max(worst, s.diff);
          if (s.diff > ROW_BOUND * sd) {
            far++;
            farRows.push(`${r} (${(s.diff / sd).toExponential(2)} x std)`);
          }
          if (s.margin > 2 * s.diff) {
            clear++;
            if (s.argA === s.argB) agree++;
          }
        }
        const last = rowStats(tiled, ref, N - 1, V);
        console.log(
          `${c.model}:${c.quant} prompt of ${N}: max |diff| ${worst.toExponential(3)} = ${(worst / sd).toExponential(3)} x std (${sd.toFixed(4)}); ` +
            `${differ} of ${tiled.length} logits differ from the decode groups' router; rows past ${ROW_BOUND} x std: ${far}${far ? ` [${farRows.join(", ")}]` : ""}; ` +
            `greedy equal in ${agree} of ${clear} rows with a clear margin; last row |diff| ${(last.diff / sd).toExponential(3)} x std; ` +
            `${rerun} logits differ between two runs of the tiled path`,
        );
        expect(finite).toBe(true);
        expect(rerun).toBe(0); // deterministic: no atomics in its sums
        expect(taken).toBeGreaterThan(0); // the tiled path ran
        expect(far).toBeLessThanOrEqual(FAR_ROWS);
        expect(agree).toBe(clear);
        expect(last.diff).toBeLessThanOrEqual(ROW_BOUND * sd);
        expect(last.argA).toBe(last.argB);
      } finally {
        be.setOption(CudaOption.fast, CudaFast.default);
        m.close();
        rmSync(file, { force: true });
      }
    });
  }
});
