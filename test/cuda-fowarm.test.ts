// The fused output + router's warm-up (CudaFast.foWarm, cuda/froute.cu fo_tail): every block runs the
// last block's instructions once before its wait with no memory access beyond shared memory, so
// it must change no value. Each step runs with the bit on and again off, rewriting the same KV
// rows: not one logit may differ, and the counter proves the launches warmed up. Skips with a
// line where no card is.
import { afterAll, describe, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, cudaStatus } from "../ffi/cuda.ts";
import { caseName, expectExact, withAbModel, type AbCase } from "./cuda-fast-ab.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-fowarm: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-fowarm-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const CASES: AbCase[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe", quant: "Q6_K" }, { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("the fused router's warm-up changes no logit", () => {
  for (const c of CASES) {
    test(`${caseName(c)}: one-token steps at depths 3 to 1,103, bit for bit`, async () => {
      const opts = { dir: tmp, tag: "fowarm", seed: 47, nCtx: 1200, maxTokens: 512, promptLength: (s: number) => (s === 5 ? 1100 : 3 + 7 * s) };
      await withAbModel(c, opts, (t) => {
        for (const seqs of [[0], [3], [5]])
          expectExact(t, c, seqs, CudaFast.default | CudaFast.foWarm, CudaFast.default & ~CudaFast.foWarm, () => t.be.stats().foWarm, "warm-ups");
      });
    }, 240_000);
  }
});
