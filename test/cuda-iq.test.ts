// The grid quant types on the card (cuda/quants/quants_iq.cuh), through the test entry points: blocks
// dequantized bit for bit as the CPU does (random blocks, and the gguf package's outputs of
// test/fixtures/iq-quants.json), and rows dotted with one activation row on int8 activations (dp4a)
// within the bound the int8 rounding gives (as Q4_K's and Q6_K's in cuda-kernels.test.ts). The model
// kernels read them on f32 activations (cuda-kernels.test.ts's other paths, cuda-lowbit.test.ts's
// models). Skips with a line where no card is.
import { describe, expect, test } from "bun:test";
import { ptr } from "bun:ffi";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { check, cpu } from "../ffi/cpu.ts";
import { checkCuda, cuda, cudaStatus } from "../ffi/cuda.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-iq: skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;

const TYPES: Record<string, { id: number; bb: number }> = {
  IQ2_XXS: { id: 16, bb: 66 }, IQ2_XS: { id: 17, bb: 74 }, IQ2_S: { id: 22, bb: 82 }, IQ3_XXS: { id: 18, bb: 98 },
  IQ3_S: { id: 21, bb: 110 }, IQ1_S: { id: 19, bb: 50 }, IQ1_M: { id: 29, bb: 56 },
};
const FX = JSON.parse(readFileSync(join(import.meta.dir, "fixtures", "iq-quants.json"), "utf8")) as {
  types: Record<string, { blocks: number; raw_b64: string; f32_le_b64: string }>;
};

function blocks(name: string, n: number, seed: number, random: boolean): Uint8Array {
  const t = TYPES[name], nb = n / 256;
  const buf = new Uint8Array(nb * t.bb);
  check(cpu().bl_synth_fill(t.id, ptr(buf), 0, nb, BigInt(seed), 0.05, 0), "synth fill");
  if (random) { // every field random (the scales too), then a finite f16 d: random bytes cover every sign and grid bit
    let s = seed * 2654435761 >>> 0;
    for (let i = 0; i < buf.length; i++) {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      const at = i % t.bb;
      if (name !== "IQ1_M" && at < 2) continue; // d
      buf[i] = name === "IQ1_M" && at >= 48 && at % 2 === 1 ? (buf[i] & 0xf0) | ((s >>> 24) & 0x0f) : s >>> 24;
    }
  }
  return buf;
}

function cpuDequant(id: number, src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  check(cpu().bl_dequantize(id, ptr(src), ptr(out), n), "dequantize");
  return out;
}

function gpuDequant(id: number, src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  checkCuda(cuda().bl_cuda_test_dequant(0, id, ptr(src), n, ptr(out)), "cuda dequantize");
  return out;
}

/** how many of a and b differ in any bit (NaN equal to NaN) */
function bitDiffs(a: Float32Array, b: Float32Array): number {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length), y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  let d = 0;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) d++;
  return d;
}

let seed = 3;
function randX(n: number): Float32Array {
  const x = new Float32Array(n);
  let s = (seed++ * 2654435761) >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    x[i] = s / 2147483648 - 1;
  }
  return x;
}

gpu("grid types on the card: dequantization", () => {
  for (const name of Object.keys(TYPES)) {
    test(`${name}: synthetic and random blocks, bit for bit the CPU's`, () => {
      const n = 256 * 24;
      for (const random of [false, true]) {
        const src = blocks(name, n, 11, random);
        expect(bitDiffs(gpuDequant(TYPES[name].id, src, n), cpuDequant(TYPES[name].id, src, n))).toBe(0);
      }
    });
    test(`${name}: the gguf package's dequantization of its blocks`, () => {
      const f = FX.types[name];
      const raw = new Uint8Array(Buffer.from(f.raw_b64, "base64"));
      const want = new Float32Array(new Uint8Array(Buffer.from(f.f32_le_b64, "base64")).buffer);
      expect(bitDiffs(gpuDequant(TYPES[name].id, raw, Number(f.blocks) * 256), want)).toBe(0);
    });
  }
});

gpu("grid types on the card: one-token products on int8 activations", () => {
  for (const name of Object.keys(TYPES)) {
    test(`${name}: rows of 256 to 4096 elements against the CPU's dequantized rows`, () => {
      const t = TYPES[name];
      for (const [rows, n] of [[67, 256], [129, 768], [33, 4096]]) {
        const w = blocks(name, rows * n, rows + n, true);
        const x = randX(n);
        const y = new Float32Array(rows);
        checkCuda(cuda().bl_cuda_test_matmul(0, 3, t.id, ptr(w), (n / 256) * t.bb, rows, ptr(x), 1, n, ptr(y)), "cuda product");
        const wf = cpuDequant(t.id, w, rows * n);
        let num = 0, den = 0;
        for (let r = 0; r < rows; r++) {
          let s = 0;
          for (let k = 0; k < n; k++) s += wf[r * n + k] * x[k];
          expect(Number.isFinite(y[r])).toBe(true);
          num += (y[r] - s) ** 2;
          den += s * s;
        }
        const rel = Math.sqrt(num / den);
        console.log(`${name}: int8 activations, ${rows} x ${n}: relative error ${rel.toExponential(2)}`);
        expect(rel).toBeLessThan(2e-2);
      }
    });
  }
});
