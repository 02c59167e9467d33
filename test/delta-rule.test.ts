// The gated delta rule of one head (ffi/cpu/delta_rule.c, the DELTANET op's core) on random inputs: the chunked
// form (chunks of 64, for prompts) against the recurrent form (a token at a time) and both against a float64
// recurrence written here, on every CPU path this machine runs: the final state and every output within the
// stated tolerance, for runs that end inside a chunk, on one, past several; heads whose width is no multiple
// of a vector (the paths' gemm_f32 tails); decays that underflow; a state carried in and one started at zero.
import { describe, expect, test } from "bun:test";
import { cpuPaths, DeltaForm, kernelDeltaRule, type DeltaInputs } from "../ffi/cpu-kernels.ts";

/** A small deterministic generator (xorshift32), values in [0, 1). */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 4294967296;
  };
}

/** Inputs as the op gives them: q and k L2-normed (q scaled by 1/sqrt(hk)), g = a * softplus(.) <= 0, beta a sigmoid. */
function inputs(seed: number, n: number, hk: number, hv: number, decay: { lo: number; hi: number }): DeltaInputs {
  const r = rng(seed), gauss = () => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
  const q = new Float32Array(n * hk), k = new Float32Array(n * hk), v = new Float32Array(n * hv);
  const g = new Float32Array(n), beta = new Float32Array(n);
  for (let t = 0; t < n; t++) {
    for (const [x, scale] of [[q, 1 / Math.sqrt(hk)], [k, 1]] as const) {
      let ss = 0;
      for (let j = 0; j < hk; j++) ss += (x[t * hk + j] = gauss()) ** 2;
      for (let j = 0; j < hk; j++) x[t * hk + j] *= scale / Math.sqrt(ss + 1e-6);
    }
    for (let i = 0; i < hv; i++) v[t * hv + i] = gauss();
    g[t] = -(decay.lo + (decay.hi - decay.lo) * r());
    beta[t] = 1 / (1 + Math.exp(-3 * gauss()));
  }
  return { n, hk, hv, q, k, v, g, beta };
}

/** The recurrence in float64: S = e^g S; S += beta (v - S k) k^T; o = S q. */
function reference(x: DeltaInputs, s0: Float32Array): { state: Float64Array; o: Float64Array } {
  const { n, hk, hv } = x;
  const S = Float64Array.from(s0), o = new Float64Array(n * hv);
  for (let t = 0; t < n; t++) {
    const d = Math.exp(x.g[t]);
    for (let i = 0; i < hv; i++) {
      let sk = 0;
      for (let j = 0; j < hk; j++) sk += (S[i * hk + j] *= d) * x.k[t * hk + j];
      const u = x.beta[t] * (x.v[t * hv + i] - sk);
      let sq = 0;
      for (let j = 0; j < hk; j++) sq += (S[i * hk + j] += u * x.k[t * hk + j]) * x.q[t * hk + j];
      o[t * hv + i] = sq;
    }
  }
  return { state: S, o };
}

/** max |a - b| over max |b| (the error against the values' own scale). */
function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let e = 0, m = 0;
  for (let i = 0; i < b.length; i++) {
    e = Math.max(e, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return e / Math.max(m, 1e-30);
}

// Measured worst cases on this machine (every path): the recurrent form 3e-7 from float64, the chunked 4e-7
// (float sums of 128 products over a few hundred tokens); the bound leaves room for other CPUs' paths.
const TOL = 5e-6;

const CASES = [
  { name: "a token", n: 1, hk: 128, hv: 128, decay: { lo: 0.01, hi: 1 } },
  { name: "a short run", n: 9, hk: 128, hv: 128, decay: { lo: 0.01, hi: 1 } },
  { name: "one chunk less a token", n: 63, hk: 128, hv: 128, decay: { lo: 0, hi: 0.3 } },
  { name: "one chunk", n: 64, hk: 128, hv: 128, decay: { lo: 0.001, hi: 0.5 } },
  { name: "a chunk and a token", n: 65, hk: 128, hv: 128, decay: { lo: 0.001, hi: 0.5 } },
  { name: "several chunks, slow decay", n: 300, hk: 128, hv: 128, decay: { lo: 0, hi: 0.05 } },
  { name: "several chunks, decays that underflow within a chunk", n: 200, hk: 128, hv: 128, decay: { lo: 2, hi: 30 } },
  { name: "heads of no vector's width", n: 150, hk: 40, hv: 24, decay: { lo: 0.01, hi: 1 } },
  { name: "wide values", n: 100, hk: 64, hv: 200, decay: { lo: 0.01, hi: 1 } },
];

describe("the gated delta rule: the chunked form against the recurrent form and a float64 recurrence", () => {
  for (const path of cpuPaths()) {
    for (const c of CASES) {
      for (const start of ["zero", "carried"] as const) {
        test(`${path}: ${c.name} (${c.n} tokens, heads of ${c.hk} and ${c.hv}), a state ${start === "zero" ? "started at zero" : "carried in"}`, () => {
          const x = inputs(c.n * 7919 + c.hk + (start === "zero" ? 0 : 1), c.n, c.hk, c.hv, c.decay);
          const s0 = new Float32Array(c.hk * c.hv);
          if (start === "carried") {
            const r = rng(99);
            for (let i = 0; i < s0.length; i++) s0[i] = (r() - 0.5) * 0.5;
          }
          const want = reference(x, s0);
          const sr = s0.slice(), sc = s0.slice();
          const or = kernelDeltaRule(path, DeltaForm.recurrent, x, sr);
          const oc = kernelDeltaRule(path, DeltaForm.chunked, x, sc);
          const e = { rState: relErr(sr, want.state), rOut: relErr(or, want.o), cState: relErr(sc, want.state), cOut: relErr(oc, want.o), apart: relErr(oc, or) };
          if (c.n >= 64) console.log(`${path} ${c.name}: recurrent ${e.rState.toExponential(1)} / ${e.rOut.toExponential(1)}, chunked ${e.cState.toExponential(1)} / ${e.cOut.toExponential(1)} (state / outputs, from float64)`);
          expect([...sc, ...oc].every(Number.isFinite)).toBe(true);
          expect(e.rState).toBeLessThan(TOL);
          expect(e.rOut).toBeLessThan(TOL);
          expect(e.cState).toBeLessThan(TOL);
          expect(e.cOut).toBeLessThan(TOL);
          expect(e.apart).toBeLessThan(TOL);
        });
      }
    }

    test(`${path}: the op's pick is the recurrent form below 8 tokens and the chunked one from there (bit for bit)`, () => {
      for (const n of [7, 8]) {
        const x = inputs(n, n, 32, 32, { lo: 0.01, hi: 1 });
        const pick = new Float32Array(32 * 32), rec = new Float32Array(32 * 32), chk = new Float32Array(32 * 32);
        const op = kernelDeltaRule(path, DeltaForm.auto, x, pick);
        const want = n < 8 ? kernelDeltaRule(path, DeltaForm.recurrent, x, rec) : kernelDeltaRule(path, DeltaForm.chunked, x, chk);
        expect(Array.from(op)).toEqual(Array.from(want));
        expect(Array.from(pick)).toEqual(Array.from(n < 8 ? rec : chk));
      }
    });
  }

  test("bad arguments are refused, naming what", () => {
    const x = inputs(1, 4, 16, 16, { lo: 0.1, hi: 1 });
    expect(() => kernelDeltaRule("scalar", 3, x, new Float32Array(256))).toThrow(/form 3/);
    expect(() => kernelDeltaRule("nosuchpath", 0, x, new Float32Array(256))).toThrow(/nosuchpath/);
    expect(() => kernelDeltaRule("scalar", 0, x, new Float32Array(10))).toThrow(/shorter/);
  });
});
