// CUDA kernels against the CPU reference: dequantization of every type the CUDA library reads
// (random blocks, and the gguf package's outputs where the fixture has them), and products of
// weight matrices with activation rows through the decode kernels (1..8 rows), the decode-batch
// products on int8 activations (rows quantized once a launch against each block's own staging)
// and the tensor-core tiles (f16 operands), odd row counts included. Skips with a line where no card is.
import { describe, expect, test } from "bun:test";
import { ptr } from "bun:ffi";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { check, cpu } from "../ffi/cpu.ts";
import { checkCuda, cuda, cudaStatus } from "../ffi/cuda.ts";
import { FIXTURES } from "./paths.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-kernels: skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const FIX = process.env.BLOOMERY_FIXTURES ?? FIXTURES;

interface T { name: string; id: number; be: number; bb: number }
const TYPES: T[] = [
  { name: "F32", id: 0, be: 1, bb: 4 }, { name: "F16", id: 1, be: 1, bb: 2 }, { name: "BF16", id: 30, be: 1, bb: 2 },
  { name: "Q4_0", id: 2, be: 32, bb: 18 }, { name: "Q4_1", id: 3, be: 32, bb: 20 }, { name: "Q5_0", id: 6, be: 32, bb: 22 },
  { name: "Q5_1", id: 7, be: 32, bb: 24 }, { name: "Q8_0", id: 8, be: 32, bb: 34 }, { name: "IQ4_NL", id: 20, be: 32, bb: 18 },
  { name: "MXFP4", id: 39, be: 32, bb: 17 }, { name: "Q4_K", id: 12, be: 256, bb: 144 }, { name: "Q5_K", id: 13, be: 256, bb: 176 },
  { name: "Q6_K", id: 14, be: 256, bb: 210 }, { name: "IQ4_XS", id: 23, be: 256, bb: 136 },
  // the 1.5-3.5 bit types (the grid types' int8 dots: cuda-iq.test.ts)
  { name: "Q2_K", id: 10, be: 256, bb: 84 }, { name: "Q3_K", id: 11, be: 256, bb: 110 },
  { name: "IQ2_XXS", id: 16, be: 256, bb: 66 }, { name: "IQ2_XS", id: 17, be: 256, bb: 74 }, { name: "IQ2_S", id: 22, be: 256, bb: 82 },
  { name: "IQ3_XXS", id: 18, be: 256, bb: 98 }, { name: "IQ3_S", id: 21, be: 256, bb: 110 }, { name: "IQ1_S", id: 19, be: 256, bb: 50 },
  { name: "IQ1_M", id: 29, be: 256, bb: 56 },
];
const GRID = new Set(["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]);

function synthBlocks(t: T, n: number, seed: number): Uint8Array {
  const blocks = n / t.be;
  const buf = new Uint8Array(blocks * t.bb + 16);
  check(cpu().bl_synth_fill(t.id, ptr(buf), 0, blocks, BigInt(seed), 0.05, 0), "synth fill");
  return buf.subarray(0, blocks * t.bb);
}

function cpuDequant(t: T, src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  check(cpu().bl_dequantize(t.id, ptr(src), ptr(out), n), "dequantize");
  return out;
}

function gpuDequant(t: T, src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  checkCuda(cuda().bl_cuda_test_dequant(0, t.id, ptr(src), n, ptr(out)), "cuda dequantize");
  return out;
}

let seed = 1;
function randX(n: number): Float32Array {
  const x = new Float32Array(n);
  let s = (seed++ * 2654435761) >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    x[i] = s / 2147483648 - 1;
  }
  return x;
}

/** ||a - b|| / ||b|| and whether every value is finite. */
function relErr(a: Float32Array, b: Float64Array | Float32Array): { rel: number; finite: boolean } {
  let num = 0, den = 0, finite = true;
  for (let i = 0; i < b.length; i++) {
    if (!Number.isFinite(a[i])) finite = false;
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  return { rel: Math.sqrt(num / Math.max(den, 1e-30)), finite };
}

gpu("CUDA dequantization", () => {
  for (const t of TYPES) {
    test(`${t.name}: random blocks match the CPU reference`, () => {
      const n = t.be === 1 ? 1024 : t.be * 24;
      const src = synthBlocks(t, n, 7);
      const ref = cpuDequant(t, src, n), got = gpuDequant(t, src, n);
      let worst = 0;
      for (let i = 0; i < n; i++) worst = Math.max(worst, Math.abs(got[i] - ref[i]) / Math.max(Math.abs(ref[i]), 1e-30));
      expect(worst).toBeLessThan(1e-6);
    });
  }
  const qpath = join(FIX, "quants", "quants.json");
  const fx = existsSync(qpath) ? (JSON.parse(readFileSync(qpath, "utf8")) as { types: Record<string, { ggml_type: number; block_elems: number; blocks: number; raw_b64: string; f32_le_b64: string }> }).types : {};
  for (const t of TYPES) {
    const f = fx[t.name];
    if (!f) continue;
    test(`${t.name}: the gguf package's dequantization of random raw blocks`, () => {
      const raw = new Uint8Array(Buffer.from(f.raw_b64, "base64"));
      const want = new Float32Array(new Uint8Array(Buffer.from(f.f32_le_b64, "base64")).buffer);
      const n = f.blocks * f.block_elems;
      if (n % 4) return; // float rows are read in fours
      const got = gpuDequant(t, raw, n);
      for (let i = 0; i < n; i++) {
        if (Number.isNaN(want[i])) continue;
        expect(Math.abs(got[i] - want[i])).toBeLessThanOrEqual(Math.abs(want[i]) * 1e-6 + 1e-30);
      }
    });
  }
});

/** y[i][r] in float64 from the CPU's dequantized rows. */
function refProduct(t: T, w: Uint8Array, rows: number, n: number, x: Float32Array, nx: number): Float64Array {
  const wf = cpuDequant(t, w, rows * n);
  const y = new Float64Array(nx * rows);
  for (let i = 0; i < nx; i++)
    for (let r = 0; r < rows; r++) {
      let s = 0;
      for (let k = 0; k < n; k++) s += wf[r * n + k] * x[i * n + k];
      y[i * rows + r] = s;
    }
  return y;
}

/** Rows of x RMS-normalised as the decode-batch test paths 6 and 7 do (eps 1e-6, test.cu's weights). */
function normRows(x: Float32Array, nx: number, n: number): Float32Array {
  const out = new Float32Array(nx * n);
  for (let i = 0; i < nx; i++) {
    let ss = 0;
    for (let k = 0; k < n; k++) ss += x[i * n + k] ** 2;
    const s = 1 / Math.sqrt(ss / n + 1e-6);
    for (let k = 0; k < n; k++) out[i * n + k] = x[i * n + k] * s * (0.75 + 0.0625 * (k % 9));
  }
  return out;
}

function gpuProduct(path: number, t: T, w: Uint8Array, rows: number, n: number, x: Float32Array, nx: number): Float32Array {
  const y = new Float32Array(nx * rows);
  const stride = (n / t.be) * t.bb;
  checkCuda(cuda().bl_cuda_test_matmul(0, path, t.id, ptr(w), stride, rows, ptr(x), nx, n, ptr(y)), "cuda product");
  return y;
}

gpu("CUDA products against the CPU reference", () => {
  const dec: [number, number, number][] = [[67, 256, 1], [67, 512, 3], [129, 768, 8], [33, 256, 5]];
  const tc: [number, number, number, number][] = [[200, 512, 9, 1], [130, 256, 40, 2], [64, 1024, 70, 1], [257, 768, 33, 2]];
  for (const t of TYPES) {
    test(`${t.name}: decode product, 1-8 rows of x, odd row counts`, () => {
      for (const [rows, n0, nx] of dec) {
        const n = Math.max(n0, t.be) - (Math.max(n0, t.be) % t.be);
        const w = synthBlocks(t, rows * n, rows + n);
        const x = randX(nx * n);
        const { rel, finite } = relErr(gpuProduct(0, t, w, rows, n, x, nx), refProduct(t, w, rows, n, x, nx));
        expect(finite).toBe(true);
        expect(rel).toBeLessThan(2e-6);
      }
    });
    // int8 activations with dp4a where the type has them (one token: Q4_K, Q6_K, Q8_0, MXFP4; decode
    // batches: Q4_K, Q6_K; the rounding of x bounds the error, as ggml's q8_1 activations), else the
    // f32 one-token kernel (exact as above)
    const d8 = t.name === "Q4_K" || t.name === "Q6_K";
    // (the test entry point's path 3 runs the grid types' own int8 dot, quants_iq.cuh's d8<T>)
    const d8one = d8 || t.name === "Q8_0" || t.name === "MXFP4" || GRID.has(t.name);
    test(`${t.name}: one-token product on int8 activations${d8one ? "" : " (f32 for this type)"}`, () => {
      for (const [rows, n0] of [[67, 256], [129, 768], [33, 512], [45, 96], [31, 2880]]) {
        const n = Math.max(n0, t.be) - (Math.max(n0, t.be) % t.be);
        const w = synthBlocks(t, rows * n, rows * 7 + n);
        const x = randX(n);
        const { rel, finite } = relErr(gpuProduct(3, t, w, rows, n, x, 1), refProduct(t, w, rows, n, x, 1));
        expect(finite).toBe(true);
        expect(rel).toBeLessThan(d8one ? 2e-2 : 2e-6);
        // the int8 path ran (not the f32 one: exact to 2e-6 would say it did not)
        if (d8one) expect(rel).toBeGreaterThan(1e-5);
        if (d8one) console.log(`${t.name}: int8 activations, ${rows} x ${n}: relative error ${rel.toExponential(2)}`);
      }
    });
    // decode batches (cuda/dense/mv_batch.cu): rows quantized once a launch (cuda/dense/x8rows.cu) must give
    // what each block's own staging gives, bit for bit, plain and RMS-normalised (test.cu's weights);
    // odd group counts (768, 1280: the quantizer's last teams idle) and the real widths (2048, 4096)
    if (d8) test(`${t.name}: decode-batch product on int8 activations, rows quantized once = staged by each block`, () => {
      for (const [rows, n0, nx] of [[67, 256, 2], [129, 768, 3], [33, 1280, 5], [200, 2048, 8], [40, 4096, 8]]) {
        const n = n0 - (n0 % t.be);
        const w = synthBlocks(t, rows * n, rows * 5 + n);
        const x = randX(nx * n);
        for (const [once, each, norm] of [[4, 5, false], [6, 7, true]] as const) {
          const a = gpuProduct(once, t, w, rows, n, x, nx), b = gpuProduct(each, t, w, rows, n, x, nx);
          let differ = 0;
          for (let i = 0; i < a.length; i++) if (!(a[i] === b[i])) differ++;
          expect(differ).toBe(0);
          const { rel, finite } = relErr(a, refProduct(t, w, rows, n, norm ? normRows(x, nx, n) : x, nx));
          expect(finite).toBe(true);
          expect(rel).toBeLessThan(2e-2);
        }
      }
    });
    test(`${t.name}: tensor-core product (f16 operands), tiles of 64 and 32 rows of x`, () => {
      for (const [rows, n0, nx, path] of tc) {
        const n = n0 - (n0 % Math.max(128, t.be));
        if (n === 0) continue;
        const w = synthBlocks(t, rows * n, rows * 3 + n);
        const x = randX(nx * n);
        const { rel, finite } = relErr(gpuProduct(path, t, w, rows, n, x, nx), refProduct(t, w, rows, n, x, nx));
        expect(finite).toBe(true);
        expect(rel).toBeLessThan(3e-3);
      }
    });
  }

  test("bad arguments are refused with a message, not a crash", () => {
    const t = TYPES.find((q) => q.name === "Q4_K")!;
    const w = synthBlocks(t, 256, 1);
    const y = new Float32Array(4);
    const x = randX(256);
    expect(Number(cuda().bl_cuda_test_matmul(0, 1, t.id, ptr(w), 144, 1, ptr(x), 1, 200, ptr(y)))).not.toBe(0);
    expect(Number(cuda().bl_cuda_test_matmul(0, 1, 2 /* Q4_0 */, ptr(w), 18, 1, ptr(x), 1, 96, ptr(y)))).not.toBe(0);
    // a type the card has no kernels for (TQ1_0: Q2_K had been this case until the card took it)
    expect(Number(cuda().bl_cuda_test_matmul(0, 0, 34 /* TQ1_0 */, ptr(w), 54, 1, ptr(x), 1, 256, ptr(y)))).toBe(4);
  });
});

gpu("launch costs (measured, printed)", () => {
  test("per-kernel cost of 340 small kernels: graph and stream (GPU and host), with shared-memory changes, carveout, PDL and decode-sized grids", () => {
    const cases: [number, string][] = [
      [0, "plain"], [1, "alternating 64 KiB smem"], [3, "alternating smem, max carveout"], [2, "max carveout"], [4, "PDL"],
      [5, "alternating smem + PDL"], [8, "5 blocks of 256 an SM"], [9, "5x256 an SM, alternating smem"], [11, "5x256 an SM, alternating smem, max carveout"],
    ];
    const out = new Float64Array(4);
    for (const [mode, name] of cases) {
      checkCuda(cuda().bl_cuda_test_launch_host(0, 340, mode, ptr(out)), "launch probe");
      console.log(`launch probe, ${name}: graph ${out[0].toFixed(2)} us/kernel (host ${out[2].toFixed(2)}), stream ${out[1].toFixed(2)} us/kernel (host ${out[3].toFixed(2)})`);
      for (const v of out) expect(v).toBeGreaterThan(0);
    }
    const two = new Float64Array(2);
    checkCuda(cuda().bl_cuda_test_launch(0, 16, 0, ptr(two), ptr(two, 8)), "launch probe");
    expect(two[0]).toBeGreaterThan(0);
    expect(Number(cuda().bl_cuda_test_launch_host(0, 0, 0, ptr(out)))).not.toBe(0); // no kernels: refused
  });
});
