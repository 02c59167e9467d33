// The one-token Q/K/V product's L2 prefetch of the slot's cached keys and values (CudaFast.l2Kv,
// cuda/dense/l2pf.cuh): a hint that must change no value. Each step runs with the bit on and again off,
// rewriting the same KV rows: not one logit may differ, and the counter proves the launches asked
// for them. Short slots and one slot past 2,048 positions (the attention's long-context shape).
// Skips with a line where no card is.
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

const CASES: AbCase[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe", quant: "Q6_K" }, { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("the one-token Q/K/V product's L2 prefetch changes no logit", () => {
  for (const c of CASES) {
    test(`${caseName(c)}: one-token steps at depths 3 to 2,101, bit for bit`, async () => {
      const opts = { dir: tmp, tag: "l2pf", seed: 43, nCtx: 2200, maxTokens: 512, promptLength: (s: number) => (s === 5 ? 2100 : 3 + 7 * s) };
      await withAbModel(c, opts, (t) => {
        for (const seqs of [[0], [3], [5]])
          expectExact(t, c, seqs, CudaFast.default, CudaFast.default & ~CudaFast.l2Kv, () => t.be.stats().l2Prefetch, "L2 prefetch of the cached keys and values");
      });
    }, 240_000);
  }
});
