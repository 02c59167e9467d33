// The one-token kernels' L2 prefetches (CudaFast.l2Down / l2Kv / l2Weights, cuda/l2pf.cuh): hints
// that must change no value. Each step runs with the bits on and again off, rewriting the same KV
// rows: not one logit may differ, and the counter proves the launches asked for them. Short slots
// and one slot past 2,048 positions (the attention's long-context shape, whose blocks share the
// output product's weights by slice). Skips with a line where no card is.
import { afterAll, describe, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, cudaStatus } from "../ffi/cuda.ts";
import { caseName, expectExact, withAbModel, type AbCase } from "./cuda-fast-ab.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-l2pf: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-l2pf-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const L2 = CudaFast.l2Down | CudaFast.l2Kv | CudaFast.l2Weights;
const CASES: AbCase[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe", quant: "Q6_K" }, { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("the one-token kernels' L2 prefetches change no logit", () => {
  for (const c of CASES) {
    test(`${caseName(c)}: one-token steps at depths 3 to 2,101, bit for bit`, async () => {
      const opts = { dir: tmp, tag: "l2pf", seed: 43, nCtx: 2200, maxTokens: 512, promptLength: (s: number) => (s === 5 ? 2100 : 3 + 7 * s) };
      await withAbModel(c, opts, (t) => {
        for (const bit of [L2, CudaFast.l2Down, CudaFast.l2Kv, CudaFast.l2Weights])
          for (const seqs of [[0], [3], [5]])
            expectExact(t, c, seqs, CudaFast.default | bit, CudaFast.default & ~L2, () => t.be.stats().l2Prefetch, `L2 prefetch bits ${bit}`);
      });
    }, 240_000);
  }
});
