// bloomery tests: DRY (src/sampling/dry.ts): llama.cpp's test-sampling vectors with token
// breakers, breaker strings matched against token bytes (whole and across tokens), crafted
// histories, and the Z-algorithm repeat lengths against a brute-force search.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { dryBreakers, dryBreakersFromTokens, dryPenalties, Sampler, type DryBreakers, type DryParams } from "../src/sampling/index.ts";
import { Tokenizer } from "../src/tokenizer/index.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";

/** Probabilities after subtracting the penalties from log(probs) (what llama's test checks). */
function afterDry(probs: number[], pen: Map<number, number>): number[] {
  const l = probs.map((p, i) => Math.log(p) - (pen.get(i) ?? 0));
  const mx = Math.max(...l);
  const e = l.map((x) => Math.exp(x - mx));
  const z = e.reduce((a, b) => a + b);
  return e.map((x) => x / z);
}

const P = (multiplier: number, base: number, allowedLength: number, penaltyLastN: number): DryParams => ({ multiplier, base, allowedLength, penaltyLastN });

describe("llama's DRY vectors", () => {
  const cases: [number[], number[], number[], DryParams, number[][]][] = [
    [[0.25, 0.25, 0.25, 0.25], [0, 1], [0.25, 0.25, 0.25, 0.25], P(1, 1.1, 2, 4), []],
    [[0.25, 0.25, 0.25, 0.25], [0, 1, 2, 0, 1], [0.296923, 0.296923, 0.109232, 0.296923], P(1, 1.1, 2, 5), []],
    [[0.2, 0.2, 0.2, 0.2, 0.2], [0, 1, 3, 4, 0, 1], [0.2, 0.2, 0.2, 0.2, 0.2], P(1, 1.1, 2, 6), [[3]]],
    [[0.2, 0.2, 0.2, 0.2, 0.2], [0, 1, 2, 0, 1], [0.241818, 0.241818, 0.032727, 0.241818, 0.241818], P(2, 1.1, 2, 5), []],
    [[0.2, 0.2, 0.2, 0.2, 0.2], [0, 1, 2, 3, 4, 0, 1], [0.2, 0.2, 0.2, 0.2, 0.2], P(1, 1.1, 4, 7), []],
  ];
  cases.forEach(([probs, hist, want, p, breakers], i) => {
    test(`case ${i + 1}: history ${hist.join(" ")}`, () => {
      const got = afterDry(probs, dryPenalties(hist, p, dryBreakersFromTokens(breakers)));
      got.forEach((g, j) => expect(Math.abs(g - want[j])).toBeLessThan(1e-5));
    });
  });
});

describe("crafted histories", () => {
  const none = dryBreakersFromTokens([]);
  test("the longest repeat per token decides its penalty", () => {
    // 5 6 7 9 | 6 7 8 | 5 6 7: "5 6 7" repeats (len 3) -> 9; "6 7" (len 2) -> 8
    const pen = dryPenalties([5, 6, 7, 9, 6, 7, 8, 5, 6, 7], P(0.8, 1.75, 2, -1), none);
    expect(pen.get(9)).toBeCloseTo(0.8 * 1.75, 6);
    expect(pen.get(8)).toBeCloseTo(0.8, 6);
    expect(pen.size).toBe(2);
  });
  test("the window limits how far back repeats are found", () => {
    const h = [5, 6, 7, 9, 1, 2, 3, 4, 5, 6, 7];
    expect(dryPenalties(h, P(1, 2, 2, -1), none).get(9)).toBe(2);
    expect(dryPenalties(h, P(1, 2, 2, 8), none).size).toBe(0);
  });
  test("off when multiplier 0, base < 1, window 0, or history not longer than allowed_length", () => {
    const h = [1, 2, 1, 2, 1, 2];
    expect(dryPenalties(h, P(0, 2, 1, -1), none).size).toBe(0);
    expect(dryPenalties(h, P(1, 0.9, 1, -1), none).size).toBe(0);
    expect(dryPenalties(h, P(1, 2, 1, 0), none).size).toBe(0);
    expect(dryPenalties([1, 2], P(1, 2, 2, -1), none).size).toBe(0);
    expect(dryPenalties(h, P(1, 2, 1, -1), none).size).toBe(1);
  });
  test("the exponent is capped where base^e would overflow a float (base 1.75: 158)", () => {
    const h = Array.from({ length: 400 }, (_, i) => (i % 2 === 0 ? 1 : 2));
    const pen = dryPenalties(h, P(1, 1.75, 2, -1), none);
    // repeat length 398 for token 1 -> exponent capped at trunc(88.7228391 / ln 1.75) = 158
    expect(pen.get(1)).toBeCloseTo(Math.pow(Math.fround(1.75), 158), -20);
    expect(Number.isFinite(pen.get(1)!)).toBe(true);
  });
  test("a multi-token breaker inside the repeated suffix caps its length", () => {
    // "1 2 7 8 3" repeats and 9 followed it; the breaker 7 8 leaves only "3" (1 < allowed 2)
    const h = [1, 2, 7, 8, 3, 9, 1, 2, 7, 8, 3];
    expect(dryPenalties(h, P(1, 2, 2, -1), dryBreakersFromTokens([[7, 8]])).size).toBe(0);
    expect(dryPenalties(h, P(1, 2, 2, -1), none).get(9)).toBe(8); // 2^(5 - 2)
    // a breaker before the suffix does not matter: "1 2 3" after "7 8" still repeats
    expect(dryPenalties([1, 2, 3, 9, 7, 8, 1, 2, 3], P(1, 2, 2, -1), dryBreakersFromTokens([[7, 8]])).get(9)).toBe(2);
  });
});

describe("breakers from text", () => {
  const texts = ["a", "b", "c", "ab", "xa", "\n", "x\ny", "*", ":", "é"];
  const enc = new TextEncoder();
  const vocab = {
    nVocab: texts.length,
    tokenBytes: (id: number) => enc.encode(texts[id]),
    encode: (t: string): number[] => {
      // greedy longest match over the texts
      const out: number[] = [];
      let s = t;
      while (s.length) {
        let best = -1;
        for (let i = 0; i < texts.length; i++) if (s.startsWith(texts[i]) && (best < 0 || texts[i].length > texts[best].length)) best = i;
        if (best < 0) throw new Error(`cannot encode ${s}`);
        out.push(best);
        s = s.slice(texts[best].length);
      }
      return out;
    },
  };
  const get = (b: DryBreakers, id: number) => (b.get(id) ?? []).map((t) => [...t]);
  test("tokens containing a breaker break alone; tokens ending in its start need the rest", () => {
    const b = dryBreakers(vocab, ["\n", "ab"]);
    expect(get(b, 5)).toEqual([[]]); // "\n"
    expect(get(b, 6)).toEqual([[]]); // "x\ny" contains "\n"
    expect(get(b, 3)).toEqual([[]]); // "ab"
    expect(get(b, 0)).toEqual([[1]]); // "a" + "b"
    expect(get(b, 4)).toEqual([[1]]); // "xa" + "b"
    expect(b.has(1)).toBe(false);
  });
  test("multi-byte breakers match by bytes", () => {
    const b = dryBreakers(vocab, ["é"]);
    expect(get(b, 9)).toEqual([[]]);
    expect(b.size).toBe(1);
  });
  test("results are cached per vocabulary and breaker list", () => {
    expect(dryBreakers(vocab, ["\n", "ab"])).toBe(dryBreakers(vocab, ["\n", "ab"]));
  });
  test("a breaker split over two tokens caps repeats in a history", () => {
    // c a b c : c a b c -> ':' followed "c a b c", but the tokens "a" "b" spell the breaker "ab"
    const h = [2, 0, 1, 2, 8, 2, 0, 1, 2];
    expect(dryPenalties(h, P(1, 2, 2, -1), dryBreakers(vocab, ["ab"])).size).toBe(0);
    expect(dryPenalties(h, P(1, 2, 2, -1), dryBreakers(vocab, ["*"])).get(8)).toBe(4); // 2^(4 - 2)
  });
});

test("Z-algorithm repeat lengths equal a brute-force search on random histories", () => {
  let s = 99;
  const rand = (n: number) => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) % n);
  for (let trial = 0; trial < 300; trial++) {
    const L = 2 + rand(60);
    const alpha = 2 + rand(4);
    const h = Array.from({ length: L }, () => rand(alpha));
    const allowed = rand(4);
    const got = dryPenalties(h, P(1, 1.5, allowed, -1), dryBreakersFromTokens([]));
    const want = new Map<number, number>();
    if (L > allowed) {
      for (let end = 0; end < L - 1; end++) {
        // longest n with h[end-n+1..end] == h[L-n..L-1]
        let n = 0;
        while (n <= end && h[end - n] === h[L - 1 - n]) n++;
        if (n < allowed) continue;
        const tok = h[end + 1];
        want.set(tok, Math.max(want.get(tok) ?? -1, n));
      }
    }
    expect([...got.keys()].sort()).toEqual([...want.keys()].sort());
    for (const [tok, n] of want) expect(got.get(tok)).toBeCloseTo(Math.pow(Math.fround(1.5), n - allowed), 6);
  }
});

describe.skipIf(!hasFixtures)("with a real vocabulary (fixtures/tokenizer, 8000 byte-level BPE tokens)", () => {
  test("llama's default breakers over a Tokenizer; the Sampler takes the Tokenizer as its vocabulary", async () => {
    const fx = (await Bun.file(join(FIXTURES, "tokenizer", "tok-cases.json")).json()) as { tokens: string[]; token_type: number[]; merges: string[] };
    const tok = Tokenizer.fromVocab({ model: "gpt2", pre: "qwen2", tokens: fx.tokens, tokenTypes: fx.token_type, merges: fx.merges });
    const t0 = performance.now();
    const b = dryBreakers(tok, ["\n", ":", "\"", "*"]);
    const ms = performance.now() - t0;
    const dec = new TextDecoder();
    let alone = 0;
    for (let id = 0; id < tok.nVocab; id++) {
      const text = dec.decode(tok.tokenBytes(id));
      const breaks = ["\n", ":", "\"", "*"].some((c) => text.includes(c));
      expect((b.get(id) ?? []).some((t) => t.length === 0)).toBe(breaks);
      if (breaks) alone++;
    }
    console.log(`DRY breakers over ${tok.nVocab} tokens: ${alone} single-token breakers, ${b.size} heads, ${ms.toFixed(1)} ms`);
    // "... return x \n ... return": the token after the first "return" would extend a repeat
    // (cut at the latest "\n" breaker to the tokens of "    return": penalty 0.8 * 1.75^(n - 2))
    const first = tok.encode("def f(x):\n    return x\n");
    const again = tok.encode("def f(x):\n    return");
    const hist = [...first, ...again];
    const next = first[again.length]; // what followed "return" the first time
    const logits = new Float32Array(tok.nVocab);
    logits[next] = 0.5;
    const eog = tok.eogIds[0];
    logits[eog] = 1;
    expect(new Sampler({ temperature: 0 }, tok).sample(logits, hist).id).toBe(eog);
    expect(new Sampler({ temperature: 0, ignoreEos: true }, tok).sample(logits, hist).id).toBe(next);
    const r = new Sampler({ seed: 1, dryMultiplier: 0.8, ignoreEos: true, temperature: 0 }, tok).sample(logits, hist);
    expect(r.id).not.toBe(next);
    expect(tok.eogIds).not.toContain(r.id);
  });
});
