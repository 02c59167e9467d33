// scripts/gguf-folder.ts (the folder-vs-GGUF runs of issue 29 on the GPU machine): a synthetic gpt-oss GGUF as
// openai ships its folders (MXFP4 experts, BF16 elsewhere) written out as that folder gives the GGUF's
// logits bit for bit on the CPU, its tensors read as MXFP4 blocks and scales (the byte repack at load, not a
// dequantization); a file whose experts are not MXFP4, or whose other tensors are quantized, is refused by name.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { exportGptOssFolder } from "../scripts/gguf-folder.ts";
import { synth } from "../src/cli/synth.ts";
import { Model } from "../src/engine/model.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { readSafetensorsHeader } from "../src/safetensors/reader.ts";
import { maxAbsDiff } from "./model-fixtures.ts";

const dir = mkdtempSync(join(tmpdir(), "bloomery-gguf-folder-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("a gpt-oss GGUF written out as openai's folder", () => {
  test("test-gpt-oss:MXFP4_BF16: the folder's logits are the GGUF's bit for bit (prompt and decode steps), its experts MXFP4 blocks and scales", async () => {
    const file = (await synth({ model: "test-gpt-oss", quant: "MXFP4_BF16", out: join(dir, "oss.gguf"), seed: 3 })).path;
    const out = join(dir, "oss-hf");
    exportGptOssFolder(GgufFile.open(file), out);
    const h = readSafetensorsHeader(join(out, "model.safetensors"));
    const byName = new Map(h.tensors.map((t) => [t.name, t]));
    expect(byName.get("model.layers.0.mlp.experts.gate_up_proj_blocks")?.shape).toEqual([8, 640, 10, 16]);
    expect(byName.get("model.layers.0.mlp.experts.down_proj_scales")?.shape).toEqual([8, 320, 10]);
    expect(byName.get("model.layers.0.self_attn.q_proj.weight")?.dtype).toBe("BF16");
    const notes: string[] = [];
    const a = Model.load(out, { nCtx: 256, nThreads: 2, log: (l) => notes.push(l) }), b = Model.load(file, { nCtx: 256, nThreads: 2, log: () => {} });
    try {
      expect(a.hp).toEqual(b.hp);
      const V = a.hp.nVocab;
      const prompt = Array.from({ length: 40 }, (_, i) => (i * 7919 + 13) % V);
      expect(maxAbsDiff(a.evalSequence(prompt, 0), b.evalSequence(prompt, 0))).toBe(0);
      for (let s = 0; s < 3; s++) expect(maxAbsDiff(a.evalSequence([s + 5], prompt.length + s), b.evalSequence([s + 5], prompt.length + s))).toBe(0);
      // the experts were taken as stored: no dequantization note
      expect(notes.join("\n")).not.toMatch(/dequantiz/i);
    } finally {
      a.close();
      b.close();
    }
  });

  test("a file the folder cannot hold is refused by name: Q8_0 attention, experts not MXFP4", async () => {
    const q8 = (await synth({ model: "test-gpt-oss", quant: "MXFP4", out: join(dir, "q8.gguf"), seed: 3 })).path;
    expect(() => exportGptOssFolder(GgufFile.open(q8), join(dir, "q8-hf"))).toThrow(/attn_norm|type 8 has no folder form/);
    const f16 = (await synth({ model: "test-gpt-oss", quant: "F16", out: join(dir, "f16.gguf"), seed: 3 })).path;
    expect(() => exportGptOssFolder(GgufFile.open(f16), join(dir, "f16-hf"))).toThrow(/ffn_gate_exps\.weight: MXFP4 expected/);
  });
});
