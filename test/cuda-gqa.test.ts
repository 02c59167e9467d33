// The card's attention with more than 8 query heads a KV head (cuda/attention/attn.cu: the general
// decode kernel takes them in sub-groups of at most 8, a block each): GLM-4.5-Air's 12 (96 heads over
// 8) and Qwen3-235B-A22B's 16 (64 over 4), on synth cuts of the real shapes, against the CPU's exact
// path - a prompt of 300 (the prefill kernels) and decode steps whose keys span several slices (the
// slices' merge). Skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, CudaOption, cudaStatus } from "../ffi/cuda.ts";
import { synth } from "../src/cli/synth.ts";
import type { CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { std } from "./logit-math.ts";
import { maxAbsDiff } from "./model-fixtures.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-gqa: GPU tests skipped (${st.reason})`);
const dir = mkdtempSync(join(tmpdir(), "bloomery-cuda-gqa-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const CASES = [
  { model: "glm-4.5-air", layers: 2, G: 12 },
  { model: "qwen3-235b-a22b", layers: 1, G: 16 },
];

describe.skipIf(!st.ok)("attention with more than 8 query heads a KV head on the card", () => {
  for (const c of CASES) {
    test(`${c.model} (${c.G} query heads a KV head, ${c.layers} layer${c.layers > 1 ? "s" : ""}): the card's logits near the CPU's exact path`, async () => {
      const file = (await synth({ model: c.model, quant: "Q4_K_M", out: join(dir, `${c.model}.gguf`), layers: c.layers, seed: 3 })).path;
      const card = Model.load(file, { nCtx: 512, nThreads: 8, nGpuLayers: "all" });
      const exact = Model.load(file, { nCtx: 512, nThreads: 8, exact: true });
      try {
        expect(card.backend.name).toBe("CUDA");
        expect(card.hp.nHead / card.hp.nHeadKv).toBe(c.G);
        (card.backend as CudaBackend).setOption(CudaOption.fast, CudaFast.default & ~CudaFast.int8);
        const V = card.hp.nVocab;
        const prompt = Array.from({ length: 300 }, (_, i) => (i * 7919 + 13) % V);
        const b = exact.evalSequence(prompt, 0);
        const dPrompt = maxAbsDiff(card.evalSequence(prompt, 0), b) / std(b);
        let dDecode = 0;
        for (let s = 0; s < 6; s++) {
          const t = (s * 131 + 7) % V;
          dDecode = Math.max(dDecode, maxAbsDiff(card.evalSequence([t], prompt.length + s), exact.evalSequence([t], prompt.length + s)) / std(b));
        }
        console.log(`${c.model}: ${c.G} query heads a KV head, max |dlogit| / std prompt of 300 ${dPrompt.toExponential(2)}, 6 decode steps ${dDecode.toExponential(2)}`);
        expect(dPrompt).toBeLessThan(3e-2);
        expect(dDecode).toBeLessThan(3e-2);
      } finally {
        card.close();
        exact.close();
      }
    }, 300_000);
  }
});
