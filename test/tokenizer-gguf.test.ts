// Tokenizer built from real GGUF metadata (the fixtures' model files, read by src/gguf).
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { FIXTURES } from "./paths.ts";
import { readGgufHeader } from "../src/gguf/index.ts";
import { Tokenizer, vocabFromMetadata } from "../src/tokenizer/index.ts";

function fromGguf(path: string): Tokenizer {
  const h = readGgufHeader(path);
  return Tokenizer.fromVocab(vocabFromMetadata((k) => h.kv.get(k)?.value));
}

describe("tokenizer from GGUF files", () => {
  test("demo model: prompts give transformers' ids, ChatML specials, eos", async () => {
    const tok = fromGguf(join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf"));
    const ref = (await Bun.file(join(FIXTURES, "demo-model", "demo-ref.json")).json()) as { refs: { text: string; prompt: number[] }[] };
    for (const r of ref.refs) expect(tok.encode(r.text)).toEqual(r.prompt);
    expect(tok.nVocab).toBe(8000);
    expect(tok.eos).toBe(0);
    expect(tok.addBos).toBe(false);
    expect(tok.encode("hi", { addSpecial: true })).toEqual(tok.encode("hi"));
    const chat = tok.encode("<|im_start|>user\nhi<|im_end|>\n", { parseSpecial: true });
    expect(chat[0]).toBe(tok.tokenId("<|im_start|>")!);
    expect(tok.isEog(tok.tokenId("<|im_end|>")!)).toBe(true);
    expect(tok.isEog(tok.tokenId("<|im_start|>")!)).toBe(false);
  });

  test("tiny model: 512-token vocabulary, specials at 509-511", () => {
    const tok = fromGguf(join(FIXTURES, "tiny-qwen3moe", "tiny.gguf"));
    expect(tok.nVocab).toBe(512);
    expect(tok.eos).toBe(511);
    expect(tok.bos).toBe(509);
    expect(tok.tokenText(511)).toBe("<|im_end|>");
    expect(tok.isEog(511) && tok.isEog(509)).toBe(true); // <|endoftext|> is end of generation too
    const text = "<|im_start|>assistant\nhello world<|im_end|>";
    const ids = tok.encode(text, { parseSpecial: true });
    expect(ids[0]).toBe(510);
    expect(ids[ids.length - 1]).toBe(511);
    expect(tok.decode(ids)).toBe(text);
    expect(tok.decode(ids, { skipSpecial: true })).toBe("assistant\nhello world");
  });
});
