// bloomery safetensors: quantized weights as checkpoint folders store them (gpt-oss MXFP4 `*_blocks` /
// `*_scales`, DeepSeek FP8 `weight` + `weight_scale_inv`, ModelOpt NVFP4 `weight` + `weight_scale` +
// `weight_scale_2`, MLX's `weight` + `scales` (+ `biases`): quant-mlx.ts) found beside a family's HF name, and
// repacked byte for byte into the engine's rows of one type (MXFP4 and mlx's mxfp4 into GGUF's MXFP4 blocks;
// the others into bloomery's own FP8 / NVFP4_MO / MLX_Q4 / MLX_Q8 rows, ffi/cpu/quants_fp.c): no value
// changes, no requantization.
// A transform the rows cannot take (a transposed copy, a norm read as F32) dequantizes that tensor to F32
// by the reference dequantizer instead, and says so.
import { ptr, type Pointer } from "bun:ffi";
import { check, cpu, cstr } from "../../ffi/cpu.ts";
import { GgmlType } from "../gguf/index.ts";
import { safeText } from "../gguf/errors.ts";
import type { HfTensor } from "../models/types.ts";
import type { Derived } from "./derive.ts";
import { dequantFp8, dequantMlx, dequantMxfp4, dequantNvfp4 } from "./quant-ref.ts";
import { mlxSourceOf, type MlxQuant } from "./quant-mlx.ts";
import { readTensorBytes } from "./derive.ts";
import { SafetensorsError, type SafetensorsTensor } from "./reader.ts";

export type QuantKind = "mxfp4" | "fp8" | "nvfp4" | "mlx4" | "mlx8";

/** What the folder's config says of its quantization (config.json's quantization_config / quantization). */
export interface QuantConfig {
  /** FP8's weight_block_size [rows, cols] */
  fp8Block: [number, number];
  /** MLX's group_size, bits and mode (default "affine"), and the modules a recipe quantizes otherwise (false: left in floats) */
  mlxGroup: number;
  mlxBits: number;
  mlxMode?: string;
  mlxModules?: ReadonlyMap<string, MlxQuant | false>;
}

/** A quantized tensor's stored parts and its logical shape (outermost first; the last: a row's elements). */
export interface QuantSource {
  kind: QuantKind;
  name: string;
  shape: number[];
  parts: SafetensorsTensor[];
  /** MLX's group size (values a scale and a bias cover along the row) */
  group?: number;
}

const WORDS: Record<QuantKind, string> = { mxfp4: "MXFP4", fp8: "FP8 block-scaled", nvfp4: "NVFP4 (ModelOpt)", mlx4: "MLX affine 4-bit", mlx8: "MLX affine 8-bit" };
export const quantWords = (k: QuantKind): string => WORDS[k];

function want(t: SafetensorsTensor | undefined, name: string, dtypes: string[], owner: SafetensorsTensor, kind: QuantKind): SafetensorsTensor {
  if (!t) throw new SafetensorsError(owner.file, `${WORDS[kind]} tensor '${safeText(owner.name)}' has no '${safeText(name)}' beside it`);
  if (!dtypes.includes(t.dtype)) throw new SafetensorsError(t.file, `tensor '${safeText(name)}' is ${t.dtype}, but ${WORDS[kind]} stores it as ${dtypes.join(" or ")}`);
  return t;
}

function shapeIs(t: SafetensorsTensor, shape: number[], what: string): void {
  if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
    throw new SafetensorsError(t.file, `tensor '${safeText(t.name)}' has shape [${t.shape.join(", ")}], ${what} expects [${shape.join(", ")}]`);
  }
}

/** The quantized form of HF tensor `name` in `tensors`, or undefined where it is stored as floats. */
export function quantSourceOf(tensors: ReadonlyMap<string, SafetensorsTensor>, name: string, q: QuantConfig): QuantSource | undefined {
  const blocks = tensors.get(`${name}_blocks`);
  if (!tensors.has(name) && blocks) {
    const b = want(blocks, `${name}_blocks`, ["U8"], blocks, "mxfp4");
    const s = want(tensors.get(`${name}_scales`), `${name}_scales`, ["U8", "F8_E8M0"], blocks, "mxfp4");
    if (b.shape.length < 3 || b.shape[b.shape.length - 1] !== 16) throw new SafetensorsError(b.file, `tensor '${safeText(b.name)}' has shape [${b.shape.join(", ")}], MXFP4 blocks are [..., rows, cols / 32, 16]`);
    shapeIs(s, b.shape.slice(0, -1), "MXFP4 (a scale per block)");
    const lead = b.shape.slice(0, -2);
    return { kind: "mxfp4", name, shape: [...lead, b.shape[b.shape.length - 2] * 32], parts: [b, s] };
  }
  const w = tensors.get(name);
  if (!w || !name.endsWith(".weight")) return undefined;
  if (w.dtype === "F8_E4M3" && tensors.has(`${name}_scale_inv`)) {
    const s = want(tensors.get(`${name}_scale_inv`), `${name}_scale_inv`, ["F32", "BF16", "F16"], w, "fp8");
    if (w.shape.length !== 2) throw new SafetensorsError(w.file, `FP8 tensor '${safeText(name)}' has ${w.shape.length} dimensions (block scales are read for matrices)`);
    const [bm, bn] = q.fp8Block;
    const [R, C] = w.shape;
    shapeIs(s, [Math.ceil(R / bm), Math.ceil(C / bn)], `FP8 with ${bm}x${bn} block scales`);
    if (C % 32 || bn % 32) throw new SafetensorsError(w.file, `FP8 tensor '${safeText(name)}': rows of ${C} with blocks of ${bn} columns are not whole 32-element rows of the engine's FP8`);
    return { kind: "fp8", name, shape: [R, C], parts: [w, s] };
  }
  if (w.dtype === "U8" && tensors.has(`${name}_scale`)) {
    const s = want(tensors.get(`${name}_scale`), `${name}_scale`, ["F8_E4M3"], w, "nvfp4");
    const g = want(tensors.get(`${name}_scale_2`), `${name}_scale_2`, ["F32"], w, "nvfp4");
    if (w.shape.length !== 2) throw new SafetensorsError(w.file, `NVFP4 tensor '${safeText(name)}' has ${w.shape.length} dimensions (a matrix is expected)`);
    const [R, C2] = w.shape, C = C2 * 2;
    shapeIs(s, [R, C / 16], "NVFP4 (an E4M3 scale per 16 values)");
    if (g.shape.reduce((a, b) => a * b, 1) !== 1) throw new SafetensorsError(g.file, `tensor '${safeText(g.name)}' has shape [${g.shape.join(", ")}], NVFP4's global scale is one value`);
    if (C % 64) throw new SafetensorsError(w.file, `NVFP4 tensor '${safeText(name)}': rows of ${C} values are not whole 64-value rows of the engine's NVFP4`);
    return { kind: "nvfp4", name, shape: [R, C], parts: [w, s, g] };
  }
  return mlxSourceOf(tensors, name, q);
}

const f16 = (h: number): number => {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
};

/** A float tensor's values as F32 (F32, F16 or BF16 stored). */
function floats(t: SafetensorsTensor): Float32Array {
  const raw = readTensorBytes(t);
  if (t.dtype === "F32") return new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4).slice();
  const h = new Uint16Array(raw.buffer, raw.byteOffset, raw.byteLength / 2);
  if (t.dtype === "F16") return Float32Array.from(h, f16);
  return new Float32Array(Uint32Array.from(h, (x) => x << 16).buffer);
}

const TYPE: Record<QuantKind, GgmlType> = { mxfp4: GgmlType.MXFP4, fp8: GgmlType.FP8, nvfp4: GgmlType.NVFP4_MO, mlx4: GgmlType.MLX4, mlx8: GgmlType.MLX8 };
const BLOCK: Record<QuantKind, [number, number]> = { mxfp4: [32, 17], fp8: [32, 36], nvfp4: [64, 40], mlx4: [64, 40], mlx8: [64, 72] };

/** `f` given the address of a stored tensor's first byte in its file, mapped read-only for the call. */
function withMapped<T>(t: SafetensorsTensor, f: (addr: Pointer) => T): T {
  const out = new BigUint64Array(2);
  check(cpu().bl_map_file(cstr(t.file), ptr(out), ptr(out, 8)), `mapping ${t.file}`);
  try {
    return f(Number(out[0] + BigInt(t.fileOffset)) as Pointer);
  } finally {
    cpu().bl_unmap_file(out[0], out[1]);
  }
}

/**
 * The engine's rows of a quantized tensor: rows `sel` of its logical shape (flattened over the leading
 * dimensions; default all of them, in order), moved by the native library (bl_repack).
 */
export function repack(src: QuantSource, q: QuantConfig, sel?: Int32Array): { type: GgmlType; rowBytes: number; data: Uint8Array } {
  const C = src.shape[src.shape.length - 1], R = src.shape.slice(0, -1).reduce((a, b) => a * b, 1);
  const [be, bb] = BLOCK[src.kind], rowBytes = (C / be) * bb;
  const rows = sel ?? Int32Array.from({ length: R }, (_, i) => i);
  const out = new Uint8Array(Math.max(1, rows.length * rowBytes));
  const none = new Uint8Array(1), noneF = new Float32Array(1);
  let s: Uint8Array = none, f: Float32Array = noneF, f2: Float32Array = noneF, g = 0;
  if (src.kind === "mxfp4") s = readTensorBytes(src.parts[1]);
  else if (src.kind === "fp8") f = floats(src.parts[1]);
  else if (src.kind === "nvfp4") {
    s = readTensorBytes(src.parts[1]);
    const p2 = readTensorBytes(src.parts[2]);
    g = new DataView(p2.buffer, p2.byteOffset, 4).getFloat32(0, true);
  } else {
    f = floats(src.parts[1]);
    f2 = floats(src.parts[2]);
  }
  // the stored values read in place from the mapped file (not copied into JavaScript first)
  if (rows.length > 0) {
    withMapped(src.parts[0], (w) => check(cpu().bl_repack(TYPE[src.kind], w, ptr(s), ptr(f), ptr(f2), g, C, q.fp8Block[0], src.group ?? q.fp8Block[1], ptr(rows), rows.length, ptr(out)), `repacking '${src.name}'`));
  }
  return { type: TYPE[src.kind], rowBytes, data: out.subarray(0, rows.length * rowBytes) };
}

/** The same rows made in TypeScript from the stored bytes alone (the reference bl_repack is tested against). */
export function repackRef(src: QuantSource, q: QuantConfig, sel?: ArrayLike<number>): { type: GgmlType; rowBytes: number; data: Uint8Array } {
  const C = src.shape[src.shape.length - 1], R = src.shape.slice(0, -1).reduce((a, b) => a * b, 1);
  const [be, bb] = BLOCK[src.kind], nb = C / be, rowBytes = nb * bb;
  const n = sel ? sel.length : R, pick = (i: number) => (sel ? sel[i] : i);
  const out = new Uint8Array(n * rowBytes), dv = new DataView(out.buffer);
  const [p0, p1, p2] = src.parts.map(readTensorBytes);
  if (src.kind === "mxfp4") {
    // GGUF's MXFP4 block: the E8M0 byte as stored, then byte j = element j (low nibble) and j + 16 (high);
    // gpt-oss's block has byte k = element 2k (low) and 2k + 1 (high): so GGUF's bytes 2k and 2k + 1 are
    // the low and the high nibbles of stored bytes k and 8 + k
    for (let i = 0; i < n; i++) {
      const r = pick(i);
      for (let b = 0; b < nb; b++) {
        const o = i * rowBytes + b * 17, blk = r * nb + b, at = blk * 16;
        out[o] = p1[blk];
        for (let k = 0; k < 8; k++) {
          const x = p0[at + k], y = p0[at + 8 + k];
          out[o + 1 + 2 * k] = (x & 15) | ((y & 15) << 4);
          out[o + 2 + 2 * k] = (x >> 4) | (y & 0xf0);
        }
      }
    }
  } else if (src.kind === "fp8") {
    // 32 E4M3 bytes as stored after the F32 scale of the 128x128 block they are in
    const [bm, bn] = q.fp8Block, sc = Math.ceil(C / bn);
    const s = floats(src.parts[1]);
    for (let i = 0; i < n; i++) {
      const r = pick(i), srow = Math.floor(r / bm) * sc;
      for (let b = 0; b < nb; b++) {
        const o = i * rowBytes + b * 36, at = r * C + b * 32;
        dv.setFloat32(o, s[srow + Math.floor((b * 32) / bn)], true);
        for (let k = 0; k < 32; k++) out[o + 4 + k] = p0[at + k];
      }
    }
  } else if (src.kind === "nvfp4") {
    // the global scale, the 4 E4M3 group scales and 32 bytes of pairs, as stored
    const g = new DataView(p2.buffer, p2.byteOffset, 4).getFloat32(0, true);
    for (let i = 0; i < n; i++) {
      const r = pick(i);
      for (let b = 0; b < nb; b++) {
        const o = i * rowBytes + b * 40, sat = r * (C / 16) + b * 4, at = r * (C / 2) + b * 32;
        dv.setFloat32(o, g, true);
        for (let k = 0; k < 4; k++) out[o + 4 + k] = p1[sat + k];
        for (let k = 0; k < 32; k++) out[o + 8 + k] = p0[at + k];
      }
    }
  } else {
    // the scale and the bias of the block's group (as F32: exact), then its 64 values' bytes as stored: a
    // little-endian uint32 holds 8 nibbles (4-bit) or 4 bytes (8-bit), the first value in its lowest bits
    const s = floats(src.parts[1]), bi = floats(src.parts[2]);
    const G = src.group ?? 64, ng = C / G, qb = src.kind === "mlx4" ? 32 : 64;
    for (let i = 0; i < n; i++) {
      const r = pick(i);
      for (let b = 0; b < nb; b++) {
        const o = i * rowBytes + b * bb, at = r * nb * qb + b * qb, g = r * ng + Math.floor((b * 64) / G);
        dv.setFloat32(o, s[g], true);
        dv.setFloat32(o + 4, bi[g], true);
        for (let k = 0; k < qb; k++) out[o + 8 + k] = p0[at + k];
      }
    }
  }
  return { type: TYPE[src.kind], rowBytes, data: out };
}

/** A quantized tensor's values as F32 by the reference dequantizer (the fallback of transforms rows cannot take). */
export function dequant(src: QuantSource, q: QuantConfig): Float32Array {
  const C = src.shape[src.shape.length - 1], R = src.shape.slice(0, -1).reduce((a, b) => a * b, 1);
  const [p0, p1, p2] = src.parts.map(readTensorBytes);
  if (src.kind === "mxfp4") return dequantMxfp4(p0, p1, R, C);
  if (src.kind === "fp8") return dequantFp8(p0, floats(src.parts[1]), R, C, q.fp8Block[0], q.fp8Block[1]);
  if (src.kind === "nvfp4") return dequantNvfp4(p0, p1, new DataView(p2.buffer, p2.byteOffset, 4).getFloat32(0, true), R, C);
  return dequantMlx(p0, floats(src.parts[1]), floats(src.parts[2]), R, C, src.group ?? 64, src.kind === "mlx4" ? 4 : 8);
}

/** Whether the rows can take what `spec` asks (row selections; no transposition, no F32 widening). */
export function rowsCanTake(spec: HfTensor, src: QuantSource): boolean {
  const transpose = spec.quantTranspose ?? spec.transpose;
  if (transpose || spec.f32 || src.shape.length < 2) return false;
  if (spec.view && spec.view[spec.view.length - 1] !== src.shape[src.shape.length - 1]) return false;
  return true;
}

/**
 * The copy `spec` asks of a quantized tensor, as rows of the engine's type: `view` over the leading
 * dimensions, then rows [r0, r0 + A) of the second-to-last, of the even (parity 0) or odd rows where
 * the family's spec interleaves two projections (gpt-oss's gate_up: on the output dimension, the rows).
 */
export function deriveQuant(spec: HfTensor, src: QuantSource, q: QuantConfig, shapeOnly: boolean): Derived {
  const shape = spec.view ?? src.shape;
  if (spec.view && spec.view.reduce((a, b) => a * b, 1) !== src.shape.reduce((a, b) => a * b, 1)) {
    throw new SafetensorsError(src.parts[0].file, `tensor '${src.name}' of shape [${src.shape.join(", ")}] cannot be read as [${spec.view.join(", ")}]`);
  }
  const C = shape[shape.length - 1], As = shape[shape.length - 2], L = shape.slice(0, -2).reduce((a, b) => a * b, 1);
  if (spec.parity !== undefined && As % 2) throw new SafetensorsError(src.parts[0].file, `tensor '${src.name}' has an odd row count ${As}: it cannot hold interleaved pairs`);
  const logical = spec.parity !== undefined ? As / 2 : As;
  const [r0, A] = spec.rows ?? [0, logical];
  if (r0 + A > logical) throw new SafetensorsError(src.parts[0].file, `tensor '${src.name}': rows ${r0}..${r0 + A} of ${logical}`);
  const type = TYPE[src.kind];
  const ne = [C, A, ...shape.slice(0, -2).reverse()];
  if (shapeOnly) return { type, ne, data: new Uint8Array(0) };
  const sel = new Int32Array(L * A);
  for (let l = 0; l < L; l++) for (let a = 0; a < A; a++) sel[l * A + a] = l * As + (spec.parity !== undefined ? 2 * (r0 + a) + spec.parity : r0 + a);
  return { type, ne, data: repack(src, q, sel).data };
}
