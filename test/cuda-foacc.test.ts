// The fused output + router's integer accumulators (CudaFast.foAcc, cuda/router/fopick.cuh fo_acc_add /
// fo_acc_sum): its blocks add their partial logits as 64-bit integers of 2^-32, so the picker reads
// one sum an expert instead of summing every block's floats. Integer sums do not depend on the order
// the blocks arrive in: two runs give the same bits. Against the float sums the logits move by the
// rounding only (same greedy token, a small bound). A partial at or past the limit raises a flag and
// the float partials are summed as without the bit: with the limit lowered (CudaOption.foAccLimit)
// not one logit may differ from the bit off. One-token
// steps at several depths; skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, CudaOption, cudaStatus } from "../ffi/cuda.ts";
import { abStep, caseName, expectExact, expectReordered, withAbModel, type AbCase } from "./cuda-fast-ab.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-foacc: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-foacc-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const CASES: AbCase[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe", quant: "Q6_K" }, { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];
const ON = CudaFast.default | CudaFast.foAcc, OFF = CudaFast.default & ~CudaFast.foAcc;

gpu("the fused router's integer accumulators", () => {
  for (const c of CASES) {
    test(`${caseName(c)}: the same bits run to run, the float sums' greedy tokens, the float sums bit for bit past the limit`, async () => {
      const opts = { dir: tmp, tag: "foacc", seed: 61, nCtx: 1200, maxTokens: 512, promptLength: (s: number) => (s === 5 ? 1100 : 3 + 7 * s) };
      await withAbModel(c, opts, (t) => {
        const acc = () => t.be.stats().foAcc;
        for (const seqs of [[0], [3], [5]]) {
          const same = abStep(t, seqs, ON, ON, acc);
          expect(same.differ).toBe(0);
          expect(same.statA).toBeGreaterThan(0);
          const rel = expectReordered(t, c, seqs, ON, OFF, acc, "accumulated");
          expect(rel).toBeLessThan(1e-3);
        }
        t.be.setOption(CudaOption.foAccLimit, -100);
        try {
          for (const seqs of [[0], [5]]) expectExact(t, c, seqs, ON, OFF, acc, "past the limit");
        } finally {
          t.be.setOption(CudaOption.foAccLimit, 22);
        }
        expect(() => t.be.setOption(CudaOption.foAccLimit, 23)).toThrow(/accumulator limit/);
      });
    }, 240_000);
  }
});
