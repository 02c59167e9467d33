// Decode batches' choice of expert kernels (cuda/runtime/forward.cu mb_choose, CudaOption.mmaPairs): a MoE
// layer whose experts got few pairs each in the last decode batches takes the dp4a kernels instead
// of the tensor cores (FAST_GUMMA / FAST_DNMMA). On a router whose picks vary per token (synth
// --centered) a batch of 8 gives most experts one pair: after one counted step the layers move to
// the dp4a kernels - the same bits as those kernels chosen by the fast bits - and with the option at
// 0 they stay on the tensor cores. Skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, CudaOption, cudaStatus } from "../ffi/cuda.ts";
import { abStep, caseName, expectExact, withAbModel, type AbCase } from "./cuda-fast-ab.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-mma-choice: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-mmachoice-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const CASE: AbCase = { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2, centered: true };
const ALL8 = [0, 1, 2, 3, 4, 5, 6, 7];
const DP4A = CudaFast.default & ~CudaFast.guMma & ~CudaFast.downMma;

gpu("decode batches' expert kernels by pairs an expert", () => {
  test(`${caseName(CASE)}: 8 streams move to the dp4a kernels, bit for bit those kernels; at 0 they stay on the tensor cores`, async () => {
    const opts = { dir: tmp, tag: "mma", seed: 29, nCtx: 256, maxTokens: 64, promptLength: (s: number) => 5 + 3 * s };
    await withAbModel(CASE, opts, (t) => {
      const stat = () => t.be.stats().mbNoMma;
      // the option at 0: never moved
      t.be.setOption(CudaOption.mmaPairs, 0);
      const r0 = abStep(t, ALL8, CudaFast.default, CudaFast.default, stat);
      expect(r0.statA + r0.statB).toBe(0);
      // a threshold of 8 pairs an expert (a batch of 8 can give no more): every counted layer moves
      t.be.setOption(CudaOption.mmaPairs, 8000);
      abStep(t, ALL8, CudaFast.default, CudaFast.default); // counts this batch's experts
      expectExact(t, CASE, ALL8, CudaFast.default, DP4A, stat, "layers moved to the dp4a kernels");
      // the default threshold (3 pairs an expert): a uniform router's batch of 8 gives ~1.3
      t.be.setOption(CudaOption.mmaPairs, 3000);
      const r = abStep(t, ALL8, CudaFast.default, DP4A, stat);
      console.log(`${caseName(CASE)}: at 3 pairs an expert ${r.statA} layer launches on the dp4a kernels, ${r.differ} of ${r.a.length} logits differ from them`);
      expect(r.statA).toBeGreaterThan(0);
      expect(r.differ).toBe(0);
    });
  }, 240_000);
});
