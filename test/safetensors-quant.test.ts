// Quantized checkpoint folders served as stored: gpt-oss MXFP4 (`*_blocks` / `*_scales`), DeepSeek FP8
// (E4M3 + weight_scale_inv per 128x128), ModelOpt NVFP4 (E2M1 + E4M3 per 16 + weight_scale_2) and MLX
// affine 4-bit (uint32 words, scales and biases per 64). The engine's repacked rows dequantize to the
// reference dequantizers' values (written from the published layouts) bit for bit; the nibble orders
// are pinned by hand-made blocks; a folder of each format, generated from a family fixture, gives its
// dequantized F32 twin's logits bit for bit on the exact path, and its greedy tokens on every CPU path.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, cpu } from "../ffi/cpu.ts";
import { cpuPaths } from "../ffi/cpu-kernels.ts";
import { cudaLib } from "../ffi/cuda.ts";
import { cudaUnsupported } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { encodeProgram } from "../src/engine/program.ts";
import { MappedWeights } from "../src/engine/weights.ts";
import { familyFor } from "../src/models/registry.ts";
import { GgmlType, TYPE_INFO, type GgufFile } from "../src/gguf/index.ts";
import { SafetensorsFolder } from "../src/safetensors/folder.ts";
import { openHfFolder } from "../src/safetensors/model.ts";
import { quantSourceOf, repack, repackRef, type QuantConfig } from "../src/safetensors/quant.ts";
import {
  dequantFp8, dequantMlx4, dequantMxfp4, dequantNvfp4, E2M1, e4m3, quantFp8, quantMlx4, quantMxfp4, quantNvfp4,
} from "../src/safetensors/quant-ref.ts";
import { greedy, maxAbsDiff, onPath } from "./model-fixtures.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";
import { floatsOf, quantFolders, writeSafetensors, type QuantFormat, type StPart } from "./st-quant-fixtures.ts";

const dir = mkdtempSync(join(tmpdir(), "bloomery-st-quant-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const QC: QuantConfig = { fp8Block: [128, 128], mlxGroup: 64, mlxBits: 4 };

function nativeValues(type: number, b: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  check(cpu().bl_dequantize(type, b, out, n), "dequantize");
  return out;
}

/** Bit-for-bit equality of two float arrays (NaN equal to NaN, -0 distinct from 0), the first index that differs. */
function firstDiff(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) return -2;
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length), y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i] && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) return i;
  return -1;
}

let seq = 0;
/** The engine's rows for tensor `name` of parts written to a one-file folder. */
function engineRows(parts: StPart[], name: string): { type: number; data: Uint8Array } {
  const d = join(dir, `unit-${seq++}`);
  mkdirSync(d);
  writeSafetensors(join(d, "model.safetensors"), parts);
  const src = quantSourceOf(SafetensorsFolder.open(d).tensors, name, QC);
  if (!src) throw new Error(`no quantized form of ${name}`);
  const rows = repack(src, QC);
  // the native repack and the TypeScript one agree byte for byte (and on a selection of rows, reversed)
  expect(Buffer.from(rows.data).equals(Buffer.from(repackRef(src, QC).data))).toBe(true);
  const R = rows.data.length / rows.rowBytes, sel = Int32Array.from({ length: R }, (_, i) => R - 1 - i);
  expect(Buffer.from(repack(src, QC, sel).data).equals(Buffer.from(repackRef(src, QC, sel).data))).toBe(true);
  return rows;
}

function gaussian(n: number, seed: number, scale = 0.05): Float32Array {
  let s = seed >>> 0;
  const r = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) + 0.5) / 4294967296;
  return Float32Array.from({ length: n }, () => scale * Math.sqrt(-2 * Math.log(r())) * Math.cos(2 * Math.PI * r()));
}

const f32p = (name: string, shape: number[], v: Float32Array): StPart => ({ name, dtype: "F32", shape, data: new Uint8Array(v.buffer) });
const f16p = (name: string, shape: number[], v: Float32Array): StPart => ({ name, dtype: "F16", shape, data: new Uint8Array(new Float16Array(v).buffer) });

describe("the engine's rows against the reference dequantizers of the published layouts", () => {
  test("MXFP4: gpt-oss's element 2k in byte k's low nibble (OCP MX) reads back in order through GGUF's MXFP4 block", () => {
    // element e of the one block has code e % 16; the scale 2^(128 - 127) = 2
    const blocks = new Uint8Array(16);
    for (let k = 0; k < 16; k++) blocks[k] = ((2 * k) % 16) | (((2 * k + 1) % 16) << 4);
    const rows = engineRows([{ name: "x_blocks", dtype: "U8", shape: [1, 1, 16], data: blocks }, { name: "x_scales", dtype: "U8", shape: [1, 1], data: new Uint8Array([128]) }], "x");
    expect(rows.type).toBe(GgmlType.MXFP4);
    // (+ 0: GGUF's table reads the code of -0 as 0)
    const want = Array.from({ length: 32 }, (_, e) => 2 * E2M1[e % 16] + 0);
    expect(Array.from(nativeValues(GgmlType.MXFP4, rows.data, 32), (v) => v + 0)).toEqual(want);
    expect(Array.from(dequantMxfp4(blocks, new Uint8Array([128]), 1, 32), (v) => v + 0)).toEqual(want);
    // GGUF's block as SPEC.md lays it: the E8M0 byte, then byte j = element j (low), element j + 16 (high)
    expect(rows.data[0]).toBe(128);
    for (let j = 0; j < 16; j++) expect(rows.data[1 + j]).toBe((j % 16) | (((j + 16) % 16) << 4));
  });

  test("E4M3: every code as the OFP8 spec gives it (subnormals, 448, NaN), through the engine's FP8 rows", () => {
    expect([e4m3(0x01), e4m3(0x08), e4m3(0x7e), e4m3(0xfe), e4m3(0x38)]).toEqual([2 ** -9, 2 ** -6, 448, -448, 1]);
    const w = Uint8Array.from({ length: 256 }, (_, c) => c);
    const rows = engineRows([{ name: "m.weight", dtype: "F8_E4M3", shape: [1, 256], data: w }, f32p("m.weight_scale_inv", [1, 2], new Float32Array([1, 1]))], "m.weight");
    const got = nativeValues(GgmlType.FP8, rows.data, 256);
    expect(firstDiff(got, Float32Array.from(w, e4m3))).toBe(-1);
  });

  test("NVFP4 and MLX: the nibble order of a hand-made row (element 2k low) reads back in order", () => {
    const codes = Uint8Array.from({ length: 64 }, (_, e) => (e * 5) % 16);
    const packed = new Uint8Array(32);
    for (let e = 0; e < 64; e++) packed[e >> 1] |= codes[e] << (4 * (e & 1));
    const nv = engineRows([
      { name: "m.weight", dtype: "U8", shape: [1, 32], data: packed },
      { name: "m.weight_scale", dtype: "F8_E4M3", shape: [1, 4], data: new Uint8Array([0x38, 0x40, 0x30, 0x38]) }, // 1, 2, 0.5, 1
      f32p("m.weight_scale_2", [], new Float32Array([0.25])),
    ], "m.weight");
    const sc = [1, 2, 0.5, 1];
    expect(Array.from(nativeValues(GgmlType.NVFP4_MO, nv.data, 64))).toEqual(Array.from(codes, (c, e) => 0.25 * sc[e >> 4] * E2M1[c]));
    const mx = engineRows([
      { name: "m.weight", dtype: "U32", shape: [1, 8], data: packed },
      f16p("m.scales", [1, 1], new Float32Array([0.5])),
      f16p("m.biases", [1, 1], new Float32Array([-1])),
    ], "m.weight");
    expect(Array.from(nativeValues(GgmlType.MLX4, mx.data, 64))).toEqual(Array.from(codes, (c) => 0.5 * c - 1));
  });

  test("a malformed quantized form is refused by name (missing scales, shapes that disagree, MLX bit widths not stored)", () => {
    const open = (parts: StPart[], name: string, q = QC) => {
      const d = join(dir, `bad-${seq++}`);
      mkdirSync(d);
      writeSafetensors(join(d, "model.safetensors"), parts);
      return () => quantSourceOf(SafetensorsFolder.open(d).tensors, name, q);
    };
    const blocks: StPart = { name: "e_blocks", dtype: "U8", shape: [2, 1, 16], data: new Uint8Array(32) };
    expect(open([blocks], "e")).toThrow(/MXFP4 tensor 'e_blocks' has no 'e_scales' beside it/);
    expect(open([blocks, { name: "e_scales", dtype: "U8", shape: [2, 2], data: new Uint8Array(4) }], "e")).toThrow(/'e_scales' has shape \[2, 2\], MXFP4 \(a scale per block\) expects \[2, 1\]/);
    const fp8: StPart = { name: "m.weight", dtype: "F8_E4M3", shape: [4, 64], data: new Uint8Array(256) };
    expect(open([fp8, f32p("m.weight_scale_inv", [2, 1], new Float32Array(2))], "m.weight")).toThrow(/expects \[1, 1\]/);
    const mlx: StPart[] = [{ name: "m.weight", dtype: "U32", shape: [1, 8], data: new Uint8Array(32) }, f16p("m.scales", [1, 1], new Float32Array(1)), f16p("m.biases", [1, 1], new Float32Array(1))];
    // the words and scales of a 4-bit row named 8-bit by the config: refused, the fitting width named
    expect(open(mlx, "m.weight", { ...QC, mlxBits: 8 })).toThrow(/tensor 'm\.weight' \(mlx module 'm': affine, 8-bit, groups of 64\): 8 words and 1 scales a row do not make groups of 64 8-bit values \(they fit 4-bit/);
    expect(open(mlx, "m.weight", { ...QC, mlxBits: 6 })).toThrow(/MLX 6-bit weights are not implemented yet \(affine 4- and 8-bit/);
    // a recipe's module entry wins over the folder's default; others' entries do not touch it
    expect(open(mlx, "m.weight", { ...QC, mlxModules: new Map([["m", { group: 64, bits: 3, mode: "affine" }]]) })).toThrow(/mlx module 'm': affine, 3-bit, groups of 64\): MLX 3-bit weights are not implemented yet/);
    expect(open(mlx, "m.weight", { ...QC, mlxModules: new Map([["other", { group: 64, bits: 8, mode: "affine" }]]) })()!.kind).toBe("mlx4");
    });

  const R = 40, C = 256;
  const cases: [QuantFormat, () => { parts: StPart[]; name: string; want: Float32Array; type: number }][] = [
    ["mxfp4", () => {
      const { blocks, scales } = quantMxfp4(gaussian(R * C, 1), R, C);
      return { name: "e", type: GgmlType.MXFP4, want: dequantMxfp4(blocks, scales, R, C), parts: [{ name: "e_blocks", dtype: "U8", shape: [2, R / 2, C / 32, 16], data: blocks }, { name: "e_scales", dtype: "U8", shape: [2, R / 2, C / 32], data: scales }] };
    }],
    ["fp8", () => {
      const rows = 200; // two block rows, the second partial
      const { w, scaleInv } = quantFp8(gaussian(rows * C, 2), rows, C);
      return { name: "m.weight", type: GgmlType.FP8, want: dequantFp8(w, scaleInv, rows, C), parts: [{ name: "m.weight", dtype: "F8_E4M3", shape: [rows, C], data: w }, f32p("m.weight_scale_inv", [2, 2], scaleInv)] };
    }],
    ["nvfp4", () => {
      const { w, scale, scale2 } = quantNvfp4(gaussian(R * C, 3), R, C);
      return { name: "m.weight", type: GgmlType.NVFP4_MO, want: dequantNvfp4(w, scale, scale2, R, C), parts: [{ name: "m.weight", dtype: "U8", shape: [R, C / 2], data: w }, { name: "m.weight_scale", dtype: "F8_E4M3", shape: [R, C / 16], data: scale }, f32p("m.weight_scale_2", [], new Float32Array([scale2]))] };
    }],
    ["mlx4", () => {
      const f16 = (v: number) => new Float16Array([v])[0];
      const { w, scales, biases } = quantMlx4(gaussian(R * C, 4), R, C, 64, f16);
      return { name: "m.weight", type: GgmlType.MLX4, want: dequantMlx4(w, scales, biases, R, C), parts: [{ name: "m.weight", dtype: "U32", shape: [R, C / 8], data: w }, f16p("m.scales", [R, C / 64], scales), f16p("m.biases", [R, C / 64], biases)] };
    }],
  ];
  for (const [fmt, make] of cases) {
    test(`${fmt}: random weights quantized by the reference quantizer, the engine's rows dequantize to the reference's values bit for bit`, () => {
      const { parts, name, want, type } = make();
      const rows = engineRows(parts, name);
      expect(rows.type).toBe(type);
      const got = nativeValues(type, rows.data, want.length);
      expect(firstDiff(got, want)).toBe(-1);
      // and the quantization is a fair one: within a few percent of the weights' scale
      const x = gaussian(want.length, cases.findIndex((c) => c[0] === fmt) + 1);
      if (fmt !== "fp8") expect(maxAbsDiff(want, x)).toBeLessThan(0.05);
    });
  }
});

/** A tensor's values as F32 (read from its file, through the engine's dequantizer for quant rows). */
function values(f: GgufFile, name: string): Float32Array {
  const t = f.tensor(name)!;
  const b = new Uint8Array(readFileSync(t.file).subarray(t.fileOffset, t.fileOffset + t.nbytes));
  const n = t.ne.reduce((a, c) => a * c, 1);
  if (t.type === GgmlType.F16) return floatsOf({ name, dtype: "F16", shape: [n], data: b });
  return nativeValues(t.type, b, n);
}

const FAM = join(FIXTURES, "families");
// tol: the bound on |dlogit| against the twin off the exact path. The float-coded rows take F32 activations,
// as the twin's F32 rows do: only the order of float sums differs (1e-3). MXFP4 rows take Q8_0 activations,
// as a GGUF's MXFP4 experts do, and the F32 twin does not: that rounding of the experts' inputs is the bound (0.1).
const FORMATS: { fmt: QuantFormat; fam: string; type: GgmlType; tol: number; card?: string }[] = [
  { fmt: "mxfp4", fam: "gpt_oss", type: GgmlType.MXFP4, tol: 0.1 },
  { fmt: "fp8", fam: "deepseek_v3", type: GgmlType.FP8, tol: 1e-3, card: "FP8 block-scaled" },
  { fmt: "nvfp4", fam: "glm4_moe", type: GgmlType.NVFP4_MO, tol: 1e-3, card: "NVFP4 (ModelOpt)" },
  { fmt: "mlx4", fam: "glm4_moe", type: GgmlType.MLX4, tol: 1e-3, card: "MLX affine 4-bit" },
];
const PROMPTS = [[1, 17, 42, 99, 300, 5, 77, 12], [250, 3, 3, 480, 64, 200]];

for (const F of FORMATS) describe.skipIf(!hasFixtures)(`${F.fmt} folder (from ${F.fam}'s hf/) against its dequantized F32 twin`, () => {
  let q = "", twin = "";
  const models: Model[] = [];
  beforeAll(() => ({ q, twin } = quantFolders(join(FAM, F.fam, "hf"), F.fmt, join(dir, F.fam))));
  afterAll(() => models.forEach((m) => m.close()));

  test("every tensor's values equal the twin's bit for bit; the quantized ones in the format's rows", () => {
    const notes: string[] = [];
    const h = openHfFolder(q, { note: (l) => notes.push(l) }), g = openHfFolder(twin);
    expect(h.tensors.size).toBe(g.tensors.size);
    let quantized = 0;
    for (const t of g.tensors.values()) {
      const m = h.tensor(t.name)!;
      expect(m.ne, t.name).toEqual(t.ne);
      if (m.type === F.type) quantized++;
      else expect(TYPE_INFO[m.type].blockElems, t.name).toBe(1);
      expect(firstDiff(values(h, t.name), values(g, t.name)), t.name).toBe(-1);
    }
    console.log(`${F.fmt}: ${quantized} of ${g.tensors.size} tensors in ${TYPE_INFO[F.type].name} rows${notes.length ? `; ${notes.length} dequantized at load, e.g. ${notes[0]}` : ""}`);
    expect(quantized).toBeGreaterThan(F.fmt === "mxfp4" ? 7 : 20);
    // DeepSeek's kv_b_proj is read transposed for its K half: that copy is dequantized, and said
    if (F.fmt === "fp8") expect(notes.some((l) => l.includes("kv_b_proj") && l.includes("F32"))).toBe(true);
    else expect(notes).toEqual([]);
  });

  // the card has kernels for MXFP4 (bl_cuda_check decides, where the library is built), none for the others:
  // those are refused at load by name, without the library or a card
  test.skipIf(!F.card && !cudaLib())(`the card: ${F.card ? "refused at load by name" : "accepted by the fusion pass"}`, () => {
    const f = openHfFolder(q);
    const fam = familyFor(f), hp = fam.hparams(f);
    const w = new MappedWeights(f, false);
    try {
      const why = cudaUnsupported(encodeProgram(fam.program(f, hp), (n) => w.tensor(n), hp.nEmbd, hp.nVocab));
      console.log(`${F.fmt} on the card: ${why ?? "accepted"}`);
      if (F.card) expect(why).toContain(`${F.card} weights are not implemented on the card yet`);
      else expect(why ?? "").not.toContain("MXFP4");
    } finally {
      w.close();
    }
  });

  test("exact path: the folder's logits equal the twin's bit for bit", () => {
    const a = Model.load(q, { nCtx: 128, nThreads: 2, exact: true });
    models.push(a);
    const b = Model.load(twin, { nCtx: 128, nThreads: 2, exact: true });
    models.push(b);
    for (const p of PROMPTS) expect(maxAbsDiff(a.evalSequence(p, 0), b.evalSequence(p, 0))).toBe(0);
  });

  for (const path of cpuPaths()) {
    test(`${path} path: the same greedy tokens as the twin, logits within ${F.tol} of its`, () => {
      onPath(path, () => {
        const a = Model.load(q, { nCtx: 128, nThreads: 2 });
        models.push(a);
        const b = Model.load(twin, { nCtx: 128, nThreads: 2 });
        models.push(b);
        for (const p of PROMPTS) {
          const d = maxAbsDiff(a.evalSequence(p, 0), b.evalSequence(p, 0));
          console.log(`${F.fmt} ${path} prompt ${p.length}: max |dlogit| vs the twin ${d.toExponential(2)}`);
          expect(d).toBeLessThan(F.tol);
          expect(greedy(a, p, 8)).toEqual(greedy(b, p, 8));
        }
      });
    });
  }
});
