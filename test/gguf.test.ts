// GGUF reader and writer: round trips, split sets, and a clear error for every malformed file.
import { describe, expect, test, beforeAll } from "bun:test";
import { mkdtempSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GgufError, GgufFile, GgufValueType, GgufWriter, GgmlType, readGgufHeader, TYPE_INFO } from "../src/gguf/index.ts";
import { FIXTURES } from "./paths.ts";
import { cpu } from "../ffi/cpu.ts";
import { ptr } from "bun:ffi";

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "bloomery-gguf-"));
});

function sample(): GgufWriter {
  const w = new GgufWriter();
  w.str("general.architecture", "test");
  w.u32("test.count", 7);
  w.f32("test.eps", 1e-6);
  w.bool("test.flag", true);
  w.set("test.u64", GgufValueType.U64, 1n << 40n);
  w.set("test.i8", GgufValueType.I8, -5);
  w.setArray("test.strings", GgufValueType.STRING, ["a", "ü", "日本"]);
  w.setArray("test.ints", GgufValueType.I32, [1, -2, 3]);
  w.setArray("test.floats", GgufValueType.F32, [0.5, 1.5]);
  w.addTensor("a.weight", GgmlType.F32, [4, 2], new Uint8Array(new Float32Array([1, 2, 3, 4, 5, 6, 7, 8]).buffer));
  w.addTensor("b.weight", GgmlType.Q8_0, [32, 3], new Uint8Array(34 * 3).fill(1));
  return w;
}

function writeBytes(name: string, b: Uint8Array): string {
  const p = join(dir, name);
  writeFileSync(p, b);
  return p;
}

function expectGgufError(path: string, ...parts: (string | RegExp)[]): void {
  let err: unknown;
  try {
    GgufFile.open(path);
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(GgufError);
  const msg = (err as Error).message;
  expect(msg).toContain(path);
  for (const p of parts) {
    if (typeof p === "string") expect(msg).toContain(p);
    else expect(msg).toMatch(p);
  }
}

describe("GGUF round trip", () => {
  test("writer output reads back with typed metadata and tensor index", () => {
    const p = join(dir, "ok.gguf");
    sample().write(p);
    const f = GgufFile.open(p);
    expect(f.str("general.architecture")).toBe("test");
    expect(f.u32("test.count")).toBe(7);
    expect(f.f32("test.eps")).toBeCloseTo(1e-6, 12);
    expect(f.bool("test.flag")).toBe(true);
    expect(f.raw("test.u64")).toBe(2 ** 40);
    expect(f.raw("test.i8")).toBe(-5);
    expect(f.array<string[]>("test.strings", GgufValueType.STRING)).toEqual(["a", "ü", "日本"]);
    expect(Array.from(f.array<Int32Array>("test.ints", GgufValueType.I32)!)).toEqual([1, -2, 3]);
    const a = f.requireTensor("a.weight", [4, 2]);
    expect(a.nbytes).toBe(32);
    expect(a.fileOffset % 32).toBe(0);
    const bytes = readFileSync(p).subarray(a.fileOffset, a.fileOffset + 32);
    expect(Array.from(new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + 32)))).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(f.requireTensor("b.weight").nbytes).toBe(102);
  });

  test("strict key types name the key and both types", () => {
    const p = join(dir, "ok2.gguf");
    sample().write(p);
    const f = GgufFile.open(p);
    expect(() => f.u32("test.eps")).toThrow(/key 'test.eps' has type f32, expected u32/);
    expect(() => f.f32("test.count")).toThrow(/key 'test.count' has type u32, expected f32/);
    expect(() => f.str("missing.key")).toThrow(/required key 'missing.key' is missing/);
    expect(() => f.array("test.ints", GgufValueType.F32)).toThrow(/array of i32, expected f32/);
    expect(() => f.requireTensor("a.weight", [2, 4])).toThrow(/has shape \[4, 2\], expected \[2, 4\]/);
  });

  test("the fixture models parse", () => {
    const f = GgufFile.open(join(FIXTURES, "tiny-qwen3moe", "tiny.gguf"));
    expect(f.str("general.architecture")).toBe("qwen3moe");
    expect(f.u32("qwen3moe.block_count")).toBe(3);
    expect(f.tensors.size).toBe(3 + 3 * 12); // token_embd, output_norm, output + 12 a layer
    const d = GgufFile.open(join(FIXTURES, "demo-model", "bloomery-demo-q4_k_m.gguf"));
    expect(d.requireTensor("blk.0.ffn_down_exps.weight").ne).toEqual([384, 256, 8]);
  });

  test("TypeScript's block sizes agree with the native library", () => {
    for (const [id, info] of Object.entries(TYPE_INFO)) {
      const out = new BigInt64Array(2);
      const s = Number(cpu().bl_type_size(Number(id), ptr(out), ptr(out, 8)));
      if (s !== 0) continue; // types the native library does not implement
      expect([info.name, Number(out[0]), Number(out[1])]).toEqual([info.name, info.blockElems, info.blockBytes]);
    }
  });
});

describe("GGUF split sets", () => {
  test("a three-part set reads as one model; a missing or misnumbered part is refused", () => {
    const names = ["t.a", "t.b", "t.c"];
    for (let i = 0; i < 3; i++) {
      const w = new GgufWriter();
      if (i === 0) w.str("general.architecture", "test");
      w.set("split.no", GgufValueType.U16, i);
      w.set("split.count", GgufValueType.U16, 3);
      w.set("split.tensors.count", GgufValueType.I32, 3);
      w.addTensor(names[i], GgmlType.F32, [8], new Uint8Array(32));
      w.write(join(dir, `m-0000${i + 1}-of-00003.gguf`));
    }
    const f = GgufFile.open(join(dir, "m-00001-of-00003.gguf"));
    expect(f.paths.length).toBe(3);
    expect([...f.tensors.keys()].sort()).toEqual(names);
    expect(f.tensor("t.c")!.file).toContain("m-00003-of-00003.gguf");
    // wrong split.no
    const w = new GgufWriter();
    w.set("split.no", GgufValueType.U16, 0);
    w.set("split.count", GgufValueType.U16, 2);
    w.addTensor("x", GgmlType.F32, [8], new Uint8Array(32));
    w.write(join(dir, "bad-00001-of-00002.gguf"));
    w.write(join(dir, "bad-00002-of-00002.gguf"));
    expectGgufError(join(dir, "bad-00002-of-00002.gguf"), "'split.no' is 0, expected 1");
    expectGgufError(join(dir, "gone-00001-of-00002.gguf"), "no such file");
    new GgufWriter().set("split.no", GgufValueType.U16, 0).set("split.count", GgufValueType.U16, 2).write(join(dir, "half-00001-of-00002.gguf"));
    expect(() => GgufFile.open(join(dir, "half-00001-of-00002.gguf"))).toThrow(/half-00002-of-00002.gguf: missing shard 2 of 2/);
  });
});

describe("malformed GGUF files give clear errors", () => {
  const good = () => sample().encodeHeader();
  // offsets in the encoded header: magic 0, version 4, n_tensors 8, n_kv 16, first key at 24
  test("empty, short, bad magic, bad version", () => {
    expectGgufError(writeBytes("empty.gguf", new Uint8Array(0)), "smaller than a GGUF header");
    expectGgufError(writeBytes("short.gguf", good().slice(0, 10)), "smaller than a GGUF header");
    const b = good(); b[0] = 0x47; b[1] = 0x47; b[2] = 0x4d; b[3] = 0x4c;
    expectGgufError(writeBytes("magic.gguf", b), "bad magic", "not a GGUF file");
    const v = good(); new DataView(v.buffer).setUint32(4, 9, true);
    expectGgufError(writeBytes("version.gguf", v), "unsupported GGUF version 9");
  });

  test("truncated anywhere in the header names what was being read", () => {
    const full = good();
    for (const cut of [30, 60, 120, 200, full.length - 40]) {
      expectGgufError(writeBytes(`trunc${cut}.gguf`, full.slice(0, cut)), /truncated|past the end|runs past/);
    }
  });

  test("absurd counts and a 30 GB string length", () => {
    const b = good();
    new DataView(b.buffer).setBigUint64(8, 1n << 40n, true);
    expectGgufError(writeBytes("ntensors.gguf", b), "tensor count is 1099511627776");
    const k = good();
    new DataView(k.buffer).setBigUint64(16, 1n << 50n, true);
    expectGgufError(writeBytes("nkv.gguf", k), "metadata count");
    const s = good();
    new DataView(s.buffer).setBigUint64(24, 30n * 1024n ** 3n, true); // first key's length
    expectGgufError(writeBytes("strlen.gguf", s), "metadata key #0 length is 32212254720");
  });

  test("unknown value type, nested array, bad bool, duplicate key", () => {
    const keyLen = Buffer.byteLength("general.architecture");
    const typeOff = 24 + 8 + keyLen;
    const t = good(); new DataView(t.buffer).setInt32(typeOff, 77, true);
    expectGgufError(writeBytes("vtype.gguf", t), "key 'general.architecture': unknown value type 77");
    const w = new GgufWriter();
    w.setArray("x.nested", GgufValueType.U8, [1]);
    const n = w.encodeHeader();
    new DataView(n.buffer).setInt32(24 + 8 + "x.nested".length + 4, GgufValueType.ARRAY, true);
    expectGgufError(writeBytes("nested.gguf", n), "nested arrays");
    const bw = new GgufWriter().bool("x.flag", true).encodeHeader();
    bw[24 + 8 + "x.flag".length + 4] = 7;
    expectGgufError(writeBytes("bool.gguf", bw), "bool value is 7");
    const dup = new GgufWriter().u32("x.a", 1).u32("x.b", 2).encodeHeader();
    dup[24 + 8 + 3 + 4 + 4 + 8 + 2] = "a".charCodeAt(0); // rename x.b -> x.a
    expectGgufError(writeBytes("dup.gguf", dup), "duplicate metadata key 'x.a'");
  });

  function tensorFile(name: string, mutate: (dv: DataView, tensorInfoAt: number) => void, data = 96): string {
    const w = new GgufWriter();
    w.addTensor("t.weight", GgmlType.F32, [4, 2], new Uint8Array(32));
    const h = w.encodeHeader();
    const at = 24; // first tensor info (no metadata)
    mutate(new DataView(h.buffer), at);
    const b = new Uint8Array(h.length + data);
    b.set(h);
    return writeBytes(name, b);
  }
  const nameBytes = 8 + "t.weight".length;

  test("tensor dims, type, offsets, sizes", () => {
    expectGgufError(tensorFile("ndims.gguf", (dv, a) => dv.setUint32(a + nameBytes, 9, true)), "n_dims 9 is outside 1..4");
    expectGgufError(tensorFile("negdim.gguf", (dv, a) => dv.setBigInt64(a + nameBytes + 4, -3n, true)), "ne[0] = -3 is out of range");
    expectGgufError(tensorFile("ttype.gguf", (dv, a) => dv.setInt32(a + nameBytes + 4 + 16, 99, true)), "tensor 't.weight': unknown ggml type 99");
    expectGgufError(tensorFile("qrow.gguf", (dv, a) => dv.setInt32(a + nameBytes + 4 + 16, GgmlType.Q4_K, true)), "row length 4 is not a multiple of Q4_K's block of 256");
    expectGgufError(tensorFile("misalign.gguf", (dv, a) => dv.setBigUint64(a + nameBytes + 4 + 16 + 4, 8n, true)), "offset 8 is not aligned to 32");
    expectGgufError(tensorFile("past.gguf", (dv, a) => dv.setBigUint64(a + nameBytes + 4 + 16 + 4, 96n, true)), "runs past the end of the file");
    expectGgufError(tensorFile("far.gguf", (dv, a) => dv.setBigUint64(a + nameBytes + 4 + 16 + 4, 1n << 62n, true)), "past the end of the file");
    expectGgufError(tensorFile("huge.gguf", (dv, a) => dv.setBigInt64(a + nameBytes + 4 + 8, 1n << 40n, true)), "runs past the end");
    expectGgufError(tensorFile("short-data.gguf", () => {}, 16), "runs past the end of the file");
  });

  test("overlapping tensors and bad alignment key", () => {
    const w = new GgufWriter();
    w.addTensor("a", GgmlType.F32, [16], new Uint8Array(64));
    w.addTensor("b", GgmlType.F32, [16], new Uint8Array(64));
    const h = w.encodeHeader();
    // set b's offset to 32 (overlaps a's 64 bytes)
    const bInfo = 24 + (8 + 1 + 4 + 8 + 4 + 8);
    new DataView(h.buffer).setBigUint64(bInfo + 8 + 1 + 4 + 8 + 4, 32n, true);
    const b = new Uint8Array(h.length + 128);
    b.set(h);
    expectGgufError(writeBytes("overlap.gguf", b), "tensor 'a' overlaps tensor 'b'");
    const al = new GgufWriter().u32("general.alignment", 24);
    al.write(join(dir, "align.gguf"));
    expectGgufError(join(dir, "align.gguf"), "'general.alignment' is 24, not a power of two");
    const at = new GgufWriter().f32("general.alignment", 32);
    at.write(join(dir, "align2.gguf"));
    expectGgufError(join(dir, "align2.gguf"), "'general.alignment' has type f32, expected u32");
  });

  test("random corruption never crashes: every byte flip gives a value or a GgufError", () => {
    const base = readFileSync(join(FIXTURES, "tiny-qwen3moe", "tiny.gguf")).subarray(0, 8192);
    let rng = 12345;
    const rand = () => ((rng = (rng * 1103515245 + 12345) >>> 0) / 2 ** 32);
    for (let i = 0; i < 300; i++) {
      const b = new Uint8Array(base);
      for (let k = 0; k < 4; k++) b[Math.floor(rand() * b.length)] = Math.floor(rand() * 256);
      const p = writeBytes(`fuzz.gguf`, b);
      try {
        readGgufHeader(p);
      } catch (e) {
        expect(e).toBeInstanceOf(GgufError);
      }
    }
  });
});
