// A prompt's next batch of uploads copied ahead (cuda/hybrid/hybrid.cu lead_plan / lead_issue): a sparse
// upload step whose batch asks for no logits (its prompt goes on) copies the next step's first
// uploads into the lead slots between its own light layers' copies, and the next step finds them
// there. The same bytes reach the same kernels: a prompt of several batches gives the same bits as
// with whole-layer uploads (no copies ahead), and the counter proves the next steps took their
// leads. Skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaOption, cudaStatus } from "../ffi/cuda.ts";
import type { CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { synth } from "../src/cli/synth.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-lead: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-lead-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

gpu("a prompt's next uploads copied ahead", () => {
  for (const c of [{ model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 4 }, { model: "test-moe", quant: "Q8_0", layers: 0 }]) {
    test(`${c.model}:${c.quant}, --cpu-moe: a prompt of 4 batches, the same bits as whole-layer uploads`, async () => {
      const file = join(tmp, `${c.model}-${c.quant}.gguf`);
      await synth({ model: c.model, quant: c.quant, out: file, layers: c.layers, seed: 29 });
      const m = Model.load(file, { nCtx: 256, nSlots: 1, maxTokens: 32, nThreads: 8, nGpuLayers: "all", placement: { cpuMoe: true } });
      try {
        const be = m.backend as CudaBackend, V = m.hp.nVocab;
        be.setOption(CudaOption.uploadMin, 16);
        be.setOption(CudaOption.cpuTokens, 0); // every used expert copied (the CPU's share: test/cuda-cpu-share.test.ts)
        const prompt = Array.from({ length: 128 }, (_, i) => (i * 7919 + 31) % V);
        const run = (sparse: number): Float32Array => {
          be.setOption(CudaOption.sparseUpload, sparse);
          return m.evalSequence(prompt, 0).slice();
        };
        run(1); // the counts a first prompt leaves (the copies ahead guess from them)
        const h0 = be.hostStats()!;
        const a = run(1);
        const h1 = be.hostStats()!;
        const b = run(0);
        let differ = 0;
        for (let i = 0; i < a.length; i++) if (!(a[i] === b[i])) differ++;
        console.log(`${c.model}:${c.quant}: ${h1.leadRuns - h0.leadRuns} uploads found copied ahead, ${h1.sparseRuns - h0.sparseRuns} sparse, ${differ} of ${a.length} logits differ from whole-layer uploads`);
        expect(a.every(Number.isFinite)).toBe(true);
        expect(h1.leadRuns - h0.leadRuns).toBeGreaterThan(0);
        expect(differ).toBe(0);
      } finally {
        m.close();
      }
    }, 300_000);
  }
});
