// The experts picked by the one-token gate/up from the fused router's partial logits
// (CudaFast.pickx: cuda/fopick.cuh, the fused output + router without its last block, down
// waiting on a flag gate/up's first block raises) against the last block picking: the same sums in
// the same order, the same norm and selection, so not one logit may differ; the counter proves
// the path ran (and did not with the bit off). Q4_K_M (the int8-rows gate/up it rides on), widths
// 256 / 512 / 2048, one-token steps at several depths. Skips with a line where no card is.
import { afterAll, describe, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, cudaStatus } from "../ffi/cuda.ts";
import { caseName, expectExact, withAbModel, type AbCase } from "./cuda-fast-ab.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-pickx: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-pickx-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const CASES: AbCase[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe-wide", quant: "Q4_K_M" }, { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("one token's gate/up picking from the router's partials gives the logits of the last block's picks", () => {
  for (const c of CASES) {
    test(`${caseName(c)}: one-token steps, bit for bit`, async () => {
      await withAbModel(c, { dir: tmp, tag: "pickx", seed: 53, nCtx: 64, maxTokens: 64, promptLength: (s) => 3 + 5 * s }, (t) => {
        for (const seqs of [[0], [3], [7], [0], [5]])
          expectExact(t, c, seqs, CudaFast.default | CudaFast.pickx, CudaFast.default & ~CudaFast.pickx, () => t.be.stats().pickx, "gate/up picked");
      });
    });
  }
});
