// The card's sigmoid router (cuda/router/sigmoid.cu: DeepSeek V3's and GLM-4.5's picks) against a
// reference written from ffi/bloomery.h's BL_GATING_SIGMOID: sigmoid(l) + the selection bias within
// the best groups (their two best scores summed), the k best, ties to the lower id; weights
// sigmoid(l), renormalised and scaled; picks by expert id. Shapes of GLM-4.5, DeepSeek V3, Kimi K2.
import { describe, expect, test } from "bun:test";
import { ptr } from "bun:ffi";
import { checkCuda, cuda, cudaStatus } from "../ffi/cuda.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-router: GPU tests skipped (${st.reason})`);

interface Case {
  name: string;
  X: number;
  k: number;
  ng: number;
  gu: number;
  norm: boolean;
  scale: number;
  corr: boolean;
  ties?: boolean;
}

const f = Math.fround;

/** The picks of one token as ffi/bloomery.h defines them (float arithmetic as the C reference's). */
function reference(lg: Float32Array, corr: Float32Array | null, c: Case): { sel: number[]; w: number[] } {
  const X = c.X;
  const s = Array.from(lg, (l) => f(1 / f(1 + f(Math.exp(-l)))));
  const sc = s.map((v, e) => f(v + (corr ? corr[e] : 0)));
  const topK = (score: number[], k: number): number[] => {
    const out: number[] = [];
    for (let i = 0; i < k; i++) {
      let best = -1;
      for (let e = 0; e < score.length; e++) if (!out.includes(e) && (best < 0 || score[e] > score[best])) best = e;
      out.push(best);
    }
    return out;
  };
  if (c.ng > 1 && c.gu > 0 && c.gu < c.ng) {
    const per = X / c.ng;
    const gs: number[] = [];
    for (let g = 0; g < c.ng; g++) {
      const v = sc.slice(g * per, (g + 1) * per).sort((a, b) => b - a);
      gs.push(per > 1 ? f(v[0] + v[1]) : v[0]);
    }
    const keep = topK(gs, c.gu);
    for (let e = 0; e < X; e++) if (!keep.includes(Math.floor(e / per))) sc[e] = -Infinity;
  }
  const sel = topK(sc, c.k);
  let w = sel.map((e) => s[e]);
  if (c.norm) {
    const sum = Math.max(w.reduce((a, b) => a + b, 0), 6.103515625e-5);
    w = w.map((v) => v / sum);
  }
  if (c.scale !== 0 && c.scale !== 1) w = w.map((v) => v * c.scale);
  const order = sel.map((e, i) => [e, w[i]] as const).sort((a, b) => a[0] - b[0]);
  return { sel: order.map((o) => o[0]), w: order.map((o) => o[1]) };
}

function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 4294967296;
  };
}

const CASES: Case[] = [
  { name: "GLM-4.5 (160 experts, 8 used, a selection bias, renormalised, scale 2.5)", X: 160, k: 8, ng: 1, gu: 1, norm: true, scale: 2.5, corr: true },
  { name: "DeepSeek V3 (256 experts in 8 groups, 4 kept, 8 used, a selection bias, scale 2.5)", X: 256, k: 8, ng: 8, gu: 4, norm: true, scale: 2.5, corr: true },
  { name: "Kimi K2 (384 experts, 8 used, one group)", X: 384, k: 8, ng: 1, gu: 1, norm: true, scale: 2.827, corr: true },
  { name: "a small router without a bias or renormalisation (64 experts, 6 used)", X: 64, k: 6, ng: 0, gu: 0, norm: false, scale: 1, corr: false },
  { name: "groups of one expert (32 groups, 8 kept, 4 used)", X: 32, k: 4, ng: 32, gu: 8, norm: true, scale: 1, corr: true },
  { name: "every logit equal: the lowest ids, in id order", X: 96, k: 8, ng: 4, gu: 2, norm: true, scale: 1, corr: false, ties: true },
];

describe.skipIf(!st.ok)("the card's sigmoid router against the reference", () => {
  for (const c of CASES) {
    test(c.name, () => {
      const ntok = 37, r = rng(c.X * 31 + c.k);
      const lg = new Float32Array(ntok * c.X).map(() => (c.ties ? 0.25 : (r() - 0.5) * 8));
      const corr = c.corr ? new Float32Array(c.X).map(() => (r() - 0.5) * 0.2) : null;
      const sel = new Int32Array(ntok * c.k), w = new Float32Array(ntok * c.k);
      checkCuda(
        cuda().bl_cuda_test_route_sigmoid(0, ptr(lg), corr ? ptr(corr) : null, ntok, c.X, c.k, c.ng, c.gu, c.norm ? 1 : 0, c.scale, ptr(sel), ptr(w)),
        "cuda sigmoid router",
      );
      let worst = 0;
      for (let t = 0; t < ntok; t++) {
        const ref = reference(lg.subarray(t * c.X, (t + 1) * c.X), corr, c);
        expect(Array.from(sel.subarray(t * c.k, (t + 1) * c.k))).toEqual(ref.sel);
        for (let i = 0; i < c.k; i++) worst = Math.max(worst, Math.abs(w[t * c.k + i] - ref.w[i]) / Math.abs(ref.w[i]));
      }
      console.log(`${c.name}: ${ntok} tokens' picks equal, weights within ${worst.toExponential(2)} (relative)`);
      expect(worst).toBeLessThan(1e-5);
    });
  }
});
