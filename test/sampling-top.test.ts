// bloomery tests: sampling from a backend's top candidates (Sampler.candidatesNeeded / sampleTop)
// picks the same token with the same probability as sampling the whole row, for the samplers
// that allow it, and the others say they need the whole row.
import { describe, expect, test } from "bun:test";
import { Sampler } from "../src/sampling/index.ts";
import type { SamplingParams } from "../src/sampling/params.ts";
import { Mt19937 } from "../src/sampling/rng.ts";

const V = 5000;
const EOG = [7, 4999];

/** A row with ties and a few large logits (the top of a real row), from a fixed generator. */
function row(g: Mt19937, spread: number): Float32Array {
  const r = new Float32Array(V);
  for (let i = 0; i < V; i++) r[i] = Math.fround(((g.nextU32() >>> 8) / 2 ** 24) * spread - spread / 2);
  for (let i = 0; i < 30; i++) r[g.nextU32() % V] = Math.fround(spread + (g.nextU32() % 5)); // ties among the best
  r[EOG[0]] = spread + 10; // an end token on top (banned with ignore_eos)
  return r;
}

/** The best k of a row, logit desc, id asc (the backends' order). */
function best(r: Float32Array, k: number): { ids: Int32Array; vals: Float32Array } {
  const idx = Array.from({ length: r.length }, (_, i) => i).sort((a, b) => r[b] - r[a] || a - b).slice(0, k);
  return { ids: Int32Array.from(idx), vals: Float32Array.from(idx, (i) => r[i]) };
}

const vocab = { nVocab: V, eogIds: EOG };

describe("sampling from the backend's top candidates", () => {
  const cases: [string, Partial<SamplingParams>][] = [
    ["llama-server's defaults", { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05 }],
    ["greedy", { temperature: 0, topK: 40 }],
    ["top-k 1", { temperature: 1, topK: 1 }],
    ["top-k 64, hot", { temperature: 3, topK: 64, topP: 1, minP: 0 }],
    ["ignore_eos", { temperature: 0.7, topK: 40, ignoreEos: true }],
    ["a token banned by bias", { temperature: 1, topK: 20, logitBias: [{ id: EOG[0], bias: -Infinity }] }],
    ["typical and xtc", { temperature: 1.2, topK: 50, typicalP: 0.9, xtcProbability: 0.5, xtcThreshold: 0.05, minP: 0 }],
    ["dynamic temperature", { temperature: 1, topK: 32, dynatempRange: 0.5 }],
    ["temperature first", { temperature: 0.5, topK: 16, samplers: ["temperature", "top_k", "top_p", "min_p"] }],
  ];
  for (const [name, p] of cases) {
    test(`${name}: the same picks as the whole row`, () => {
      const full = new Sampler({ seed: 1234, ...p }, vocab), top = new Sampler({ seed: 1234, ...p }, vocab);
      const need = top.candidatesNeeded();
      expect(need).toBeGreaterThan(0);
      expect(need).toBeLessThanOrEqual(64);
      const g = new Mt19937(99);
      for (let i = 0; i < 200; i++) {
        const r = row(g, i % 2 ? 4 : 12);
        const b = best(r, need + (i % 3)); // more candidates than needed are fine
        const a = full.sample(r, [1, 2, 3]), c = top.sampleTop(b.ids, b.vals, [1, 2, 3]);
        expect(c.id).toBe(a.id);
        expect(c.p).toBe(a.p);
        full.accept(a.id);
        top.accept(c.id);
      }
    });
  }

  test("samplers that read the whole row need it", () => {
    const whole: [string, Partial<SamplingParams>][] = [
      ["no top-k", { topK: 0 }],
      ["top-k past 64", { topK: 65 }],
      ["repetition penalty", { topK: 40, repeatPenalty: 1.1 }],
      ["a finite logit bias", { topK: 40, logitBias: [{ id: 3, bias: 2 }] }],
      ["probabilities asked for", { topK: 40, nProbs: 5 }],
      ["mirostat", { topK: 40, mirostat: 2 }],
      ["top-n-sigma", { topK: 40, topNSigma: 1 }],
      ["top-p first", { topK: 40, samplers: ["top_p", "top_k", "temperature"] }],
    ];
    for (const [name, p] of whole) {
      const s = new Sampler({ seed: 1, ...p }, vocab);
      expect([name, s.candidatesNeeded()]).toEqual([name, 0]);
      expect(() => s.sampleTop(new Int32Array(64), new Float32Array(64), [])).toThrow(/whole logits row/);
    }
  });

  test("too few candidates, or NaN among them, is an error", () => {
    const s = new Sampler({ seed: 1, topK: 40 }, vocab);
    expect(() => s.sampleTop(new Int32Array(10), new Float32Array(10), [])).toThrow(/10 candidates given, 40 needed/);
    const vals = new Float32Array(40).fill(1);
    vals[3] = NaN;
    expect(() => s.sampleTop(Int32Array.from({ length: 40 }, (_, i) => i), vals, [])).toThrow(/NaN/);
  });
});
