// bloomery safetensors: reference dequantizers and quantizers of the quantized weight formats checkpoint
// folders ship, written from their published layouts (not from the engine's repacked rows): MXFP4 as
// gpt-oss stores it (OCP MX: E8M0 scale per 32, E2M1 pairs low nibble first), FP8 E4M3 with DeepSeek V3's
// 128x128 block scales (weight_scale_inv, F32), NVFP4 as NVIDIA ModelOpt stores it (E2M1 pairs low
// nibble first, an E4M3 scale per 16, the F32 global weight_scale_2) and MLX's affine 4- and 8-bit
// (uint32 words of 8 or 4 values, the first in the lowest bits, a scale and a bias per group of 64 or
// more). Each dequantizer rounds as the engine's float reference does (each multiply and add once to F32,
// in the order written), so a tensor's values equal the engine's bit for bit. Matrices are row-major [rows, cols] (cols: the input).

const F = Math.fround;

/** OFP8 E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits, exponent 0 subnormal, S.1111.111 NaN. */
export function e4m3(x: number): number {
  const s = x & 0x80 ? -1 : 1, e = (x >> 3) & 15, m = x & 7;
  if (e === 15 && m === 7) return NaN;
  return e === 0 ? s * m * 2 ** -9 : s * (1 + m / 8) * 2 ** (e - 7);
}

/** The E4M3 code nearest x (ties to the even code), saturating at +-448. */
export function toE4m3(x: number): number {
  const a = Math.abs(x);
  let best = 0, err = Infinity;
  for (let c = 0; c < 127; c++) {
    const d = Math.abs(e4m3(c) - a);
    if (d < err || (d === err && c % 2 === 0)) [best, err] = [c, d];
  }
  return best | (x < 0 ? 0x80 : 0);
}

/** OCP MX E2M1 (FP4): sign, 2 exponent bits (bias 1), 1 mantissa bit. */
export const E2M1: readonly number[] = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6];

export function toE2m1(v: number): number {
  let best = 0, err = Infinity;
  for (let c = 0; c < 16; c++) {
    const d = Math.abs(E2M1[c] - v);
    if (d < err) [best, err] = [c, d];
  }
  return best;
}

/** OCP MX E8M0 scale: 2^(x - 127); 0xff is NaN. */
export function e8m0(x: number): number {
  return x === 255 ? NaN : 2 ** (x - 127);
}

/** The 4-bit value of element e of packed pairs (low nibble first). */
const nib = (b: Uint8Array, at: number, e: number): number => (b[at + (e >> 1)] >> (4 * (e & 1))) & 15;

/** gpt-oss MXFP4: blocks [rows, cols/32, 16] (element 2k in byte k's low nibble, 2k+1 in its high), scales [rows, cols/32]. */
export function dequantMxfp4(blocks: Uint8Array, scales: Uint8Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols), nb = cols / 32;
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const s = e8m0(scales[r * nb + b]), at = (r * nb + b) * 16;
      for (let e = 0; e < 32; e++) out[r * cols + b * 32 + e] = F(E2M1[nib(blocks, at, e)] * s);
    }
  }
  return out;
}

export function quantMxfp4(x: Float32Array, rows: number, cols: number): { blocks: Uint8Array; scales: Uint8Array } {
  const nb = cols / 32, blocks = new Uint8Array(rows * nb * 16), scales = new Uint8Array(rows * nb);
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const at = r * cols + b * 32;
      let amax = 0;
      for (let e = 0; e < 32; e++) amax = Math.max(amax, Math.abs(x[at + e]));
      // the OCP spec's scale: 2^(floor(log2(amax)) - 2), the largest element's exponent over E2M1's (2)
      const ex = amax > 0 ? Math.max(-127, Math.min(127, Math.floor(Math.log2(amax)) - 2)) : -127;
      scales[r * nb + b] = ex + 127;
      const s = 2 ** ex;
      for (let e = 0; e < 32; e++) blocks[(r * nb + b) * 16 + (e >> 1)] |= toE2m1(x[at + e] / s) << (4 * (e & 1));
    }
  }
  return { blocks, scales };
}

/** DeepSeek V3 FP8: weight E4M3 [rows, cols], weight_scale_inv F32 [ceil(rows/bm), ceil(cols/bn)]: w = e4m3 * scale. */
export function dequantFp8(w: Uint8Array, scaleInv: Float32Array, rows: number, cols: number, bm = 128, bn = 128): Float32Array {
  const out = new Float32Array(rows * cols), sc = Math.ceil(cols / bn);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) out[r * cols + c] = F(scaleInv[Math.floor(r / bm) * sc + Math.floor(c / bn)] * e4m3(w[r * cols + c]));
  }
  return out;
}

export function quantFp8(x: Float32Array, rows: number, cols: number, bm = 128, bn = 128): { w: Uint8Array; scaleInv: Float32Array } {
  const sr = Math.ceil(rows / bm), sc = Math.ceil(cols / bn), scaleInv = new Float32Array(sr * sc), w = new Uint8Array(rows * cols);
  for (let i = 0; i < sr; i++) {
    for (let j = 0; j < sc; j++) {
      let amax = 0;
      for (let r = i * bm; r < Math.min(rows, (i + 1) * bm); r++) for (let c = j * bn; c < Math.min(cols, (j + 1) * bn); c++) amax = Math.max(amax, Math.abs(x[r * cols + c]));
      const s = F(amax > 0 ? amax / 448 : 1);
      scaleInv[i * sc + j] = s;
      for (let r = i * bm; r < Math.min(rows, (i + 1) * bm); r++) for (let c = j * bn; c < Math.min(cols, (j + 1) * bn); c++) w[r * cols + c] = toE4m3(x[r * cols + c] / s);
    }
  }
  return { w, scaleInv };
}

/** ModelOpt NVFP4: weight [rows, cols/2] (element 2k low nibble of byte k), weight_scale E4M3 [rows, cols/16], weight_scale_2 F32: w = (scale_2 * e4m3) * e2m1. */
export function dequantNvfp4(w: Uint8Array, scale: Uint8Array, scale2: number, rows: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols), ng = cols / 16;
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < ng; g++) {
      const d = F(scale2 * e4m3(scale[r * ng + g]));
      for (let e = 0; e < 16; e++) out[r * cols + g * 16 + e] = F(d * E2M1[nib(w, r * (cols / 2) + g * 8, e)]);
    }
  }
  return out;
}

export function quantNvfp4(x: Float32Array, rows: number, cols: number): { w: Uint8Array; scale: Uint8Array; scale2: number } {
  let amax = 0;
  for (const v of x) amax = Math.max(amax, Math.abs(v));
  const scale2 = F(amax > 0 ? amax / (6 * 448) : 1), ng = cols / 16;
  const w = new Uint8Array(rows * cols / 2), scale = new Uint8Array(rows * ng);
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < ng; g++) {
      const at = r * cols + g * 16;
      let m = 0;
      for (let e = 0; e < 16; e++) m = Math.max(m, Math.abs(x[at + e]));
      const s = toE4m3(m / 6 / scale2);
      scale[r * ng + g] = s;
      const d = F(scale2 * e4m3(s));
      for (let e = 0; e < 16; e++) w[r * (cols / 2) + g * 8 + (e >> 1)] |= toE2m1(d > 0 ? x[at + e] / d : 0) << (4 * (e & 1));
    }
  }
  return { w, scale, scale2 };
}

/**
 * MLX affine (mlx's quantize, mode "affine"): weight uint32 [rows, cols * bits / 32] (little-endian words of
 * 32 / bits values, value k of a word in bits k*bits.. k*bits + bits - 1), scales and biases [rows,
 * cols / group]: w = scale * q + bias. 4- and 8-bit (whose values never straddle a word).
 */
export function dequantMlx(w: Uint8Array, scales: Float32Array, biases: Float32Array, rows: number, cols: number, group = 64, bits = 4): Float32Array {
  const out = new Float32Array(rows * cols), ng = cols / group, per = 32 / bits, mask = (1 << bits) - 1;
  const words = new DataView(w.buffer, w.byteOffset, w.byteLength);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const word = words.getUint32((r * (cols / per) + Math.floor(c / per)) * 4, true);
      const q = (word >>> (bits * (c % per))) & mask;
      const g = r * ng + Math.floor(c / group);
      out[r * cols + c] = F(F(scales[g] * q) + biases[g]);
    }
  }
  return out;
}

export function dequantMlx4(w: Uint8Array, scales: Float32Array, biases: Float32Array, rows: number, cols: number, group = 64): Float32Array {
  return dequantMlx(w, scales, biases, rows, cols, group, 4);
}

/**
 * mlx's affine quantizer as its ops.cpp writes it (mode "affine"), per group: the edge is the end of larger
 * magnitude (min, with a positive scale, or max, with a negative one), scale = (max - min) / (2^bits - 1)
 * nudged so that the edge is a whole number of steps from 0 (zero stays exact), bias = the edge; q =
 * round((w - bias) / scale) clipped to [0, 2^bits - 1]; scale and bias stored rounded by `round` (to the
 * model's F16 or BF16). For tests: the layout, not this rounding, is what a folder is read by.
 */
export function quantMlx(x: Float32Array, rows: number, cols: number, group = 64, bits = 4, round: (v: number) => number = F): { w: Uint8Array; scales: Float32Array; biases: Float32Array } {
  const ng = cols / group, per = 32 / bits, bins = (1 << bits) - 1;
  const w = new Uint8Array((rows * cols * bits) / 8), dv = new DataView(w.buffer);
  const scales = new Float32Array(rows * ng), biases = new Float32Array(rows * ng);
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < ng; g++) {
      const at = r * cols + g * group;
      let lo = Infinity, hi = -Infinity;
      for (let e = 0; e < group; e++) [lo, hi] = [Math.min(lo, x[at + e]), Math.max(hi, x[at + e])];
      const useMin = Math.abs(lo) > Math.abs(hi);
      let s = Math.max(F((hi - lo) / bins), 1e-7);
      if (!useMin) s = -s;
      const edge = useMin ? lo : hi, q0 = Math.round(edge / s);
      if (q0 !== 0) s = F(edge / q0);
      const sr = round(s), br = round(q0 === 0 ? 0 : edge);
      scales[r * ng + g] = sr;
      biases[r * ng + g] = br;
      for (let e = 0; e < group; e++) {
        const q = Math.max(0, Math.min(bins, Math.round((x[at + e] - br) / sr)));
        const c = g * group + e, o = (r * (cols / per) + Math.floor(c / per)) * 4;
        dv.setUint32(o, (dv.getUint32(o, true) | (q << (bits * (c % per)))) >>> 0, true);
      }
    }
  }
  return { w, scales, biases };
}

/** A plain min-max 4-bit quantizer in MLX's layout: per group, scale = (max - min) / 15, bias = min (both rounded by `round`, e.g. to F16); quantMlx is mlx's own. */
export function quantMlx4(x: Float32Array, rows: number, cols: number, group = 64, round: (v: number) => number = F): { w: Uint8Array; scales: Float32Array; biases: Float32Array } {
  const ng = cols / group, w = new Uint8Array(rows * cols / 2), scales = new Float32Array(rows * ng), biases = new Float32Array(rows * ng);
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < ng; g++) {
      const at = r * cols + g * group;
      let lo = Infinity, hi = -Infinity;
      for (let e = 0; e < group; e++) [lo, hi] = [Math.min(lo, x[at + e]), Math.max(hi, x[at + e])];
      const s = round((hi - lo) / 15), b = round(lo);
      scales[r * ng + g] = s;
      biases[r * ng + g] = b;
      for (let e = 0; e < group; e++) {
        const q = s > 0 ? Math.max(0, Math.min(15, Math.round((x[at + e] - b) / s))) : 0;
        const c = g * group + e;
        w[r * (cols / 2) + (c >> 1)] |= q << (4 * (c & 1));
      }
    }
  }
  return { w, scales, biases };
}
