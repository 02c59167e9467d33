// bloomery tests: the grid quant types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M
// (ffi/cpu/quants_iq2.c, quants_iq13.c, the codebooks of ffi/cpu/iq_grids.h): dequantization bit
// for bit against the gguf package's (test/fixtures/iq-quants.json, scripts/make-iq-fixtures.py),
// the codebooks read back through the dequantizer entry by entry (levels, counts, distinct points,
// equal to the package's), a second dequantizer written here from the block layouts alone, and the
// scalar products against dequantized dots.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { readFileSync } from "node:fs";
import { ptr } from "bun:ffi";
import { cpu, check, NativeError } from "../ffi/cpu.ts";

const BL_E_UNSUPPORTED = 4;
const f32 = Math.fround;

interface IqType { id: number; bb: number; points: number; elems: number; levels: number[] }
const IQ: Record<string, IqType> = {
  IQ2_XXS: { id: 16, bb: 66, points: 256, elems: 8, levels: [8, 25, 43] },
  IQ2_XS: { id: 17, bb: 74, points: 512, elems: 8, levels: [8, 25, 43] },
  IQ2_S: { id: 22, bb: 82, points: 1024, elems: 8, levels: [8, 25, 43] },
  IQ3_XXS: { id: 18, bb: 98, points: 256, elems: 4, levels: [4, 12, 20, 28, 36, 44, 52, 62] },
  IQ3_S: { id: 21, bb: 110, points: 512, elems: 4, levels: [1, 3, 5, 7, 9, 11, 13, 15] },
  IQ1_S: { id: 19, bb: 50, points: 2048, elems: 8, levels: [-1, 0, 1] },
  IQ1_M: { id: 29, bb: 56, points: 2048, elems: 8, levels: [-1, 0, 1] },
};
const NAMES = Object.keys(IQ);

interface FixtureType {
  ggml_type: number; block_elems: number; block_bytes: number; blocks: number; raw_b64: string; f32_le_b64: string;
  grid_points: number; grid_elems: number; grid_i8_b64: string;
}
const FX = JSON.parse(readFileSync(join(import.meta.dir, "fixtures", "iq-quants.json"), "utf8")) as {
  ksigns_b64: string; types: Record<string, FixtureType>;
};
const b64 = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "base64"));
const KSIGNS = b64(FX.ksigns_b64);
const GRID: Record<string, Int8Array> = Object.fromEntries(NAMES.map((n) => {
  const g = b64(FX.types[n].grid_i8_b64);
  return [n, new Int8Array(g.buffer, g.byteOffset, g.length)];
}));

function st(v: unknown): number {
  if (typeof v === "number" || typeof v === "bigint") return Number(v);
  throw new TypeError(`native call returned ${typeof v}`);
}

function dequantize(name: string, raw: Uint8Array, blocks: number): Float32Array {
  const out = new Float32Array(blocks * 256);
  check(st(cpu().bl_dequantize(IQ[name].id, raw, out, out.length)), `dequantize ${name}`);
  return out;
}

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

const f16 = (bits: number): number => new Float16Array(new Uint16Array([bits]).buffer)[0];
const f16bits = (v: number): number => new Uint16Array(new Float16Array([v]).buffer)[0];

// ---------------------------------------------------------------- a second dequantizer

/**
 * Block b of `name` decoded from the layout description alone (ggml-common.h's structs and the
 * format's rules), with the gguf package's codebooks and sign table, in float32 steps.
 */
function decodeBlock(name: string, raw: Uint8Array, o: number, y: Float32Array, yo: number): void {
  const dv = new DataView(raw.buffer, raw.byteOffset);
  const u16 = (at: number): number => dv.getUint16(o + at, true);
  const u32 = (at: number): number => dv.getUint32(o + at, true);
  const grid = GRID[name];
  const E = IQ[name].elems;
  const sgn = (signs: number, j: number): number => ((signs >> j) & 1 ? -1 : 1);
  /** 8 elements from a point of 8 (or two of 4) at scale db with 8 sign bits */
  const put8 = (at: number, db: number, pts: number[], signs: number): void => {
    for (let j = 0; j < 8; j++) {
      const v = E === 8 ? grid[pts[0] * 8 + j] : grid[pts[j >> 2] * 4 + (j & 3)];
      y[yo + at + j] = f32(f32(db * v) * sgn(signs, j));
    }
  };
  switch (name) {
    case "IQ2_XXS": {
      const d = f16(u16(0));
      for (let g = 0; g < 8; g++) {
        const w = u32(2 + 8 * g + 4);
        const db = f32(f32(d * (0.5 + (w >>> 28))) * 0.25);
        for (let l = 0; l < 4; l++) put8(32 * g + 8 * l, db, [raw[o + 2 + 8 * g + l]], KSIGNS[(w >>> (7 * l)) & 127]);
      }
      return;
    }
    case "IQ2_XS":
    case "IQ2_S": {
      const d = f16(u16(0));
      const scOff = name === "IQ2_XS" ? 66 : 74;
      for (let g = 0; g < 8; g++) {
        const sc = raw[o + scOff + g];
        const db = [f32(f32(d * (0.5 + (sc & 15))) * 0.25), f32(f32(d * (0.5 + (sc >> 4))) * 0.25)];
        for (let l = 0; l < 4; l++) {
          const k = 4 * g + l;
          if (name === "IQ2_XS") {
            const q = u16(2 + 2 * k);
            put8(8 * k, db[l >> 1], [q & 511], KSIGNS[q >> 9]);
          } else {
            const idx = raw[o + 2 + k] | (((raw[o + 66 + g] >> (2 * l)) & 3) << 8);
            put8(8 * k, db[l >> 1], [idx], raw[o + 34 + k]);
          }
        }
      }
      return;
    }
    case "IQ3_XXS": {
      const d = f16(u16(0));
      for (let g = 0; g < 8; g++) {
        const w = u32(66 + 4 * g);
        const db = f32(f32(d * (0.5 + (w >>> 28))) * 0.5);
        for (let l = 0; l < 4; l++) {
          put8(32 * g + 8 * l, db, [raw[o + 2 + 8 * g + 2 * l], raw[o + 2 + 8 * g + 2 * l + 1]], KSIGNS[(w >>> (7 * l)) & 127]);
        }
      }
      return;
    }
    case "IQ3_S": {
      const d = f16(u16(0));
      for (let g = 0; g < 8; g++) {
        const s = (raw[o + 106 + (g >> 1)] >> (4 * (g & 1))) & 15;
        const db = f32(d * (1 + 2 * s));
        const idx = (k: number): number => raw[o + 2 + 8 * g + k] | (((raw[o + 66 + g] >> k) & 1) << 8);
        for (let l = 0; l < 4; l++) put8(32 * g + 8 * l, db, [idx(2 * l), idx(2 * l + 1)], raw[o + 74 + 4 * g + l]);
      }
      return;
    }
    case "IQ1_S": {
      const d = f16(u16(0));
      for (let g = 0; g < 8; g++) {
        const qh = u16(34 + 2 * g);
        const dl = f32(d * (2 * ((qh >> 12) & 7) + 1));
        const delta = qh & 0x8000 ? -0.125 : 0.125;
        for (let l = 0; l < 4; l++) {
          const idx = raw[o + 2 + 4 * g + l] | (((qh >> (3 * l)) & 7) << 8);
          for (let j = 0; j < 8; j++) y[yo + 32 * g + 8 * l + j] = f32(dl * f32(grid[idx * 8 + j] + delta));
        }
      }
      return;
    }
    case "IQ1_M": {
      const sc = [0, 1, 2, 3].map((k) => u16(48 + 2 * k));
      const d = f16((sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) | ((sc[2] >> 4) & 0xf00) | (sc[3] & 0xf000));
      for (let g = 0; g < 8; g++) {
        for (let l = 0; l < 4; l++) {
          const s = (sc[g >> 1] >> (6 * (g & 1) + 3 * (l >> 1))) & 7;
          const dl = f32(d * (2 * s + 1));
          const h = (raw[o + 32 + 2 * g + (l >> 1)] >> (4 * (l & 1))) & 15;
          const delta = h & 8 ? -0.125 : 0.125;
          const idx = raw[o + 4 * g + l] | ((h & 7) << 8);
          for (let j = 0; j < 8; j++) y[yo + 32 * g + 8 * l + j] = f32(dl * f32(grid[idx * 8 + j] + delta));
        }
      }
      return;
    }
  }
  throw new Error(`no decoder for ${name}`);
}

function decode(name: string, raw: Uint8Array, blocks: number): Float32Array {
  const y = new Float32Array(blocks * 256);
  for (let b = 0; b < blocks; b++) decodeBlock(name, raw, b * IQ[name].bb, y, b * 256);
  return y;
}

/** Index of the first float whose bits differ, or -1. */
function firstDiff(a: Float32Array, b: Float32Array): number {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length), y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  if (x.length !== y.length) return 0;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
  return -1;
}

function synth(name: string, blocks: number, seed: number): Uint8Array {
  const raw = new Uint8Array(blocks * IQ[name].bb);
  check(st(cpu().bl_synth_fill(IQ[name].id, ptr(raw), 0, blocks, BigInt(seed), 0.02, 0)), "synth fill");
  return raw;
}

// ---------------------------------------------------------------- block shapes, no quantizer

describe("grid types: shapes, and files of them are read, not written", () => {
  test("bl_type_size reports each block shape", () => {
    const be = new BigInt64Array(1), bb = new BigInt64Array(1);
    for (const n of NAMES) {
      check(st(cpu().bl_type_size(IQ[n].id, be, bb)), n);
      expect([Number(be[0]), Number(bb[0])]).toEqual([256, IQ[n].bb]);
      expect(FX.types[n].block_bytes).toBe(IQ[n].bb);
    }
  });
  test("bl_quantize refuses them by name", () => {
    for (const n of NAMES) {
      const out = new Uint8Array(IQ[n].bb);
      let err: NativeError | undefined;
      try {
        check(st(cpu().bl_quantize(IQ[n].id, new Float32Array(256), out, 256)), "quantize");
      } catch (e) {
        if (e instanceof NativeError) err = e;
      }
      expect(err?.status).toBe(BL_E_UNSUPPORTED);
      expect(err?.message).toContain(n);
    }
  });
});

// ---------------------------------------------------------------- the gguf package's dequantization

describe("dequantize matches the gguf package bit for bit", () => {
  for (const n of NAMES) {
    test(n, () => {
      const f = FX.types[n];
      expect(f.ggml_type).toBe(IQ[n].id);
      const raw = b64(f.raw_b64);
      const want = new Float32Array(b64(f.f32_le_b64).slice().buffer);
      const got = dequantize(n, raw, f.blocks);
      const i = firstDiff(got, want);
      if (i >= 0) console.error(`${n}: element ${i}: ${got[i]} vs ${want[i]}`);
      expect(i).toBe(-1);
      // and the second dequantizer reads the package's blocks the same way
      expect(firstDiff(decode(n, raw, f.blocks), want)).toBe(-1);
    });
  }
});

// ---------------------------------------------------------------- the codebooks

/** Where point k (0 .. 31 for 8-element points, 0 .. 63 for 4) of a block keeps its grid index. */
function setIndex(name: string, blk: Uint8Array, k: number, idx: number): void {
  const dv = new DataView(blk.buffer, blk.byteOffset);
  switch (name) {
    case "IQ2_XXS": blk[2 + 8 * (k >> 2) + (k & 3)] = idx; return;
    case "IQ2_XS": dv.setUint16(2 + 2 * k, (dv.getUint16(2 + 2 * k, true) & ~511) | idx, true); return;
    case "IQ2_S": blk[2 + k] = idx & 255; blk[66 + (k >> 2)] = (blk[66 + (k >> 2)] & ~(3 << (2 * (k & 3)))) | ((idx >> 8) << (2 * (k & 3))); return;
    case "IQ3_XXS": blk[2 + k] = idx; return;
    case "IQ3_S": blk[2 + k] = idx & 255; blk[66 + (k >> 3)] = (blk[66 + (k >> 3)] & ~(1 << (k & 7))) | ((idx >> 8) << (k & 7)); return;
    case "IQ1_S": {
      blk[2 + k] = idx & 255;
      const at = 34 + 2 * (k >> 2), sh = 3 * (k & 3);
      dv.setUint16(at, (dv.getUint16(at, true) & ~(7 << sh)) | ((idx >> 8) << sh), true);
      return;
    }
    case "IQ1_M": {
      blk[k] = idx & 255;
      const at = 32 + (k >> 1), sh = 4 * (k & 1);
      blk[at] = (blk[at] & ~(7 << sh)) | ((idx >> 8) << sh);
      return;
    }
  }
}

/**
 * Blocks that visit every grid index once (point k of block b: index 32b + k, or 64b + k for
 * 4-element points), with d = 1, every scale 0, every sign positive and every shift +1/8: the
 * dequantized value is then the grid value times a known factor (plus 1/8 for IQ1).
 */
function coverBlocks(name: string): { raw: Uint8Array; blocks: number; factor: number; shift: number } {
  const t = IQ[name];
  const per = t.elems === 8 ? 32 : 64;
  const blocks = t.points / per;
  const raw = new Uint8Array(blocks * t.bb);
  for (let b = 0; b < blocks; b++) {
    const blk = raw.subarray(b * t.bb, (b + 1) * t.bb);
    if (name === "IQ1_M") {
      const d = f16bits(1); // d's nibbles in the scale words' tops, the scales 0
      for (let k = 0; k < 4; k++) new DataView(blk.buffer, blk.byteOffset).setUint16(48 + 2 * k, ((d >> (4 * k)) & 15) << 12, true);
    } else new DataView(blk.buffer, blk.byteOffset).setUint16(0, f16bits(1), true);
    for (let k = 0; k < per; k++) setIndex(name, blk, k, b * per + k);
  }
  const factor = { IQ2_XXS: 0.125, IQ2_XS: 0.125, IQ2_S: 0.125, IQ3_XXS: 0.25, IQ3_S: 1, IQ1_S: 1, IQ1_M: 1 }[name]!;
  return { raw, blocks, factor, shift: name.startsWith("IQ1") ? 0.125 : 0 };
}

describe("the codebooks, read back through the dequantizer", () => {
  for (const n of NAMES) {
    test(`${n}: ${IQ[n].points} points (2^index bits) of ${IQ[n].elems} values in {${IQ[n].levels.join(", ")}}, distinct, equal to the gguf package's`, () => {
      const t = IQ[n];
      const { raw, blocks, factor, shift } = coverBlocks(n);
      const y = dequantize(n, raw, blocks);
      const grid = Array.from(y, (v) => v / factor - shift);
      expect(grid.length).toBe(t.points * t.elems);
      for (const v of grid) expect(t.levels).toContain(v);
      const points = new Set<string>();
      for (let p = 0; p < t.points; p++) points.add(grid.slice(p * t.elems, (p + 1) * t.elems).join(","));
      expect(points.size).toBe(t.points);
      expect(FX.types[n].grid_points).toBe(t.points);
      expect(FX.types[n].grid_elems).toBe(t.elems);
      expect(Array.from(grid)).toEqual(Array.from(GRID[n]));
    });
  }

  test("7-bit sign indices: the eighth sign makes the count of negatives even (the gguf package's table)", () => {
    // IQ2_XXS points with sign index s: the signs of the 8 values are the table's bits
    const blk = new Uint8Array(66 * 32);
    for (let b = 0; b < 32; b++) {
      const dv = new DataView(blk.buffer, b * 66);
      dv.setUint16(0, f16bits(1), true);
      for (let g = 0; g < 8; g++) {
        const s = (b * 8 + g) % 128; // point l of group g gets sign index s + l (mod 128)
        let w = 0;
        for (let l = 0; l < 4; l++) w |= ((s + l) % 128) << (7 * l);
        dv.setUint32(2 + 8 * g + 4, w >>> 0, true);
      }
    }
    const y = dequantize("IQ2_XXS", blk, 32);
    for (let b = 0; b < 32; b++)
      for (let g = 0; g < 8; g++)
        for (let l = 0; l < 4; l++) {
          const s = ((b * 8 + g) % 128 + l) % 128;
          let bits = 0;
          for (let j = 0; j < 8; j++) if (y[256 * b + 32 * g + 8 * l + j] < 0) bits |= 1 << j;
          let pop = 0;
          for (let j = 0; j < 7; j++) pop += (s >> j) & 1;
          expect(bits).toBe(s | ((pop & 1) << 7));
          expect(bits).toBe(KSIGNS[s]);
        }
  });
});

// ---------------------------------------------------------------- the second dequantizer at large

describe("the layout-only dequantizer agrees with the library on synthetic and random blocks", () => {
  for (const n of NAMES) {
    test(n, () => {
      const blocks = 96;
      const a = synth(n, blocks, 5);
      expect(firstDiff(dequantize(n, a, blocks), decode(n, a, blocks))).toBe(-1);
      // random bytes everywhere but a finite scale
      const r = rng(IQ[n].id), raw = new Uint8Array(blocks * IQ[n].bb);
      for (let i = 0; i < raw.length; i++) raw[i] = Math.floor(r() * 256);
      for (let b = 0; b < blocks; b++) {
        const dv = new DataView(raw.buffer, b * IQ[n].bb);
        const d = f16bits((r() < 0.5 ? -1 : 1) * (1e-3 + 0.03 * r()));
        if (n === "IQ1_M") for (let k = 0; k < 4; k++) dv.setUint16(48 + 2 * k, (dv.getUint16(48 + 2 * k, true) & 0x0fff) | (((d >> (4 * k)) & 15) << 12), true);
        else dv.setUint16(0, d, true);
      }
      expect(firstDiff(dequantize(n, raw, blocks), decode(n, raw, blocks))).toBe(-1);
    });
  }

  test("synthetic blocks have about the weight spread asked for", () => {
    for (const n of NAMES) {
      const y = dequantize(n, synth(n, 256, 3), 256);
      let s2 = 0;
      for (const v of y) s2 += v * v;
      const rms = Math.sqrt(s2 / y.length);
      expect(rms).toBeGreaterThan(0.02 * 0.6);
      expect(rms).toBeLessThan(0.02 * 1.4);
    }
  });
});

// ---------------------------------------------------------------- scalar products

describe("scalar products against Q8_K rows equal the dequantized dots", () => {
  for (const n of NAMES) {
    test(n, () => {
      const rows = 9, blocks = 6, len = blocks * 256;
      const w = synth(n, rows * blocks, 11);
      const r = rng(77);
      const x = Float32Array.from({ length: len }, () => (r() - 0.5) * 4);
      // the activation as the product sees it: Q8_K, dequantized
      const q = new Uint8Array(blocks * 292);
      check(st(cpu().bl_quantize(15, x, q, len)), "quantize Q8_K");
      const xq = new Float32Array(len);
      check(st(cpu().bl_dequantize(15, q, xq, len)), "dequantize Q8_K");
      const y = new Float32Array(rows);
      check(st(cpu().bl_matvec_ref(IQ[n].id, ptr(w), blocks * IQ[n].bb, rows, x, len, y)), "matvec");
      const wf = dequantize(n, w, rows * blocks);
      for (let i = 0; i < rows; i++) {
        let want = 0, sabs = 0;
        for (let k = 0; k < len; k++) {
          want += wf[i * len + k] * xq[k];
          sabs += Math.abs(wf[i * len + k] * xq[k]);
        }
        // exact integer sums per block, a few float steps per block
        expect(Math.abs(y[i] - want)).toBeLessThanOrEqual(4 * (blocks + 2) * 2 ** -24 * sabs);
      }
      // the bound has teeth: one flipped sign moves the product far past it
      if (n !== "IQ1_S" && n !== "IQ1_M") {
        const w2 = w.slice();
        const signAt = { IQ2_XXS: 2 + 4, IQ2_XS: 3, IQ2_S: 34, IQ3_XXS: 66, IQ3_S: 74 }[n]!;
        w2[signAt] ^= n === "IQ2_XS" ? 0x02 : 0x01;
        const y2 = new Float32Array(rows);
        check(st(cpu().bl_matvec_ref(IQ[n].id, ptr(w2), blocks * IQ[n].bb, rows, x, len, y2)), "matvec");
        expect(y2[0]).not.toBe(y[0]);
      }
    });
  }
});
