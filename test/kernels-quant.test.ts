// bloomery tests: every CPU kernel path (scalar, AVX2, AVX-512 where this CPU has them) against the
// scalar reference: activation quantizers bit for bit, and the products of every weight type on
// random blocks (every bit pattern, finite scales), odd shapes and unaligned rows within a bound.
import { describe, expect, test } from "bun:test";
import { cpu, check } from "../ffi/cpu.ts";
import { cpuPaths, kernelMatmul, kernelQuantize } from "../ffi/cpu-kernels.ts";

const T = {
  F32: 0, F16: 1, Q4_0: 2, Q5_0: 6, Q8_0: 8, Q2_K: 10, Q3_K: 11, Q4_K: 12, Q5_K: 13, Q6_K: 14, Q8_K: 15,
  IQ4_NL: 20, IQ4_XS: 23, BF16: 30, MXFP4: 39, FP8_E4M3: 64, NVFP4_MO: 65, MLX_Q4: 66, MLX_Q8: 67,
  IQ2_XXS: 16, IQ2_XS: 17, IQ2_S: 22, IQ3_XXS: 18, IQ3_S: 21, IQ1_S: 19, IQ1_M: 29,
} as const;
type WType = Exclude<keyof typeof T, "Q8_K">;

/** block elements, block bytes, activation type, and where the float scales sit in a block
 * (nibbleF16: an f16 kept in the top nibbles of four 16-bit words there, IQ1_M's). */
const SHAPE: Record<WType, { be: number; bb: number; act: keyof typeof T; f16At: number[]; nibbleF16?: number; f32At?: number[] }> = {
  F32: { be: 1, bb: 4, act: "F32", f16At: [] },
  F16: { be: 1, bb: 2, act: "F16", f16At: [] },
  BF16: { be: 1, bb: 2, act: "BF16", f16At: [] },
  Q4_0: { be: 32, bb: 18, act: "Q8_0", f16At: [0] },
  Q5_0: { be: 32, bb: 22, act: "Q8_0", f16At: [0] },
  Q8_0: { be: 32, bb: 34, act: "Q8_0", f16At: [0] },
  IQ4_NL: { be: 32, bb: 18, act: "Q8_0", f16At: [0] },
  MXFP4: { be: 32, bb: 17, act: "Q8_0", f16At: [] },
  // the checkpoint folders' types (bloomery's own ids): F32 scales, E4M3 codes, F32 activations
  FP8_E4M3: { be: 32, bb: 36, act: "F32", f16At: [], f32At: [0] },
  NVFP4_MO: { be: 64, bb: 40, act: "F32", f16At: [], f32At: [0] },
  MLX_Q4: { be: 64, bb: 40, act: "F32", f16At: [], f32At: [0, 4] },
  MLX_Q8: { be: 64, bb: 72, act: "F32", f16At: [], f32At: [0, 4] },
  Q2_K: { be: 256, bb: 84, act: "Q8_K", f16At: [80, 82] },
  Q3_K: { be: 256, bb: 110, act: "Q8_K", f16At: [108] },
  Q4_K: { be: 256, bb: 144, act: "Q8_K", f16At: [0, 2] },
  Q5_K: { be: 256, bb: 176, act: "Q8_K", f16At: [0, 2] },
  Q6_K: { be: 256, bb: 210, act: "Q8_K", f16At: [208] },
  IQ4_XS: { be: 256, bb: 136, act: "Q8_K", f16At: [0] },
  IQ2_XXS: { be: 256, bb: 66, act: "Q8_K", f16At: [0] },
  IQ2_XS: { be: 256, bb: 74, act: "Q8_K", f16At: [0] },
  IQ2_S: { be: 256, bb: 82, act: "Q8_K", f16At: [0] },
  IQ3_XXS: { be: 256, bb: 98, act: "Q8_K", f16At: [0] },
  IQ3_S: { be: 256, bb: 110, act: "Q8_K", f16At: [0] },
  IQ1_S: { be: 256, bb: 50, act: "Q8_K", f16At: [0] },
  IQ1_M: { be: 256, bb: 56, act: "Q8_K", f16At: [], nibbleF16: 48 },
};
const ACT_BYTES: Record<string, [number, number]> = { Q8_K: [256, 292], Q8_0: [32, 34], F16: [1, 2], BF16: [1, 2], F32: [1, 4] };

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

function gaussian(n: number, seed: number, scale = 1): Float32Array {
  const r = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = scale * Math.sqrt(-2 * Math.log(Math.max(r(), 1e-12))) * Math.cos(2 * Math.PI * r());
  return out;
}

const f16bits = (v: number): number => new Uint16Array(new Float16Array([v]).buffer)[0];

/** `rows` rows of n elements of `type`, `stride` bytes apart: random bytes, float fields made finite. */
function randomRows(type: WType, rows: number, n: number, stride: number, seed: number): Uint8Array {
  const s = SHAPE[type], r = rng(seed);
  const w = new Uint8Array(rows * stride);
  for (let i = 0; i < w.length; i++) w[i] = Math.floor(r() * 256);
  for (let row = 0; row < rows; row++) {
    const base = row * stride;
    if (type === "F32") {
      const f = new Float32Array(gaussian(n, seed + row, 0.1));
      w.set(new Uint8Array(f.buffer), base);
      continue;
    }
    if (type === "F16" || type === "BF16") {
      const g = gaussian(n, seed + row, 0.1);
      for (let k = 0; k < n; k++) {
        const bits = type === "F16" ? f16bits(g[k]) : new Uint32Array(new Float32Array([g[k]]).buffer)[0] >>> 16;
        w[base + 2 * k] = bits & 255;
        w[base + 2 * k + 1] = bits >> 8;
      }
      continue;
    }
    for (let b = 0; b < n / s.be; b++) {
      const o = base + b * s.bb;
      for (const at of s.f16At) {
        const bits = f16bits((r() < 0.5 ? -1 : 1) * (0.002 + 0.02 * r()));
        w[o + at] = bits & 255;
        w[o + at + 1] = bits >> 8;
      }
      if (type === "MXFP4") w[o] = 118 + Math.floor(r() * 16); // exponents 2^-10 .. 2^5
      for (const at of s.f32At ?? []) new DataView(w.buffer).setFloat32(o + at, (r() < 0.5 ? -1 : 1) * (0.002 + 0.02 * r()), true);
      // E4M3 codes: no NaN (S.1111.111); NVFP4's group scales positive, as ModelOpt writes them
      if (type === "FP8_E4M3") for (let k = 4; k < 36; k++) if ((w[o + k] & 0x7f) === 0x7f) w[o + k] ^= 1;
      if (type === "NVFP4_MO") for (let k = 4; k < 8; k++) w[o + k] = Math.min(w[o + k] & 0x7f, 0x7e);
      if (s.nibbleF16 !== undefined) {
        const bits = f16bits((r() < 0.5 ? -1 : 1) * (0.002 + 0.02 * r()));
        for (let k = 0; k < 4; k++) {
          const at = o + s.nibbleF16 + 2 * k + 1; // the high byte of word k
          w[at] = (w[at] & 0x0f) | (((bits >> (4 * k)) & 15) << 4);
        }
      }
    }
  }
  return w;
}

function actBytes(act: string, n: number): number {
  const [be, bb] = ACT_BYTES[act];
  return (n / be) * bb;
}

function dequantRow(type: number, src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  check(cpu().bl_dequantize(type, src, out, n), "dequantize");
  return out;
}

const paths = cpuPaths();
// "avx512+lanes": the AVX-512 kernels of batches (lane-order Q8_K activations)
const simd = [...paths.filter((p) => p !== "scalar"), ...(paths.includes("avx512") ? ["avx512+lanes"] : [])];

describe("kernel paths", () => {
  test("this CPU runs the scalar path, and the AVX paths it has", () => {
    expect(paths[0]).toBe("scalar");
    console.log(`paths on this CPU: ${paths.join(", ")}`);
  });
});

describe("activation quantizers are bit-exact with the reference on every path", () => {
  const cases: [string, Float32Array][] = [
    ["gaussian", gaussian(1024, 1)],
    ["wide range", Float32Array.from(gaussian(1024, 2), (v, i) => v * 10 ** ((i % 13) - 6))],
    ["zeros and a lone value", Float32Array.from({ length: 512 }, (_, i) => (i === 300 ? -3.5 : 0))],
    // +amax and -amax in one block: the first one sets the sign of the scale
    ["ties of |x|", Float32Array.from({ length: 512 }, (_, i) => (i % 64 === 5 ? -2 : i % 64 === 9 ? 2 : Math.sin(i)))],
    // scale 1: halves land on .5 exactly (Q8_0 rounds away from zero, Q8_K to even)
    ["halves", Float32Array.from({ length: 512 }, (_, i) => (i % 32 === 0 ? -127 : ((i % 11) - 5) + 0.5))],
    ["halves, positive extreme", Float32Array.from({ length: 512 }, (_, i) => (i % 32 === 0 ? 127 : ((i % 9) - 4) - 0.5))],
    ["tiny (f16 subnormal scales)", Float32Array.from(gaussian(512, 3), (v) => v * 1e-6)],
  ];
  for (const path of simd) {
    for (const act of ["Q8_K", "Q8_0", "F16", "BF16"] as const) {
      test(`${path} ${act}`, () => {
        for (const [name, x] of cases) {
          const n = x.length;
          const want = new Uint8Array(actBytes(act, n));
          check(cpu().bl_quantize(T[act], x, want, n), "reference quantize");
          const got = kernelQuantize(path, T[act], x, want.length);
          let first = -1;
          for (let i = 0; i < want.length && first < 0; i++) if (got[i] !== want[i]) first = i;
          if (first >= 0) console.error(`${path} ${act} ${name}: first differing byte ${first}: ${got[first]} vs ${want[first]}`);
          expect(first).toBe(-1);
        }
      });
    }
  }
});

/** Products of `rows` random rows with `nX` activation rows on `path` vs the scalar path; returns
 * how many differ from the scalar path's in any bit. */
function compare(path: string, type: WType, n: number, rows: number, nX: number, pad: number, seed: number): number {
  const s = SHAPE[type];
  const rowBytes = (n / s.be) * s.bb;
  const stride = rowBytes + pad;
  const w = randomRows(type, rows, n, stride, seed);
  const x = new Float32Array(nX * n);
  for (let i = 0; i < nX; i++) x.set(gaussian(n, seed * 7 + i, i % 3 === 2 ? 30 : 1), i * n);
  const ref = kernelMatmul("scalar", T[type], w, stride, rows, x, nX, n);
  const got = kernelMatmul(path, T[type], w, stride, rows, x, nX, n);
  // the bound: float sums of exact block integers in another order, relative to sum |w x|
  const wf = Array.from({ length: rows }, (_, r) => dequantRow(T[type], w.subarray(r * stride, r * stride + rowBytes), n));
  const xq = Array.from({ length: nX }, (_, i) => {
    const xr = x.subarray(i * n, (i + 1) * n);
    const q = kernelQuantize("scalar", T[s.act], xr, actBytes(s.act, n));
    return dequantRow(T[s.act], q, n);
  });
  const exactFloat = s.be === 1; // products of float rows summed in double on every path
  const blocks = n / (s.be === 1 ? 16 : s.be);
  let worst = 0, differ = 0;
  for (let i = 0; i < nX; i++) {
    for (let r = 0; r < rows; r++) {
      let sabs = 0;
      for (let k = 0; k < n; k++) sabs += Math.abs(wf[r][k] * xq[i][k]);
      const bound = exactFloat ? 2 ** -40 * sabs + Math.abs(ref[i * rows + r]) * 2 ** -23 : 2 * (blocks + 32) * 2 ** -24 * sabs;
      const d = Math.abs(got[i * rows + r] - ref[i * rows + r]);
      if (got[i * rows + r] !== ref[i * rows + r]) differ++;
      expect(Number.isFinite(got[i * rows + r])).toBe(true);
      if (d > bound) console.error(`${path} ${type} n ${n} row ${r} act ${i}: ${got[i * rows + r]} vs ${ref[i * rows + r]} (bound ${bound})`);
      expect(d).toBeLessThanOrEqual(bound);
      worst = Math.max(worst, sabs > 0 ? d / sabs : 0);
    }
  }
  if (seed === 1) console.log(`${path} ${type}: worst |simd - scalar| / sum|w x| = ${worst.toExponential(2)}`);
  return differ;
}

describe("products of every weight type agree with the scalar path", () => {
  const types = Object.keys(SHAPE) as WType[];
  for (const path of simd) {
    for (const type of types) {
      test(`${path} ${type}`, () => {
        const be = SHAPE[type].be;
        const shapes: [number, number, number, number][] = be === 256
          ? [[256, 5, 1, 0], [768, 13, 11, 3], [2048, 4, 9, 0], [1280, 7, 3, 1]]
          : be === 32
            ? [[32, 5, 1, 0], [96, 13, 11, 3], [2048, 4, 9, 0], [160, 7, 3, 1]]
            : be === 64
              ? [[64, 5, 1, 0], [192, 13, 11, 3], [2048, 4, 9, 0], [320, 7, 3, 1]]
            : [[16, 5, 1, 0], [37, 13, 11, 2], [2048, 4, 9, 0], [100, 7, 3, 4]];
        const differ = shapes.reduce((acc, [n, rows, nX, pad], i) => acc + compare(path, type, n, rows, nX, pad, i + 1), 0);
        // the path runs a kernel of its own: a table entry left empty falls back to the scalar
        // reference (cpuid.c), whose float sums of the block integers come in another order than
        // the x86 kernels'. (aarch64's kernels keep the reference's order by design - neon gives its
        // bits on every type - so there the bits cannot tell a kernel from the fallback.)
        if (be > 1 && (path === "avx2" || path === "avx512")) expect(differ).toBeGreaterThan(0);
      });
    }
  }

  test("a wrong kernel would fail: flipped weight bits of one group move the result past the bound", () => {
    // the test's own power: change one quant nibble and the scalar result moves far more than the bound
    const n = 768, rows = 1, type: WType = "Q4_K";
    const w = randomRows(type, rows, n, 432, 9);
    const x = gaussian(n, 10);
    const a = kernelMatmul("scalar", T[type], w, 432, rows, x, 1, n)[0];
    const w2 = w.slice();
    for (let i = 16 + 32; i < 16 + 64; i++) w2[i] ^= 0x0c; // two bits of the low nibbles of one 32-group
    const b = kernelMatmul("scalar", T[type], w2, 432, rows, x, 1, n)[0];
    const wf = dequantRow(T[type], w, n);
    let sabs = 0;
    for (let k = 0; k < n; k++) sabs += Math.abs(wf[k] * x[k]);
    expect(Math.abs(a - b)).toBeGreaterThan(2 * (3 + 32) * 2 ** -24 * sabs);
  });
});
