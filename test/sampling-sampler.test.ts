// bloomery tests: the Sampler as llama-server uses it (src/sampling/sampler.ts): the seeded
// generator (MT19937's standard outputs), determinism, a 20k-draw distribution check, greedy,
// logit bias and bans, ignore_eos, grammar restriction (llama's sample-then-resample), token
// probabilities before and after the chain, adaptive-p, parameter checks and the samplers /
// logit_bias request fields.
import { describe, expect, test } from "bun:test";
import {
  DEFAULT_SAMPLER_ORDER, Mt19937, Sampler, SamplingError, SamplingParamError, parseLogitBiasField, parseSamplersField,
  resolveSamplingParams, type SamplingParams,
} from "../src/sampling/index.ts";

const N = 151936;

function peakedRow(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  const r = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 4294967296);
  const row = new Float32Array(n);
  for (let i = 0; i < n; i++) row[i] = (r() + r() + r() - 1.5) * 4;
  for (let i = 0; i < 30; i++) row[Math.floor(r() * n)] = 12 + r() * 4;
  return row;
}

describe("MT19937", () => {
  test("the standard's reference outputs (seed 5489: first 3499211612, 10000th 4123659995)", () => {
    const g = new Mt19937(5489);
    expect(g.nextU32()).toBe(3499211612);
    for (let i = 2; i < 10000; i++) g.nextU32();
    expect(g.nextU32()).toBe(4123659995);
  });
  test("canonical draws take two outputs (double) or one (float)", () => {
    const a = new Mt19937(0);
    const x1 = a.nextU32();
    const x2 = a.nextU32();
    expect(new Mt19937(0).nextDouble()).toBe((x1 + x2 * 2 ** 32) / 2 ** 64);
    expect(new Mt19937(0).nextFloat()).toBe(Math.fround(Math.fround(x1) / 2 ** 32));
    expect(new Mt19937(0).nextFloat()).toBeCloseTo(0.5488135, 6); // llama's XTC test relies on this draw
  });
});

describe("determinism and seeds", () => {
  const row = peakedRow(N, 1);
  const run = (p: Partial<SamplingParams>, steps = 20): number[] => {
    const s = new Sampler(p, { nVocab: N });
    const hist: number[] = [1, 2, 3];
    for (let i = 0; i < steps; i++) {
      const id = s.sample(row, hist).id;
      s.accept(id);
      hist.push(id);
    }
    return hist.slice(3);
  };
  test("the same seed and inputs give the same tokens; another seed differs", () => {
    const p: Partial<SamplingParams> = { seed: 1234, temperature: 1.5, topK: 0, topP: 0.99, minP: 0 };
    expect(run(p)).toEqual(run(p));
    expect(run({ ...p, seed: 1235 })).not.toEqual(run(p));
  });
  test("seed -1 picks a random seed, reported and reusable", () => {
    const a = new Sampler({ seed: -1, temperature: 2 }, { nVocab: N });
    const b = new Sampler({ seed: -1, temperature: 2 }, { nVocab: N });
    expect(a.seed).toBeGreaterThanOrEqual(0);
    expect(a.seed).toBeLessThan(2 ** 32 - 1);
    expect(a.seed).not.toBe(b.seed);
    expect(run({ seed: a.seed, temperature: 2, topK: 100 })).toEqual(run({ seed: a.seed, temperature: 2, topK: 100 }));
  });
  test("reset() replays the stream", () => {
    const s = new Sampler({ seed: 5, temperature: 3, topK: 0, minP: 0, topP: 1 }, { nVocab: N });
    const first = [0, 1, 2, 3, 4].map(() => s.sample(row, []).id);
    s.reset();
    expect([0, 1, 2, 3, 4].map(() => s.sample(row, []).id)).toEqual(first);
  });
});

describe("distribution", () => {
  // five tokens with known probabilities (plus banned filler that must never appear)
  const probs = [0.05, 0.1, 0.15, 0.3, 0.4];
  const logits = Float32Array.from([...probs.map(Math.log), 0, 0, 0]);
  const draws = 20000;
  const check = (p: Partial<SamplingParams>): void => {
    const s = new Sampler({ seed: 2024, logitBias: [5, 6, 7].map((id) => ({ id, bias: -Infinity })), ...p }, { nVocab: 8 });
    const count = new Array(8).fill(0);
    for (let i = 0; i < draws; i++) count[s.sample(logits, []).id]++;
    for (let i = 0; i < 5; i++) {
      const f = count[i] / draws;
      const sd = Math.sqrt((probs[i] * (1 - probs[i])) / draws);
      if (Math.abs(f - probs[i]) > 4 * sd) throw new Error(`token ${i}: frequency ${f}, probability ${probs[i]} (4 sd = ${4 * sd})`);
    }
    expect(count.slice(5)).toEqual([0, 0, 0]);
  };
  test("20000 draws over the whole vocabulary match the probabilities (4 sigma)", () => check({ samplers: [], temperature: 1 }));
  test("20000 draws through a candidate list match the probabilities", () => check({ samplers: ["top_k"], topK: 8 }));
  test("temperature 0.5 squares the probabilities", () => {
    const s = new Sampler({ seed: 7, samplers: ["temperature"], temperature: 0.5, logitBias: [5, 6, 7].map((id) => ({ id, bias: -Infinity })) }, { nVocab: 8 });
    const count = new Array(8).fill(0);
    for (let i = 0; i < draws; i++) count[s.sample(logits, []).id]++;
    const q = probs.map((p) => p * p);
    const z = q.reduce((a, b) => a + b);
    for (let i = 0; i < 5; i++) expect(Math.abs(count[i] / draws - q[i] / z)).toBeLessThan(4 * Math.sqrt((q[i] / z) / draws) + 1e-3);
  });
});

describe("greedy, bias, bans", () => {
  const row = peakedRow(N, 3);
  let best = 0;
  for (let i = 1; i < N; i++) if (row[i] > row[best]) best = i;
  test("temperature <= 0 takes the argmax and reports probability 1 after the chain", () => {
    for (const p of [{ temperature: 0 }, { temperature: -1 }, { temperature: 0, topK: 0, topP: 1, minP: 0 }]) {
      const s = new Sampler({ ...p, nProbs: 3, postSamplingProbs: true }, { nVocab: N });
      const r = s.sample(row, []);
      expect(r.id).toBe(best);
      expect(r.probs).toEqual([{ id: best, p: 1, logit: row[best] }]);
    }
  });
  test("a positive bias makes a token win; -Infinity bans the best one", () => {
    const s = new Sampler({ temperature: 0, logitBias: [{ id: 77, bias: 100 }] }, { nVocab: N });
    expect(s.sample(row, []).id).toBe(77);
    const t = new Sampler({ temperature: 0, logitBias: [{ id: best, bias: -Infinity }] }, { nVocab: N });
    const r = t.sample(row, []);
    expect(r.id).not.toBe(best);
    let second = best === 0 ? 1 : 0;
    for (let i = 0; i < N; i++) if (i !== best && row[i] > row[second]) second = i;
    expect(r.id).toBe(second);
  });
  test("ignore_eos bans the end-of-generation tokens", () => {
    const vocab = { nVocab: N, eogIds: [best, 5] };
    expect(new Sampler({ temperature: 0 }, vocab).sample(row, []).id).toBe(best);
    expect(new Sampler({ temperature: 0, ignoreEos: true }, vocab).sample(row, []).id).not.toBe(best);
    expect(() => new Sampler({ ignoreEos: true }, { nVocab: N })).toThrow(SamplingParamError);
  });
  test("repetition penalty on the history changes the greedy choice", () => {
    const s = new Sampler({ temperature: 0, repeatPenalty: 100, repeatLastN: 64 }, { nVocab: N });
    expect(s.sample(row, [best]).id).not.toBe(best);
    expect(s.sample(row, [...new Array(64).fill(9), best].slice(1)).id).not.toBe(best);
    expect(s.sample(row, [best, ...new Array(64).fill(9)]).id).toBe(best); // out of the window
  });
  test("every token banned is an error, not a guess", () => {
    const s = new Sampler({ logitBias: [0, 1, 2].map((id) => ({ id, bias: -Infinity })) }, { nVocab: 3 });
    expect(() => s.sample(Float32Array.from([1, 2, 3]), [])).toThrow(SamplingError);
  });
});

describe("grammar restriction", () => {
  const row = peakedRow(N, 4);
  const order = Array.from({ length: N }, (_, i) => i).sort((a, b) => row[b] - row[a] || a - b);
  test("an allowed token is kept; a refused one is sampled again among allowed tokens only", () => {
    const s = new Sampler({ temperature: 0 }, { nVocab: N });
    expect(s.sample(row, [], { allowed: () => true }).id).toBe(order[0]);
    const refuseTop = new Set(order.slice(0, 10));
    expect(s.sample(row, [], { allowed: (id) => !refuseTop.has(id) }).id).toBe(order[10]);
  });
  test("candidates widen until an allowed token is found deep in the vocabulary", () => {
    const only = order[120000];
    const calls: number[] = [];
    const s = new Sampler({ temperature: 0.8, seed: 1 }, { nVocab: N });
    const r = s.sample(row, [], { allowed: (id) => (calls.push(id), id === only) });
    expect(r.id).toBe(only);
    // the free pick is checked once, then the masked pass tests every token once (top_k 40 wants
    // 40 allowed tokens and only one exists)
    expect(calls.length).toBe(N + 1);
    expect(new Set(calls).size).toBe(N);
  });
  test("with top_k 40 the resample draws from the 40 best allowed tokens", () => {
    const even = (id: number) => id % 2 === 0;
    const allowedTop = order.filter(even).slice(0, 40);
    const s = new Sampler({ seed: 11, temperature: 5, topK: 40, topP: 1, minP: 0 }, { nVocab: N });
    for (let i = 0; i < 200; i++) expect(allowedTop).toContain(s.sample(row, [], { allowed: even }).id);
  });
  test("top-n-sigma under a grammar measures only allowed tokens; nothing allowed is an error", () => {
    const s = new Sampler({ seed: 2, topNSigma: 1, topK: 0 }, { nVocab: N });
    const odd = (id: number) => id % 2 === 1;
    for (let i = 0; i < 20; i++) expect(odd(s.sample(row, [], { allowed: odd }).id)).toBe(true);
    expect(() => s.sample(row, [], { allowed: () => false })).toThrow(SamplingError);
  });
});

describe("token probabilities", () => {
  const row = peakedRow(N, 5);
  let mx = -Infinity;
  for (const x of row) mx = Math.max(mx, x);
  let z = 0;
  for (const x of row) z += Math.exp(x - mx);
  test("default: the top n by raw logit with the softmax of the raw row (bias ignored), and the token's raw p", () => {
    const s = new Sampler({ seed: 1, nProbs: 5, logitBias: [{ id: 3, bias: 50 }] }, { nVocab: N });
    const r = s.sample(row, []);
    expect(r.id).toBe(3);
    expect(r.p).toBeCloseTo(Math.exp(row[3] - mx) / z, 9);
    expect(r.probs!.length).toBe(5);
    const ranked = Array.from({ length: N }, (_, i) => i).sort((a, b) => row[b] - row[a] || a - b);
    r.probs!.forEach((t, i) => {
      expect(t.id).toBe(ranked[i]);
      expect(t.p).toBeCloseTo(Math.exp(row[t.id] - mx) / z, 7);
      expect(t.logit).toBe(row[t.id]);
    });
  });
  test("post_sampling_probs: the chain's final set, by probability, summing to 1 when complete", () => {
    const s = new Sampler({ seed: 1, nProbs: 1000, postSamplingProbs: true, topK: 20, temperature: 0.7 }, { nVocab: N });
    const r = s.sample(row, []);
    expect(r.probs!.length).toBeLessThanOrEqual(20);
    const sum = r.probs!.reduce((a, t) => a + t.p, 0);
    expect(sum).toBeCloseTo(1, 5);
    for (let i = 1; i < r.probs!.length; i++) expect(r.probs![i].p).toBeLessThanOrEqual(r.probs![i - 1].p);
    expect(r.probs!.find((t) => t.id === r.id)!.p).toBe(r.p);
  });
});

describe("adaptive-p", () => {
  test("moves its target with accepted tokens and samples near the target probability", () => {
    const probs = [0.6, 0.2, 0.1, 0.05, 0.05];
    const logits = Float32Array.from(probs, Math.log);
    const s = new Sampler({ seed: 4, samplers: ["adaptive_p"], adaptiveTarget: 0.1, adaptiveDecay: 0.9 }, { nVocab: 5 });
    const count = new Array(5).fill(0);
    for (let i = 0; i < 2000; i++) {
      const id = s.sample(logits, []).id;
      s.accept(id);
      count[id]++;
    }
    // the token at probability 0.1 (and 0.05s) are favoured over the 0.6 one
    expect(count[2]).toBeGreaterThan(count[0]);
  });
});

describe("parameters", () => {
  test("defaults are llama-server's", () => {
    const p = resolveSamplingParams();
    expect(p).toMatchObject({ temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, typicalP: 1, repeatPenalty: 1, repeatLastN: 64, seed: -1, mirostat: 0 });
    expect(p.samplers).toEqual([...DEFAULT_SAMPLER_ORDER]);
    expect(p.drySequenceBreakers).toEqual(["\n", ":", "\"", "*"]);
  });
  test("bad values name the request field", () => {
    const bad: [Partial<SamplingParams>, string][] = [
      [{ repeatPenalty: 0 }, "repeat_penalty"],
      [{ temperature: NaN }, "temperature"],
      [{ topK: 1.5 }, "top_k"],
      [{ mirostat: 3 as 0 }, "mirostat"],
      [{ seed: 2 ** 32 }, "seed"],
      [{ repeatLastN: -2 }, "repeat_last_n"],
      [{ logitBias: [{ id: 1, bias: NaN }] }, "logit_bias"],
      [{ samplers: ["bogus" as "top_k"] }, "samplers"],
    ];
    for (const [p, field] of bad) {
      try {
        resolveSamplingParams(p);
        throw new Error(`accepted ${JSON.stringify(p)}`);
      } catch (e) {
        expect(e).toBeInstanceOf(SamplingParamError);
        expect((e as SamplingParamError).field).toBe(field);
      }
    }
    expect(() => new Sampler({ samplers: ["infill"] }, { nVocab: 10 })).toThrow(/infill/);
    expect(() => new Sampler({ logitBias: [{ id: 10, bias: 1 }] }, { nVocab: 10 })).toThrow(/outside the vocabulary/);
    expect(() => new Sampler({ dryMultiplier: 0.8 }, { nVocab: 10 })).toThrow(/DRY needs/);
  });
  test("bad inputs to a step", () => {
    const s = new Sampler({ repeatPenalty: 1.1 }, { nVocab: 10 });
    expect(() => s.sample(new Float32Array(9), [])).toThrow(/9 values/);
    expect(() => s.sample(new Float32Array(10), [3, 10])).toThrow(/outside the vocabulary/);
    const nan = new Float32Array(10);
    nan[4] = NaN;
    expect(() => s.sample(nan, [])).toThrow(SamplingError);
  });
  test("samplers field: names with llama's aliases, or letters; unknown entries left out", () => {
    const unknown: string[] = [];
    expect(parseSamplersField(["top-k", "TopP", "nucleus", "temp", "typ", "min_p", "bogus"], (u) => unknown.push(u))).toEqual([
      "top_k", "top_p", "top_p", "temperature", "typ_p", "min_p",
    ]);
    expect(unknown).toEqual(["bogus"]);
    expect(parseSamplersField("edskypmxt")).toEqual([...DEFAULT_SAMPLER_ORDER]);
    expect(parseSamplersField("kfz")).toEqual(["top_k"]);
    expect(() => parseSamplersField(5)).toThrow(SamplingParamError);
    expect(() => parseSamplersField(["top_k", 3])).toThrow(/array of strings/);
  });
  test("logit_bias field: pairs or an object, false bans, strings through the tokenizer, out-of-range ids skipped", () => {
    const enc = (t: string) => [...t].map((c) => c.charCodeAt(0) - 97);
    expect(parseLogitBiasField([[1, 2.5], [2, false], [99, 1], ["ab", -1], [3], [4, "x"]], 10, enc)).toEqual([
      { id: 1, bias: 2.5 }, { id: 2, bias: -Infinity }, { id: 0, bias: -1 }, { id: 1, bias: -1 },
    ]);
    expect(parseLogitBiasField({ "5": 1, "-1": 2, c: false }, 10, enc)).toEqual([{ id: 5, bias: 1 }, { id: 2, bias: -Infinity }]);
    expect(() => parseLogitBiasField("x", 10)).toThrow(SamplingParamError);
  });
});

test("cost per token of a whole sampling step on 151936 logits (printed)", () => {
  const row = peakedRow(N, 8);
  const hist = Array.from({ length: 300 }, (_, i) => (i * 7919) % N);
  const time = (p: Partial<SamplingParams>): number => {
    const s = new Sampler({ seed: 1, ...p }, { nVocab: N });
    for (let i = 0; i < 10; i++) s.sample(row, hist);
    const t: number[] = [];
    for (let i = 0; i < 100; i++) {
      const t0 = performance.now();
      s.sample(row, hist);
      t.push(performance.now() - t0);
    }
    t.sort((a, b) => a - b);
    return t[t.length >> 1];
  };
  const d = time({});
  const pen = time({ repeatPenalty: 1.1, frequencyPenalty: 0.1, presencePenalty: 0.1 });
  const full = time({ topK: 0 });
  const probs = time({ nProbs: 5 });
  const greedy = time({ temperature: 0 });
  console.log(
    `sampling step, ${N} logits (median of 100): defaults ${d.toFixed(3)} ms; with penalties ${pen.toFixed(3)} ms; ` +
      `top_k 0 (whole vocabulary) ${full.toFixed(3)} ms; n_probs 5 ${probs.toFixed(3)} ms; greedy ${greedy.toFixed(3)} ms`,
  );
  expect(d).toBeLessThan(5);
});
