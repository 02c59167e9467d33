// bloomery tests: whole forward passes on every CPU kernel path (the fixture models) against the
// scalar path; llama.cpp's greedy text on every path; the exact path unchanged by the kernels;
// thread counts (-t / -tb) and batching leave results unchanged; a path the CPU lacks is refused.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { CpuBackend } from "../src/engine/cpu-backend.ts";
import { NativeError } from "../ffi/cpu.ts";
import { CPU_PATHS, cpuPath, cpuPaths, setCpuPath, usableCores } from "../ffi/cpu-kernels.ts";
import { FIXTURES, SLOWDOWN } from "./paths.ts";
import { argmax, greedy, maxAbsDiff } from "./model-fixtures.ts";

const tinyDir = join(FIXTURES, "tiny-qwen3moe");
const demoDir = join(FIXTURES, "demo-model");
const initial = cpuPath();
const paths = cpuPaths();
afterAll(() => setCpuPath(initial));

function onPath<T>(path: string, f: () => T): T {
  setCpuPath(path);
  try {
    return f();
  } finally {
    setCpuPath(initial);
  }
}

describe("paths", () => {
  test("an unknown path and a path this CPU lacks are refused by name", () => {
    expect(() => setCpuPath("avx9")).toThrow(/avx9.*not one of scalar, avx2, avx512/);
    for (const p of CPU_PATHS) if (!paths.includes(p)) expect(() => setCpuPath(p)).toThrow(NativeError);
    expect(cpuPath()).toBe(initial);
  });
});

describe("forward passes agree across paths", () => {
  const prompt = [1, 22, 333, 44, 5, 66, 77, 8, 99, 100, 111, 12, 13, 140, 15, 16, 170];
  for (const file of [join(tinyDir, "tiny.gguf"), join(tinyDir, "tiny-q8_0.gguf"), join(demoDir, "bloomery-demo-q4_k_m.gguf")]) {
    const name = file.split("/").pop();
    test(`${name}: logits of every path near the scalar path's; the exact path identical on all`, () => {
      const m = Model.load(file, { nCtx: 64, nThreads: 2 });
      const mx = Model.load(file, { nCtx: 64, nThreads: 2, exact: true });
      try {
        const ref = onPath("scalar", () => m.evalSequence(prompt, 0, 0, true));
        const refExact = onPath("scalar", () => mx.evalSequence(prompt, 0));
        let scale = 0;
        for (const v of ref) scale = Math.max(scale, Math.abs(v));
        const V = m.hp.nVocab;
        for (const p of paths) {
          const got = onPath(p, () => m.evalSequence(prompt, 0, 0, true));
          // Another summation order may move an activation across an int8 step, or a router near a
          // tie to another expert: per position the logits stay close in most places (median), and
          // the top token agrees wherever the scalar path's top-2 margin is clear.
          const per: number[] = [];
          for (let t = 0; t < prompt.length; t++) {
            const a = got.subarray(t * V, (t + 1) * V), b = ref.subarray(t * V, (t + 1) * V);
            per.push(maxAbsDiff(a, b));
            const order = Array.from(b.keys()).sort((i, j) => b[j] - b[i]);
            if (b[order[0]] - b[order[1]] > 1.0) expect(argmax(a)).toBe(order[0]);
          }
          const median = per.slice().sort((x, y) => x - y)[per.length >> 1];
          console.log(`${name} ${p}: |dlogit| vs scalar: median ${median.toExponential(2)}, max ${Math.max(...per).toExponential(2)} (logits up to ${scale.toFixed(2)})`);
          expect(median).toBeLessThan(0.03 * scale);
          const ex = onPath(p, () => mx.evalSequence(prompt, 0));
          expect(maxAbsDiff(ex, refExact)).toBe(0);
        }
        // the two SIMD paths keep the same integer lanes and float operations (the same bits) for
        // the legacy and float types; K-quants on AVX-512 use the lane-order kernels at every batch
        // size (batch invariance), whose float steps differ in order: within the bound above
        if (paths.includes("avx2") && paths.includes("avx512") && !name?.includes("_k_")) {
          const a = onPath("avx2", () => m.evalSequence(prompt, 0, 0, true));
          const b = onPath("avx512", () => m.evalSequence(prompt, 0, 0, true));
          expect(maxAbsDiff(a, b)).toBe(0);
        }
        // aarch64: dotprod and i8mm form the same exact integer block sums (sdot or smmla) and
        // take the same float steps, for every type: the same bits
        if (paths.includes("dotprod") && paths.includes("i8mm")) {
          const a = onPath("dotprod", () => m.evalSequence(prompt, 0, 0, true));
          const b = onPath("i8mm", () => m.evalSequence(prompt, 0, 0, true));
          expect(maxAbsDiff(a, b)).toBe(0);
        }
      } finally {
        m.close();
        mx.close();
      }
    });
  }

  test("demo Q4_K_M: greedy tokens of every path follow the scalar path's up to a close call; llama.cpp's text", async () => {
    const file = "bloomery-demo-q4_k_m.gguf";
    const hf = (await Bun.file(join(demoDir, "demo-ref.json")).json()).refs as { prompt: number[] }[];
    const ll = (await Bun.file(join(demoDir, "llamacpp-ref.json")).json()).files[file].greedy as { completion: string }[];
    const m = Model.load(join(demoDir, file), { nCtx: 256, nThreads: 2 });
    try {
      const ref = onPath("scalar", () => hf.map((r) => greedy(m, r.prompt, 32)));
      for (const p of paths) {
        let equal = 0;
        onPath(p, () => {
          for (let i = 0; i < hf.length; i++) {
            const toks = greedy(m, hf[i].prompt, 32);
            let s = 0;
            while (s < toks.length && toks[s] === ref[i][s]) s++;
            if (s < toks.length) {
              // where a path parts from the scalar path, the scalar path's own top-2 margin is small
              const lg = onPath("scalar", () => m.evalSequence([...hf[i].prompt, ...ref[i].slice(0, s)], 0));
              const order = Array.from(lg.keys()).sort((a, b) => lg[b] - lg[a]);
              expect(lg[order[0]] - lg[order[1]]).toBeLessThan(0.5);
            }
            const text = m.tokenizer.decode(toks);
            const want = ll[i].completion.replace(/\n\n$/, "");
            const n = Math.min(text.length, want.length);
            if (text.slice(0, n) === want.slice(0, n)) equal++;
          }
        });
        console.log(`${file} on ${p}: ${equal}/${hf.length} greedy texts equal llama.cpp's`);
        expect(equal).toBeGreaterThanOrEqual(hf.length - 1);
      }
    } finally {
      m.close();
    }
  });
});

describe("long contexts", () => {
  test("past 64-position sub-tiles and 512-position chunks: paths agree, batch and one-token steps give the same bits", () => {
    const m = Model.load(join(tinyDir, "tiny-q8_0.gguf"), { nCtx: 800, nThreads: 2, maxTokens: 512 });
    try {
      const n = 700, V = m.hp.nVocab;
      const toks = Array.from({ length: n }, (_, i) => (i * 37 + 11) % 500);
      const tail = 3; // the last positions again, one token at a time (few tokens: chunks become work items)
      const run = (p: string) =>
        onPath(p, () => {
          const all = m.evalSequence(toks, 0, 0, true);
          const one: Float32Array[] = [];
          for (let i = n - tail; i < n; i++) one.push(m.evalSequence([toks[i]], i));
          return { all, one };
        });
      const ref = run("scalar");
      for (let k = 0; k < tail; k++) expect(maxAbsDiff(ref.one[k], ref.all.subarray((n - tail + k) * V, (n - tail + k + 1) * V))).toBe(0);
      let scale = 0;
      for (const v of ref.all.subarray((n - tail) * V)) scale = Math.max(scale, Math.abs(v));
      const simd = new Map<string, Float32Array>();
      for (const p of paths) {
        const got = run(p);
        for (let k = 0; k < tail; k++) {
          const row = got.all.subarray((n - tail + k) * V, (n - tail + k + 1) * V);
          expect(maxAbsDiff(got.one[k], row)).toBe(0);
          const d = maxAbsDiff(row, ref.all.subarray((n - tail + k) * V, (n - tail + k + 1) * V));
          if (k === tail - 1) console.log(`long context, ${p}: |dlogit| vs scalar at position ${n - 1}: ${d.toExponential(2)} (logits up to ${scale.toFixed(2)})`);
          // activation rounding flips over 700 positions and 3 layers: a few percent of the logit range
          expect(d).toBeLessThan(0.05 * scale);
        }
        if (p !== "scalar") simd.set(p, got.all);
      }
      // paths that keep the same integer lanes and float steps give the same bits
      for (const [a, b] of [["avx2", "avx512"], ["dotprod", "i8mm"]]) {
        if (simd.has(a) && simd.has(b)) expect(maxAbsDiff(simd.get(a)!, simd.get(b)!)).toBe(0);
      }
    } finally {
      m.close();
    }
  }, 60_000 * SLOWDOWN);
});

describe("batches of at least 32 rows (the lane-order kernels where the path has them)", () => {
  test("demo Q4_K_M, a 48-token batch: every path near the scalar path's", () => {
    const m = Model.load(join(demoDir, "bloomery-demo-q4_k_m.gguf"), { nCtx: 64, nThreads: 2 });
    try {
      const prompt = Array.from({ length: 48 }, (_, i) => (i * 131 + 7) % 7900);
      const V = m.hp.nVocab;
      const ref = onPath("scalar", () => m.evalSequence(prompt, 0, 0, true));
      for (const p of paths) {
        const got = onPath(p, () => m.evalSequence(prompt, 0, 0, true));
        const per: number[] = [];
        for (let t = 0; t < prompt.length; t++) {
          const a = got.subarray(t * V, (t + 1) * V), b = ref.subarray(t * V, (t + 1) * V);
          per.push(maxAbsDiff(a, b));
          const order = Array.from(b.keys()).sort((i, j) => b[j] - b[i]);
          if (b[order[0]] - b[order[1]] > 1.0) expect(argmax(a)).toBe(order[0]);
        }
        const median = per.slice().sort((x, y) => x - y)[per.length >> 1];
        console.log(`48-token batch, ${p}: |dlogit| vs scalar: median ${median.toExponential(2)}, max ${Math.max(...per).toExponential(2)}`);
        expect(median).toBeLessThan(0.5);
      }
    } finally {
      m.close();
    }
  });
});

describe("threads", () => {
  test("-t / -tb are clamped to the usable cores and do not change results; batching neither", () => {
    const cores = usableCores();
    expect(cores).toBeGreaterThanOrEqual(1);
    const prompt = [5, 17, 300, 2, 44, 9, 81, 120, 7, 64, 3];
    const m = Model.load(join(tinyDir, "tiny-q8_0.gguf"), { nCtx: 64, nThreads: 1, nThreadsBatch: 2, nSlots: 2 });
    try {
      const be = m.backend as CpuBackend;
      expect(be.threads()).toEqual({ nThreads: 1, nThreadsBatch: Math.min(2, cores) });
      const a = m.evalSequence(prompt, 0, 0, true);
      be.setThreads(64, 64);
      expect(be.threads()).toEqual({ nThreads: cores, nThreadsBatch: cores });
      const b = m.evalSequence(prompt, 0, 0, true);
      expect(maxAbsDiff(a, b)).toBe(0);
      const V = m.hp.nVocab;
      for (let i = 0; i < prompt.length; i++) {
        const one = m.evalSequence([prompt[i]], i, 1);
        expect(maxAbsDiff(one, a.subarray(i * V, (i + 1) * V))).toBe(0);
      }
      expect(() => be.setThreads(0, 1)).toThrow(/thread counts/);
    } finally {
      m.close();
    }
  });
});
