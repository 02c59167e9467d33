// bloomery: a probe run by hand on the GPU machine (`scripts/device-ab.sh tests:./scripts/probe-attn-window.test.ts`;
// outside the suite: it prints, it asserts nothing): test/cuda-attn-window.test.ts's A/B step at slot 4 (1,100
// positions) fails 2.54e-2 with the default bits while the CPU-exact case passes with f32 products; this runs that
// step with int8 off and with the attention's x8 rows off, and each path against itself.
import { afterAll, describe, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, cudaStatus } from "../ffi/cuda.ts";
import { abStep, withAbModel, type AbCase } from "../test/cuda-fast-ab.ts";

const st = cudaStatus();
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-attn-diag-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const LENGTHS = [3, 100, 130, 300, 1100, 2100, 2500, 4200];
gpu("probe", () => {
  test("gpt-oss-20b 2 layers, slot 4", async () => {
    const C: AbCase = { model: "gpt-oss-20b", quant: "MXFP4", layers: 2 };
    await withAbModel(C, { dir: tmp, tag: "diag", seed: 53, nCtx: 4400, maxTokens: 512, promptLength: (s: number) => LENGTHS[s] }, (t) => {
      const D = CudaFast.default, F = D & ~CudaFast.int8, X = D & ~CudaFast.attnX8, H = CudaFast.headGroups;
      const sets: [string, number][] = [["default", D], ["no int8", F], ["no attn x8", X], ["default again", D]];
      for (const slot of [4, 3, 5])
        for (const [name, bits] of sets) {
          const r = abStep(t, [slot], bits, bits & ~H);
          console.log(`slot ${slot} (${t.len[slot]} positions) ${name}: head groups vs general ${r.rel.toExponential(2)} (${r.differ} differ)`);
        }
      const r2 = abStep(t, [4], D, D);
      console.log(`slot 4 default vs itself: ${r2.rel.toExponential(2)} (${r2.differ} differ)`);
      const r3 = abStep(t, [4], D & ~H, D & ~H);
      console.log(`slot 4 general vs itself: ${r3.rel.toExponential(2)} (${r3.differ} differ)`);
    });
  }, 300_000);
});
