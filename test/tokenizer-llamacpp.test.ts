// Tokenizer against llama.cpp's own tokenizer test vocabularies (models/ggml-vocab-*.gguf with
// .inp/.out made by Hugging Face tokenizers), read from ../llama/llama.cpp when it is there.
import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./paths.ts";
import { readGgufHeader } from "../src/gguf/index.ts";
import { StreamDecoder, Tokenizer, vocabFromMetadata } from "../src/tokenizer/index.ts";

const MODELS = join(ROOT, "..", "llama", "llama.cpp", "models");
const have = existsSync(MODELS);
if (!have) console.log(`skipping llama.cpp vocabulary tests: ${MODELS} is not there`);

// name -> what it covers
const VOCABS: [string, string][] = [
  ["qwen2", "gpt2 / qwen2"],
  ["qwen35", "gpt2 / qwen35 (\\p{M})"],
  ["llama-bpe", "gpt2 / llama3 (ignore_merges, digits by three)"],
  ["gpt-2", "gpt2 / gpt-2"],
  ["mpt", "gpt2 / mpt"],
  ["llama-spm", "llama (SPM, byte fallback)"],
  ["phi-3", "llama (SPM)"],
];

describe.skipIf(!have)("llama.cpp test vocabularies", () => {
  for (const [name, what] of VOCABS) {
    test(`${name}: ${what}`, () => {
      const path = join(MODELS, `ggml-vocab-${name}.gguf`);
      const h = readGgufHeader(path);
      const tok = Tokenizer.fromVocab(vocabFromMetadata((k) => h.kv.get(k)?.value));
      const inputs = readFileSync(path + ".inp", "utf8").split("\n__ggml_vocab_test__\n");
      const outputs = readFileSync(path + ".out", "utf8").split("\n");
      let n = 0;
      for (let i = 0; i < inputs.length; i++) {
        const line = outputs[i].trim();
        const want = line === "" ? [] : line.split(/\s+/).map(Number);
        const ids = tok.encode(inputs[i]); // llama.cpp's test: add_special and parse_special off
        expect({ text: inputs[i], ids }).toEqual({ text: inputs[i], ids: want });
        expect(tok.decode(ids)).toBe(inputs[i]);
        // streamed text is the tokens' bytes as they are (an SPM piece keeps its leading space)
        const sd = new StreamDecoder(tok);
        const raw = new TextDecoder().decode(Buffer.concat(ids.map((id) => tok.tokenBytes(id))));
        expect(ids.map((id) => sd.push(id)).join("") + sd.flush()).toBe(raw);
        n++;
      }
      // speed: ~400 KB of the test texts and Python source, cold cache
      let big = readFileSync(join(ROOT, "..", "shared", "fixtures", "demo-model", "heldout.txt"), "utf8");
      while (big.length < 400_000) big += inputs.join("\n");
      const t0 = performance.now();
      const ids = tok.encode(big);
      const ms = performance.now() - t0;
      console.log(`${name}: ${n} texts exact; ${big.length} chars -> ${ids.length} tokens in ${ms.toFixed(0)} ms`);
      expect(ms).toBeLessThan(1500);
      expect(tok.decode(ids)).toBe(big);
    });
  }
});
