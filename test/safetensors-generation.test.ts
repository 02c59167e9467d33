// generation_config.json gives a folder's default sampling: written as the general.sampling.* metadata
// llama.cpp's converter writes from it, and taken by the server for every option no flag sets (as
// llama-server takes a GGUF's), a request's own fields winning over both; checked through /props and a
// sampled completion of the real executable.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KvMap } from "../src/safetensors/config.ts";
import { generationKv } from "../src/safetensors/generation.ts";
import { openHfFolder } from "../src/safetensors/model.ts";
import { modelSamplingDefaults } from "../src/sampling/model-defaults.ts";
import { ensureBuilt, post, startServer } from "./server-helpers.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";

const HF = join(FIXTURES, "families", "gpt_oss", "hf");
const dir = mkdtempSync(join(tmpdir(), "bloomery-st-gen-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
type Props = { default_generation_settings: { params: Record<string, number> } };
const GEN = { do_sample: true, temperature: 0.6, top_k: 20, top_p: 0.9, repetition_penalty: 1.05, transformers_version: "5.17.0" };

describe("generation_config.json -> general.sampling.*", () => {
  test("the converter's keys and types (top_k an i32, the rest f32; repetition_penalty as penalty_repeat; others ignored)", () => {
    const kv = new KvMap();
    generationKv({ ...GEN, min_p: "x", penalty_last_n: 1.5 }, kv);
    expect([...kv.kv.keys()].sort()).toEqual(["general.sampling.penalty_repeat", "general.sampling.temp", "general.sampling.top_k", "general.sampling.top_p"]);
    expect(kv.kv.get("general.sampling.top_k")).toEqual({ type: 5, value: 20 });
    expect(kv.kv.get("general.sampling.temp")).toEqual({ type: 6, value: Math.fround(0.6) });
    expect(kv.kv.get("general.sampling.penalty_repeat")!.value).toBe(Math.fround(1.05));
  });

  test("the options no flag set take the model's values", () => {
    const raw = (k: string) => ({ "general.sampling.temp": Math.fround(0.6), "general.sampling.top_k": 20, "general.sampling.top_p": "x" } as Record<string, unknown>)[k];
    const a = modelSamplingDefaults(raw, new Set());
    expect(a.defaults).toEqual({ temperature: Math.fround(0.6), topK: 20 });
    expect(a.line).toBe("sampling defaults from the model: top_k 20, temp 0.6 (a flag or a request field given wins)");
    expect(modelSamplingDefaults(raw, new Set(["topK"])).defaults).toEqual({ temperature: Math.fround(0.6) });
    expect(modelSamplingDefaults(() => undefined, new Set()).line).toBeUndefined();
  });

  test.skipIf(!hasFixtures)("a folder's metadata carries them", () => {
    const d = join(dir, "meta");
    mkdirSync(d);
    for (const f of ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(HF, f), join(d, f));
    writeFileSync(join(d, "generation_config.json"), JSON.stringify(GEN));
    const g = openHfFolder(d, { copies: false });
    expect(g.raw("general.sampling.top_k")).toBe(20);
    expect(g.raw("general.sampling.temp")).toBe(Math.fround(0.6));
    // the fixture's own generation_config.json states no sampling: no keys
    expect(openHfFolder(HF, { copies: false }).has("general.sampling.temp")).toBe(false);
  });
});

describe.skipIf(!hasFixtures)("bloomery-serve -m <folder>: generation_config.json's sampling as the defaults", () => {
  beforeAll(() => ensureBuilt(), 600000);
  let d = "";
  beforeAll(() => {
    d = join(dir, "serve");
    mkdirSync(d);
    for (const f of ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(HF, f), join(d, f));
    writeFileSync(join(d, "generation_config.json"), JSON.stringify(GEN));
  });

  test("/props shows them, a flag given wins over them, a request field over both", async () => {
    const a = await startServer(["-m", d, "-np", "1", "-c", "256"]);
    const b = await startServer(["-m", d, "-np", "1", "-c", "256", "--top-k", "5"]);
    try {
      const pa = ((await fetch(`${a.url}/props`).then((r) => r.json())) as Props).default_generation_settings.params;
      expect(pa.temperature).toBeCloseTo(0.6, 6);
      expect(pa.top_k).toBe(20);
      expect(pa.top_p).toBeCloseTo(0.9, 6);
      expect(pa.repeat_penalty).toBeCloseTo(1.05, 6);
      expect(pa.min_p).toBeCloseTo(0.05, 6); // not stated: the flag's default
      expect(a.log()).toContain("sampling defaults from the model: top_k 20, top_p 0.9, temp 0.6, penalty_repeat 1.05");
      const pb = ((await fetch(`${b.url}/props`).then((r) => r.json())) as Props).default_generation_settings.params;
      expect(pb.top_k).toBe(5);
      expect(pb.temperature).toBeCloseTo(0.6, 6);
      // a request's own field: the completion reports the settings it ran with
      const r = await post(`${a.url}/completion`, { prompt: "Hello", n_predict: 2, top_k: 3, seed: 1 });
      expect(r.status).toBe(200);
      expect(r.json.generation_settings.top_k).toBe(3);
      expect(r.json.generation_settings.temperature).toBeCloseTo(0.6, 6);
    } finally {
      await a.stop();
      await b.stop();
    }
  }, 180000);
});
