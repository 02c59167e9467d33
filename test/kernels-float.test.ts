// bloomery tests: the float helpers of every CPU kernel path (attention's f16 dot and axpy, the f16
// conversions, SwiGLU, softmax exponentials, f32 axpy and scale) against the scalar path.
import { describe, expect, test } from "bun:test";
import { FloatOp, cpuPaths, kernelFloat } from "../ffi/cpu-kernels.ts";

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randn(n: number, seed: number, scale = 1): Float32Array {
  const r = rng(seed);
  return Float32Array.from({ length: n }, () => scale * Math.sqrt(-2 * Math.log(Math.max(r(), 1e-12))) * Math.cos(2 * Math.PI * r()));
}

const toF16 = (x: Float32Array): Uint16Array => new Uint16Array(new Float16Array(x).buffer);
const paths = cpuPaths().filter((p) => p !== "scalar");
const SIZES = [1, 15, 16, 17, 128, 131, 2048];

function maxRel(a: Float32Array, b: Float32Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    const s = Math.max(Math.abs(b[i]), 1e-30);
    if (!(d <= 0)) m = Math.max(m, d / s);
  }
  return m;
}

describe("float helpers agree with the scalar path", () => {
  for (const path of paths) {
    test(`${path}: f16 conversions are bit-exact (round to nearest even)`, () => {
      const special = Float32Array.from([0, -0, 65504, 65520, 1e6, -1e6, 6e-8, 3e-8, 2.98e-8, 1 + 2 ** -11, 1 + 3 * 2 ** -11, -2.5e-5, Infinity, -Infinity]);
      for (const x of [randn(131, 1, 3), randn(2048, 2, 1e-5), special]) {
        const want = new Uint16Array(x.length), got = new Uint16Array(x.length);
        kernelFloat("scalar", FloatOp.toF16, 0, x, want, x.length);
        kernelFloat(path, FloatOp.toF16, 0, x, got, x.length);
        expect(Array.from(got)).toEqual(Array.from(want));
        const rw = new Float32Array(x.length), rg = new Float32Array(x.length);
        kernelFloat("scalar", FloatOp.roundF16, 0, x, rw, x.length);
        kernelFloat(path, FloatOp.roundF16, 0, x, rg, x.length);
        expect(Array.from(rg)).toEqual(Array.from(rw));
      }
    });

    test(`${path}: dot products within float rounding of the sum of |x y|`, () => {
      for (const n of SIZES) {
        const x = randn(n, n), y = randn(n, n + 1), h = toF16(randn(n, n + 2));
        let sxy = 0, sxh = 0;
        const hf = new Float32Array(new Float16Array(h.buffer));
        for (let i = 0; i < n; i++) {
          sxy += Math.abs(x[i] * y[i]);
          sxh += Math.abs(x[i] * hf[i]);
        }
        const bound = (s: number) => (n + 16) * 2 ** -24 * s;
        expect(Math.abs(kernelFloat(path, FloatOp.dotF32, 0, x, y, n) - kernelFloat("scalar", FloatOp.dotF32, 0, x, y, n))).toBeLessThanOrEqual(bound(sxy));
        expect(Math.abs(kernelFloat(path, FloatOp.dotF16, 0, x, h, n) - kernelFloat("scalar", FloatOp.dotF16, 0, x, h, n))).toBeLessThanOrEqual(bound(sxh));
      }
    });

    test(`${path}: axpy and scale within one rounding`, () => {
      for (const n of SIZES) {
        const h = toF16(randn(n, 3 * n)), x = randn(n, 3 * n + 1), y0 = randn(n, 3 * n + 2);
        for (const [op, src] of [[FloatOp.axpyF16, h], [FloatOp.axpyF32, x]] as const) {
          const a = y0.slice(), b = y0.slice();
          kernelFloat("scalar", op, 0.37, src, a, n);
          kernelFloat(path, op, 0.37, src, b, n);
          for (let i = 0; i < n; i++) expect(Math.abs(a[i] - b[i])).toBeLessThanOrEqual(2 ** -23 * (Math.abs(a[i]) + Math.abs(y0[i])));
        }
        const a = new Float32Array(n), b = new Float32Array(n);
        kernelFloat("scalar", FloatOp.scaleF32, -1.75, x, a, n);
        kernelFloat(path, FloatOp.scaleF32, -1.75, x, b, n);
        expect(Array.from(b)).toEqual(Array.from(a));
      }
    });

    test(`${path}: SwiGLU and softmax exponentials within a few ulp of expf`, () => {
      for (const n of SIZES) {
        const g = randn(n, 5 * n, 4), u = randn(n, 5 * n + 1);
        g[0] = -100; // exp overflows inside silu: the result is -0
        if (n > 2) g[1] = 90;
        const a = g.slice(), b = g.slice();
        kernelFloat("scalar", FloatOp.swiglu, 0, u, a, n);
        kernelFloat(path, FloatOp.swiglu, 0, u, b, n);
        expect(maxRel(b, a)).toBeLessThan(4e-7);
        const s = randn(n, 5 * n + 2, 20);
        const m = Math.max(...s);
        const ea = new Float32Array(n), eb = new Float32Array(n);
        const sa = kernelFloat("scalar", FloatOp.expSum, m, s, ea, n);
        const sb = kernelFloat(path, FloatOp.expSum, m, s, eb, n);
        // relative error, on values above the point where expf turns subnormal
        for (let i = 0; i < n; i++) if (ea[i] > 1e-37) expect(Math.abs(eb[i] - ea[i]) / ea[i]).toBeLessThan(4e-7);
        expect(Math.abs(sb - sa) / sa).toBeLessThan(1e-6);
      }
    });
  }
});
