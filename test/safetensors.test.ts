// The safetensors reader and checkpoint folder: the fixtures' real headers parse; random corruptions
// of a real header (byte flips, cuts, edited fields) never crash and always give a SafetensorsError
// that names the file and the defect; sharded folders are checked against their index.
import { afterAll, describe, expect, test } from "bun:test";
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, ftruncateSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FIXTURES, hasFixtures } from "./paths.ts";
import { readSafetensorsHeader, SafetensorsError, SafetensorsFolder, dtypeRefusal } from "../src/safetensors/index.ts";

const HF = join(FIXTURES, "families", "gpt_oss", "hf");
const REAL = join(HF, "model.safetensors");
const dir = mkdtempSync(join(tmpdir(), "bloomery-st-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A file of `header` (its own length prefix unless `len` is given) and a sparse data section of `data` bytes. */
function writeSt(path: string, header: Uint8Array, data: number, len?: bigint): string {
  const fd = openSync(path, "w");
  const pre = new Uint8Array(8);
  new DataView(pre.buffer).setBigUint64(0, len ?? BigInt(header.length), true);
  writeSync(fd, pre);
  writeSync(fd, header);
  ftruncateSync(fd, 8 + header.length + data);
  closeSync(fd);
  return path;
}

/** A small random generator (the fuzz cases are the same every run). */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const DEFECT = /truncated|header length|JSON header|header: |does not parse|not valid UTF-8|overlap|no such file/;

describe.skipIf(!hasFixtures)("safetensors header", () => {
  const raw = hasFixtures ? new Uint8Array(readFileSync(REAL)) : new Uint8Array(16);
  const n = Number(new DataView(raw.buffer).getBigUint64(0, true));
  const header = raw.slice(8, 8 + n);
  const dataSize = raw.length - 8 - n;

  test("the fixture's header parses: 71 F16 tensors, offsets absolute, __metadata__ kept", () => {
    const h = readSafetensorsHeader(REAL);
    expect(h.tensors.length).toBe(71);
    expect(h.metadata.get("format")).toBe("pt");
    const e = h.tensors.find((t) => t.name === "model.layers.0.mlp.experts.gate_up_proj")!;
    expect(e.dtype).toBe("F16");
    expect(e.shape).toEqual([8, 128, 128]);
    expect(e.nbytes).toBe(8 * 128 * 128 * 2);
    expect(e.fileOffset).toBe(8 + n + 395520);
    // the bytes at fileOffset are the tensor's: the first F16 of the embedding equals the file's
    const emb = h.tensors.find((t) => t.name === "model.embed_tokens.weight")!;
    expect(emb.fileOffset).toBe(8 + n + 131072);
  });

  const edits: [string, (j: Record<string, any>) => void, RegExp][] = [
    ["an unknown dtype", (j) => (j["model.norm.weight"].dtype = "F17"), /tensor 'model\.norm\.weight' has unknown dtype 'F17'/],
    ["a shape that disagrees with the bytes", (j) => (j["model.norm.weight"].shape = [129]), /'model\.norm\.weight' \(F16 \[129\]\) needs 258 bytes, data_offsets \[2653280, 2653536\] give 256/],
    ["a negative dimension", (j) => (j["model.norm.weight"].shape = [-128]), /'model\.norm\.weight' has shape .*non-negative integers/],
    ["a fractional offset", (j) => (j["model.norm.weight"].data_offsets = [2653280.5, 2653536]), /'model\.norm\.weight' data_offsets must be two non-negative integers/],
    ["offsets past the end", (j) => (j["model.norm.weight"].data_offsets = [2653280 + 1024, 2653536 + 1024]), /truncated: tensor 'model\.norm\.weight' data_offsets \[2654304, 2654560\] reach offset/],
    ["offsets ending before they begin", (j) => (j["model.norm.weight"].data_offsets = [2653536, 2653280]), /end before they begin/],
    ["two tensors over the same bytes", (j) => (j["model.norm.weight"].data_offsets = [262144, 262400]), /tensors 'model\.(layers\.0\.input_layernorm|norm)\.weight' and 'model\.(layers\.0\.input_layernorm|norm)\.weight' overlap at offset/],
    ["an unknown field", (j) => (j["model.norm.weight"].strides = [1]), /tensor 'model\.norm\.weight' has unknown field 'strides'/],
    ["a non-string __metadata__ value", (j) => (j.__metadata__.format = 3), /__metadata__ key 'format' is not a string/],
    ["a tensor that is not an object", (j) => (j["model.norm.weight"] = [1, 2]), /tensor 'model\.norm\.weight' is not an object/],
    ["a name with terminal escapes", (j) => (j["\u001b[31mred"] = 5), /tensor '\\x1b\[31mred' is not an object/],
  ];
  for (const [what, edit, msg] of edits) {
    test(`refused: ${what}`, () => {
      const j = JSON.parse(new TextDecoder().decode(header));
      edit(j);
      const p = writeSt(join(dir, "edit.safetensors"), new TextEncoder().encode(JSON.stringify(j)), dataSize);
      expect(() => readSafetensorsHeader(p)).toThrow(msg);
      try {
        readSafetensorsHeader(p);
      } catch (e) {
        expect(e).toBeInstanceOf(SafetensorsError);
        expect((e as Error).message.startsWith(`${p}: `)).toBe(true);
      }
    });
  }

  test("refused: the length prefix (0, over the limit, past the file) and a cut file", () => {
    const cases: [bigint | undefined, number, RegExp][] = [
      [0n, dataSize, /header length at offset 0 is 0/],
      [2n ** 63n, dataSize, /header length at offset 0 is 9223372036854775808 bytes, over the 100000000-byte limit/],
      [BigInt(n + dataSize + 1), dataSize, /truncated: header length at offset 0 says \d+ bytes, file has \d+ after it/],
      [undefined, dataSize - 1, /truncated: tensor 'model\.norm\.weight' data_offsets \[2653280, 2653536\] reach offset \d+, file has \d+ bytes/],
    ];
    for (const [len, data, msg] of cases) {
      const p = writeSt(join(dir, "len.safetensors"), header, data, len);
      expect(() => readSafetensorsHeader(p)).toThrow(msg);
    }
    const tiny = join(dir, "tiny.safetensors");
    writeFileSync(tiny, new Uint8Array(5));
    expect(() => readSafetensorsHeader(tiny)).toThrow(/truncated: the 8-byte header length at offset 0 needs 8 bytes, file has 5/);
    const gguf = join(FIXTURES, "families", "gpt_oss", "gpt_oss.gguf");
    expect(() => readSafetensorsHeader(gguf)).toThrow(/header length at offset 0 is \d+ bytes, over the 100000000-byte limit/);
  });

  test("fuzz: 400 random corruptions of the real header never crash and name the defect", () => {
    const r = rng(29);
    let refused = 0;
    for (let i = 0; i < 400; i++) {
      const h = header.slice();
      let data = dataSize;
      let len: bigint | undefined;
      const kind = i % 4;
      if (kind === 0) {
        // flip 1-8 random bytes anywhere in the JSON
        for (let k = 1 + Math.floor(r() * 8); k > 0; k--) h[Math.floor(r() * h.length)] ^= 1 + Math.floor(r() * 255);
      } else if (kind === 1) {
        // digits of the offsets and shapes changed
        const text = new TextDecoder().decode(h);
        const digits = [...text.matchAll(/\d/g)].map((m) => m.index!);
        for (let k = 1 + Math.floor(r() * 3); k > 0; k--) h[digits[Math.floor(r() * digits.length)]] = 48 + Math.floor(r() * 10);
      } else if (kind === 2) {
        // the header's length or the data cut
        len = BigInt(Math.max(0, n + Math.floor((r() - 0.5) * 64)));
        data = Math.floor(r() * dataSize);
      } else {
        // structural characters replaced
        const text = new TextDecoder().decode(h);
        const marks = [...text.matchAll(/[{}\[\]:,"]/g)].map((m) => m.index!);
        h[marks[Math.floor(r() * marks.length)]] = " {}[]:,\"x0".charCodeAt(Math.floor(r() * 10));
      }
      const p = writeSt(join(dir, `fuzz.safetensors`), h, data, len);
      try {
        readSafetensorsHeader(p);
      } catch (e) {
        refused++;
        if (!(e instanceof SafetensorsError)) throw new Error(`case ${i}: not a SafetensorsError: ${String(e)}`);
        expect(e.message.startsWith(`${p}: `)).toBe(true);
        if (!DEFECT.test(e.detail)) throw new Error(`case ${i}: the error names no defect: ${e.message}`);
        expect(e.message.length).toBeLessThan(2600);
      }
    }
    expect(refused).toBeGreaterThan(200);
  });

  test("dtypes other than F32/F16/BF16 are parsed, and refused by name when used", () => {
    expect(dtypeRefusal("BF16")).toBeUndefined();
    expect(dtypeRefusal("F8_E4M3")).toMatch(/^FP8 E4M3 weights are not implemented yet/);
    const j = JSON.parse(new TextDecoder().decode(header));
    j["model.norm.weight"] = { dtype: "F8_E4M3", shape: [128, 2], data_offsets: [2653280, 2653536] };
    const sub = join(dir, "fp8");
    mkdirSync(sub, { recursive: true });
    writeSt(join(sub, "model.safetensors"), new TextEncoder().encode(JSON.stringify(j)), dataSize);
    const f = SafetensorsFolder.open(sub);
    expect(f.tensors.get("model.norm.weight")!.dtype).toBe("F8_E4M3");
    expect(() => f.require("model.norm.weight")).toThrow(/tensor 'model\.norm\.weight' is F8_E4M3: FP8 E4M3 weights are not implemented yet/);
    expect(f.require("model.embed_tokens.weight", [512, 128]).dtype).toBe("F16");
    expect(() => f.require("model.embed_tokens.weight", [128, 512])).toThrow(/has shape \[512, 128\], expected \[128, 512\]/);
  });
});

describe.skipIf(!hasFixtures)("safetensors folder", () => {
  test("the fixture folder opens, with its side files", () => {
    const f = SafetensorsFolder.open(HF);
    expect(f.tensors.size).toBe(71);
    expect((f.json("config.json")!.architectures as string[])[0]).toBe("GptOssForCausalLM");
    expect(f.json("nothing.json")).toBeUndefined();
  });

  /** The fixture split in two shards with an index (the tensors' bytes copied as they are). */
  function sharded(name: string, edit?: (map: Record<string, string>) => void): string {
    const sub = join(dir, name);
    mkdirSync(sub, { recursive: true });
    const raw = new Uint8Array(readFileSync(REAL));
    const h = readSafetensorsHeader(REAL);
    const parts = [h.tensors.filter((_, i) => i % 2 === 0), h.tensors.filter((_, i) => i % 2 === 1)];
    const map: Record<string, string> = {};
    parts.forEach((ts, k) => {
      const file = `model-0000${k + 1}-of-00002.safetensors`;
      const j: Record<string, unknown> = {};
      let off = 0;
      for (const t of ts) {
        j[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.nbytes] };
        off += t.nbytes;
        map[t.name] = file;
      }
      const hb = new TextEncoder().encode(JSON.stringify(j));
      const out = new Uint8Array(8 + hb.length + off);
      new DataView(out.buffer).setBigUint64(0, BigInt(hb.length), true);
      out.set(hb, 8);
      let at = 8 + hb.length;
      for (const t of ts) {
        out.set(raw.subarray(t.fileOffset, t.fileOffset + t.nbytes), at);
        at += t.nbytes;
      }
      writeFileSync(join(sub, file), out);
    });
    edit?.(map);
    writeFileSync(join(sub, "model.safetensors.index.json"), JSON.stringify({ metadata: { total_size: 0 }, weight_map: map }));
    return sub;
  }

  test("a sharded folder opens through its index: every tensor's bytes equal the single file's", () => {
    const f = SafetensorsFolder.open(sharded("two"));
    expect(f.paths.length).toBe(2);
    expect(f.tensors.size).toBe(71);
    const one = SafetensorsFolder.open(HF);
    const raw = readFileSync(REAL);
    for (const t of f.tensors.values()) {
      const u = one.tensors.get(t.name)!;
      const a = readFileSync(t.file).subarray(t.fileOffset, t.fileOffset + t.nbytes);
      expect(Buffer.compare(a, raw.subarray(u.fileOffset, u.fileOffset + u.nbytes))).toBe(0);
    }
  });

  test("index defects are refused, naming the file and the tensor", () => {
    expect(() => SafetensorsFolder.open(sharded("wrong", (m) => (m["model.norm.weight"] = m["model.norm.weight"].includes("00001") ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors"))))
      .toThrow(/index\.json: weight_map puts 'model\.norm\.weight' in 'model-0000\d-of-00002\.safetensors' but it is in 'model-0000\d-of-00002\.safetensors'/);
    expect(() => SafetensorsFolder.open(sharded("missing", (m) => (m["model.norm.weight"] = "model-00003-of-00003.safetensors")))).toThrow(/model-00003-of-00003\.safetensors: missing shard named by/);
    expect(() => SafetensorsFolder.open(sharded("escape", (m) => (m["model.norm.weight"] = "../x.safetensors")))).toThrow(/names '\.\.\/x\.safetensors', not a \.safetensors file of this folder/);
    expect(() => SafetensorsFolder.open(sharded("absent", (m) => delete m["model.norm.weight"]))).toThrow(/tensor 'model\.norm\.weight' is not in model\.safetensors\.index\.json's weight_map/);
    const bad = join(dir, "badindex");
    mkdirSync(bad, { recursive: true });
    writeFileSync(join(bad, "model.safetensors.index.json"), "{ not json");
    expect(() => SafetensorsFolder.open(bad)).toThrow(/badindex\/model\.safetensors\.index\.json: the shard index does not parse as JSON/);
  });

  test("a folder with no safetensors, or two without an index, is refused", () => {
    const empty = join(dir, "empty");
    mkdirSync(empty, { recursive: true });
    expect(() => SafetensorsFolder.open(empty)).toThrow(/is a directory with no \.safetensors file and no model\.safetensors\.index\.json/);
    const two = sharded("noindex");
    rmSync(join(two, "model.safetensors.index.json"));
    expect(() => SafetensorsFolder.open(two)).toThrow(/holds 2 \.safetensors files .* but no model\.safetensors\.index\.json/);
  });
});
