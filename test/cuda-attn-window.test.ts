// One token's attention by head groups (cuda/attention/attn2.cu, CudaFast.headGroups) on gpt-oss's
// blocks: its sliding window (the slices cover the last 128 positions alone) and its sink logit per
// head (a term of every softmax's denominator, in the one-slice division and in the merge of
// slices) against the general decode kernel (attn.cu k_attn_dec) that ran those blocks before.
// Each step runs with the bit on and again off, rewriting the same KV rows: the logits stay within
// 2e-3 of their std with the same greedy token (f32 both ways; the positions summed in another
// order), and the counter proves the head-group kernel took the windowed blocks (and did not with
// the bit off). Slots from 3 positions (inside the window) to 4,200 (every context class, merges
// by a kernel of their own), steps of one token and decode batches (distinct slots: Q/K formed
// inside the attention; a slot's tokens together: on cu_qk_prep's rows). Skips with a line where
// no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, cudaStatus } from "../ffi/cuda.ts";
import { caseName, expectReordered, withAbModel, type AbCase } from "./cuda-fast-ab.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-attn-window: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-attn-window-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

// test-gpt-oss: 2 query heads a KV head; gpt-oss-20b cut to 2 layers: the real 8 heads of 64
const CASES: AbCase[] = [{ model: "test-gpt-oss", quant: "MXFP4" }, { model: "gpt-oss-20b", quant: "MXFP4", layers: 2 }];
const LENGTHS = [3, 100, 130, 300, 1100, 2100, 2500, 4200];

gpu("gpt-oss's sliding window and sinks in the head-group attention give the general kernel's logits", () => {
  for (const C of CASES)
    test(`${caseName(C)}: slots at 3 to 4,200 positions, one token and batches`, async () => {
      const opts = { dir: tmp, tag: "attn-window", seed: 53, nCtx: 4400, maxTokens: 512, promptLength: (s: number) => LENGTHS[s] };
      await withAbModel(C, opts, (t) => {
        let worst = 0;
        const off = CudaFast.default & ~CudaFast.headGroups;
        for (const seqs of [[0], [1], [2], [3], [4], [5], [7], [0, 2, 4, 7], [7, 3, 6, 0, 1], [2, 2, 5]])
          worst = Math.max(worst, expectReordered(t, C, seqs, CudaFast.default, off, () => t.be.stats().a2Windowed, "windowed head-group attention"));
        console.log(`${caseName(C)}: worst max |dlogit| / std ${worst.toExponential(2)}`);
        expect(worst).toBeLessThan(2e-3);
      });
    }, 300_000);
});
