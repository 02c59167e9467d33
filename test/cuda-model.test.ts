// The CUDA backend end to end: tiny-qwen3moe against transformers (logits within a stated bound,
// greedy tokens equal wherever the reference's top-2 margin is clear), the CUDA forward against
// the CPU exact path on synthetic models of every quant mix (decode steps and prompt batches),
// batch independence, graphs on and off, top-k on the card, KV save/load and copy, refusals.
// Placement rules run everywhere; the rest skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, CudaOption, cudaStatus } from "../ffi/cuda.ts";
import type { Batch } from "../src/engine/backend.ts";
import { CUDA_SPLIT_MAX, CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { chooseBackend, PlacementError } from "../src/engine/placement.ts";
import { synth } from "../src/cli/synth.ts";
import { FIXTURES } from "./paths.ts";
import { maxAbs, std } from "./logit-math.ts";
import { teacherForcedSteps } from "./model-fixtures.ts";
import { abStep, caseName, expectExact, expectReordered, rotatingSteps, withAbModel } from "./cuda-fast-ab.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-model: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const FIX = process.env.BLOOMERY_FIXTURES ?? FIXTURES;
// Every one-token product on f32 activations: the kernels' own error, apart from ggml's int8
// rounding of the activations (which flips the tiny fixture's near-tied routing; its int8 path is
// held by teacher-forced picks against transformers instead)
const F32 = CudaFast.default & ~CudaFast.int8;
const tinyDir = join(FIX, "tiny-qwen3moe");
const tmp = mkdtempSync(join(tmpdir(), "bloomery-cuda-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface TinyRef { prompt: number[]; greedy: number[]; margins: number[]; last_logits: number[] }

function argmax(v: ArrayLike<number>): number {
  let b = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[b]) b = i;
  return b;
}
function greedy(m: Model, prompt: number[], n: number): number[] {
  let lg = m.evalSequence(prompt, 0);
  let pos = prompt.length;
  const out: number[] = [];
  for (let s = 0; s < n; s++) {
    const t = argmax(lg);
    out.push(t);
    if (s + 1 < n) lg = m.evalSequence([t], pos++);
  }
  return out;
}
function one(tok: number, pos: number, seq: number, logits: Float32Array): Batch {
  return { tokens: Int32Array.of(tok), pos: Int32Array.of(pos), seq: Int32Array.of(seq), outRows: Int32Array.of(0), logits };
}

describe("placement", () => {
  const hp = { arch: "qwen3moe", nVocab: 10, nEmbd: 8, nLayer: 2, nCtxTrain: 8, nHead: 2, nHeadKv: 1, headDim: 4, nFf: 8, nExpert: 2, nExpertUsed: 1, eps: 1e-6, kvLayers: 2 };
  test("-ngl 0 and the exact path are the CPU; a card when asked and present; a line when absent", () => {
    expect(chooseBackend(hp, { nGpuLayers: 0 }).kind).toBe("cpu");
    expect(chooseBackend(hp, {}).kind).toBe("cpu");
    const ex = chooseBackend(hp, { nGpuLayers: "all", exact: true });
    expect(ex.kind).toBe("cpu");
    expect(ex.note).toContain("exact");
    const auto = chooseBackend(hp, { nGpuLayers: "auto" });
    if (st.ok) expect(auto.kind).toBe("cuda");
    else {
      expect(auto.kind).toBe("cpu");
      expect(auto.note).toContain(st.reason);
    }
    expect(() => chooseBackend(hp, { nGpuLayers: -5 })).toThrow(PlacementError);
  });
});

gpu("tiny-qwen3moe on the card against transformers", () => {
  for (const [gguf, ref, bound] of [["tiny-q8_0.gguf", "ref-q8_0.json", 2e-2], ["tiny.gguf", "ref.json", 2e-2]] as const) {
    const path = join(tinyDir, gguf);
    test.skipIf(!existsSync(path))(`${gguf}: logits within ${bound}, greedy equal wherever the margin is clear`, async () => {
      const refs: TinyRef[] = (await Bun.file(join(tinyDir, ref)).json()).refs;
      const m = Model.load(path, { nCtx: 128, nGpuLayers: "all" });
      try {
        expect(m.backend.name).toBe("CUDA");
        const be = m.backend as CudaBackend;
        let clear = 0, agree = 0;
        for (const r of refs) {
          // the default (quantized rows' one-token products on int8 activations, ggml's numerics):
          // teacher-forced top-1 at clear margins, as the CPU's ggml paths are held
          const tf = teacherForcedSteps(m, r);
          clear += tf.clear;
          agree += tf.agree;
          // f32 activations: the kernels against transformers' logits and greedy tokens
          be.setOption(CudaOption.fast, F32);
          const d = maxAbs(m.evalSequence(r.prompt, 0), r.last_logits);
          const ours = greedy(m, r.prompt, r.greedy.length);
          be.setOption(CudaOption.fast, CudaFast.default);
          let i = 0;
          while (i < ours.length && ours[i] === r.greedy[i]) i++;
          console.log(`${gguf} prompt ${r.prompt.length}: max |dlogit| ${d.toExponential(2)}, greedy ${i}/${r.greedy.length}${i < r.greedy.length ? ` (margin ${r.margins[i].toFixed(4)} at the first difference)` : ""} (f32 one-token products); teacher-forced top-1 ${tf.agree}/${tf.clear} (int8)`);
          expect(d).toBeLessThan(bound);
          if (i < r.greedy.length) expect(r.margins[i]).toBeLessThan(0.05);
        }
        expect(agree / clear).toBeGreaterThanOrEqual(0.85);
      } finally {
        m.close();
      }
    });
  }
});

interface Case { model: string; quant: string; layers?: number }
const CASES: Case[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe", quant: "Q8_0" }, { model: "test-moe", quant: "Q4_0" },
  { model: "test-moe", quant: "Q6_K" }, { model: "test-moe", quant: "IQ4_XS" }, { model: "test-moe", quant: "MXFP4" },
  { model: "test-moe", quant: "F16" }, { model: "test-moe", quant: "BF16" }, { model: "test-moe-wide", quant: "Q4_K_M" },
  { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("the CUDA forward against the CPU exact path (synthetic models)", () => {
  for (const c of CASES) {
    test(`${c.model}:${c.quant}${c.layers ? ` (${c.layers} layers)` : ""}: prompt batch and decode steps`, async () => {
      const file = join(tmp, `${c.model}-${c.quant}.gguf`);
      await synth({ model: c.model, quant: c.quant, out: file, layers: c.layers ?? 0, seed: 3 });
      const cpu = Model.load(file, { nCtx: 64, exact: true, nThreads: 8 });
      const gpuM = Model.load(file, { nCtx: 64, nGpuLayers: "all" });
      try {
        const V = cpu.hp.nVocab;
        // 40 tokens: past CUDA_SPLIT_MAX, so the prompt kernels (batches of 9-24 run as decode steps)
        const prompt = Array.from({ length: 40 }, (_, i) => (i * 7919 + 13) % V);
        const a = cpu.evalSequence(prompt, 0, 0, true), b = gpuM.evalSequence(prompt, 0, 0, true);
        const sd = std(a.subarray((prompt.length - 1) * V));
        const dPrompt = maxAbs(b, a) / sd;
        const steps = [5, 77, 301].map((t) => t % V);
        // decode steps twice: the default (int8 activations for Q4_K / Q6_K rows), then f32
        // activations (which leaves its KV rows for the next step)
        const be = gpuM.backend as CudaBackend;
        let dDecode = 0, dDecode8 = 0;
        for (let i = 0; i < steps.length; i++) {
          const x = cpu.evalSequence([steps[i]], prompt.length + i);
          const y8 = gpuM.evalSequence([steps[i]], prompt.length + i);
          be.setOption(CudaOption.fast, CudaFast.all & ~CudaFast.int8);
          const y = gpuM.evalSequence([steps[i]], prompt.length + i);
          be.setOption(CudaOption.fast, CudaFast.default);
          dDecode = Math.max(dDecode, maxAbs(y, x) / std(x));
          dDecode8 = Math.max(dDecode8, maxAbs(y8, x) / std(x));
        }
        console.log(`${c.model}:${c.quant}: max |dlogit| / std: prompt ${dPrompt.toExponential(2)}, decode ${dDecode.toExponential(2)}, decode on int8 activations ${dDecode8.toExponential(2)}`);
        expect(dPrompt).toBeLessThan(3e-2);
        expect(dDecode).toBeLessThan(3e-2);
        expect(dDecode8).toBeLessThan(1e-1); // ggml's numerics: activations rounded to int8 per 32
      } finally {
        cpu.close();
        gpuM.close();
        rmSync(file, { force: true });
      }
    });
  }
});

gpu("CUDA backend behaviour", () => {
  const path = join(tinyDir, "tiny-q8_0.gguf");
  test.skipIf(!existsSync(path))("batched decode equals single decode; graphs on and off agree; prompt batch equals token by token", () => {
    const m = Model.load(path, { nCtx: 64, nSlots: 3, maxTokens: 64, nGpuLayers: "all" });
    try {
      const be = m.backend as CudaBackend;
      be.setOption(CudaOption.fast, F32);
      const V = m.hp.nVocab;
      const prompt = Array.from({ length: 30 }, (_, i) => (i * 31 + 7) % V);
      const whole = m.evalSequence(prompt, 0, 0, true);
      let worst = 0;
      for (let i = 0; i < prompt.length; i++) worst = Math.max(worst, maxAbs(m.evalSequence([prompt[i]], i, 1), whole.subarray(i * V, (i + 1) * V)) / std(whole.subarray(i * V, (i + 1) * V)));
      console.log(`tiny: prompt batch vs token by token: max |dlogit| / std ${worst.toExponential(2)}`);
      expect(worst).toBeLessThan(2e-2);
      // slots 1 and 2 hold the same prefix (1 from above, 2 copied); one batch of two tokens vs each
      // alone through the same (general) kernels
      be.kvCopy(1, 2, prompt.length);
      be.setOption(CudaOption.fast, 0);
      const two = new Float32Array(2 * V), s1 = new Float32Array(V), s2 = new Float32Array(V);
      be.forward({ tokens: Int32Array.of(11, 12), pos: Int32Array.of(30, 30), seq: Int32Array.of(1, 2), outRows: Int32Array.of(0, 1), logits: two });
      be.forward(one(11, 30, 1, s1));
      be.forward(one(12, 30, 2, s2));
      expect(maxAbs(two.subarray(0, V), s1)).toBeLessThan(1e-5);
      expect(maxAbs(two.subarray(V), s2)).toBeLessThan(1e-5);
      // the one-token kernels (staged products, experts selecting for themselves, fused attention,
      // the router fused into the attention output, attention by head groups) against the
      // general ones, each part alone and all together
      const F = CudaFast;
      let worstBits = 0;
      for (const bits of [F.products, F.experts, F.attention, 7, F.experts | F.fusedRouter, F.headGroups, F.attention | F.headGroups,
        F.experts | F.fusedRouter | F.headGroups, F.all & ~F.int8]) {
        be.setOption(CudaOption.fast, bits);
        const f = new Float32Array(V);
        be.forward(one(11, 30, 1, f));
        const d = maxAbs(f, s1) / std(s1);
        console.log(`tiny: one-token kernels (bits ${bits}) vs general: max |dlogit| / std ${d.toExponential(2)}`);
        worstBits = Math.max(worstBits, Number.isFinite(d) ? d : Infinity);
      }
      expect(worstBits).toBeLessThan(1e-4); // after the loop: every set's line is printed
      const g = new Float32Array(V);
      be.forward(one(13, 31, 1, g));
      be.setOption(1, 0); // graphs off
      const ng = new Float32Array(V);
      be.forward(one(13, 31, 1, ng));
      be.setOption(1, 1);
      expect(maxAbs(g, ng)).toBe(0);
      be.setOption(CudaOption.fast, CudaFast.default);
      const stats = be.stats();
      console.log(`tiny: ${stats.steps} steps, ${stats.graphSteps} from graphs, ${stats.graphs} graphs, ${stats.weightBytes} weight bytes`);
      expect(stats.graphSteps).toBeGreaterThan(0);
    } finally {
      m.close();
    }
  });

  test.skipIf(!existsSync(path))("long context: a 300-token prompt in one batch and split decode attention against the CPU exact path", () => {
    const cpuM = Model.load(path, { nCtx: 512, exact: true, nThreads: 8 });
    const m = Model.load(path, { nCtx: 512, nGpuLayers: "all" });
    try {
      const be = m.backend as CudaBackend;
      be.setOption(CudaOption.fast, F32); // the attention's own error: f32 one-token products
      const V = m.hp.nVocab;
      const prompt = Array.from({ length: 300 }, (_, i) => (i * 131 + 17) % V);
      const a = cpuM.evalSequence(prompt, 0, 0, true), b = m.evalSequence(prompt, 0, 0, true);
      let dp = 0;
      for (let i = 0; i < prompt.length; i += 37) dp = Math.max(dp, maxAbs(b.subarray(i * V, (i + 1) * V), a.subarray(i * V, (i + 1) * V)) / std(a.subarray(i * V, (i + 1) * V)));
      const ref = cpuM.evalSequence([9], 300);
      const split = m.evalSequence([9], 300);
      be.setOption(3, 1); // one slice: no merge
      const whole = m.evalSequence([9], 300);
      be.setOption(3, 32);
      const dd = maxAbs(split, ref) / std(ref), ds = maxAbs(split, whole) / std(ref);
      console.log(`tiny long context: prompt ${dp.toExponential(2)}, decode ${dd.toExponential(2)}, split vs one slice ${ds.toExponential(2)} (max |dlogit| / std)`);
      expect(dp).toBeLessThan(3e-2);
      expect(dd).toBeLessThan(1e-2);
      expect(ds).toBeLessThan(1e-4);
    } finally {
      cpuM.close();
      m.close();
    }
  });

  test.skipIf(!existsSync(path))("one-token attention by head groups past 1024 positions: split, merged, against attn1 and the CPU exact path", () => {
    const cpuM = Model.load(path, { nCtx: 1280, exact: true, nThreads: 8 });
    const m = Model.load(path, { nCtx: 1280, nGpuLayers: "all" });
    try {
      const be = m.backend as CudaBackend;
      be.setOption(CudaOption.fast, F32); // the attention's own error: f32 one-token products
      const V = m.hp.nVocab;
      const prompt = Array.from({ length: 1100 }, (_, i) => (i * 197 + 5) % V);
      cpuM.evalSequence(prompt, 0);
      m.evalSequence(prompt, 0);
      let worst = 0, vsOld = 0, vsWhole = 0;
      for (const [i, t] of [21, 400].entries()) {
        const p = prompt.length + i;
        const ref = cpuM.evalSequence([t], p);
        const y = m.evalSequence([t], p); // head groups, split and merged (the default)
        be.setOption(CudaOption.fast, F32 & ~CudaFast.headGroups);
        const old = m.evalSequence([t], p); // attn1.cu
        be.setOption(CudaOption.fast, F32);
        be.setOption(CudaOption.maxSplits, 1);
        const whole = m.evalSequence([t], p); // head groups, one slice
        be.setOption(CudaOption.maxSplits, 32);
        const sd = std(ref);
        worst = Math.max(worst, maxAbs(y, ref) / sd);
        vsOld = Math.max(vsOld, maxAbs(y, old) / sd);
        vsWhole = Math.max(vsWhole, maxAbs(y, whole) / sd);
      }
      console.log(`tiny at 1100 positions: head groups vs CPU exact ${worst.toExponential(2)}, vs attn1 ${vsOld.toExponential(2)}, split vs one slice ${vsWhole.toExponential(2)} (max |dlogit| / std)`);
      // against the CPU exact path the bound is the prompt batches' (3e-2): the 1100 cached
      // positions come from the f16 tensor-core prefill into the f16 cache (measured 1.7e-2 on the
      // H200, the same within 2e-6 with attn1.cu); the kernel's own error shows in the two below
      expect(worst).toBeLessThan(3e-2);
      expect(vsOld).toBeLessThan(1e-4);
      expect(vsWhole).toBeLessThan(1e-4);
    } finally {
      cpuM.close();
      m.close();
    }
  });

  test.skipIf(!existsSync(path))("one-token attention by head groups at 2,200 / 4,200 / 8,300 positions (slices of 128, more than 32 slices, two windows a slice) against attn1 and one slice", () => {
    const m = Model.load(path, { nCtx: 8448, nGpuLayers: "all" });
    try {
      const be = m.backend as CudaBackend;
      const V = m.hp.nVocab;
      const prompt = Array.from({ length: 8300 }, (_, i) => (i * 211 + 3) % V);
      m.evalSequence(prompt, 0);
      let vsOld = 0, vsWhole = 0;
      for (const [i, p] of [2200, 4200, 8300].entries()) {
        const t = 17 + 31 * i;
        const y = m.evalSequence([t], p); // head groups (the default)
        be.setOption(CudaOption.fast, CudaFast.all & ~CudaFast.headGroups);
        const old = m.evalSequence([t], p); // attn1.cu
        be.setOption(CudaOption.fast, CudaFast.default);
        be.setOption(CudaOption.maxSplits, 1);
        const whole = m.evalSequence([t], p); // head groups, one slice
        be.setOption(CudaOption.maxSplits, 32);
        const sd = std(old);
        const a = maxAbs(y, old) / sd, b = maxAbs(y, whole) / sd;
        console.log(`tiny at ${p} positions: head groups vs attn1 ${a.toExponential(2)}, split vs one slice ${b.toExponential(2)} (max |dlogit| / std)`);
        vsOld = Math.max(vsOld, Number.isFinite(a) ? a : Infinity);
        vsWhole = Math.max(vsWhole, Number.isFinite(b) ? b : Infinity);
      }
      expect(vsOld).toBeLessThan(1e-4);
      expect(vsWhole).toBeLessThan(1e-4);
    } finally {
      m.close();
    }
  });

  test.skipIf(!existsSync(path))("top-k on the card equals the top of the logits; KV save/load round trip", () => {
    const m = Model.load(path, { nCtx: 64, nSlots: 2, nGpuLayers: "all" });
    try {
      const be = m.backend as CudaBackend;
      const V = m.hp.nVocab;
      const prompt = [5, 9, 200, 31, 7, 77, 3];
      const lg = m.evalSequence(prompt, 0);
      const order = Array.from({ length: V }, (_, i) => i).sort((a, b) => lg[b] - lg[a] || a - b);
      const ids = new Int32Array(40), vals = new Float32Array(40);
      const full = new Float32Array(V);
      be.forward(one(42, 7, 0, full));
      be.forwardTopK(one(42, 7, 0, new Float32Array(0)), 40, ids, vals);
      const want = Array.from({ length: V }, (_, i) => i).sort((a, b) => full[b] - full[a] || a - b).slice(0, 40);
      expect(Array.from(ids)).toEqual(want);
      for (let i = 0; i < 40; i++) expect(vals[i]).toBe(full[want[i]]);
      expect(order.length).toBe(V);
      const n = 8, bytes = new Uint8Array(n * be.kvPosBytes());
      be.kvSave(0, n, bytes);
      be.kvLoad(1, n, bytes);
      const a = new Float32Array(V), b = new Float32Array(V);
      be.forward(one(42, 8, 0, a));
      be.forward(one(42, 8, 1, b));
      expect(maxAbs(a, b)).toBe(0);
      // a decode batch of two slots: each row's best 64 (the scheduler's sampling path) are the top of its row
      const two = (logits: Float32Array): Batch => ({ tokens: Int32Array.of(43, 44), pos: Int32Array.of(9, 9), seq: Int32Array.of(0, 1), outRows: Int32Array.of(0, 1), logits });
      const rows2 = new Float32Array(2 * V), ids2 = new Int32Array(128), vals2 = new Float32Array(128);
      be.forward(two(rows2));
      be.forwardTopK(two(new Float32Array(0)), 64, ids2, vals2);
      for (let r = 0; r < 2; r++) {
        const row = rows2.subarray(r * V, (r + 1) * V);
        const best = Array.from({ length: V }, (_, i) => i).sort((x, y) => row[y] - row[x] || x - y).slice(0, 64);
        expect(Array.from(ids2.subarray(r * 64, (r + 1) * 64))).toEqual(best);
        for (let i = 0; i < 64; i++) expect(vals2[r * 64 + i]).toBe(row[best[i]]);
      }
    } finally {
      m.close();
    }
  });

  test.skipIf(!existsSync(path))("saved KV is position-major as the CPU's: a prefix of a saved state restores, and the bytes match the CPU's layout", () => {
    const m = Model.load(path, { nCtx: 64, nSlots: 3, nGpuLayers: "all" });
    const cpuM = Model.load(path, { nCtx: 64, nSlots: 1, nGpuLayers: 0 });
    try {
      const be = m.backend as CudaBackend;
      const V = m.hp.nVocab, P = be.kvPosBytes();
      expect(P).toBe(cpuM.backend.kvPosBytes());
      const prompt = [5, 9, 200, 31, 7, 77, 3, 11, 12, 13, 14, 15];
      m.evalSequence(prompt, 0, 0);
      const saved = new Uint8Array(prompt.length * P);
      be.kvSave(0, prompt.length, saved);
      // the first 7 positions of the 12 saved restore into slot 1; slot 2 evaluates those 7 itself
      const n = 7;
      be.kvLoad(1, n, saved.subarray(0, n * P));
      m.evalSequence(prompt.slice(0, n), 0, 2);
      const a = new Float32Array(V), b = new Float32Array(V);
      be.forward(one(prompt[n], n, 1, a));
      be.forward(one(prompt[n], n, 2, b));
      expect(argmax(a)).toBe(argmax(b));
      expect(maxAbs(a, b) / std(b)).toBeLessThan(2e-2);
      // the same state kept on the card (the prompt cache's card tier) restores the same bits
      const dev = be.kvStash(0, prompt.length);
      expect(dev).toBeDefined();
      expect(dev!.bytes).toBe(prompt.length * P);
      dev!.restore(1, n);
      const d = new Float32Array(V);
      be.forward(one(prompt[n], n, 1, d));
      expect(maxAbs(d, a)).toBe(0);
      dev!.free();
      expect(() => dev!.restore(1, n)).toThrow(/freed/);
      // the CPU's saved bytes of the same prompt: the same layout, f16 values within rounding
      cpuM.evalSequence(prompt, 0, 0);
      const cpuSaved = new Uint8Array(prompt.length * P);
      cpuM.backend.kvSave(0, prompt.length, cpuSaved);
      const h16 = (u: Uint8Array) => new Float16Array(u.buffer, u.byteOffset, u.byteLength / 2);
      const g = h16(saved), c = h16(cpuSaved);
      let worst = 0, scale = 0;
      for (let i = 0; i < c.length; i++) { worst = Math.max(worst, Math.abs(g[i] - c[i])); scale = Math.max(scale, Math.abs(c[i])); }
      console.log(`saved KV, card against CPU: max |diff| ${worst.toExponential(2)} (values up to ${scale.toFixed(2)})`);
      expect(worst).toBeLessThan(0.05 * scale);
    } finally {
      cpuM.close();
      m.close();
    }
  });

  test.skipIf(!existsSync(path))("batch-invariant mode: a sequence's logits are the same bits alone, batched with others, and token by token", () => {
    const m = Model.load(path, { nCtx: 64, nSlots: 4, nGpuLayers: "all", batchInvariant: true, maxTokens: 64 });
    try {
      const be = m.backend as CudaBackend;
      expect(be.maxTokens).toBe(8);
      const V = m.hp.nVocab;
      const prompts = [[5, 9, 200, 31, 7, 77, 3, 11, 12, 13, 14], [40, 41, 42], [300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313]];
      // prompts in slots 0-2 (chunks of 8); slot 3 evaluates prompt 0 token by token
      const whole = prompts.map((p, i) => m.evalSequence(p, 0, i, true));
      for (let t = 0; t < prompts[0].length; t++) {
        const one = m.evalSequence([prompts[0][t]], t, 3);
        expect(maxAbs(one, whole[0].subarray(t * V, (t + 1) * V))).toBe(0);
      }
      // one decode step of each sequence alone (slot 3 re-evaluates each prompt), then all three in one batch
      const next = [17, 18, 19];
      const alone = prompts.map((p, i) => {
        m.evalSequence(p, 0, 3);
        const out = new Float32Array(V);
        be.forward(one(next[i], p.length, 3, out));
        return out;
      });
      const logits = new Float32Array(3 * V);
      be.forward({ tokens: Int32Array.from(next), pos: Int32Array.from(prompts.map((p) => p.length)), seq: Int32Array.of(0, 1, 2), outRows: Int32Array.of(0, 1, 2), logits });
      for (let i = 0; i < 3; i++) expect(maxAbs(logits.subarray(i * V, (i + 1) * V), alone[i])).toBe(0);
    } finally {
      m.close();
    }
  });

  test.skipIf(!existsSync(path))("bad batches and a context too large for the card are refused with clear messages", () => {
    const m = Model.load(path, { nCtx: 16, nGpuLayers: "all" });
    try {
      const V = m.hp.nVocab;
      expect(() => m.backend.forward(one(V + 5, 0, 0, new Float32Array(V)))).toThrow(/outside the vocabulary/);
      expect(() => m.backend.forward(one(1, 16, 0, new Float32Array(V)))).toThrow(/outside the context/);
      expect(() => m.backends.create({ nSlots: 64, nCtxSlot: 1 << 24, maxTokens: 512, nThreads: 1 }, { nGpuLayers: "all" })).toThrow(/not fit/);
      // the context still works after the refusals
      expect(m.evalSequence([1, 2, 3], 0).length).toBe(V);
    } finally {
      m.close();
    }
  });
});

// The two models of a decode-batch test: the CPU exact path and the card (every layer), S slots
// each, slot s fed prompt(s, V) on both; len: each slot's next position. Closes both on a failure.
function batchModels(file: string, S: number, prompt: (s: number, V: number) => number[]): { cpu: Model; m: Model; be: CudaBackend; V: number; len: number[] } {
  const cpu = Model.load(file, { nCtx: 64, nSlots: S, exact: true, nThreads: 8 });
  const m = Model.load(file, { nCtx: 64, nSlots: S, maxTokens: 64, nGpuLayers: "all" });
  try {
    const V = m.hp.nVocab;
    const len: number[] = [];
    for (let s = 0; s < S; s++) {
      const p = prompt(s, V);
      cpu.evalSequence(p, 0, s);
      m.evalSequence(p, 0, s);
      len.push(p.length);
    }
    return { cpu, m, be: m.backend as CudaBackend, V, len };
  } catch (e) {
    cpu.close();
    m.close();
    throw e;
  }
}

// Decode batches of 2..8 sequences (one token each, different slots and positions) take the
// experts grouped by expert (cuda/experts/moe_batch.cu). Each token's logits against its sequence's
// one-token step alone and against the CPU exact path. Bounds: with f32 activations everywhere
// (CudaFast.all & ~int8) both steps differ only in summation order (the one-token kernels against
// the general ones measure below 1e-4 above), so 1e-3; with the default int8 activations the
// one-token step rounds Q, K, V, O and the experts' inputs to int8 per 32 while the batch keeps
// Q, K, V and O in f32, so the CPU comparisons' 1e-1 (ggml's numerics) bounds that difference.
// Against the CPU: synthetic models within the bounds of the tests above; the tiny fixture's own
// card-vs-CPU gap reaches 0.2 at some positions (the one-token step shows the same: f16 KV cache
// and near ties among its 8 experts), so there the batch must be no further from the CPU than
// the one-token step (plus 1e-3).
interface BatchCase { model: string; quant: string; layers?: number; fixture?: string }
const BATCH_CASES: BatchCase[] = [
  { model: "tiny", quant: "Q8_0", fixture: "tiny-q8_0.gguf" }, { model: "test-moe", quant: "Q4_K_M" },
  { model: "test-moe", quant: "Q8_0" }, { model: "test-moe", quant: "MXFP4" }, { model: "test-moe", quant: "BF16" },
  { model: "test-moe-wide", quant: "Q4_K_M" }, { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("decode batches grouped by expert against one-token steps and the CPU exact path", () => {
  for (const c of BATCH_CASES) {
    const fixture = c.fixture ? join(tinyDir, c.fixture) : undefined;
    test.skipIf(fixture !== undefined && !existsSync(fixture))(`${c.model}:${c.quant}${c.layers ? ` (${c.layers} layers)` : ""}: steps of 2, 3, 5 and 8 sequences`, async () => {
      let file = fixture;
      if (!file) {
        file = join(tmp, `batch-${c.model}-${c.quant}.gguf`);
        await synth({ model: c.model, quant: c.quant, out: file, layers: c.layers ?? 0, seed: 5 });
      }
      const S = 8;
      // a prompt of a different length in each slot
      const { cpu, m, be, V, len } = batchModels(file, S, (s, V) => Array.from({ length: 6 + 3 * s }, (_, i) => (i * 7919 + 31 * s + 13) % V));
      try {
        const F = CudaFast;
        const worst = { f32Single: 0, f32Cpu: 0, f32Excess: 0, i8Single: 0, i8Cpu: 0, i8Excess: 0 };
        let round = 0;
        for (const int8 of [false, true]) {
          be.setOption(CudaOption.fast, int8 ? F.all : F.all & ~F.int8);
          for (const n of [2, 3, 5, 8]) {
            // n slots from a rotating start, one token each at the slot's next position
            const seqs = Array.from({ length: n }, (_, i) => (i + round) % S);
            const toks = seqs.map((s, i) => (s * 101 + i * 17 + round * 5 + 3) % V);
            const pos = seqs.map((s) => len[s]);
            const all = new Float32Array(n * V);
            be.forward({ tokens: Int32Array.from(toks), pos: Int32Array.from(pos), seq: Int32Array.from(seqs), outRows: Int32Array.from(seqs.keys()), logits: all });
            let dSingle = 0, dCpu = 0, dAloneCpu = 0, excess = -Infinity;
            for (let i = 0; i < n; i++) {
              const got = all.subarray(i * V, (i + 1) * V);
              // the same position again alone (it rewrites the KV row the batch wrote for it)
              const alone = new Float32Array(V);
              be.forward(one(toks[i], pos[i], seqs[i], alone));
              const ref = cpu.evalSequence([toks[i]], pos[i], seqs[i]);
              const dGot = maxAbs(got, ref) / std(ref), dAlone = maxAbs(alone, ref) / std(ref);
              dSingle = Math.max(dSingle, maxAbs(got, alone) / std(alone));
              dCpu = Math.max(dCpu, dGot);
              dAloneCpu = Math.max(dAloneCpu, dAlone);
              excess = Math.max(excess, Number.isFinite(dGot) ? dGot - dAlone : Infinity);
            }
            for (const s of seqs) len[s]++;
            round++;
            console.log(`${c.model}:${c.quant} batch of ${n} (${int8 ? "int8" : "f32"} activations): max |dlogit| / std vs one-token steps ${dSingle.toExponential(2)}, vs CPU exact ${dCpu.toExponential(2)} (the one-token steps ${dAloneCpu.toExponential(2)})`);
            if (int8) {
              worst.i8Single = Math.max(worst.i8Single, Number.isFinite(dSingle) ? dSingle : Infinity);
              worst.i8Cpu = Math.max(worst.i8Cpu, Number.isFinite(dCpu) ? dCpu : Infinity);
              worst.i8Excess = Math.max(worst.i8Excess, excess);
            } else {
              worst.f32Single = Math.max(worst.f32Single, Number.isFinite(dSingle) ? dSingle : Infinity);
              worst.f32Cpu = Math.max(worst.f32Cpu, Number.isFinite(dCpu) ? dCpu : Infinity);
              worst.f32Excess = Math.max(worst.f32Excess, excess);
            }
          }
        }
        be.setOption(CudaOption.fast, F.all);
        expect(worst.f32Single).toBeLessThan(1e-3);
        // the tiny fixture's near ties: its one-token step takes int8 activations on its Q8_0
        // products (since bfbb059) where the batch keeps f32, and one flipped pick moved a step's
        // logits by 1.1 std (batch of 2, H200); there the batch is held to the CPU instead (excess)
        if (!fixture) expect(worst.i8Single).toBeLessThan(1e-1);
        expect(worst.f32Excess).toBeLessThan(1e-3);
        expect(worst.i8Excess).toBeLessThan(1e-1);
        if (!fixture) {
          expect(worst.f32Cpu).toBeLessThan(3e-2);
          expect(worst.i8Cpu).toBeLessThan(1e-1);
        }
      } finally {
        cpu.close();
        m.close();
        if (!fixture) rmSync(file, { force: true });
      }
    });
  }
});

// Decode batches' dense products (cuda/dense/mv_batch.cu: Q/K/V, attention output, router, output head,
// each weight row read once for all of the batch's rows). Each batch runs twice: with the general
// per-token products (CudaFast.products off) and with the batched ones, then each sequence alone
// (one-token kernels) and on the CPU exact path. Bounds: f32 activations (int8 off) change only
// summation order, so 1e-3 against the general kernels and the one-token step; int8 activations
// round each normalised row per 32 as the one-token kernels do, so the batch now stays within
// 1e-2 of the one-token step (it was ~1.2e-2 while the batch kept Q/K/V/O in f32; Q8_0 files: 1e-1,
// their one-token step keeps f32) and within the 1e-1 of the CPU comparisons of the general
// kernels and the CPU exact path. H200: f32 <= 1.3e-6 against both; int8 <= 7.8e-4 against the
// one-token step (Q4_K_M), 1.3-1.5e-2 against the general kernels.
const MVB_CASES: BatchCase[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe", quant: "Q8_0" }, { model: "test-moe", quant: "BF16" },
  { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("decode batches' dense products read each weight row once, against the general kernels, one-token steps and the CPU exact path", () => {
  for (const c of MVB_CASES) {
    test(`${c.model}:${c.quant}${c.layers ? ` (${c.layers} layers)` : ""}: steps of 2, 3, 5 and 8 sequences`, async () => {
      const file = join(tmp, `mvb-${c.model}-${c.quant}.gguf`);
      await synth({ model: c.model, quant: c.quant, out: file, layers: c.layers ?? 0, seed: 7 });
      const S = 8;
      const { cpu, m, be, V, len } = batchModels(file, S, (s, V) => Array.from({ length: 5 + 2 * s }, (_, i) => (i * 4099 + 37 * s + 11) % V));
      try {
        const F = CudaFast;
        const worst = { f32General: 0, f32Single: 0, f32Cpu: 0, i8General: 0, i8Single: 0, i8Cpu: 0 };
        let round = 0;
        for (const int8 of [false, true]) {
          const bits = int8 ? F.all : F.all & ~F.int8;
          for (const n of [2, 3, 5, 8]) {
            const seqs = Array.from({ length: n }, (_, i) => (i * 3 + round) % S);
            const toks = seqs.map((s, i) => (s * 89 + i * 23 + round * 7 + 1) % V);
            const pos = seqs.map((s) => len[s]);
            const batch = (logits: Float32Array): Batch => ({ tokens: Int32Array.from(toks), pos: Int32Array.from(pos), seq: Int32Array.from(seqs), outRows: Int32Array.from(seqs.keys()), logits });
            const general = new Float32Array(n * V), got = new Float32Array(n * V);
            be.setOption(CudaOption.fast, bits & ~F.products);
            be.forward(batch(general));
            be.setOption(CudaOption.fast, bits);
            be.forward(batch(got));
            let dGeneral = 0, dSingle = 0, dCpu = 0;
            for (let i = 0; i < n; i++) {
              const g = got.subarray(i * V, (i + 1) * V), gen = general.subarray(i * V, (i + 1) * V);
              const alone = new Float32Array(V);
              be.forward(one(toks[i], pos[i], seqs[i], alone));
              const ref = cpu.evalSequence([toks[i]], pos[i], seqs[i]);
              dGeneral = Math.max(dGeneral, maxAbs(g, gen) / std(gen));
              dSingle = Math.max(dSingle, maxAbs(g, alone) / std(alone));
              dCpu = Math.max(dCpu, maxAbs(g, ref) / std(ref));
            }
            for (const s of seqs) len[s]++;
            round++;
            console.log(`${c.model}:${c.quant} batched products, ${n} sequences (${int8 ? "int8" : "f32"} activations): max |dlogit| / std vs the general kernels ${dGeneral.toExponential(2)}, vs one-token steps ${dSingle.toExponential(2)}, vs CPU exact ${dCpu.toExponential(2)}`);
            const fin = (v: number) => (Number.isFinite(v) ? v : Infinity);
            if (int8) {
              worst.i8General = Math.max(worst.i8General, fin(dGeneral));
              worst.i8Single = Math.max(worst.i8Single, fin(dSingle));
              worst.i8Cpu = Math.max(worst.i8Cpu, fin(dCpu));
            } else {
              worst.f32General = Math.max(worst.f32General, fin(dGeneral));
              worst.f32Single = Math.max(worst.f32Single, fin(dSingle));
              worst.f32Cpu = Math.max(worst.f32Cpu, fin(dCpu));
            }
          }
        }
        be.setOption(CudaOption.fast, F.all);
        expect(worst.f32General).toBeLessThan(1e-3);
        expect(worst.f32Single).toBeLessThan(1e-3);
        expect(worst.f32Cpu).toBeLessThan(3e-2);
        expect(worst.i8General).toBeLessThan(1e-1);
        // the one-token kernels round activations to int8 for Q4_K / Q6_K rows only: a Q8_0 file's
        // one-token step keeps f32 activations, the batch rounds them (measured 1.3-1.5e-2)
        expect(worst.i8Single).toBeLessThan(c.quant === "Q8_0" ? 1e-1 : 1e-2);
        expect(worst.i8Cpu).toBeLessThan(1e-1);
      } finally {
        cpu.close();
        m.close();
        rmSync(file, { force: true });
      }
    });
  }
});

// The decode-batch fast bits A/B (test/cuda-fast-ab.ts): each step run with a bit on, then again
// with it off, on 8 slots holding prompts. Every fusion below is bit for bit the launches it
// replaces (the same float operations in the same order), so not one logit may differ; Q/K in the
// attention changes only the per-head norm's sum order. Counters (CudaBackend.stats) prove the
// fused path ran where it must.
const withTiny = (c: BatchCase): BatchCase => (c.fixture ? { ...c, fixture: join(tinyDir, c.fixture) } : c);
const absent = (c: BatchCase): boolean => c.fixture !== undefined && !existsSync(join(tinyDir, c.fixture));
// prompts across the attention's context classes: slots 0, 3, 6 ~5 positions; 1, 4, 7 ~300; 2, 5 ~1,100
const classLengths = (s: number): number => [5, 300, 1100][s % 3] + s;

// Int8 products with their activation rows quantized once a launch (cuda/dense/x8rows.cu, CudaFast.x8)
// against each block staging the rows itself: the same int8 values, scales and sums reach the
// same dot products - Q/K/V (rows RMS-normalised on the way), the attention output (added to the
// residual), the grouped experts' gate/up (rows quantized by spare blocks of the picks' launch),
// the output head. Q4_K_M mixes Q4_K and Q6_K rows in one launch; Q6_K files take Q6_K alone;
// widths 256, 512, 2048 and 4096.
const X8_CASES: BatchCase[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe", quant: "Q6_K" }, { model: "test-moe-wide", quant: "Q4_K_M" },
  { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("decode batches' rows quantized once a launch give the logits of each block's own staging", () => {
  for (const c of X8_CASES) {
    test(`${caseName(c)}: steps of 2, 3, 5 and 8 sequences, bit for bit`, async () => {
      await withAbModel(c, { dir: tmp, tag: "x8", seed: 13, nCtx: 64, maxTokens: 64, promptLength: (s) => 4 + 2 * s }, (t) => {
        for (const seqs of rotatingSteps([2, 3, 5, 8], 5)) {
          // the tensor-core gate/up takes only rows quantized once: off on both sides
          const base = CudaFast.default & ~CudaFast.guMma;
          const r = abStep(t, seqs, base, base & ~CudaFast.x8);
          console.log(`${c.model}:${c.quant} batch of ${seqs.length}: ${r.differ} of ${r.a.length} logits differ between rows quantized once and by each block`);
          expect(r.finite).toBe(true);
          expect(r.differ).toBe(0);
        }
      });
    });
  }
});

// Decode batches of distinct slots with Q/K norm, RoPE and the cache write inside the attention
// (CudaFast.qkAttention; the one-token step's arithmetic) against cu_qk_prep's separate launch: only
// the per-head norm's sum order differs (a warp's against a block's): 6-8e-7 of the std on the
// H200, but a last-bit change can move an int8 rounding of the activations downstream (8.4e-4 on
// the 2-layer Qwen3 shapes), so within 1e-2, and the same greedy token; a batch holding a slot's
// two adjacent tokens keeps cu_qk_prep both times (bit for bit).
gpu("decode batches of distinct slots form Q/K in the attention", () => {
  for (const c of [{ model: "test-moe", quant: "Q4_K_M" }, { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 }] as BatchCase[]) {
    test(`${caseName(c)}: steps of 2, 5 and 8 sequences and one with a slot's two tokens`, async () => {
      await withAbModel(c, { dir: tmp, tag: "qka", seed: 17, nCtx: 2048, maxTokens: 512, promptLength: classLengths }, (t) => {
        let worst = 0;
        for (const seqs of [[0, 3], [2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 6, 7], [7, 7, 3]]) {
          const r = abStep(t, seqs, CudaFast.default, CudaFast.default & ~CudaFast.qkAttention);
          console.log(`${c.model}:${c.quant} slots ${seqs.join(",")}: Q/K in the attention vs cu_qk_prep: max |dlogit| / std ${r.rel.toExponential(2)}`);
          worst = Math.max(worst, r.rel);
          expect(r.finite).toBe(true);
          expect(r.sameArgmax).toBe(true);
          if (new Set(seqs).size < seqs.length) expect(r.differ).toBe(0);
        }
        expect(worst).toBeLessThan(1e-2);
      });
    });
  }
});

// The experts' combine fused into the next layer's Q/K/V row quantization (CudaFast.combine:
// cuda/dense/x8rows.cu k_x8_comb, one launch for moe.cu's k_moe_combine and the normalised k_x8_rows)
// against the two launches: the same fma chain over the picks in pick order, the same x stored,
// the same norm and int8 rows. Q4_K_M files fuse every MoE layer's combine but the last (the
// output norm launches that one; the count of fused combines must grow); the tiny fixture (Q8_0:
// no int8 rows) and f32 activations take the pending combine's other path, launched before the
// product reads x. Widths 256, 512 and 2048.
const COMBINE_CASES: BatchCase[] = [
  { model: "tiny", quant: "Q8_0", fixture: "tiny-q8_0.gguf" }, { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe-wide", quant: "Q4_K_M" },
  { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("decode batches' expert combine fused into the next layer's row quantization gives the logits of the two launches", () => {
  for (const c of COMBINE_CASES) {
    test.skipIf(absent(c))(`${caseName(c)}: steps of 2, 5 and 8 sequences, bit for bit`, async () => {
      await withAbModel(withTiny(c), { dir: tmp, tag: "comb", seed: 17, nCtx: 64, maxTokens: 64, promptLength: (s) => 3 + 3 * s }, (t) => {
        for (const int8 of [true, false]) {
          const bits = int8 ? CudaFast.default : CudaFast.default & ~CudaFast.int8;
          for (const seqs of rotatingSteps([2, 5, 8], 3)) {
            const r = abStep(t, seqs, bits, bits & ~CudaFast.combine, () => t.be.stats().fusedCombines);
            console.log(`${c.model}:${c.quant} batch of ${seqs.length} (${int8 ? "int8" : "f32"} activations): ${r.statA} combines fused, ${r.differ} of ${r.a.length} logits differ from the two launches`);
            expect(r.finite).toBe(true);
            expect(r.differ).toBe(0);
            expect(r.statB).toBe(0);
            if (int8 && c.quant === "Q4_K_M") expect(r.statA).toBeGreaterThan(0);
            else expect(r.statA).toBe(0);
          }
        }
      });
    });
  }
});

// The attention output's int8 rows written by the attention itself (CudaFast.attnX8: cuda/attention/attn2.cu
// writes each head group's x8 slot where it writes the f32 output - the one-slice block and the
// slices' merge - with k_x8_rows<false>'s q8_group on the same floats), so the output product
// skips its quantization launch, against that launch: the same int8 bytes. Steps in the
// attention's three context classes, of distinct slots (Q/K formed in the attention, and with
// qkAttention off cu_qk_prep's path) and holding a slot's two adjacent tokens (cu_qk_prep's path).
// Q4_K_M files must count the products that took the attention's rows; the tiny fixture (Q8_0: no
// int8 rows here) counts none.
const ATTX8_CASES: BatchCase[] = [
  { model: "tiny", quant: "Q8_0", fixture: "tiny-q8_0.gguf" }, { model: "test-moe", quant: "Q4_K_M" }, { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("decode batches' attention output rows quantized by the attention give the logits of the quantization launch", () => {
  for (const c of ATTX8_CASES) {
    test.skipIf(absent(c))(`${caseName(c)}: steps of 2, 5 and 8 sequences and a slot's two tokens, bit for bit`, async () => {
      await withAbModel(withTiny(c), { dir: tmp, tag: "attx8", seed: 17, nCtx: 2048, maxTokens: 512, promptLength: classLengths }, (t) => {
        // class 0 (2 tokens), class 1 (5), class 2 (8 and 2), a slot's two tokens in classes 1 and 2
        const steps = [[0, 3], [1, 4, 0, 3, 6], [0, 1, 2, 3, 4, 5, 6, 7], [2, 6], [7, 7, 3], [5, 5, 1, 0, 2]];
        for (const bits of [CudaFast.default, CudaFast.default & ~CudaFast.qkAttention]) {
          for (const seqs of steps) {
            const r = abStep(t, seqs, bits | CudaFast.attnX8, bits & ~CudaFast.attnX8, () => t.be.stats().attnX8);
            console.log(`${c.model}:${c.quant} slots ${seqs.join(",")}${bits & CudaFast.qkAttention ? "" : " (qkAttention off)"}: ${r.statA} output products took the attention's int8 rows, ${r.differ} of ${r.a.length} logits differ from the quantization launch`);
            expect(r.finite).toBe(true);
            expect(r.differ).toBe(0);
            expect(r.statB).toBe(0);
            if (c.quant === "Q4_K_M") expect(r.statA).toBeGreaterThan(0);
            else expect(r.statA).toBe(0);
          }
        }
      });
    });
  }
});

// The experts' down by lane groups (CudaFast.downGroups: cuda/experts/moe_batch.cu, 4 lanes a row of up to
// 48 int8 units, 8 rows a warp) against a warp a row, and the one-token down with a warp's lanes
// over every pick's units (CudaFast.down1: cuda/experts/fastdec.cu k_fdown) against a lane a unit of one
// pick at a time: the same int8 products, each row's units summed in another order, so a last bit
// may move an int8 rounding downstream (as Q/K in the attention): within 1e-2 of the std and the
// same greedy token. Counters prove each path ran (and not with its bit off). Q4_K_M: Q4_K and Q6_K
// down; Q6_K files: Q6_K alone; rows of 256, 512 and 768 (Qwen3-30B-A3B: 12 and 24 units).
const DOWN_CASES: BatchCase[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe", quant: "Q6_K" }, { model: "test-moe-wide", quant: "Q4_K_M" },
  { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("the experts' down by lane groups and over every pick's units give the logits of a warp a row", () => {
  for (const c of DOWN_CASES) {
    test(`${caseName(c)}: steps of 1, 2, 5 and 8 sequences`, async () => {
      await withAbModel(c, { dir: tmp, tag: "dng", seed: 23, nCtx: 64, maxTokens: 64, promptLength: (s) => 3 + 2 * s }, (t) => {
        let worst = 0;
        for (const seqs of rotatingSteps([1, 2, 5, 8], 3)) {
          const one = seqs.length === 1;
          const bit = one ? CudaFast.down1 : CudaFast.downGroups;
          const base = CudaFast.default & ~CudaFast.downMma; // the tensor-core down comes before the lane groups
          const stat = () => (one ? t.be.stats().down1 : t.be.stats().downGroups);
          worst = Math.max(worst, expectReordered(t, c, seqs, base, base & ~bit, stat, one ? "down over every pick's units" : "down by lane groups"));
        }
        expect(worst).toBeLessThan(1e-2);
      });
    });
  }
});

// The one-token gate/up quantizing its SwiGLU rows for down (CudaFast.act8: cuda/experts/fastdec.cu k_fgu8,
// 32 rows a block, q8_group on the floats down's own quantization takes) against down quantizing
// them itself: the same int8 rows, scales and sums, so not one logit may differ; the counter proves
// the path ran. Q4_K_M (Q4_K gate/up, Q4_K and Q6_K down), Q6_K, widths 256 / 512 / 2048.
gpu("the one-token gate/up's int8 rows for down give the logits of down's own quantization", () => {
  for (const c of DOWN_CASES) {
    test(`${caseName(c)}: one-token steps, bit for bit`, async () => {
      await withAbModel(c, { dir: tmp, tag: "act8", seed: 37, nCtx: 64, maxTokens: 64, promptLength: (s) => 3 + 2 * s }, (t) => {
        for (const seqs of [[0], [3], [7]])
          expectExact(t, c, seqs, CudaFast.default, CudaFast.default & ~CudaFast.act8, () => t.be.stats().act8, "gate/up quantized down's rows");
      });
    });
  }
});

// Decode batches' down on the tensor cores (CudaFast.downMma: cuda/experts/moe_batch.cu k_mb_down_mma with
// cuda/experts/mma8.cuh's Q4_K and Q6_K units) against the lane-group dp4a kernel: exact int32 sums, the
// scales applied in another order: within 1e-2 of the std, the same greedy token, the counter
// proves it ran. Q4_K_M: Q4_K and Q6_K down; Q6_K files: Q6_K alone; rows of 256, 512 and 768.
gpu("decode batches' down on the tensor cores gives the logits of the dp4a kernel", () => {
  for (const c of DOWN_CASES) {
    test(`${caseName(c)}: steps of 2, 5 and 8 sequences`, async () => {
      await withAbModel(c, { dir: tmp, tag: "dnmma", seed: 31, nCtx: 64, maxTokens: 64, promptLength: (s) => 3 + 2 * s }, (t) => {
        let worst = 0;
        for (const seqs of [...rotatingSteps([2, 5, 8], 3), [1, 1, 4, 4, 4]])
          worst = Math.max(worst, expectReordered(t, c, seqs, CudaFast.default, CudaFast.default & ~CudaFast.downMma, () => t.be.stats().downMma, "down on the tensor cores"));
        expect(worst).toBeLessThan(1e-2);
      });
    });
  }
});

// Decode batches' gate/up on the tensor cores (CudaFast.guMma: cuda/experts/moe_batch.cu k_mb_gu_mma, Q4_K
// rows) against the dp4a kernel: the same int8 rows and exact int32 group sums, the scales applied
// and the groups summed in another order: within 1e-2 of the std, the same greedy token, and the
// counter proves the tensor-core kernel ran. Widths 256 (one Q4_K block: one warp of the block
// works), 512 and 2048 (Qwen3-30B-A3B).
const GUMMA_CASES: BatchCase[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe-wide", quant: "Q4_K_M" }, { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

gpu("decode batches' gate/up on the tensor cores give the logits of the dp4a kernel", () => {
  for (const c of GUMMA_CASES) {
    test(`${caseName(c)}: steps of 2, 5 and 8 sequences`, async () => {
      await withAbModel(c, { dir: tmp, tag: "gumma", seed: 29, nCtx: 64, maxTokens: 64, promptLength: (s) => 3 + 2 * s }, (t) => {
        let worst = 0;
        for (const seqs of [...rotatingSteps([2, 5, 8], 3), [1, 1, 4, 4, 4]])
          worst = Math.max(worst, expectReordered(t, c, seqs, CudaFast.default, CudaFast.default & ~CudaFast.guMma, () => t.be.stats().guMma, "gate/up on the tensor cores"));
        expect(worst).toBeLessThan(1e-2);
      });
    });
  }
});

// Prompt batches' tensor-core products with each K slice's stored blocks copied into shared memory
// at once (CudaFast.gemmRaw, cuda/dense/gemm.cu's raw path) against the direct loads: the same blocks
// reach the same units, the same halves the same products, so a prompt's logits agree bit for bit
// - dense (Q/K/V, attention output) and grouped by expert; Q4_K_M (Q4_K and Q6_K rows; Q6_K rows
// of 768 elements are not 16-byte aligned and keep the direct path), Q8_0, MXFP4 and BF16.
const RAW_CASES: BatchCase[] = [
  { model: "test-moe", quant: "Q4_K_M" }, { model: "test-moe", quant: "Q8_0" }, { model: "test-moe", quant: "MXFP4" },
  { model: "test-moe", quant: "BF16" }, { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2 },
];

// A prompt (chunks of `chunks` tokens, each at the next position of slot 0) evaluated with every
// default bit and again without `bit`: the logits must agree bit for bit; count() (a stats
// counter, optional) must grow with the bit on, so the path under test was taken.
async function promptBitForBit(c: BatchCase, tag: string, bit: number, chunks: number[], count?: (be: CudaBackend) => number): Promise<void> {
  const file = join(tmp, `${tag}-${c.model}-${c.quant}.gguf`);
  await synth({ model: c.model, quant: c.quant, out: file, layers: c.layers ?? 0, seed: 23 });
  const total = chunks.reduce((a, b) => a + b, 0);
  const m = Model.load(file, { nCtx: total + 64, maxTokens: Math.max(...chunks), nGpuLayers: "all" });
  const be = m.backend as CudaBackend;
  try {
    const V = m.hp.nVocab;
    const prompt = Array.from({ length: total }, (_, i) => (i * 7001 + 11) % V);
    const run = (bits: number): Float32Array[] => {
      be.setOption(CudaOption.fast, bits);
      const out: Float32Array[] = [];
      let pos = 0;
      for (const n of chunks) {
        out.push(Float32Array.from(m.evalSequence(prompt.slice(pos, pos + n), pos, 0, true)));
        pos += n;
      }
      return out;
    };
    const before = count ? count(be) : 0;
    const on = run(CudaFast.default | bit);
    const taken = count ? count(be) - before : 1;
    const off = run(CudaFast.default & ~bit);
    let differ = 0, finite = true, n = 0;
    for (let k = 0; k < chunks.length; k++) {
      expect(on[k].length).toBe(chunks[k] * V);
      for (let i = 0; i < on[k].length; i++) {
        if (!(on[k][i] === off[k][i])) differ++;
        if (!Number.isFinite(on[k][i])) finite = false;
      }
      n += on[k].length;
    }
    console.log(`${caseName(c)} ${tag}, chunks ${chunks.join("+")}: ${differ} of ${n} logits differ with the bit off${count ? ` (${taken} launches took the path)` : ""}`);
    expect(finite).toBe(true);
    expect(taken).toBeGreaterThan(0);
    expect(differ).toBe(0);
  } finally {
    be.setOption(CudaOption.fast, CudaFast.default);
    m.close();
    rmSync(file, { force: true });
  }
}

gpu("prompt batches' products from a shared-memory copy of the stored blocks give the logits of the direct loads", () => {
  for (const c of RAW_CASES) test(`${caseName(c)}: a 200-token prompt, bit for bit`, () => promptBitForBit(c, "raw", CudaFast.gemmRaw, [200]));
});

// Prompt batches' dense products (Q/K/V, attention output) from f16 copies of the weights made once
// a launch, on the pipelined product (CudaFast.gemm16, cuda/dense/gemm16.cu): the same halves in the same
// m16n8k16 sequence as gemm.cu's tiles, so the logits agree bit for bit - every stored type the
// raw path covers, F16 rows read in place, a batch of 200 and a second chunk at position 200.
const F16_CASES: BatchCase[] = [...RAW_CASES, { model: "test-moe", quant: "F16" }];

// Prompt batches' expert products on f16 activation rows (CudaFast.gemmB16): the normalised rows
// converted once and gate/up's SwiGLU rows written as halves, copied into the tiles - the halves
// the tiles' own conversions make, so bit for bit (Q4_K_M's Q6_K down rows of 768 elements take
// the direct path, the rest the raw one).
gpu("prompt batches' expert products on f16 activation rows give the tiles' logits", () => {
  for (const c of F16_CASES) {
    test(`${caseName(c)}: prompts of 200 and 200+136, bit for bit`, () =>
      promptBitForBit(c, "b16", CudaFast.gemmB16, [200, 136], (be) => be.stats().gemmB16));
  }
});

// Q/K norm, RoPE and the cache write a block a token (CudaFast.qkTok, cuda/attention/attn.cu k_qk_tok): the
// same factors, sums and expressions as k_qk, so bit for bit.
gpu("prompt batches' Q/K preparation a block a token gives k_qk's logits", () => {
  for (const c of F16_CASES) {
    test(`${caseName(c)}: prompts of 200 and 200+136, bit for bit`, () =>
      promptBitForBit(c, "qk", CudaFast.qkTok, [200, 136], (be) => be.stats().qkTok));
  }
});

gpu("prompt batches' dense products from f16 weight copies give the tiles' logits", () => {
  for (const c of F16_CASES) {
    test(`${caseName(c)}: prompts of 200 and 200+136, bit for bit`, () =>
      promptBitForBit(c, "f16", CudaFast.gemm16, [200, 136], (be) => be.stats().gemm16));
  }
});

// A decode-sized batch in which one slot's tokens are not adjacent (two rows of slot 0 rewritten at
// positions 5 and 19): the token at 19 must read row 5 as this step writes it. The one-token
// attention kernel prefetches rows before its wait on the Q/K step, so such a batch takes the
// general attention (forward.cu, ATTN_GENERAL); adjacent tokens (a prompt chunk) keep the fast one.
gpu("a decode batch with a slot's tokens apart reads the rows the step writes", () => {
  test("test-moe:Q4_K_M: rows 5 and 19 of one slot in one step, against the CPU exact path", async () => {
    const file = join(tmp, "gap-test-moe.gguf");
    await synth({ model: "test-moe", quant: "Q4_K_M", out: file, layers: 0, seed: 11 });
    const { cpu, m, be, V } = batchModels(file, 2, (s, V) => Array.from({ length: 20 }, (_, i) => (i * 131 + 7 * s + 3) % V));
    try {
      be.setOption(CudaOption.fast, CudaFast.all & ~CudaFast.int8);
      const cases: { pos: number[]; seq: number[] }[] = [
        { pos: [5, 19], seq: [0, 0] }, // apart: the general attention
        { pos: [18, 19, 19], seq: [0, 0, 1] }, // adjacent (and another slot): the one-token kernel
      ];
      for (const k of cases) {
        const n = k.pos.length;
        const batch = (logits: Float32Array): Batch => ({
          tokens: Int32Array.from(k.pos, (p, i) => (p * 977 + 31 * i + 5) % V), pos: Int32Array.from(k.pos), seq: Int32Array.from(k.seq),
          outRows: Int32Array.from(k.pos.keys()), logits,
        });
        const got = new Float32Array(n * V), ref = new Float32Array(n * V);
        be.forward(batch(got));
        cpu.backend.forward(batch(ref));
        let worst = 0;
        for (let i = 0; i < n; i++) {
          const r = ref.subarray(i * V, (i + 1) * V);
          worst = Math.max(worst, maxAbs(got.subarray(i * V, (i + 1) * V), r) / std(r));
        }
        console.log(`slot tokens at ${k.pos.join(", ")} (slots ${k.seq.join(", ")}): max |dlogit| / std vs CPU exact ${worst.toExponential(2)}`);
        expect(worst).toBeLessThan(1e-2);
      }
      be.setOption(CudaOption.fast, CudaFast.default);
    } finally {
      cpu.close();
      m.close();
      rmSync(file, { force: true });
    }
  });
});

// Batches of 9..CUDA_SPLIT_MAX tokens run as decode steps of at most 8 (src/engine/cuda-backend.ts
// splitPieces): a 14-token chunk after a 30-token prefix, with every row's logits and with the
// card's top-k, against the same chunk in one forward of the prompt kernels (BLOOMERY_CUDA_SPLIT_MAX=0).
gpu("batches of 9-24 tokens as decode steps", () => {
  test(`test-moe:Q4_K_M: a 14-token chunk in two steps, within the int8 bound of one prompt batch`, async () => {
    expect(CUDA_SPLIT_MAX).toBeGreaterThanOrEqual(14);
    const file = join(tmp, "split-test-moe.gguf");
    await synth({ model: "test-moe", quant: "Q4_K_M", out: file, layers: 0, seed: 41 });
    const prev = process.env.BLOOMERY_CUDA_SPLIT_MAX;
    const run = (splitMax: string | undefined) => {
      if (splitMax === undefined) delete process.env.BLOOMERY_CUDA_SPLIT_MAX;
      else process.env.BLOOMERY_CUDA_SPLIT_MAX = splitMax;
      const m = Model.load(file, { nCtx: 128, maxTokens: 64, nGpuLayers: "all" });
      try {
        const V = m.hp.nVocab, be = m.backend as CudaBackend;
        const toks = Array.from({ length: 44 }, (_, i) => (i * 613 + 29) % V);
        m.evalSequence(toks.slice(0, 30), 0);
        const s0 = be.stats().steps;
        const all = m.evalSequence(toks.slice(30), 30, 0, true);
        const steps = be.stats().steps - s0;
        // the card's top 8 of rows 3 and 13 of the chunk (the same chunk again: its KV rows rewritten)
        const ids = new Int32Array(16), vals = new Float32Array(16);
        const chunk = Int32Array.from(toks.slice(30));
        be.forwardTopK({ tokens: chunk, pos: Int32Array.from(chunk, (_, i) => 30 + i), seq: new Int32Array(14), outRows: Int32Array.of(3, 13), logits: new Float32Array(0) }, 8, ids, vals);
        return { all, steps, ids, V };
      } finally {
        m.close();
      }
    };
    try {
      const split = run(undefined), one = run("0");
      const V = split.V;
      const d = maxAbs(split.all, one.all) / std(one.all.subarray(13 * V));
      console.log(`split: ${split.steps} steps against ${one.steps}; max |dlogit| / std ${d.toExponential(2)}`);
      expect(split.steps).toBe(2);
      expect(one.steps).toBe(1);
      expect(d).toBeLessThan(1e-1); // int8 activations in the decode steps (ggml's numerics)
      // the top-k rows pick the argmax of the full rows of the same run
      for (const [j, row] of [[0, 3], [1, 13]] as const) expect(split.ids[8 * j]).toBe(argmax(split.all.subarray(row * V, (row + 1) * V)));
    } finally {
      if (prev === undefined) delete process.env.BLOOMERY_CUDA_SPLIT_MAX;
      else process.env.BLOOMERY_CUDA_SPLIT_MAX = prev;
      rmSync(file, { force: true });
    }
  });
});
