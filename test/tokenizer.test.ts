// Tokenizer tests: Hugging Face oracle ids (fixtures/tokenizer, demo-model), split rules,
// BPE merge order, hand-derived SPM cases, special tokens, streaming, errors, speed.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { FIXTURES } from "./paths.ts";
import { StreamDecoder, Tokenizer, TokenizerError, vocabFromMetadata, type VocabData } from "../src/tokenizer/index.ts";
import { BYTE_TO_CP } from "../src/tokenizer/bytes.ts";
import { PreTokenizer, splitRuleFor } from "../src/tokenizer/pretokenize.ts";
import { completePrefix } from "../src/tokenizer/stream.ts";

interface Cases {
  tokens: string[];
  token_type: number[];
  merges: string[];
  special: Record<string, number>;
  cases: { text: string; ids: number[] }[];
}
const fx = (await Bun.file(join(FIXTURES, "tokenizer", "tok-cases.json")).json()) as Cases;
const fixtureVocab: VocabData = { model: "gpt2", pre: "qwen2", tokens: fx.tokens, tokenTypes: fx.token_type, merges: fx.merges };
const qwen = Tokenizer.fromVocab(fixtureVocab);

function expectErr(f: () => unknown, re: RegExp): void {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(TokenizerError);
  expect((err as Error).message).toMatch(re);
}

describe("byte-level BPE against Hugging Face (tok-cases.json)", () => {
  test("all 23 cases give HF's ids and decode back to the text", () => {
    expect(fx.cases.length).toBe(23);
    let matched = 0;
    for (const c of fx.cases) {
      const ids = qwen.encode(c.text, { parseSpecial: true });
      expect({ text: c.text, ids }).toEqual({ text: c.text, ids: c.ids });
      expect(qwen.decode(ids)).toBe(c.text);
      matched++;
    }
    console.log(`tok-cases: ${matched}/23 exact`);
  });

  test("control tokens are text unless parseSpecial", () => {
    const t = "<|im_start|>user\nhi<|im_end|>";
    const parsed = qwen.encode(t, { parseSpecial: true });
    expect(parsed[0]).toBe(1);
    expect(parsed[parsed.length - 1]).toBe(2);
    const plain = qwen.encode(t);
    expect(plain).not.toContain(1);
    expect(plain).not.toContain(2);
    expect(qwen.decode(plain)).toBe(t);
    expect(qwen.decode(parsed, { skipSpecial: true })).toBe("user\nhi");
  });

  test("token accessors and end of generation", () => {
    expect(qwen.nVocab).toBe(8000);
    expect(qwen.tokenText(2)).toBe("<|im_end|>");
    expect(qwen.tokenId("<|im_start|>")).toBe(1);
    expect(qwen.isControl(0) && qwen.isControl(1) && qwen.isControl(2)).toBe(true);
    expect(qwen.isControl(3)).toBe(false);
    // llama.cpp treats <|endoftext|> and <|im_end|> as end of generation, <|im_start|> not.
    expect(qwen.isEog(0)).toBe(true);
    expect(qwen.isEog(2)).toBe(true);
    expect(qwen.isEog(1)).toBe(false);
    expect(qwen.bos).toBeUndefined();
    const space = qwen.tokenId("\u0120")!; // GPT-2 alphabet's stand-in for " "
    expect([...qwen.tokenBytes(space)]).toEqual([0x20]);
    expect(new TextDecoder().decode(qwen.tokenBytes(2))).toBe("<|im_end|>");
  });
});

describe("demo model's prompts and held-out windows (transformers ids)", () => {
  const ref = JSON.parse(require("node:fs").readFileSync(join(FIXTURES, "demo-model", "demo-ref.json"), "utf8")) as {
    refs: { text: string; prompt: number[]; greedy: number[]; completion: string }[];
    heldout_windows: number[][];
  };

  test("prompts encode to transformers' ids; completions decode to its text", () => {
    for (const r of ref.refs) {
      expect(qwen.encode(r.text)).toEqual(r.prompt);
      expect(qwen.decode(r.greedy)).toBe(r.completion);
    }
  });

  test("40 held-out windows decode to heldout.txt and re-encode to the same ids", async () => {
    const text = await Bun.file(join(FIXTURES, "demo-model", "heldout.txt")).text();
    expect(ref.heldout_windows.map((w) => qwen.decode(w)).join("\n\n")).toBe(text);
    let n = 0;
    for (const w of ref.heldout_windows) {
      expect(qwen.encode(qwen.decode(w))).toEqual(w);
      n += w.length;
    }
    console.log(`held-out windows: ${ref.heldout_windows.length} windows, ${n} ids exact`);
  });
});

describe("speed", () => {
  test("a ~420 KB prompt (Python + JSON) encodes well under a second", async () => {
    const held = await Bun.file(join(FIXTURES, "demo-model", "heldout.txt")).text();
    const json = await Bun.file(join(FIXTURES, "tokenizer", "tokenizer.json")).text();
    let text = held + json.slice(0, 420_000 - held.length);
    for (const c of fx.cases) text += c.text;
    const tok = Tokenizer.fromVocab(fixtureVocab); // cold: empty word cache
    const t0 = performance.now();
    const ids = tok.encode(text);
    const ms = performance.now() - t0;
    console.log(`encode: ${text.length} chars -> ${ids.length} tokens in ${ms.toFixed(1)} ms (cold cache)`);
    expect(ids.length).toBeGreaterThan(100_000);
    expect(ms).toBeLessThan(1500);
    const t1 = performance.now();
    expect(tok.decode(ids)).toBe(text);
    console.log(`decode: ${ids.length} tokens in ${(performance.now() - t1).toFixed(1)} ms`);
  });
});

function split(pre: string, text: string): string[] {
  const out: string[] = [];
  new PreTokenizer(splitRuleFor(pre)).split(text, (p) => out.push(p));
  return out;
}

describe("split rules", () => {
  test("qwen2: whitespace lookahead, single digits, contractions, CRLF", () => {
    expect(split("qwen2", "Hello  world")).toEqual(["Hello", " ", " world"]);
    expect(split("qwen2", "x=12;")).toEqual(["x", "=", "1", "2", ";"]);
    expect(split("qwen2", "it's WE'LL")).toEqual(["it", "'s", " WE", "'LL"]);
    expect(split("qwen2", "a\r\n\r\nb  ")).toEqual(["a", "\r\n\r\n", "b", "  "]);
    expect(split("qwen2", "f(x):\n    return")).toEqual(["f", "(x", "):\n", "   ", " return"]);
  });

  test("\\s is Unicode White_Space (U+0085 yes, U+FEFF no), as in Rust and Python", () => {
    expect(split("qwen2", "x\u0085\u0085y")).toEqual(["x", "\u0085", "\u0085y"]);
    expect(split("qwen2", "x\uFEFF\uFEFFy")).toEqual(["x", "\uFEFF\uFEFF", "y"]);
  });

  test("qwen35 keeps combining marks with letters; qwen2 does not", () => {
    expect(split("qwen2", "e\u0301x")).toEqual(["e", "\u0301x"]);
    expect(split("qwen35", "e\u0301x")).toEqual(["e\u0301x"]);
    // marks are also excluded from qwen35's punctuation run
    expect(split("qwen2", " !\u0301\u0301")).toEqual([" !\u0301\u0301"]);
    expect(split("qwen35", " !\u0301\u0301")).toEqual([" !", "\u0301\u0301"]);
  });

  test("llama3 groups digits by three", () => {
    expect(split("llama3", "1234567 ab")).toEqual(["123", "456", "7", " ab"]);
    expect(split("qwen2", "123")).toEqual(["1", "2", "3"]);
  });

  test("gpt-2 and the default pipeline", () => {
    expect(split("gpt-2", "I'm  here123")).toEqual(["I", "'m", " ", " here", "123"]);
    expect(split("default", "Hello, world 12345!")).toEqual(["Hello", ",", " world", " ", "123", "45", "!"]);
    expect(split("deepseek-v3", "abc 1234")).toEqual(["abc", " ", "123", "4"]);
  });

  test("kimi-k2: Han runs apart from other letters, case runs and contractions as GPT-4o's", () => {
    expect(split("kimi-k2", "你好world")).toEqual(["你好", "world"]);
    expect(split("gpt-4o", "你好world")).toEqual(["你好world"]);
    expect(split("kimi-k2", "日本語テキスト")).toEqual(["日本語", "テキスト"]);
    expect(split("kimi-k2", "HelloWorld it's 12345")).toEqual(["Hello", "World", " it's", " ", "123", "45"]);
    expect(split("kimi-k2", "x=1;\n\n  y")).toEqual(["x", "=", "1", ";\n\n", " ", " y"]);
  });

  test("pieces always concatenate to the input", () => {
    const text = fx.cases.map((c) => c.text).join("\u0085\uFEFF \t\n");
    for (const pre of ["qwen2", "qwen35", "llama3", "gpt-2", "default", "gpt-4o", "deepseek-v3", "kimi-k2"]) {
      expect(split(pre, text).join("")).toBe(text);
    }
  });
});

/** A byte-level vocabulary: the 256 byte symbols, then `extra` tokens. */
function byteVocab(extra: string[], merges: string[], more: Partial<VocabData> = {}): VocabData {
  const tokens = [...Array.from(BYTE_TO_CP, (cp) => String.fromCharCode(cp)), ...extra];
  return { model: "gpt2", pre: "qwen2", tokens, merges, ...more };
}

describe("BPE merges", () => {
  const id = (t: Tokenizer, s: string) => t.tokenId(s)!;

  test("lowest rank first, leftmost on ties", () => {
    const t = Tokenizer.fromVocab(byteVocab(["bc", "ab", "abc", "aa"], ["b c", "a b", "a bc", "a a"]));
    expect(t.encode("abc")).toEqual([id(t, "abc")]); // b+c (rank 0) before a+b (rank 1)
    expect(t.encode("ab")).toEqual([id(t, "ab")]);
    expect(t.encode("aaa")).toEqual([id(t, "aa"), id(t, "a")]);
    expect(t.encode("aaaaa")).toEqual([id(t, "aa"), id(t, "aa"), id(t, "a")]);
  });

  test("a rank-order merge chain, not a longest match", () => {
    // "abcd": c+d (0), then b+cd (1); "ab" (2) never gets a chance.
    const t = Tokenizer.fromVocab(byteVocab(["cd", "bcd", "ab"], ["c d", "b cd", "a b"]));
    expect(t.encode("abcd")).toEqual([id(t, "a"), id(t, "bcd")]);
    expect(t.encode("abc")).toEqual([id(t, "ab"), id(t, "c")]);
  });

  test("a merge whose result is not a token: used as a step, spelled as bytes if it survives", () => {
    const t = Tokenizer.fromVocab(byteVocab(["xyz"], ["x y", "xy z"]));
    expect(t.encode("xyz")).toEqual([id(t, "xyz")]);
    expect(t.encode("xy")).toEqual([id(t, "x"), id(t, "y")]);
  });

  test("bytes the vocabulary cannot spell are dropped, as llama.cpp does", () => {
    const t = Tokenizer.fromVocab({ model: "gpt2", tokens: ["a"], merges: [] });
    expect(t.encode("ab")).toEqual([0]);
  });

  test("non-ASCII goes through the byte alphabet", () => {
    const t = Tokenizer.fromVocab(byteVocab([], []));
    const ids = t.encode("é€");
    expect(ids.map((i) => t.tokenBytes(i)[0])).toEqual([0xc3, 0xa9, 0xe2, 0x82, 0xac]);
    expect(t.decode(ids)).toBe("é€");
  });

  test("llama3 takes a whole piece that is a token (ignore_merges); qwen2 merges", () => {
    const extra = ["abc"];
    const l3 = Tokenizer.fromVocab(byteVocab(extra, [], { pre: "llama3", bosId: 0 }));
    const q2 = Tokenizer.fromVocab(byteVocab(extra, [], { pre: "qwen2" }));
    expect(l3.encode("abc")).toEqual([256]);
    expect(q2.encode("abc")).toEqual([id(q2, "a"), id(q2, "b"), id(q2, "c")]);
    // llama3 adds BOS by default, as llama.cpp does
    expect(l3.encode("abc", { addSpecial: true })).toEqual([0, 256]);
  });
});

describe("special tokens", () => {
  // ids: 256 <s> (control), 257 </s> (control), 258 <tool> (user-defined), 259 <tool_call> (user-defined)
  const v = byteVocab(["<s>", "</s>", "<tool>", "<tool_call>"], [], {
    tokenTypes: [...new Array(256).fill(1), 3, 3, 4, 4],
    bosId: 256,
    eosId: 257,
    addBos: true,
    addEos: true,
  });
  const t = Tokenizer.fromVocab(v);

  test("user-defined tokens always match, longest at the leftmost position", () => {
    const ids = t.encode("a<tool_call>b<tool>");
    expect(ids).toEqual([t.tokenId("a")!, 259, t.tokenId("b")!, 258]);
  });

  test("addSpecial adds BOS and EOS; parseSpecial matches control tokens", () => {
    expect(t.encode("<s>", { addSpecial: true, parseSpecial: true })).toEqual([256, 256, 257]);
    expect(t.encode("<s>", { addSpecial: true })).toEqual([256, ...[..."<s>"].map((c) => t.tokenId(c)!), 257]);
    expect(t.isEog(257)).toBe(true);
    expect(t.isEog(256)).toBe(false);
    expect(t.bos).toBe(256);
    expect(t.eos).toBe(257);
  });

  test("decode renders specials unless skipSpecial (user-defined always render)", () => {
    const ids = [256, t.tokenId("h")!, 258, 257];
    expect(t.decode(ids)).toBe("<s>h<tool></s>");
    expect(t.decode(ids, { skipSpecial: true })).toBe("h<tool>");
  });
});

// SPM vocabulary built by hand: expected ids derived from the algorithm on paper.
function spmVocab(opts: { bytes?: boolean; unk?: boolean; addSpacePrefix?: boolean } = {}): VocabData {
  const tokens: string[] = ["<unk>", "<s>", "</s>"];
  const types: number[] = [2, 3, 3];
  const scores: number[] = [0, 0, 0];
  for (let b = 0; b < 256; b++) {
    // without byte pieces the slots hold unused fillers, so that the ids stay put
    tokens.push(opts.bytes === false ? `[unused${b}]` : "<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">");
    types.push(opts.bytes === false ? 5 : 6);
    scores.push(0);
  }
  const pieces: [string, number][] = [
    ["\u2581", -1], // 259
    ["h", -2], ["e", -2], ["l", -2], ["o", -2], // 260..263
    ["ll", -3], // 264
    ["he", -4], // 265
    ["\u2581he", -5], // 266
    ["llo", -6], // 267
    ["\u2581hello", -7], // 268
    ["lo", -1], // 269
  ];
  for (const [p, s] of pieces) {
    tokens.push(p);
    types.push(1);
    scores.push(s);
  }
  return {
    model: "llama",
    tokens,
    tokenTypes: types,
    scores,
    bosId: 1,
    eosId: 2,
    ...(opts.unk === false ? {} : { unkId: 0 }),
    addSpacePrefix: opts.addSpacePrefix ?? true,
  };
}

describe("SPM (hand-built vocabulary)", () => {
  const spm = Tokenizer.fromVocab(spmVocab());
  const B = (b: number) => 3 + b; // id of <0xNN>

  test("merges by score, highest first; stale pairs skipped", () => {
    // ▁ h e l l o: lo(-1) > ll(-3) > he(-4); then l+lo=llo, he, ▁he(-5), llo(-6), ▁hello(-7)
    expect(spm.encode("hello")).toEqual([268]);
    // ▁ h e l l: ll(-3), he(-4), ▁he(-5)
    expect(spm.encode("hell")).toEqual([266, 264]);
  });

  test("space prefix: on by default, off when the vocabulary says so", () => {
    const noPrefix = Tokenizer.fromVocab(spmVocab({ addSpacePrefix: false }));
    // h e l l o: lo(-1), he(-4), l+lo=llo(-6) -> he llo
    expect(noPrefix.encode("hello")).toEqual([265, 267]);
    expect(noPrefix.decode([265, 267])).toBe("hello");
  });

  test("inner spaces become U+2581 pieces; decode strips only the added prefix", () => {
    expect(spm.encode("he  lo")).toEqual([266, 259, 259, 269]);
    expect(spm.decode([266, 259, 259, 269])).toBe("he  lo");
    expect(spm.decode(spm.encode(" he"))).toBe(" he");
  });

  test("a character no piece contains splits the merging, with the same result", () => {
    // "\n" is in no piece: "▁hello" | "\n" (byte fallback) | "hello" (no prefix: he, llo)
    expect(spm.encode("hello\nhello")).toEqual([268, B(0x0a), 265, 267]);
    expect(spm.decode(spm.encode("hello\nhello"))).toBe("hello\nhello");
  });

  test("ties go to the leftmost pair", () => {
    // ▁ l l l: ll at (1,2) and (2,3) tie; the left one merges
    expect(spm.encode("lll")).toEqual([259, 264, 262]);
  });

  test("byte fallback for characters with no piece", () => {
    expect(spm.encode("hé")).toEqual([259, 260, B(0xc3), B(0xa9)]);
    expect(spm.encode("😀")).toEqual([259, B(0xf0), B(0x9f), B(0x98), B(0x80)]);
    expect(spm.decode(spm.encode("hé 😀"))).toBe("hé 😀");
  });

  test("unknown token when bytes cannot spell it; error when there is no unknown token", () => {
    const noBytes = Tokenizer.fromVocab(spmVocab({ bytes: false }));
    expect(noBytes.encode("hé")).toEqual([259, 260, 0]);
    const v = spmVocab({ bytes: false, unk: false });
    // without unknown_token_id, id 0 is the unknown token (llama.cpp's default) if its type agrees
    expect(Tokenizer.fromVocab(v).unk).toBe(0);
    v.tokenTypes = [1, ...Array.from(v.tokenTypes!).slice(1)];
    const t = Tokenizer.fromVocab(v);
    expect(t.unk).toBeUndefined();
    expectErr(() => t.encode("hé"), /cannot spell "é"/);
  });

  test("BOS by default, space prefix after special tokens", () => {
    expect(spm.addBos).toBe(true);
    expect(spm.encode("hello", { addSpecial: true })).toEqual([1, 268]);
    expect(spm.encode("<s>hello", { parseSpecial: true })).toEqual([1, 268]);
    expect(spm.decode([1, 268])).toBe("<s>hello");
    expect(spm.decode([1, 268], { skipSpecial: true })).toBe("hello");
    expect(spm.isEog(2)).toBe(true);
  });
});

describe("StreamDecoder", () => {
  test("byte-level tokens: never half a character, all text in the end", () => {
    const texts = ["🙂🙂🙂🙂🙂", "emoji 👍🏽 👨\u200d👩\u200d👧\u200d👦 🇰🇷 ✨", "안녕하세요, 반갑습니다.", "你好，世界。"];
    let heldBack = 0;
    for (const text of texts) {
      const ids = qwen.encode(text);
      const sd = new StreamDecoder(qwen);
      let acc = "";
      for (const id of ids) {
        const piece = sd.push(id);
        expect(piece).not.toContain("\uFFFD");
        expect(piece.toWellFormed()).toBe(piece);
        if (piece === "") heldBack++;
        acc += piece;
      }
      acc += sd.flush();
      expect(acc).toBe(text);
    }
    expect(heldBack).toBeGreaterThan(0);
  });

  test("SPM byte-fallback emoji arrives whole on its fourth byte", () => {
    const spm = Tokenizer.fromVocab(spmVocab());
    const sd = new StreamDecoder(spm);
    const out = [0xf0, 0x9f, 0x98, 0x80].map((b) => sd.push(3 + b));
    expect(out).toEqual(["", "", "", "😀"]);
    expect(sd.flush()).toBe("");
  });

  test("invalid or unfinished sequences become U+FFFD", () => {
    const spm = Tokenizer.fromVocab(spmVocab());
    const sd = new StreamDecoder(spm);
    expect(sd.push(3 + 0xc3)).toBe("");
    expect(sd.push(260)).toBe("\uFFFDh"); // C3 followed by 'h'
    expect(sd.push(3 + 0xf0)).toBe("");
    expect(sd.push(3 + 0x9f)).toBe("");
    expect(sd.flush()).toBe("\uFFFD"); // F0 9F cut off
    expect(sd.push(3 + 0x80)).toBe("\uFFFD"); // a lone continuation byte is not held
    expect(sd.push(3 + 0xed)).toBe("");
    expect(sd.push(3 + 0xa0)).toBe("\uFFFD\uFFFD"); // ED A0 starts a surrogate: invalid at once
  });

  test("skipSpecial leaves out control tokens", () => {
    const sd = new StreamDecoder(qwen, { skipSpecial: true });
    const ids = qwen.encode("hi<|im_end|>", { parseSpecial: true });
    expect(ids.map((i) => sd.push(i)).join("") + sd.flush()).toBe("hi");
  });

  test("completePrefix", () => {
    const b = (...x: number[]) => Uint8Array.from(x);
    expect(completePrefix(b(0x61, 0xe2, 0x82), 3)).toBe(1);
    expect(completePrefix(b(0x61, 0xe2, 0x82, 0xac), 4)).toBe(4);
    expect(completePrefix(b(0xe0, 0x80), 2)).toBe(2); // E0 80 can never complete
    expect(completePrefix(b(0xf4, 0x8f, 0xbf), 3)).toBe(0);
    expect(completePrefix(b(0xf4, 0x90), 2)).toBe(2);
  });
});

describe("errors", () => {
  test("bad vocabularies are refused with the reason", () => {
    expectErr(() => Tokenizer.fromVocab({ ...fixtureVocab, model: "bert" }), /unknown tokenizer model 'bert'/);
    expectErr(() => Tokenizer.fromVocab({ ...fixtureVocab, merges: undefined }), /merges is missing/);
    expectErr(() => Tokenizer.fromVocab({ ...fixtureVocab, pre: "nonesuch" }), /unknown pre-tokenizer 'nonesuch'/);
    expectErr(() => Tokenizer.fromVocab({ ...fixtureVocab, merges: ["ab"] }), /merges\[0\]/);
    expectErr(() => Tokenizer.fromVocab({ ...fixtureVocab, eosId: 8000 }), /eos_token_id = 8000/);
    expectErr(() => Tokenizer.fromVocab({ ...fixtureVocab, tokens: [] }), /tokens is missing or empty/);
    expectErr(() => Tokenizer.fromVocab({ ...fixtureVocab, tokenTypes: [1, 1] }), /token_type has 2 entries/);
    expectErr(() => Tokenizer.fromVocab({ ...fixtureVocab, addBos: true }), /no bos_token_id/);
  });

  test("token ids out of range", () => {
    expectErr(() => qwen.decode([5, 8000]), /token id 8000 is out of range/);
    expectErr(() => qwen.tokenBytes(-1), /token id -1/);
    expectErr(() => qwen.tokenText(1.5), /token id 1.5/);
    expectErr(() => new StreamDecoder(qwen).push(99999), /out of range/);
  });

  test("metadata with wrong types", () => {
    const kv = new Map<string, unknown>([
      ["tokenizer.ggml.model", "gpt2"],
      ["tokenizer.ggml.pre", "qwen2"],
      ["tokenizer.ggml.tokens", fx.tokens],
      ["tokenizer.ggml.token_type", Int32Array.from(fx.token_type)],
      ["tokenizer.ggml.merges", fx.merges],
      ["tokenizer.ggml.eos_token_id", 2],
      ["tokenizer.ggml.add_bos_token", false],
    ]);
    const t = Tokenizer.fromVocab(vocabFromMetadata((k) => kv.get(k)));
    expect(t.encode(fx.cases[0].text)).toEqual(fx.cases[0].ids);
    expect(t.eos).toBe(2);
    kv.set("tokenizer.ggml.add_bos_token", 1);
    expectErr(() => vocabFromMetadata((k) => kv.get(k)), /add_bos_token is not a bool/);
    kv.delete("tokenizer.ggml.model");
    expectErr(() => vocabFromMetadata((k) => kv.get(k)), /tokenizer.ggml.model is missing/);
  });
});
