// Multi-head latent attention on the card (cuda/attention/mla.cu, forward.cu mla_block): synth cuts
// of DeepSeek V3's real shape and tensor types and the small test-deepseek2 against the CPU's exact
// path (prompts past the 64-token chunks, decode steps whose positions the attention slices and
// merges); the tiny fixture evaluated whole, in pieces and token by token; and the latent KV cache
// (K rows alone: [latent | rope]) saved, restored, kept on the card and laid out as the CPU's.
// Skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, CudaOption, cudaStatus } from "../ffi/cuda.ts";
import { synth } from "../src/cli/synth.ts";
import type { Batch } from "../src/engine/backend.ts";
import type { CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { FIXTURES } from "./paths.ts";
import { maxAbs, std } from "./logit-math.ts";
import { argmax, maxAbsDiff } from "./model-fixtures.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-mla: GPU tests skipped (${st.reason})`);
const dir = mkdtempSync(join(tmpdir(), "bloomery-cuda-mla-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
// the GPU machine reads the fixtures it was carried (BLOOMERY_FIXTURES)
const fixture = join(process.env.BLOOMERY_FIXTURES ?? FIXTURES, "families", "deepseek_v3", "deepseek_v3.gguf");

function one(tok: number, pos: number, seq: number, logits: Float32Array): Batch {
  return { tokens: Int32Array.of(tok), pos: Int32Array.of(pos), seq: Int32Array.of(seq), outRows: Int32Array.of(0), logits };
}

const CASES = [
  { model: "test-deepseek2", quant: "Q4_K_M", layers: 0 },
  { model: "test-deepseek2", quant: "IQ2_XXS", layers: 0 },
  // the real shape: 128 heads, a latent of 512 and a rotated part of 64 (rows of 576), q's LoRA of 1536
  { model: "deepseek-v3", quant: "IQ2_XXS", layers: 2 },
];

describe.skipIf(!st.ok)("latent attention on the card against the CPU's exact path", () => {
  for (const c of CASES) {
    test(`${c.model}:${c.quant}${c.layers ? ` (${c.layers} layers)` : ""}: a prompt of 300 (two chunks of prefill tiles) and decode steps`, async () => {
      const file = (await synth({ model: c.model, quant: c.quant, out: join(dir, `${c.model}-${c.quant}.gguf`), ...(c.layers ? { layers: c.layers } : {}), seed: 7 })).path;
      const card = Model.load(file, { nCtx: 512, nThreads: 8, nGpuLayers: "all" });
      const exact = Model.load(file, { nCtx: 512, nThreads: 8, exact: true });
      try {
        expect(card.backend.name).toBe("CUDA");
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
        // the default one-token products (int8 activations; DeepSeek's 16,384-wide attention output among them)
        (card.backend as CudaBackend).setOption(CudaOption.fast, CudaFast.default);
        let dInt8 = 0;
        for (let s = 6; s < 10; s++) {
          const t = (s * 131 + 7) % V;
          dInt8 = Math.max(dInt8, maxAbsDiff(card.evalSequence([t], prompt.length + s), exact.evalSequence([t], prompt.length + s)) / std(b));
        }
        console.log(`${c.model}:${c.quant} latent attention on the card: max |dlogit| / std prompt of 300 ${dPrompt.toExponential(2)}, 6 decode steps ${dDecode.toExponential(2)} (f32 one-token products), 4 more on int8 ${dInt8.toExponential(2)}`);
        expect(dPrompt).toBeLessThan(3e-2);
        expect(dDecode).toBeLessThan(3e-2);
        // (int8 rows of every one-token product, the 16,384-wide attention output and IQ2_XXS's grid dots
        // among them: 7.6e-2 on the real shape's cut, 1.2e-2 on test-deepseek2:Q4_K_M, call 215)
        expect(dInt8).toBeLessThan(1e-1);
      } finally {
        card.close();
        exact.close();
      }
    }, 600_000);
  }
});

describe.skipIf(!st.ok)("the deepseek2 fixture on the card", () => {
  test.skipIf(!existsSync(fixture))("a prompt evaluated whole, in pieces and token by token gives the same logits and greedy text", () => {
    const m = Model.load(fixture, { nCtx: 256, nSlots: 3, nThreads: 2, nGpuLayers: "all" });
    try {
      (m.backend as CudaBackend).setOption(CudaOption.fast, CudaFast.default & ~CudaFast.int8);
      const V = m.hp.nVocab;
      const prompt = Array.from({ length: 90 }, (_, i) => (i * 131 + 5) % V);
      const whole = m.evalSequence(prompt, 0, 0);
      let pieces: Float32Array = new Float32Array(0);
      for (let p = 0; p < prompt.length; p += 13) pieces = m.evalSequence(prompt.slice(p, p + 13), p, 1);
      let steps: Float32Array = new Float32Array(0);
      for (let p = 0; p < prompt.length; p++) steps = m.evalSequence([prompt[p]], p, 2);
      const s = std(whole);
      console.log(`deepseek2 fixture, 90 ids: whole vs pieces of 13 ${(maxAbs(whole, pieces) / s).toExponential(2)}, vs token by token ${(maxAbs(whole, steps) / s).toExponential(2)}`);
      expect(maxAbs(whole, pieces) / s).toBeLessThan(5e-3);
      expect(maxAbs(whole, steps) / s).toBeLessThan(5e-3);
      expect(argmax(pieces)).toBe(argmax(whole));
      expect(argmax(steps)).toBe(argmax(whole));
    } finally {
      m.close();
    }
  });

  test.skipIf(!existsSync(fixture))("the latent KV cache: the CPU's bytes a position, save and load, a prefix restored, a state kept on the card", () => {
    const m = Model.load(fixture, { nCtx: 64, nSlots: 3, nThreads: 2, nGpuLayers: "all" });
    const cpuM = Model.load(fixture, { nCtx: 64, nSlots: 1, nThreads: 2, nGpuLayers: 0 });
    try {
      const be = m.backend as CudaBackend;
      const V = m.hp.nVocab, P = be.kvPosBytes();
      // K rows alone: layers x (latent 32 + rope 16) halves
      expect(P).toBe(cpuM.backend.kvPosBytes());
      expect(P).toBe(m.hp.kvLayers! * 48 * 2);
      const prompt = [5, 9, 200, 31, 7, 77, 3, 11, 12, 13, 14, 15];
      m.evalSequence(prompt, 0, 0);
      const saved = new Uint8Array(prompt.length * P);
      be.kvSave(0, prompt.length, saved);
      const n = 7;
      be.kvLoad(1, n, saved.subarray(0, n * P));
      m.evalSequence(prompt.slice(0, n), 0, 2);
      const a = new Float32Array(V), b = new Float32Array(V);
      be.forward(one(prompt[n], n, 1, a));
      be.forward(one(prompt[n], n, 2, b));
      expect(maxAbs(a, b)).toBe(0);
      const dev = be.kvStash(0, prompt.length);
      expect(dev).toBeDefined();
      expect(dev!.bytes).toBe(prompt.length * P);
      dev!.restore(1, n);
      const d = new Float32Array(V);
      be.forward(one(prompt[n], n, 1, d));
      expect(maxAbs(d, a)).toBe(0);
      dev!.free();
      cpuM.evalSequence(prompt, 0, 0);
      const cpuSaved = new Uint8Array(prompt.length * P);
      cpuM.backend.kvSave(0, prompt.length, cpuSaved);
      const h16 = (u: Uint8Array) => new Float16Array(u.buffer, u.byteOffset, u.byteLength / 2);
      const g = h16(saved), c = h16(cpuSaved);
      let worst = 0, scale = 0;
      for (let i = 0; i < c.length; i++) {
        worst = Math.max(worst, Math.abs(g[i] - c[i]));
        scale = Math.max(scale, Math.abs(c[i]));
      }
      console.log(`deepseek2 latent KV, card against CPU: max |diff| ${worst.toExponential(2)} (values up to ${scale.toFixed(2)})`);
      expect(worst).toBeLessThan(0.05 * scale);
    } finally {
      cpuM.close();
      m.close();
    }
  });
});
