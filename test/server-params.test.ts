// Request fields -> generation settings, as llama-server reads them: defaults from the flags,
// aliases, soft limits clamped, hard limits refused naming the field, logit_bias forms, prompts.
import { describe, expect, test } from "bun:test";
import { defaultServerOptions, parseArgs } from "../src/cli/flags.ts";
import { Tokenizer, vocabFromMetadata } from "../src/tokenizer/index.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { ApiError } from "../src/server/errors.ts";
import { readGenSettings, type ParamContext } from "../src/server/params.ts";
import { readPrompts } from "../src/server/prompt.ts";
import { DEMO_MODEL } from "./server-helpers.ts";

const gguf = GgufFile.open(DEMO_MODEL);
const tok = Tokenizer.fromVocab(vocabFromMetadata((k) => gguf.raw(k)));

function ctx(opts = defaultServerOptions()): ParamContext {
  return { opts, nVocab: tok.nVocab, nSlots: 2, encode: (t) => tok.encode(t, { addSpecial: false, parseSpecial: false }) };
}

function fails(body: Record<string, unknown>, field: string): void {
  let err: unknown;
  try {
    readGenSettings(body, ctx());
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(ApiError);
  expect((err as ApiError).status).toBe(400);
  expect((err as ApiError).message).toContain(field);
}

describe("generation settings", () => {
  test("defaults are llama's, or the flags'", () => {
    const s = readGenSettings({}, ctx());
    expect(s.params).toMatchObject({ temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, repeatLastN: 64, seed: -1 });
    expect(s.params.samplers).toEqual(["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]);
    expect(s.nPredict).toBe(-1);
    expect(s.nCmpl).toBe(1);
    const parsed = parseArgs(["-m", "x.gguf", "--temp", "0.2", "--top-k", "7", "-n", "33"], {});
    if (parsed.action !== "serve") throw new Error("expected serve");
    const f = readGenSettings({}, ctx(parsed.options));
    expect(f.params.temperature).toBe(0.2);
    expect(f.params.topK).toBe(7);
    expect(f.nPredict).toBe(33);
  });

  test("aliases: n_predict before max_completion_tokens before max_tokens; n_probs before logprobs; n", () => {
    expect(readGenSettings({ max_tokens: 5 }, ctx()).nPredict).toBe(5);
    expect(readGenSettings({ max_tokens: 5, max_completion_tokens: 6 }, ctx()).nPredict).toBe(6);
    expect(readGenSettings({ max_tokens: 5, n_predict: 7 }, ctx()).nPredict).toBe(7);
    expect(readGenSettings({ logprobs: 3 }, ctx()).nProbs).toBe(3);
    expect(readGenSettings({ n: 2 }, ctx()).nCmpl).toBe(2);
    expect(readGenSettings({ max_tokens: null }, ctx()).nPredict).toBe(-1);
  });

  test("soft limits clamp, hard limits refuse naming the field", () => {
    const s = readGenSettings({ top_p: 3, min_p: -1, temperature: -2, top_k: -5, xtc_probability: 9 }, ctx());
    expect(s.params).toMatchObject({ topP: 1, minP: 0, temperature: 0, topK: 0, xtcProbability: 1 });
    fails({ n_predict: -2 }, "n_predict");
    fails({ n: 3 }, "n");
    fails({ repeat_last_n: -1 }, "repeat_last_n");
    fails({ id_slot: 2 }, "id_slot");
    fails({ seed: -7 }, "seed");
    fails({ repeat_penalty: 0 }, "repeat_penalty");
    fails({ dry_sequence_breakers: [] }, "dry_sequence_breakers");
    fails({ stop: [1] }, "stop[0]");
    fails({ samplers: 5 }, "samplers");
    expect(readGenSettings({ dry_base: 0.5 }, ctx()).params.dryBase).toBe(1.75);
  });

  test("logit_bias in llama's array form and OpenAI's map form; stop strings; samplers by letters", () => {
    const a = readGenSettings({ logit_bias: [[15, 2.5], [16, false], [99999, 1], ["def", -1]] }, ctx());
    const ids = tok.encode("def", { addSpecial: false });
    expect(a.params.logitBias).toEqual([{ id: 15, bias: 2.5 }, { id: 16, bias: -Infinity }, ...ids.map((id) => ({ id, bias: -1 }))]);
    const b = readGenSettings({ logit_bias: { "15": 1, "16": -100 } }, ctx());
    expect(b.params.logitBias).toEqual([{ id: 15, bias: 1 }, { id: 16, bias: -100 }]);
    expect(readGenSettings({ stop: "x" }, ctx()).stop).toEqual(["x"]);
    expect(readGenSettings({ stop: ["a", "", "b"] }, ctx()).stop).toEqual(["a", "b"]);
    expect(readGenSettings({ samplers: "kt" }, ctx()).params.samplers).toEqual(["top_k", "temperature"]);
  });
});

describe("prompts", () => {
  test("a string, ids, mixed, a list of prompts, {prompt_string}", () => {
    const ids = tok.encode("def main", { addSpecial: true, parseSpecial: true });
    expect(readPrompts(tok, "def main")).toEqual([ids]);
    expect(readPrompts(tok, [5, 6, 7])).toEqual([[5, 6, 7]]);
    expect(readPrompts(tok, ["def main", 7])).toEqual([[...ids, 7]]);
    expect(readPrompts(tok, ["def main", [1, 2]])).toEqual([ids, [1, 2]]);
    expect(readPrompts(tok, [{ prompt_string: "def main" }])).toEqual([ids]);
    expect(() => readPrompts(tok, [1, 99999])).toThrow(ApiError);
    expect(() => readPrompts(tok, [])).toThrow("must not be empty");
    expect(() => readPrompts(tok, undefined)).toThrow("required");
    expect(() => readPrompts(tok, [{ x: 1 }])).toThrow("prompt");
  });
});
