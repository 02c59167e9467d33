// bloomery tests: the CPU library's quant blocks (ffi/cpu/quant*.c) through ffi/cpu.ts -
// dequantization bit-exact against gguf-py's (fixtures), MXFP4 by hand, quantizer round trips,
// ggml's activation quantizers re-derived here, vec_dot / matvec against dequantized dots.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { readFileSync } from "node:fs";
import { ptr } from "bun:ffi";
import { cpu, check, NativeError } from "../ffi/cpu.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";

const BL_E_INVAL = 1;
const BL_E_UNSUPPORTED = 4;

// ggml type ids and block shapes (SPEC.md / ggml-common.h)
const T = {
  F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q5_0: 6, Q5_1: 7, Q8_0: 8, Q8_1: 9, Q2_K: 10, Q3_K: 11,
  Q4_K: 12, Q5_K: 13, Q6_K: 14, Q8_K: 15, IQ4_NL: 20, IQ4_XS: 23, BF16: 30, MXFP4: 39,
} as const;
type TypeName = keyof typeof T;

const SHAPE: Record<TypeName, [number, number]> = {
  F32: [1, 4], F16: [1, 2], BF16: [1, 2], Q4_0: [32, 18], Q4_1: [32, 20], Q5_0: [32, 22],
  Q5_1: [32, 24], Q8_0: [32, 34], Q8_1: [32, 36], Q2_K: [256, 84], Q3_K: [256, 110],
  Q4_K: [256, 144], Q5_K: [256, 176], Q6_K: [256, 210], Q8_K: [256, 292], IQ4_NL: [32, 18],
  IQ4_XS: [256, 136], MXFP4: [32, 17],
};

// The activation format ggml's CPU backend converts x to for each weight type.
const VEC_DOT: Partial<Record<TypeName, TypeName>> = {
  F32: "F32", F16: "F16", BF16: "BF16", Q4_0: "Q8_0", Q4_1: "Q8_1", Q5_0: "Q8_0", Q5_1: "Q8_1",
  Q8_0: "Q8_0", IQ4_NL: "Q8_0", MXFP4: "Q8_0", Q2_K: "Q8_K", Q3_K: "Q8_K", Q4_K: "Q8_K",
  Q5_K: "Q8_K", Q6_K: "Q8_K", IQ4_XS: "Q8_K",
};
const WEIGHT_TYPES = Object.keys(VEC_DOT) as TypeName[];

// Round-trip bound per type: relative RMS error of quantize -> dequantize on Gaussian data with
// a few 6-sigma outliers (measured with this library's quantizers: about 80% of each bound).
const RT_BOUND: Record<TypeName, number> = {
  F32: 0, F16: 3e-4, BF16: 2.5e-3, Q8_0: 8e-3, Q8_1: 8e-3, Q8_K: 1.1e-2, Q6_K: 2.8e-2,
  Q5_0: 6.4e-2, Q5_1: 5.7e-2, Q5_K: 5.2e-2, Q4_0: 0.12, Q4_1: 0.105, Q4_K: 0.105,
  IQ4_NL: 0.1, IQ4_XS: 0.105, MXFP4: 0.145, Q3_K: 0.2, Q2_K: 0.38,
};

// ---------------------------------------------------------------- helpers

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
  for (let i = 0; i < n; i++) {
    const u = Math.max(r(), 1e-12);
    out[i] = scale * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * r());
  }
  return out;
}

function rowBytes(type: TypeName, n: number): number {
  const [be, bb] = SHAPE[type];
  return (n / be) * bb;
}

function quantize(type: TypeName, x: Float32Array): Uint8Array {
  const out = new Uint8Array(rowBytes(type, x.length));
  check(st(cpu().bl_quantize(T[type], x, out, x.length)), `quantize ${type}`);
  return out;
}

function dequantize(type: TypeName, src: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  check(st(cpu().bl_dequantize(T[type], src, out, n)), `dequantize ${type}`);
  return out;
}

/** y = W x through bl_matvec_ref; w holds `rows` rows `stride` bytes apart. */
function matvec(type: TypeName, w: Uint8Array, stride: number, rows: number, x: Float32Array): Float32Array {
  const y = new Float32Array(rows);
  check(st(cpu().bl_matvec_ref(T[type], ptr(w), stride, rows, x, x.length, y)), `matvec ${type}`);
  return y;
}

/** A native status as a number (bun:ffi types i64 returns loosely). */
function st(v: unknown): number {
  if (typeof v === "number" || typeof v === "bigint") return Number(v);
  throw new TypeError(`native call returned ${typeof v}, not a status`);
}

/** The status and message of a call expected to fail. */
function failure(status: unknown): { status: number; message: string } {
  try {
    check(st(status), "call");
  } catch (e) {
    if (e instanceof NativeError) return { status: e.status, message: e.message };
    throw e;
  }
  throw new Error(`expected a failure, got status ${String(status)}`);
}

const f16 = (bits: number): number => new Float16Array(new Uint16Array([bits]).buffer)[0];
const readF16 = (b: Uint8Array, off: number): number => f16(b[off] | (b[off + 1] << 8));

/** Rows of type `type` quantized from Gaussian data, laid out `stride` bytes apart. */
function makeRows(type: TypeName, rows: number, n: number, stride: number, seed: number): Uint8Array {
  const w = new Uint8Array(stride * rows);
  for (let r = 0; r < rows; r++) w.set(quantize(type, gaussian(n, seed + r, 0.05)), r * stride);
  return w;
}

// ---------------------------------------------------------------- block shapes

describe("bl_type_size", () => {
  test("every type reports ggml's block shape", () => {
    const be = new BigInt64Array(1);
    const bb = new BigInt64Array(1);
    for (const name of Object.keys(T) as TypeName[]) {
      check(st(cpu().bl_type_size(T[name], be, bb)), name);
      expect([Number(be[0]), Number(bb[0])]).toEqual(SHAPE[name]);
    }
  });

  test("unknown ids are refused with the id named", () => {
    const be = new BigInt64Array(1);
    const bb = new BigInt64Array(1);
    for (const id of [4, 5, 24, 34, 38, 40, -1, 1000]) {
      const f = failure(cpu().bl_type_size(id, be, bb));
      expect(f.status).toBe(BL_E_UNSUPPORTED);
      expect(f.message).toContain(`${id}`);
    }
  });
});

// ---------------------------------------------------------------- dequantization oracle

type FixtureType = { ggml_type: number; block_elems: number; block_bytes: number; blocks: number; raw_b64: string; f32_le_b64: string };

describe.skipIf(!hasFixtures)("dequantize matches gguf-py bit for bit", () => {
  const fx = hasFixtures
    ? (JSON.parse(readFileSync(join(FIXTURES, "quants", "quants.json"), "utf8")) as { types: Record<string, FixtureType> }).types
    : {};
  test("the fixture covers every stored weight type but MXFP4", () => {
    expect(Object.keys(fx).sort()).toEqual(
      ["BF16", "F16", "IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0"],
    );
  });
  for (const [name, f] of Object.entries(fx)) {
    test(name, () => {
      const type = name as TypeName;
      expect(f.ggml_type).toBe(T[type]);
      expect([f.block_elems, f.block_bytes]).toEqual(SHAPE[type]);
      const raw = new Uint8Array(Buffer.from(f.raw_b64, "base64"));
      const want = new Uint32Array(new Uint8Array(Buffer.from(f.f32_le_b64, "base64")).buffer);
      const n = f.blocks * f.block_elems;
      expect(raw.length).toBe(f.blocks * f.block_bytes);
      expect(want.length).toBe(n);
      const got = new Uint32Array(dequantize(type, raw, n).buffer);
      let bad = 0;
      let first = -1;
      for (let i = 0; i < n; i++) {
        if (got[i] !== want[i]) {
          bad++;
          if (first < 0) first = i;
        }
      }
      if (bad) console.error(`${name}: ${bad}/${n} differ, first at ${first}: ${got[first].toString(16)} vs ${want[first].toString(16)}`);
      expect(bad).toBe(0);
    });
  }
});

// ---------------------------------------------------------------- MXFP4 by hand

/** An e2m1 code's value, decoded from its bits: sign bit 3, exponent bits 2..1, mantissa bit 0. */
function e2m1(code: number): number {
  const sign = code & 8 ? -1 : 1;
  const exp = (code >> 1) & 3;
  const man = code & 1;
  return sign * (exp === 0 ? man * 0.5 : 2 ** (exp - 1) * (1 + man / 2));
}

describe("MXFP4", () => {
  const blocks: { e: number; codes: number[] }[] = [
    { e: 127, codes: Array.from({ length: 32 }, (_, i) => i % 16) },
    { e: 130, codes: Array.from({ length: 32 }, (_, i) => (i * 7 + 3) % 16) },
    { e: 120, codes: Array.from({ length: 32 }, (_, i) => 15 - (i % 16)) },
    { e: 0, codes: Array.from({ length: 32 }, (_, i) => (i * 5) % 16) }, // scale 2^-127: subnormal results
    { e: 1, codes: Array.from({ length: 32 }, (_, i) => (i * 3) % 16) },
    { e: 2, codes: Array.from({ length: 32 }, (_, i) => (i * 11) % 16) },
    { e: 200, codes: Array.from({ length: 32 }, (_, i) => (i * 13 + 1) % 16) },
  ];
  const raw = new Uint8Array(17 * blocks.length);
  blocks.forEach((b, k) => {
    raw[17 * k] = b.e;
    // ggml's layout: byte j holds element j (low nibble) and element j + 16 (high nibble)
    for (let j = 0; j < 16; j++) raw[17 * k + 1 + j] = b.codes[j] | (b.codes[j + 16] << 4);
  });

  test("dequantizes to e2m1 value * 2^(e-127), element order low nibbles then high", () => {
    const got = dequantize("MXFP4", raw, 32 * blocks.length);
    blocks.forEach((b, k) => {
      for (let i = 0; i < 32; i++) {
        const want = Math.fround(e2m1(b.codes[i]) * 2 ** (b.e - 127));
        // ggml's table holds +0 for the "negative zero" code
        expect(Object.is(got[32 * k + i], want === 0 ? 0 : want)).toBe(true);
      }
    });
    expect(got[7]).toBe(6); // code 7 at e = 127 is the largest e2m1 value
    expect(got[15]).toBe(-6);
  });

  test("vec_dot against Q8_0 equals the hand-computed sum", () => {
    // x = integer values with 127 in each block, so Q8_0 holds them exactly with d = 1
    const x = new Float32Array(64);
    for (let i = 0; i < 64; i++) x[i] = i % 32 === 0 ? 127 : ((i * 37) % 15) - 7;
    const w = raw.slice(0, 34); // blocks e = 127 and e = 130
    let want = 0;
    for (let i = 0; i < 64; i++) want += e2m1(blocks[i >> 5].codes[i & 31]) * 2 ** (blocks[i >> 5].e - 127) * x[i];
    expect(matvec("MXFP4", w, 34, 1, x)[0]).toBe(want);
  });

  test("quantizer picks levels of the table and the exponent of the block maximum", () => {
    const x = new Float32Array(32);
    for (let i = 0; i < 32; i++) x[i] = e2m1(i % 16) * 4; // exactly representable at e = 129
    const q = quantize("MXFP4", x);
    expect(q[0]).toBe(129);
    expect(Array.from(dequantize("MXFP4", q, 32))).toEqual(Array.from(x).map((v) => (v === 0 ? 0 : v)));
  });
});

// ---------------------------------------------------------------- ggml's activation quantizers

/** ggml's quantize_row_q8_0_ref / q8_1_ref re-derived: d = amax/127, q = roundf(x / d). */
function q8_0Ref(x: Float32Array, withSum: boolean): Uint8Array {
  const bs = withSum ? 36 : 34;
  const out = new Uint8Array((x.length / 32) * bs);
  const dv = new DataView(out.buffer);
  for (let b = 0; b < x.length / 32; b++) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[32 * b + j]));
    const d = Math.fround(amax / 127);
    const id = d ? Math.fround(1 / d) : 0;
    dv.setUint16(b * bs, new Uint16Array(new Float16Array([d]).buffer)[0], true);
    let sum = 0;
    for (let j = 0; j < 32; j++) {
      const v = Math.fround(x[32 * b + j] * id);
      const q = Math.sign(v) * Math.round(Math.abs(v)); // roundf: half away from zero
      dv.setInt8(b * bs + (withSum ? 4 : 2) + j, q);
      sum += q;
    }
    if (withSum) dv.setUint16(b * bs + 2, new Uint16Array(new Float16Array([Math.fround(sum * d)]).buffer)[0], true);
  }
  return out;
}

/** ggml's quantize_row_q8_K_ref re-derived: iscale = -127/max (signed, first largest), ties to even. */
function q8_KRef(x: Float32Array): Uint8Array {
  const out = new Uint8Array((x.length / 256) * 292);
  const dv = new DataView(out.buffer);
  const rne = (v: number): number => {
    const f = Math.floor(v);
    const r = v - f;
    return r > 0.5 || (r === 0.5 && f % 2 !== 0) ? f + 1 : f;
  };
  for (let b = 0; b < x.length / 256; b++) {
    const o = b * 292;
    let amax = 0;
    let max = 0;
    for (let j = 0; j < 256; j++) {
      if (Math.abs(x[256 * b + j]) > amax) {
        amax = Math.abs(x[256 * b + j]);
        max = x[256 * b + j];
      }
    }
    if (amax === 0) continue;
    const iscale = Math.fround(-127 / max);
    for (let j = 0; j < 256; j++) dv.setInt8(o + 4 + j, Math.min(127, rne(Math.fround(iscale * x[256 * b + j]))));
    for (let g = 0; g < 16; g++) {
      let s = 0;
      for (let l = 0; l < 16; l++) s += dv.getInt8(o + 4 + 16 * g + l);
      dv.setInt16(o + 260 + 2 * g, s, true);
    }
    dv.setFloat32(o, Math.fround(1 / iscale), true);
  }
  return out;
}

describe("activation quantizers equal ggml's reference rules", () => {
  const x = gaussian(256 * 6, 7, 3);
  x.fill(0, 256, 512); // an all-zero block
  // integers with +-254 leading each 32-block: x / d lands on .5 ties, where roundf (Q8_0,
  // Q8_1) and ties-to-even (Q8_K) differ
  for (let i = 1024; i < 1280; i++) x[i] = i % 32 === 0 ? (i % 64 === 0 ? 254 : -254) : ((i * 29) % 255) - 127;
  test("Q8_0", () => expect(quantize("Q8_0", x)).toEqual(q8_0Ref(x, false)));
  test("Q8_1 (s = d * sum q)", () => expect(quantize("Q8_1", x)).toEqual(q8_0Ref(x, true)));
  test("Q8_K", () => expect(quantize("Q8_K", x)).toEqual(q8_KRef(x)));
  test("F16 rounds to nearest even (as Float16Array), BF16 likewise", () => {
    const v = new Float32Array([...gaussian(500, 3, 100), 65519, 65520, -65520, 1e-8, 3e-8, 2 ** -25, 2 ** -24 * 1.5, 6.1e-5, 1e30]);
    expect(new Uint16Array(quantize("F16", v).buffer)).toEqual(new Uint16Array(new Float16Array(v).buffer));
    const u = new Uint32Array(v.buffer);
    const bf = new Uint16Array(quantize("BF16", v).buffer);
    for (let i = 0; i < v.length; i++) {
      const lsb = (u[i] >>> 16) & 1;
      expect(bf[i]).toBe(Number((BigInt(u[i]) + BigInt(0x7fff + lsb)) >> 16n) & 0xffff);
    }
  });
});

// ---------------------------------------------------------------- round trips

describe("quantize round trip within the stated bound", () => {
  for (const name of Object.keys(RT_BOUND) as TypeName[]) {
    test(`${name} relative RMS < ${RT_BOUND[name]}`, () => {
      const n = 256 * 16;
      const x = gaussian(n, 100 + T[name], 0.02);
      for (let i = 0; i < 32; i++) x[7 * i] *= 6; // a few outliers, as real weights have
      const y = dequantize(name, quantize(name, x), n);
      let num = 0;
      let den = 0;
      for (let i = 0; i < n; i++) {
        num += (x[i] - y[i]) ** 2;
        den += x[i] ** 2;
      }
      const rel = Math.sqrt(num / den);
      if (process.env.BL_QUANT_VERBOSE) console.log(`${name}: relative RMS ${rel.toExponential(3)}`);
      expect(rel).toBeLessThanOrEqual(RT_BOUND[name]);
    });
  }

  test("all-zero input stays zero for every type", () => {
    for (const name of Object.keys(RT_BOUND) as TypeName[]) {
      const y = dequantize(name, quantize(name, new Float32Array(256)), 256);
      expect(y.every((v) => v === 0)).toBe(true);
    }
  });
});

// ---------------------------------------------------------------- vec_dot / matvec

/** Per-block offsets of fp16 fields in a weight block, for the exact-arithmetic test. */
const SCALE_FIELDS: Partial<Record<TypeName, number[]>> = {
  Q4_0: [0], Q4_1: [0, 2], Q5_0: [0], Q5_1: [0, 2], Q8_0: [0], IQ4_NL: [0], Q2_K: [80, 82],
  Q3_K: [108], Q4_K: [0, 2], Q5_K: [0, 2], Q6_K: [208], IQ4_XS: [0],
};

/** dot(dequant(w row), dequant(x as the activation type)) in double, plus ggml's Q8_1 min term
 * (m * s with s the activation's stored sum), and the sum of |terms| for the error bound. */
function expectedDot(type: TypeName, wrow: Uint8Array, n: number, xq: Uint8Array, xd: Float32Array): [number, number] {
  const wd = dequantize(type, wrow, n);
  let sum = 0;
  let mag = 0;
  for (let i = 0; i < n; i++) {
    sum += wd[i] * xd[i];
    mag += Math.abs(wd[i] * xd[i]);
  }
  if (VEC_DOT[type] === "Q8_1") {
    const bb = SHAPE[type][1];
    for (let b = 0; b < n / 32; b++) {
      const m = readF16(wrow, b * bb + 2);
      let xs = 0;
      for (let j = 0; j < 32; j++) xs += xd[32 * b + j];
      sum += m * (readF16(xq, b * 36 + 2) - xs);
    }
  }
  return [sum, mag];
}

describe("matvec_ref = dot(dequant(w), dequant(quantized x))", () => {
  for (const type of WEIGHT_TYPES) {
    test(`${type} · ${VEC_DOT[type]}`, () => {
      const n = 1024;
      const rows = 7;
      const stride = rowBytes(type, n) + 2 * SHAPE[type][1] + 4; // padded rows
      const w = makeRows(type, rows, n, stride, 1000 + T[type]);
      const x = gaussian(n, 55, 1.5);
      const y = matvec(type, w, stride, rows, x);
      const at = VEC_DOT[type]!;
      const xq = quantize(at, x);
      const xd = dequantize(at, xq, n);
      for (let r = 0; r < rows; r++) {
        const row = w.subarray(r * stride, r * stride + rowBytes(type, n));
        const [want, mag] = expectedDot(type, row, n, xq, xd);
        if (type === "F32" || type === "F16" || type === "BF16") {
          // ggml's scalar float dot: f32 products summed in double in element order
          const wd = dequantize(type, row, n);
          let s = 0;
          for (let i = 0; i < n; i++) s += Math.fround(wd[i] * xd[i]);
          expect(y[r]).toBe(Math.fround(s));
        } else {
          // f32 rounding of the block scales and of the running sum only (observed <= 2e-8)
          expect(Math.abs(y[r] - want)).toBeLessThanOrEqual(2e-7 * mag);
        }
      }
    });
  }

  test("odd row counts and a single row agree with the full matrix", () => {
    const n = 512;
    const stride = rowBytes("Q4_K", n);
    const w = makeRows("Q4_K", 9, n, stride, 9);
    const x = gaussian(n, 10);
    const all = matvec("Q4_K", w, stride, 9, x);
    for (const r of [0, 4, 8]) expect(matvec("Q4_K", w.slice(r * stride, (r + 1) * stride), stride, 1, x)[0]).toBe(all[r]);
  });
});

describe("vec_dot integer block semantics are exact", () => {
  // Weights of random bytes with power-of-two scales and activations of small integers (with
  // 127 leading each 32-block, so Q8_0 / Q8_1 / Q8_K hold x exactly with |d| = 1): every term
  // and partial sum is a multiple of 2^-5 below 2^19 (checked), so is exact in f32, and any
  // correct evaluation order gives exactly the double-precision sum.
  for (const type of WEIGHT_TYPES.filter((t) => SCALE_FIELDS[t] || t === "MXFP4")) {
    test(type, () => {
      const n = 256;
      const rows = 5;
      const rb = rowBytes(type, n);
      const [, bb] = SHAPE[type];
      const r = rng(77 + T[type]);
      const w = new Uint8Array(rb * rows);
      for (let i = 0; i < w.length; i++) w[i] = Math.floor(r() * 256);
      for (let b = 0; b < w.length / bb; b++) {
        if (type === "MXFP4") w[b * bb] = 125 + (b % 3); // scales 2^-2 .. 2^0
        for (const off of SCALE_FIELDS[type] ?? []) {
          const bits = [0x2c00, 0x2800, 0xac00][(b + off) % 3]; // 2^-4, 2^-5, -2^-4
          w[b * bb + off] = bits & 0xff;
          w[b * bb + off + 1] = bits >> 8;
        }
      }
      const x = new Float32Array(n);
      for (let i = 0; i < n; i++) x[i] = i % 32 === 0 ? 127 : Math.floor(r() * 5) - 2;
      const y = matvec(type, w, rb, rows, x);
      const at = VEC_DOT[type]!;
      const xq = quantize(at, x);
      expect(dequantize(at, xq, n)).toEqual(x); // activations held exactly
      for (let k = 0; k < rows; k++) {
        const [want, mag] = expectedDot(type, w.subarray(k * rb, (k + 1) * rb), n, xq, x);
        expect(mag).toBeLessThan(2 ** 19);
        expect(y[k]).toBe(want);
      }
    });
  }
});

// ---------------------------------------------------------------- errors

describe("bad arguments", () => {
  test("n not a multiple of the block names the type and n", () => {
    const src = new Uint8Array(64);
    const dst = new Float32Array(64);
    for (const [name, n] of [["Q4_0", 33], ["Q4_K", 300], ["MXFP4", 31]] as [TypeName, number][]) {
      const f = failure(cpu().bl_dequantize(T[name], src, dst, n));
      expect(f.status).toBe(BL_E_INVAL);
      expect(f.message).toContain(name);
      expect(f.message).toContain(`${n}`);
      const g = failure(cpu().bl_quantize(T[name], dst, src, n));
      expect(g.status).toBe(BL_E_INVAL);
      expect(g.message).toContain(`${n}`);
    }
  });

  test("unknown type ids are unsupported, with the id named", () => {
    const src = new Uint8Array(64);
    const dst = new Float32Array(64);
    for (const id of [5, 35, 99, -3]) {
      for (const status of [
        cpu().bl_dequantize(id, src, dst, 32),
        cpu().bl_quantize(id, dst, src, 32),
        cpu().bl_matvec_ref(id, ptr(src), 64, 1, dst, 32, dst),
      ]) {
        const f = failure(status);
        expect(f.status).toBe(BL_E_UNSUPPORTED);
        expect(f.message).toContain(`${id}`);
      }
    }
  });

  test("non-finite input to a quantizer is refused", () => {
    const x = new Float32Array(32);
    x[5] = NaN;
    const f = failure(cpu().bl_quantize(T.Q8_0, x, new Uint8Array(34), 32));
    expect(f.status).toBe(BL_E_INVAL);
    expect(f.message).toContain("element 5");
  });

  test("matvec refuses activation-only types and short row strides", () => {
    const w = new Uint8Array(1024);
    const x = new Float32Array(256);
    const y = new Float32Array(2);
    expect(failure(cpu().bl_matvec_ref(T.Q8_K, ptr(w), 292, 1, x, 256, y)).status).toBe(BL_E_UNSUPPORTED);
    const f = failure(cpu().bl_matvec_ref(T.Q4_0, ptr(w), 17, 2, x, 32, y));
    expect(f.status).toBe(BL_E_INVAL);
    expect(f.message).toContain("stride");
  });
});
