// Request fields -> generation settings, as llama-server reads them: defaults from the flags,
// aliases, soft limits clamped, hard limits refused naming the field, logit_bias forms, prompts.
import { describe, expect, test } from "bun:test";
import { defaultServerOptions, parseArgs } from "../src/cli/flags.ts";
import { Tokenizer, vocabFromMetadata } from "../src/tokenizer/index.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { ApiError } from "../src/server/errors.ts";
import { readGenSettings, type ParamContext } from "../src/server/params.ts";
import { readPrompts } from "../src/server/prompt.ts";
import { ServerContext } from "../src/server/state.ts";
import { DEMO_MODEL } from "./server-helpers.ts";

const gguf = GgufFile.open(DEMO_MODEL);
const vocab = vocabFromMetadata((k) => gguf.raw(k));
const tok = Tokenizer.fromVocab(vocab);
const server = new ServerContext(defaultServerOptions(), [], () => {});
server.tokenizer = tok;
server.body.setTokenizer(tok, vocab);

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
  test("a string, ids, mixed, a list of prompts, {prompt_string}", async () => {
    const ids = tok.encode("def main", { addSpecial: true, parseSpecial: true });
    expect(await readPrompts(server, "def main")).toEqual([ids]);
    expect(await readPrompts(server, [5, 6, 7])).toEqual([[5, 6, 7]]);
    expect(await readPrompts(server, ["def main", 7])).toEqual([[...ids, 7]]);
    expect(await readPrompts(server, ["def main", [1, 2]])).toEqual([ids, [1, 2]]);
    expect(await readPrompts(server, [{ prompt_string: "def main" }])).toEqual([ids]);
    await expect(readPrompts(server, [1, 99999])).rejects.toThrow(ApiError);
    await expect(readPrompts(server, [])).rejects.toThrow("must not be empty");
    await expect(readPrompts(server, undefined)).rejects.toThrow("required");
    await expect(readPrompts(server, [{ x: 1 }])).rejects.toThrow("prompt");
  });

  test("a long text is tokenized in the body worker, to the same ids; one that cannot fit the context is refused before", async () => {
    const text = "def main(argv):\n    return [x * 2 for x in argv if x]\n".repeat(2000); // 110 KB: past the inline limit
    expect(await readPrompts(server, text)).toEqual([tok.encode(text, { addSpecial: true, parseSpecial: true })]);
    const huge = "x".repeat(64 * 4096 * server.maxTokenBytes);
    const t0 = performance.now();
    const err = await readPrompts(server, huge, { nCtx: 4096 }).catch((e: unknown) => e);
    expect(performance.now() - t0).toBeLessThan(200);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).type).toBe("exceed_context_size_error");
    expect((err as ApiError).message).toContain("exceeds the available context size (4096 tokens)");
  });
});
