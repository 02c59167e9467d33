// One token's attention on the tensor cores (CudaFast.attnMma, cuda/attention/attn2_mma.cuh: 8 query heads
// of 128 a KV head as the rows of m16n8k16 f16 products, q and the probabilities as halves)
// against the scalar FP32 kernel it replaces past 1,024 positions: each step runs with the bit on
// and again off, rewriting the same KV rows; the logits stay within 1e-2 of their std with the same
// greedy token, and the counter proves the tensor-core window ran (and did not with the bit off).
// Slots at ~1,500 positions (windows of 64) and ~2,100 and ~4,200 (windows of 128, several windows
// a slice past 8,192 are not reached here), steps of one token and decode batches.
// The same slots' long-context merge by a kernel of its own (CudaFast.a2Merge, attn2.cu k_a2merge)
// against the last slice's block: within 1e-3 of the logits' std, the counter proving it ran.
// Skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, cudaStatus } from "../ffi/cuda.ts";
import { caseName, expectReordered, withAbModel, type AbCase } from "./cuda-fast-ab.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-attn-mma: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-attn-mma-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const C: AbCase = { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 };
const LENGTHS = [1500, 2100, 4200, 1100, 3, 9, 1600, 2500];

gpu("one token's attention on the tensor cores (and its long-context merge by a kernel of its own) gives the logits of the scalar kernel", () => {
  test(`${caseName(C)}: slots at 1,100 to 4,200 positions, one token and batches`, async () => {
    const opts = { dir: tmp, tag: "attn-mma", seed: 47, nCtx: 4400, maxTokens: 512, promptLength: (s: number) => LENGTHS[s] };
    await withAbModel(C, opts, (t) => {
      let worst = 0;
      for (const seqs of [[0], [1], [2], [3], [6], [0, 1, 2, 3], [7, 2, 6, 0, 1]])
        worst = Math.max(worst, expectReordered(t, C, seqs, CudaFast.default, CudaFast.default & ~CudaFast.attnMma, () => t.be.stats().attnMma, "attention on the tensor cores"));
      expect(worst).toBeLessThan(1e-2);
      // long contexts' slices merged by a kernel of their own (CudaFast.a2Merge) against the last
      // slice's block: one token of a slot past 2,048 positions (decode batches quantize their
      // attention's output in the merging block, FAST_ATTX8, and keep that merge)
      let worstMerge = 0;
      for (const seqs of [[1], [2], [7]])
        worstMerge = Math.max(worstMerge, expectReordered(t, C, seqs, CudaFast.default | CudaFast.a2Merge, CudaFast.default & ~CudaFast.a2Merge, () => t.be.stats().a2Merge, "merges by a kernel of their own"));
      expect(worstMerge).toBeLessThan(1e-3);
    });
  }, 300_000);
});
