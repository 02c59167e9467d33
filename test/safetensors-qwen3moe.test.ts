// qwen3moe from a Hugging Face folder: the tiny qwen3moe GGUF written out as transformers lays out a
// Qwen3MoeForCausalLM checkpoint (per-expert tensors, config.json, tokenizer.json with the Qwen2 split
// regex) is read back to the same metadata and tensor values, and gives the GGUF's logits bit for bit.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { openHfFolder } from "../src/safetensors/model.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";
import { maxAbsDiff } from "./model-fixtures.ts";
import { exportFolder } from "./qwen3moe-folder.ts";

const TINY = join(FIXTURES, "tiny-qwen3moe", "tiny.gguf");
const dir = mkdtempSync(join(tmpdir(), "bloomery-st-qwen-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!hasFixtures)("qwen3moe: a transformers-layout folder of the tiny model", () => {
  const out = join(dir, "qwen3moe");
  const models: Model[] = [];
  afterAll(() => models.forEach((m) => m.close()));

  test("the folder reads back to the GGUF's metadata, tokenizer and tensor values", () => {
    const g = GgufFile.open(TINY);
    exportFolder(g, out);
    const h = openHfFolder(out);
    for (const [key, v] of g.kv) {
      if (key.startsWith("general.")) continue;
      const mine = h.kv.get(key);
      expect(mine, key).toBeDefined();
      const list = (x: unknown) => (typeof x === "object" ? Array.from(x as ArrayLike<unknown>) : [x]);
      expect(list(mine!.value), key).toEqual(list(v.value));
    }
    expect(h.tensors.size).toBe(g.tensors.size);
    for (const t of g.tensors.values()) {
      const m = h.tensor(t.name)!;
      expect(m.ne, t.name).toEqual(t.ne);
      expect(m.type, t.name).toBe(t.type);
      const a = readFileSync(m.file).subarray(m.fileOffset, m.fileOffset + m.nbytes), b = readFileSync(t.file).subarray(t.fileOffset, t.fileOffset + t.nbytes);
      expect(Buffer.compare(a, b), t.name).toBe(0);
    }
  });

  for (const exact of [true, false]) {
    test(`${exact ? "exact" : "ggml"} path: the folder's logits equal the GGUF's bit for bit`, () => {
      const a = Model.load(out, { nCtx: 128, nThreads: 2, exact });
      models.push(a);
      const b = Model.load(TINY, { nCtx: 128, nThreads: 2, exact });
      models.push(b);
      const prompt = a.tokenizer.encode("Hello world, the quick brown fox");
      expect(prompt).toEqual(b.tokenizer.encode("Hello world, the quick brown fox"));
      expect(maxAbsDiff(a.evalSequence(prompt, 0), b.evalSequence(prompt, 0))).toBe(0);
    });
  }
});
