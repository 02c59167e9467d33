// bloomery tests: each sampling stage on small distributions with hand-computed expectations
// (including the vectors of llama.cpp's tests/test-sampling.cpp), run two ways through the
// Sampler: as the first stage (the whole-vocabulary path over native statistics) and after a
// top-k that keeps everything (the candidate-list path). Also the two paths against each other
// on random peaked distributions.
import { describe, expect, test } from "bun:test";
import { Sampler, type SamplerStageName, type SamplingParams } from "../src/sampling/index.ts";

type Expect = Record<number, number>;

/** Post-sampling probabilities (id -> p) after the given stages, on logits log(probs). */
function chain(probs: number[], stages: SamplerStageName[], params: Partial<SamplingParams>, history: number[] = []): Map<number, number> {
  const n = probs.length;
  const s = new Sampler({ seed: 0, nProbs: n, postSamplingProbs: true, ...params, samplers: stages }, { nVocab: n });
  const r = s.sample(Float32Array.from(probs, (p) => Math.log(p)), history);
  const m = new Map<number, number>();
  for (const t of r.probs!) m.set(t.id, t.p);
  expect(m.get(r.id)).toBe(r.p);
  return m;
}

/** Same probabilities within tol; with `exactSet`, also the same tokens (a stage that cuts must drop them). */
function expectProbs(got: Map<number, number>, want: Expect, tol = 1e-5, exactSet = true): void {
  const ids = Object.keys(want).map(Number).filter((id) => want[id] > 0);
  if (exactSet) expect([...got.keys()].sort((a, b) => a - b)).toEqual(ids.sort((a, b) => a - b));
  for (const id of new Set([...ids, ...got.keys()])) {
    const g = got.get(id) ?? 0;
    const w = want[id] ?? 0;
    if (Math.abs(g - w) > tol) throw new Error(`token ${id}: p ${g}, expected ${w}`);
  }
}

/** Both paths: the stage alone, and after top_k = everything. */
function both(name: string, probs: number[], stage: SamplerStageName, params: Partial<SamplingParams>, want: Expect, history: number[] = []): void {
  const exact = stage !== "penalties"; // penalties shrink probabilities, they do not drop tokens
  test(`${name} (whole vocabulary)`, () => expectProbs(chain(probs, [stage], params, history), want, 1e-5, exact));
  // top_k twice: the second acts on the list the first made
  const listParams = stage === "top_k" ? params : { ...params, topK: probs.length };
  test(`${name} (candidate list)`, () => expectProbs(chain(probs, ["top_k", stage], listParams, history), want, 1e-5, exact));
}

const P4 = [0.1, 0.2, 0.3, 0.4];
const ids = (ps: number[]): Expect => Object.fromEntries(ps.map((p, i) => [i, p]));

describe("temperature", () => {
  both("t = 1 leaves the distribution", P4, "temperature", { temperature: 1 }, ids(P4));
  both("t = 0 keeps only the best token", P4, "temperature", { temperature: 0 }, { 3: 1 });
  both("t = 0.5 squares the probabilities", P4, "temperature", { temperature: 0.5 }, ids(P4.map((p) => (p * p) / 0.3)));
  both("t = 2 takes square roots", P4, "temperature", { temperature: 2 }, ids(P4.map((p) => Math.sqrt(p) / P4.reduce((a, q) => a + Math.sqrt(q), 0))));
  // Dynamic temperature: entropy H = 1.27985 nats of ln 4 = 1.38629 max -> normalized 0.923217;
  // T = (1 - 0.5) + (2 * 0.5) * 0.923217^1 = 1.423217, p ~ p^(1/T).
  const H = -P4.reduce((a, p) => a + p * Math.log(p), 0);
  const T = 0.5 + 1.0 * (H / Math.log(4));
  const w = P4.map((p) => Math.pow(p, 1 / T));
  both("dynamic temperature (range 0.5, exponent 1)", P4, "temperature", { temperature: 1, dynatempRange: 0.5, dynatempExponent: 1 }, ids(w.map((x) => x / w.reduce((a, b) => a + b))));
  test("dynamic temperature picked T = 1.4232 for this distribution", () => expect(T).toBeCloseTo(1.42322, 4));
});

describe("top-k", () => {
  both("k = 1", P4, "top_k", { topK: 1 }, { 3: 1 });
  both("k = 3", P4, "top_k", { topK: 3 }, { 3: 0.4 / 0.9, 2: 0.3 / 0.9, 1: 0.2 / 0.9 });
  both("k = 4", P4, "top_k", { topK: 4 }, ids(P4));
  both("k = 0 is off", P4, "top_k", { topK: 0 }, ids(P4));
});

describe("top-p", () => {
  both("p = 0 keeps the best", P4, "top_p", { topP: 0 }, { 3: 1 });
  both("p = 0.65: 0.4 + 0.3 reach it", P4, "top_p", { topP: 0.65 }, { 3: 4 / 7, 2: 3 / 7 });
  both("p = 0.8: three tokens", P4, "top_p", { topP: 0.8 }, { 3: 0.4 / 0.9, 2: 0.3 / 0.9, 1: 0.2 / 0.9 });
  both("p = 1 is off", P4, "top_p", { topP: 1 }, ids(P4));
  test("p = 0.7 at the exact boundary 0.4 + 0.3 (list path, llama's float sums)", () =>
    expectProbs(chain(P4, ["top_k", "top_p"], { topK: 4, topP: 0.7 }), { 3: 4 / 7, 2: 3 / 7 }));
  both("min_keep keeps at least that many", P4, "top_p", { topP: 0.1, minKeep: 3 }, { 3: 0.4 / 0.9, 2: 0.3 / 0.9, 1: 0.2 / 0.9 });
});

describe("min-p (llama's vectors)", () => {
  const cases: [number, Expect][] = [
    [0.0, ids(P4)],
    [0.24, ids(P4)],
    [0.26, { 1: 0.2 / 0.9, 2: 0.3 / 0.9, 3: 0.4 / 0.9 }],
    [0.49, { 1: 0.2 / 0.9, 2: 0.3 / 0.9, 3: 0.4 / 0.9 }],
    [0.51, { 2: 0.3 / 0.7, 3: 0.4 / 0.7 }],
    [0.74, { 2: 0.3 / 0.7, 3: 0.4 / 0.7 }],
    [0.76, { 3: 1 }],
    [1.0, { 3: 1 }],
    [1.05, { 3: 1 }],
  ];
  for (const [p, want] of cases) both(`p = ${p}`, P4, "min_p", { minP: p }, want);
});

describe("XTC (llama's vectors; probability 0.99, seed 0 draws 0.549)", () => {
  const X = [0.4, 0.3, 0.2, 0.1];
  both("threshold 0.09 removes all but the last above it", X, "xtc", { xtcProbability: 0.99, xtcThreshold: 0.09 }, { 3: 1 });
  both("threshold 0.19", X, "xtc", { xtcProbability: 0.99, xtcThreshold: 0.19 }, { 2: 2 / 3, 3: 1 / 3 });
  both("threshold 0.29", X, "xtc", { xtcProbability: 0.99, xtcThreshold: 0.29 }, { 1: 0.5, 2: 1 / 3, 3: 1 / 6 });
  both("threshold 0.39: only one token above, nothing removed", X, "xtc", { xtcProbability: 0.99, xtcThreshold: 0.39 }, ids(X));
  both("threshold above 0.5 is off", X, "xtc", { xtcProbability: 1, xtcThreshold: 0.51 }, ids(X));
  both("chance 0.549 above probability 0.5: nothing removed", X, "xtc", { xtcProbability: 0.5, xtcThreshold: 0.09, seed: 0 }, ids(X));
  both("seed 1 draws 0.417 > 0.3: nothing removed", X, "xtc", { xtcProbability: 0.3, xtcThreshold: 0.09, seed: 1 }, ids(X));
});

describe("locally typical (llama's vectors)", () => {
  both("a dominant token", [0.97, 0.01, 0.01, 0.01], "typ_p", { typicalP: 0.5 }, { 0: 1 });
  // H = 1.3322; |-ln p - H| is 0.416 for 0.4 and 0.277 for each 0.2: the three 0.2s first.
  both("the typical tokens are the less likely ones", [0.4, 0.2, 0.2, 0.2], "typ_p", { typicalP: 0.5 }, { 1: 1 / 3, 2: 1 / 3, 3: 1 / 3 });
  both("p = 0.7 adds the 0.4", [0.4, 0.2, 0.2, 0.2], "typ_p", { typicalP: 0.7 }, ids([0.4, 0.2, 0.2, 0.2]));
});

describe("top-n-sigma (llama's vectors)", () => {
  // ln p = -2.303 -1.609 -1.204 -0.916: mean -1.508, std 0.5212, keep >= -0.916 - 0.521
  both("n = 1", P4, "top_n_sigma", { topNSigma: 1 }, { 2: 3 / 7, 3: 4 / 7 });
  both("n = 0 is off", P4, "top_n_sigma", { topNSigma: 0 }, ids(P4));
  both("n = 3 keeps all", P4, "top_n_sigma", { topNSigma: 3 }, ids(P4));
});

describe("repetition penalties (llama's vectors)", () => {
  const P5 = [0.2, 0.2, 0.2, 0.2, 0.2];
  const pen = (history: number[], rep: number, freq: number, pres: number): Partial<SamplingParams> => ({
    repeatLastN: history.length, repeatPenalty: rep, frequencyPenalty: freq, presencePenalty: pres,
  });
  both("repeat 50, one token seen", P5, "penalties", pen([0], 50, 0, 0), { 1: 0.25, 2: 0.25, 3: 0.25, 4: 0.25 }, [0]);
  both("repeat 50, three seen", P5, "penalties", pen([0, 1, 2], 50, 0, 0), { 3: 0.5, 4: 0.5 }, [0, 1, 2]);
  both("repeat 50, repeats counted once", P5, "penalties", pen([0, 1, 2, 0, 0], 50, 0, 0), { 3: 0.5, 4: 0.5 }, [0, 1, 2, 0, 0]);
  both("frequency 5 and presence 5", P5, "penalties", pen([0], 1, 5, 5), { 0: 0.000011, 1: 0.249997, 2: 0.249997, 3: 0.249997, 4: 0.249997 }, [0]);
  both("frequency and presence on three", P5, "penalties", pen([0, 1, 2], 1, 5, 5), { 0: 0.000023, 1: 0.000023, 2: 0.000023, 3: 0.499966, 4: 0.499966 }, [0, 1, 2]);
  both("frequency grows with the count", P5, "penalties", pen([0, 1, 2, 0, 0], 1, 5, 5), { 0: 1.5e-8, 1: 0.000023, 2: 0.000023, 3: 0.499977, 4: 0.499977 }, [0, 1, 2, 0, 0]);
  test("positive logits are divided, negative multiplied (hand-computed)", () => {
    // logits 2 and -2 for tokens 0 and 1, token 2 at 0; both 0 and 1 seen once, penalty 2
    const s = new Sampler({ seed: 0, samplers: ["penalties"], repeatPenalty: 2, repeatLastN: 8, nProbs: 3, postSamplingProbs: true }, { nVocab: 3 });
    const r = s.sample(Float32Array.from([2, -2, 0]), [0, 1]);
    const z = Math.exp(1) + Math.exp(-4) + 1;
    expectProbs(new Map(r.probs!.map((t) => [t.id, t.p])), { 0: Math.exp(1) / z, 1: Math.exp(-4) / z, 2: 1 / z });
    expect(r.probs!.find((t) => t.id === 1)!.logit).toBe(-4);
  });
  test("only the last repeat_last_n tokens count", () => {
    expectProbs(chain(P5, ["penalties"], pen([0, 1], 50, 0, 0), [3, 4, 0, 1]), { 2: 1 / 3, 3: 1 / 3, 4: 1 / 3 }, 1e-5, false);
    expectProbs(chain(P5, ["penalties"], { repeatLastN: -1, repeatPenalty: 50 }, [3, 4, 0, 1]), { 2: 1 }, 1e-5, false);
  });
});

describe("DRY through the sampler (token text breakers)", () => {
  // vocabulary "a" "b" "c" ":" "e": ':' is a single-token breaker
  const texts = ["a", "b", "c", ":", "e"];
  const vocab = {
    nVocab: 5,
    tokenBytes: (id: number) => new TextEncoder().encode(texts[id]),
    encode: (t: string) => [...t].map((ch) => texts.indexOf(ch)),
  };
  const dry = (history: number[], params: Partial<SamplingParams>): Map<number, number> => {
    const s = new Sampler({ seed: 0, samplers: ["dry"], nProbs: 5, postSamplingProbs: true, drySequenceBreakers: [":"], ...params }, vocab);
    return new Map(s.sample(new Float32Array(5), history).probs!.map((t) => [t.id, t.p]));
  };
  test("a b c a b -> c extends a repeat of 2: penalty 1 * 1.1^0", () => {
    const z = 4 + Math.exp(-1);
    expectProbs(dry([0, 1, 2, 0, 1], { dryMultiplier: 1, dryBase: 1.1, dryAllowedLength: 2, dryPenaltyLastN: 5 }), {
      0: 1 / z, 1: 1 / z, 2: Math.exp(-1) / z, 3: 1 / z, 4: 1 / z,
    });
  });
  test("a breaker between the occurrences stops the repeat", () => {
    expectProbs(dry([0, 1, 3, 4, 0, 1], { dryMultiplier: 1, dryBase: 1.1, dryAllowedLength: 2, dryPenaltyLastN: 6 }), ids([0.2, 0.2, 0.2, 0.2, 0.2]));
  });
  test("a breaker token itself is never penalized", () => {
    // a : a : a -> ':' would extend the repeat "a : a" but is a breaker... and the breaker limits the repeat anyway
    expectProbs(dry([0, 3, 0, 3, 0], { dryMultiplier: 1, dryBase: 1.1, dryAllowedLength: 1, dryPenaltyLastN: 8 }), ids([0.2, 0.2, 0.2, 0.2, 0.2]));
  });
  test("longer repeats get base^(length - allowed)", () => {
    // a b c e a b c -> e extends a repeat of 3: 2 * 1.5^(3-2) = 3
    const z = 4 + Math.exp(-3);
    expectProbs(dry([0, 1, 2, 4, 0, 1, 2], { dryMultiplier: 2, dryBase: 1.5, dryAllowedLength: 2, dryPenaltyLastN: -1 }), {
      0: 1 / z, 1: 1 / z, 2: 1 / z, 3: 1 / z, 4: Math.exp(-3) / z,
    });
  });
});

describe("mirostat", () => {
  test("Mirostat 2 keeps tokens of surprise <= mu and learns mu", () => {
    const probs = [0.5, 0.25, 0.125, 0.0625, 0.0625];
    const s = new Sampler({ seed: 3, mirostat: 2, mirostatTau: 0.5, mirostatEta: 0.1, temperature: 1, nProbs: 5, postSamplingProbs: true }, { nVocab: 5 });
    const logits = Float32Array.from(probs, Math.log);
    // mu = 2 tau = 1: only p = 0.5 (surprise 1) stays; surprise of the pick 0 -> mu = 1 - 0.1 (0 - 0.5)
    const r = s.sample(logits, []);
    expect(r.id).toBe(0);
    expect(r.probs!.length).toBe(1);
    expect(s.mirostatMu).toBeCloseTo(1.05, 6);
    const s2 = new Sampler({ seed: 3, mirostat: 2, mirostatTau: 5, mirostatEta: 0.1, temperature: 1, nProbs: 5, postSamplingProbs: true }, { nVocab: 5 });
    const r2 = s2.sample(logits, []);
    expect(r2.probs!.length).toBe(5); // mu = 10: every surprise (at most 4) stays
    expect(s2.mirostatMu).toBeCloseTo(10 - 0.1 * (-Math.log2(probs[r2.id]) - 5), 5);
  });

  test("Mirostat 1 on a Zipf distribution (s = 1.5) keeps k = ((0.5 * 2^10) / (1 - 200^-0.5))^(1/1.5) = 67 tokens", () => {
    const n = 200;
    const w = Array.from({ length: n }, (_, i) => 1 / Math.pow(i + 1, 1.5));
    const s = new Sampler({ seed: 9, mirostat: 1, mirostatTau: 5, mirostatEta: 0.1, temperature: 1, nProbs: n, postSamplingProbs: true }, { nVocab: n });
    const r = s.sample(Float32Array.from(w, Math.log), []);
    const k = Math.floor(Math.pow((0.5 * 1024) / (1 - Math.pow(n, -0.5)), 1 / 1.5));
    expect(k).toBe(67);
    expect(r.probs!.length).toBe(k);
    const z = w.slice(0, k).reduce((a, b) => a + b);
    expect(r.p).toBeCloseTo(w[r.id] / z, 5);
    expect(s.mirostatMu).toBeCloseTo(10 - 0.1 * (-Math.log2(w[r.id] / z) - 5), 4);
  });
});

describe("the whole-vocabulary path equals the list path on random peaked distributions", () => {
  const n = 3000;
  let st = 12345;
  const rand = () => ((st = (Math.imul(st, 1103515245) + 12345) >>> 0) / 4294967296);
  const logits = Float32Array.from({ length: n }, () => {
    const g = Math.sqrt(-2 * Math.log(rand() + 1e-12)) * Math.cos(2 * Math.PI * rand());
    return g * 2.5;
  });
  const configs: [SamplerStageName[], Partial<SamplingParams>][] = [
    [["top_p"], { topP: 0.9 }],
    [["min_p"], { minP: 0.02 }],
    [["typ_p"], { typicalP: 0.6 }],
    [["typ_p"], { typicalP: 0.95 }],
    [["xtc"], { xtcProbability: 1, xtcThreshold: 0.005 }],
    [["temperature", "top_p"], { temperature: 0.7, topP: 0.8 }],
    [["top_p", "temperature"], { temperature: 1.3, topP: 0.5 }],
    [["temperature"], { temperature: 1, dynatempRange: 0.4, dynatempExponent: 1.5 }],
    [["top_n_sigma", "min_p"], { topNSigma: 2, minP: 0.01 }],
    [["xtc", "top_p", "temperature"], { xtcProbability: 1, xtcThreshold: 0.005, topP: 0.7, temperature: 0.6 }],
  ];
  // penalties, DRY and top-n-sigma run natively at the head of the chain and in JavaScript after a cut
  const history = [...Array.from({ length: 80 }, (_, i) => [5, 9, 17, 5, 9, 23][i % 6] + (i % 13 === 0 ? 100 : 0)), 5, 9, 17, 5, 9];
  const texts = Array.from({ length: n }, (_, i) => (i === 23 ? ":" : `t${i} `));
  const vocab = {
    nVocab: n,
    tokenBytes: (id: number) => new TextEncoder().encode(texts[id]),
    encode: (t: string) => (t === ":" ? [23] : []),
  };
  configs.push(
    [["penalties", "dry", "top_n_sigma"], { repeatPenalty: 1.3, frequencyPenalty: 0.2, presencePenalty: 0.4, dryMultiplier: 0.8, topNSigma: 1.5 }],
    [["temperature", "penalties", "dry"], { temperature: 0.6, repeatPenalty: 1.2, frequencyPenalty: 0.3, presencePenalty: 0.5, dryMultiplier: 1 }],
    [["xtc", "penalties", "top_n_sigma"], { xtcProbability: 1, xtcThreshold: 0.005, repeatPenalty: 1.5, topNSigma: 2 }],
  );
  for (const [stages, params] of configs) {
    test(`${stages.join(" ")} ${JSON.stringify(params)}`, () => {
      const base = { seed: 77, nProbs: n, postSamplingProbs: true, drySequenceBreakers: [":"], ...params };
      const a = new Sampler({ ...base, samplers: stages }, vocab).sample(logits, history);
      const b = new Sampler({ ...base, samplers: ["top_k", ...stages], topK: n }, vocab).sample(logits, history);
      const pa = new Map(a.probs!.map((t) => [t.id, t.p]));
      const pb = new Map(b.probs!.map((t) => [t.id, t.p]));
      expect(pa.size).toBe(pb.size);
      for (const [id, p] of pb) {
        expect(pa.has(id)).toBe(true);
        expect(Math.abs(pa.get(id)! - p)).toBeLessThan(2e-6);
      }
      expect(a.id).toBe(b.id);
    });
  }
});
