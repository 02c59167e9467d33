// The known-model table (src/cli/known-models.ts): every size equals the GGUF synth writes for the
// shape and quant mix; names, aliases and :QUANT resolve case-insensitively; close names for typos;
// the expert and embedding byte counts and the geometry of a known shape agree with a real file.
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { synth, synthWriter } from "../src/cli/synth.ts";
import { SHAPES } from "../src/cli/synth-shapes.ts";
import { GgufFile } from "../src/gguf/index.ts";
import {
  closeKnownNames, DEMO_NAME, expertBytes, findKnownModel, knownModelByRepo, knownQuant, KNOWN_MODELS, tokenEmbdBytes,
  type KnownModel,
} from "../src/cli/known-models.ts";
import { decodeBytesPerToken, geometryFromGguf, geometryFromKnown } from "../src/cli/agent-sizes.ts";

setDefaultTimeout(120000); // the 235B writers build large headers on a 2-core machine

describe("known models", () => {
  test("the table holds the models the agent interface promises, each with a repository and quants", () => {
    const names = KNOWN_MODELS.map((m) => m.name);
    for (const n of ["Qwen3-30B-A3B-Instruct-2507", "Qwen3-30B-A3B", "Qwen3-Coder-30B-A3B-Instruct", "Qwen3-235B-A22B-Instruct-2507", DEMO_NAME]) expect(names).toContain(n);
    for (const m of KNOWN_MODELS) {
      if (m.name === DEMO_NAME) continue;
      expect(m.repo).toMatch(/^unsloth\/.+-GGUF$/);
      expect(m.shape && SHAPES[m.shape]).toBeTruthy();
      expect(m.quants.map((q) => q.name)).toEqual(["IQ4_XS", "Q4_K_M", "Q6_K", "Q8_0", "BF16"]);
      // smallest first
      expect([...m.quants].sort((a, b) => a.bytes - b.bytes)).toEqual(m.quants);
    }
    // names and aliases are unique across the table
    const all = KNOWN_MODELS.flatMap((m) => [m.name, ...m.aliases].map((n) => n.toLowerCase()));
    expect(new Set(all).size).toBe(all.length);
  });

  test("every quant size is the size synth writes for that shape and mix", () => {
    const seen = new Map<string, number>();
    for (const m of KNOWN_MODELS) {
      if (!m.shape) continue;
      for (const q of m.quants) {
        const key = `${m.shape}:${q.name}`;
        let bytes = seen.get(key);
        if (bytes === undefined) {
          bytes = synthWriter({ model: m.shape, quant: q.name, out: "" }).writer.fileBytes();
          seen.set(key, bytes);
        }
        expect(`${key} ${q.bytes}`).toBe(`${key} ${bytes}`);
      }
    }
    // llama-bench's size of Qwen3-30B-A3B Q4_K_M (17.28 GiB) is the tensor data of that file
    expect(knownQuant(findKnownModel("qwen3-30b-a3b-instruct")!.model, "q4_k_m")!.bytes).toBe(18556542400);
  });

  test("names, aliases and a :QUANT suffix resolve case-insensitively; repositories map back", () => {
    expect(findKnownModel("Qwen3-30B-A3B-Instruct-2507")?.model.repo).toBe("unsloth/Qwen3-30B-A3B-Instruct-2507-GGUF");
    expect(findKnownModel("QWEN3-CODER")?.model.name).toBe("Qwen3-Coder-30B-A3B-Instruct");
    expect(findKnownModel("qwen3-235b:q8_0")).toEqual({ model: findKnownModel("Qwen3-235B-A22B-Instruct-2507")!.model, quant: "q8_0" });
    expect(findKnownModel("demo")?.model.name).toBe(DEMO_NAME);
    expect(findKnownModel("llama-3-8b")).toBeUndefined();
    expect(findKnownModel("/models/x.gguf")).toBeUndefined();
    expect(knownModelByRepo("UNSLOTH/qwen3-30b-a3b-gguf")?.name).toBe("Qwen3-30B-A3B");
    expect(knownModelByRepo("acme/other")).toBeUndefined();
  });

  test("close names for a typo, a partial name, or a file name; none for something unrelated", () => {
    expect(closeKnownNames("qwen3-coder-30b-a3b-instrct")[0]).toBe("Qwen3-Coder-30B-A3B-Instruct");
    expect(closeKnownNames("Qwen3-235B")[0]).toBe("Qwen3-235B-A22B-Instruct-2507");
    expect(closeKnownNames("qwen3-30b-a3b-instruct-2507.gguf")[0]).toBe("Qwen3-30B-A3B-Instruct-2507");
    expect(closeKnownNames("mistral-large-123b")).toEqual([]);
    expect(closeKnownNames("")).toEqual([]);
  });
});

describe("sizes from a shape agree with a file of that shape", () => {
  test("expert and embedding bytes, hyper-parameters and decode bytes of a synth file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bloomery-known-"));
    for (const quant of ["Q4_K_M", "Q8_0"]) {
      const path = join(dir, `wide-${quant}.gguf`);
      const written = await synth({ model: "test-moe-wide", quant, out: path });
      const fromFile = geometryFromGguf(GgufFile.open(path));
      const shape = SHAPES["test-moe-wide"];
      expect(expertBytes(shape, quant)).toBe(fromFile.expertBytes);
      expect(tokenEmbdBytes(shape, quant)).toBe(fromFile.embdBytes);
      const model: KnownModel = {
        name: "wide", aliases: [], description: "", repo: "acme/wide-GGUF", shape: "test-moe-wide", nCtxTrain: shape.nCtxTrain,
        thinking: false, quants: [{ name: quant, bytes: written.bytes }],
      };
      const known = geometryFromKnown(model, model.quants[0])!;
      expect(known.hp).toEqual(fromFile.hp);
      expect(known.expertBytes).toBe(fromFile.expertBytes);
      // the file's bytes bound its tensor bytes from above, by the header only
      expect(known.weightBytes).toBeGreaterThan(fromFile.weightBytes);
      expect(known.weightBytes - fromFile.weightBytes).toBeLessThan(200_000);
      expect(known.cardWeightBytes).toBeGreaterThanOrEqual(fromFile.cardWeightBytes);
      // a token reads the non-expert weights, K of X experts and one embedding row
      const g = fromFile;
      expect(decodeBytesPerToken(g)).toBe(Math.round(g.weightBytes - g.expertBytes - g.embdBytes + (g.expertBytes * 4) / 16 + g.embdBytes / 2048));
    }
  });

  test("an unknown mix or the demo has no shape geometry", () => {
    const m = findKnownModel("qwen3-30b")!.model;
    expect(geometryFromKnown(m, { name: "Q5_K_S", bytes: 1 })).toBeUndefined();
    expect(geometryFromKnown(findKnownModel(DEMO_NAME)!.model, { name: "Q8_0", bytes: 1 })).toBeUndefined();
  });
});
