// The one-token gate/up's bulk copies (CudaFast.tmaGu, cuda/experts/fastdec.cu k_fgu8 on sm_90+): each
// block's 32 gate rows and 32 up rows come by two cp.async.bulk copies instead of per-lane
// cp.async, the same bytes into the same dots, so they must change no value. Each step runs with
// the bit on and again off, rewriting the same KV rows: not one logit may differ, and the counter
// proves the launches took the bulk copies. Skips with a line where no card is, or where the card
// has no bulk copies (before sm_90).
import { afterAll, describe, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, cudaDeviceInfo, cudaStatus } from "../ffi/cuda.ts";
import { caseName, expectExact, withAbModel, type AbCase } from "./cuda-fast-ab.ts";

const st = cudaStatus();
const major = st.ok ? cudaDeviceInfo(0).ccMajor : 0;
if (!st.ok) console.log(`cuda-tma: GPU tests skipped (${st.reason})`);
else if (major < 9) console.log(`cuda-tma: skipped (compute capability ${major}.x has no bulk copies)`);
const gpu = st.ok && major >= 9 ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-tma-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

// Q4_K_M: gate and up are Q4_K, whose rows are whole 16-byte units (the bulk copies' condition)
const CASES: AbCase[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe-wide", quant: "Q4_K_M" }, { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("the one-token gate/up's bulk copies change no logit", () => {
  for (const c of CASES) {
    test(`${caseName(c)}: one-token steps at depths 3 to 1,103, bit for bit`, async () => {
      const opts = { dir: tmp, tag: "tma", seed: 53, nCtx: 1200, maxTokens: 512, promptLength: (s: number) => (s === 5 ? 1100 : 3 + 7 * s) };
      await withAbModel(c, opts, (t) => {
        for (const seqs of [[0], [3], [5]])
          expectExact(t, c, seqs, CudaFast.default | CudaFast.tmaGu, CudaFast.default & ~CudaFast.tmaGu, () => t.be.stats().tmaGu, "bulk-copy launches");
      });
    }, 240_000);
  }
});
