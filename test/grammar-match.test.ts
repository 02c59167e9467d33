// bloomery tests: the grammar matcher (byte chunks splitting UTF-8, partial characters, end states, clones, candidates, a differential test against RegExp, speed).
import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { CompiledGrammar, GrammarMatchError, GrammarMatcher, JSON_OBJECT_GBNF, filterCandidates, parseGbnf, shortestCompletion } from "../src/grammar/index.ts";

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

/** Deterministic PRNG (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Split bytes into random chunks of 1..4 bytes (so UTF-8 characters are split often). */
function chunks(bytes: Uint8Array, r: () => number): Uint8Array[] {
  const out: Uint8Array[] = [];
  let i = 0;
  while (i < bytes.length) {
    const n = 1 + Math.floor(r() * 4);
    out.push(bytes.subarray(i, Math.min(bytes.length, i + n)));
    i += n;
  }
  return out;
}

/** Feed text in random chunks: true iff every chunk is accepted and the grammar can end after it. */
function feed(m: GrammarMatcher, text: string | Uint8Array, r: () => number): boolean {
  const bytes = typeof text === "string" ? enc.encode(text) : text;
  for (const c of chunks(bytes, r)) {
    if (!m.accepts(c)) {
      expect(() => m.clone().advance(c)).toThrow(GrammarMatchError);
      return false;
    }
    m.advance(c);
  }
  return m.canEnd();
}

describe("matcher basics", () => {
  test("accepts / rejects hand-written strings fed in random byte chunks", () => {
    const g = `
root ::= item ("," ws item)*
item ::= word | number | quoted
word ::= [a-zA-Zα-ω]+
number ::= "-"? [0-9]+ ("." [0-9]+)?
quoted ::= "«" [^»]* "»"
ws ::= " "?
`;
    const good = ["abc", "abc, -1.5,αβγ", "«日本語 😀»,x", "«»", "0,0.0, ζ"];
    const bad = ["", "abc,", "1.", "«unterminated", "abc,,x", "αβγ!", "--1", "«a»»"];
    const r = rng(1);
    for (let round = 0; round < 20; round++) {
      for (const s of good) expect(feed(GrammarMatcher.compile(g), s, r)).toBe(true);
      for (const s of bad) expect(feed(GrammarMatcher.compile(g), s, r)).toBe(false);
    }
  });

  test("the rejecting byte is the first one that cannot continue", () => {
    const m = GrammarMatcher.compile(`root ::= "abc" [0-9]+`);
    expect(m.acceptsText("ab")).toBe(true);
    expect(m.acceptsText("abd")).toBe(false);
    expect(m.acceptsText("abc12")).toBe(true);
    expect(m.acceptsText("abc12x")).toBe(false);
    expect(() => m.advanceText("abx")).toThrow(/byte 2 \(0x78\)/);
    // a failed advance leaves the matcher where it was
    m.advanceText("ab");
    expect(m.acceptsText("c1")).toBe(true);
  });

  test("partial UTF-8 characters are carried across tokens", () => {
    const g = `root ::= "é" [α-γ] "😀"`;
    const m = GrammarMatcher.compile(g);
    const bytes = enc.encode("éβ😀"); // c3 a9 | ce b2 | f0 9f 98 80
    expect(bytes.length).toBe(8);
    for (let i = 0; i < bytes.length; i++) {
      expect(m.accepts(bytes.subarray(i, i + 1))).toBe(true);
      m.advance(bytes.subarray(i, i + 1));
      const atBoundary = i === 1 || i === 3 || i === 7;
      expect(m.inPartialCharacter()).toBe(!atBoundary);
      expect(m.canEnd()).toBe(i === 7);
    }
    expect(m.isDone()).toBe(true);
  });

  test("a partial character is allowed only when some completion of it can match", () => {
    const m = GrammarMatcher.compile(`root ::= "é"`); // c3 a9
    expect(m.accepts(Uint8Array.of(0xc3))).toBe(true);
    expect(m.accepts(Uint8Array.of(0xc4))).toBe(false); // U+0100..U+013F
    expect(m.accepts(Uint8Array.of(0xe2))).toBe(false);
    expect(m.accepts(Uint8Array.of(0xc3, 0xa8))).toBe(false); // è
    const n = GrammarMatcher.compile(`root ::= [^é]`);
    expect(n.accepts(Uint8Array.of(0xc3))).toBe(true);
    expect(n.accepts(Uint8Array.of(0xc3, 0xa8))).toBe(true);
    expect(n.accepts(Uint8Array.of(0xc3, 0xa9))).toBe(false);
    const astral = GrammarMatcher.compile(`root ::= [\\U0001F600-\\U0001F64F]`);
    expect(astral.accepts(Uint8Array.of(0xf0, 0x9f))).toBe(true);
    expect(astral.accepts(Uint8Array.of(0xf0, 0x9f, 0x98))).toBe(true); // U+1F600..U+1F63F
    expect(astral.accepts(Uint8Array.of(0xf0, 0x9f, 0x8f))).toBe(false); // U+1F3C0..U+1F3FF
    expect(astral.accepts(Uint8Array.of(0xf0, 0x90))).toBe(false); // U+10000..U+10FFF
  });

  test("invalid UTF-8 is rejected even by '.'", () => {
    const m = GrammarMatcher.compile(`root ::= .*`);
    expect(m.accepts(enc.encode("any 😀 text"))).toBe(true);
    const invalid = [
      [0xff],
      [0x80],
      [0xc0, 0x80], // overlong NUL
      [0xc1, 0xbf],
      [0xe0, 0x80, 0x80], // overlong
      [0xe0, 0x9f],
      [0xed, 0xa0, 0x80], // surrogate U+D800
      [0xf0, 0x8f], // overlong 4-byte
      [0xf4, 0x90], // above U+10FFFF
      [0xf5],
      [0x61, 0xc3, 0x61], // lead byte followed by ASCII
    ];
    for (const b of invalid) expect(m.accepts(Uint8Array.from(b))).toBe(false);
    expect(m.accepts(Uint8Array.of(0xed, 0x9f, 0xbf))).toBe(true); // U+D7FF
    expect(m.accepts(Uint8Array.of(0xf4, 0x8f, 0xbf, 0xbf))).toBe(true); // U+10FFFF
  });

  test("canEnd and isDone", () => {
    const m = GrammarMatcher.compile(`root ::= "a" "b"?`);
    expect(m.canEnd()).toBe(false);
    m.advanceText("a");
    expect(m.canEnd()).toBe(true);
    expect(m.isDone()).toBe(false);
    m.advanceText("b");
    expect(m.isDone()).toBe(true);
    expect(m.acceptsText("b")).toBe(false);
    expect(m.accepts(new Uint8Array(0))).toBe(true);
    const e = GrammarMatcher.compile(`root ::= ""`);
    expect(e.canEnd() && e.isDone()).toBe(true);
  });

  test("clones are independent and reset goes back to the start", () => {
    const m = GrammarMatcher.compile(`root ::= "ab" | "ac"`);
    m.advanceText("a");
    const c = m.clone();
    c.advanceText("b");
    expect(c.isDone()).toBe(true);
    expect(m.isDone()).toBe(false);
    expect(m.acceptsText("c")).toBe(true);
    m.reset();
    expect(m.acceptsText("a")).toBe(true);
    expect(m.acceptsText("b")).toBe(false);
  });

  test("the automaton caches can be dropped and rebuilt while matchers are in flight", () => {
    const g = new CompiledGrammar(parseGbnf(JSON_OBJECT_GBNF), { maxStates: 40 });
    const doc = `{"a": [1, {"b": [true, null, "x\\"y"]}, -2.5e10], "c": {"d": {"e": []}}}`;
    const r = rng(7);
    const m = GrammarMatcher.fromGrammar(g);
    const other = GrammarMatcher.fromGrammar(g);
    other.advanceText(`{"zz": [`);
    const epoch0 = g.epoch;
    expect(feed(m, doc, r)).toBe(true);
    expect(g.epoch).toBeGreaterThan(epoch0);
    expect(other.acceptsText(`1]}`)).toBe(true);
    expect(other.acceptsText(`1}`)).toBe(false);
    other.advanceText("1]}");
    expect(other.isDone()).toBe(true);
  });

  test("filterCandidates keeps order, honours the limit and end tokens", () => {
    const m = GrammarMatcher.compile(`root ::= [0-9]+`);
    const cands = ["x", "12", "a1", "3", "", "456", "7z"].map((s, i) => ({ id: i, bytes: enc.encode(s) }));
    expect(filterCandidates(m, cands, 10).map((c) => c.id)).toEqual([1, 3, 4, 5]);
    expect(filterCandidates(m, cands, 2).map((c) => c.id)).toEqual([1, 3]);
    const eos = new Set([99]);
    const withEos = [{ id: 99, bytes: new Uint8Array(0) }, ...cands];
    expect(filterCandidates(m, withEos, 10, { eos }).map((c) => c.id)).toEqual([1, 3, 4, 5]);
    m.advanceText("1");
    expect(filterCandidates(m, withEos, 10, { eos }).map((c) => c.id)).toEqual([99, 1, 3, 4, 5]);
  });

  test("llama.cpp's json.gbnf follows a long document (when the reference checkout is present)", () => {
    const file = "/work/llama/llama.cpp/grammars/json.gbnf";
    if (!existsSync(file)) {
      console.log("skipped: llama.cpp grammars not present");
      return;
    }
    const g = readFileSync(file, "utf8");
    const doc = JSON.stringify({ list: Array.from({ length: 200 }, (_, i) => ({ i, s: `ünï ${i} "q"`, f: i / 7 })) }, null, 1);
    expect(feed(GrammarMatcher.compile(g), doc, rng(3))).toBe(true);
  });
});

// ---- differential test against JavaScript RegExp on random regular grammars ----

type R =
  | { t: "lit"; s: string }
  | { t: "cls"; neg: boolean; items: [string, string][] }
  | { t: "any" }
  | { t: "seq"; xs: R[] }
  | { t: "alt"; xs: R[] }
  | { t: "rep"; x: R; min: number; max: number };

const ALPHABET = ["a", "b", "c", "é", "😀", "\n"];

function randomTree(r: () => number, depth: number): R {
  const pick = <T,>(xs: T[]): T => xs[Math.floor(r() * xs.length)];
  const k = depth <= 0 ? Math.floor(r() * 3) : Math.floor(r() * 6);
  switch (k) {
    case 0:
      return { t: "lit", s: Array.from({ length: 1 + Math.floor(r() * 2) }, () => pick(ALPHABET)).join("") };
    case 1: {
      const items: [string, string][] = [];
      for (let i = 0; i < 1 + Math.floor(r() * 2); i++) items.push(r() < 0.3 ? ["a", "c"] : r() < 0.5 ? ["é", "😀"] : [pick(ALPHABET), ""]);
      return { t: "cls", neg: r() < 0.3, items };
    }
    case 2:
      return r() < 0.5 ? { t: "any" } : { t: "lit", s: pick(ALPHABET) };
    case 3:
      return { t: "seq", xs: Array.from({ length: 2 + Math.floor(r() * 2) }, () => randomTree(r, depth - 1)) };
    case 4:
      return { t: "alt", xs: Array.from({ length: 2 + Math.floor(r() * 2) }, () => randomTree(r, depth - 1)) };
    default: {
      const min = Math.floor(r() * 3);
      const max = r() < 0.3 ? Infinity : min + Math.floor(r() * 3);
      return { t: "rep", x: randomTree(r, depth - 1), min, max };
    }
  }
}

function gbnfChar(c: string): string {
  return c === "\n" ? "\\n" : c;
}
function toGbnf(x: R): string {
  switch (x.t) {
    case "lit":
      return `"${Array.from(x.s).map(gbnfChar).join("")}"`;
    case "cls":
      return `[${x.neg ? "^" : ""}${x.items.map(([a, b]) => gbnfChar(a) + (b ? "-" + gbnfChar(b) : "")).join("")}]`;
    case "any":
      return ".";
    case "seq":
      return `(${x.xs.map(toGbnf).join(" ")})`;
    case "alt":
      return `(${x.xs.map(toGbnf).join(" | ")})`;
    case "rep":
      return `(${toGbnf(x.x)}){${x.min},${x.max === Infinity ? "" : x.max}}`;
  }
}
function reChar(c: string): string {
  return c === "\n" ? "\\n" : c;
}
function toRegex(x: R): string {
  switch (x.t) {
    case "lit":
      return Array.from(x.s).map(reChar).join("");
    case "cls":
      return `[${x.neg ? "^" : ""}${x.items.map(([a, b]) => reChar(a) + (b ? "-" + reChar(b) : "")).join("")}]`;
    case "any":
      return "[^]";
    case "seq":
      return `(?:${x.xs.map(toRegex).join("")})`;
    case "alt":
      return `(?:${x.xs.map(toRegex).join("|")})`;
    case "rep":
      return `(?:${toRegex(x.x)}){${x.min},${x.max === Infinity ? "" : x.max}}`;
  }
}
function sample(x: R, r: () => number): string {
  const pick = <T,>(xs: T[]): T => xs[Math.floor(r() * xs.length)];
  switch (x.t) {
    case "lit":
      return x.s;
    case "cls":
    case "any": {
      const re = new RegExp(`^${toRegex(x)}$`, "u");
      const options = [...ALPHABET, "d", "z", "ü"].filter((c) => re.test(c));
      return options.length ? pick(options) : "";
    }
    case "seq":
      return x.xs.map((y) => sample(y, r)).join("");
    case "alt":
      return sample(pick(x.xs), r);
    case "rep": {
      const n = x.min + Math.floor(r() * ((x.max === Infinity ? x.min + 3 : x.max) - x.min + 1));
      return Array.from({ length: n }, () => sample(x.x, r)).join("");
    }
  }
}

describe("matcher agrees with RegExp on random regular grammars", () => {
  test("full matches, prefixes and shortest completions", () => {
    const r = rng(2024);
    let positives = 0;
    let negatives = 0;
    for (let gi = 0; gi < 150; gi++) {
      const tree = randomTree(r, 3);
      const gbnf = `root ::= ${toGbnf(tree)}`;
      const re = new RegExp(`^${toRegex(tree)}$`, "u");
      const base = GrammarMatcher.compile(gbnf);
      const strings: string[] = [];
      for (let i = 0; i < 15; i++) strings.push(sample(tree, r));
      for (let i = 0; i < 25; i++) strings.push(Array.from({ length: Math.floor(r() * 6) }, () => [...ALPHABET, "d"][Math.floor(r() * 7)]).join(""));
      for (const s of strings) {
        const expected = re.test(s);
        if (expected) positives++;
        else negatives++;
        const got = feed(base.clone(), s, r);
        if (got !== expected) throw new Error(`grammar ${gbnf} on ${JSON.stringify(s)}: got ${got}, RegExp says ${expected}`);
        // every accepted prefix can be completed into a full match
        const m = base.clone();
        const bytes = enc.encode(s);
        const cut = Math.floor(r() * (bytes.length + 1));
        if (m.accepts(bytes.subarray(0, cut))) {
          m.advance(bytes.subarray(0, cut));
          const tail = shortestCompletion(m);
          expect(tail).not.toBeNull();
          const completed = dec.decode(Uint8Array.from([...bytes.subarray(0, cut), ...tail!]));
          if (!re.test(completed)) throw new Error(`grammar ${gbnf}: completion ${JSON.stringify(completed)} does not match`);
        }
      }
    }
    console.log(`differential test: ${positives} matching and ${negatives} non-matching strings`);
    expect(positives).toBeGreaterThan(500);
    expect(negatives).toBeGreaterThan(500);
  });
});

describe("speed", () => {
  test("accepts over a vocabulary-like candidate list while following JSON", () => {
    const r = rng(99);
    // a pseudo vocabulary: pieces of JSON text, words, numbers, punctuation, multi-byte pieces
    const pieces = new Set<string>();
    const sampleDoc = JSON.stringify({ name: "Ünïcode test", values: [1, 2.5, -3e4, true, false, null], nested: { deep: { list: ["a", "b", "c"] } }, text: "日本語のテキスト 😀" }, null, 2);
    for (let i = 0; i < 6000; i++) {
      const start = Math.floor(r() * sampleDoc.length);
      pieces.add(sampleDoc.slice(start, start + 1 + Math.floor(r() * 6)));
    }
    for (let i = 0; i < 4000; i++) pieces.add(Math.floor(r() * 100000).toString().slice(0, 1 + Math.floor(r() * 4)));
    const words = ["the", " the", "value", " name", "true", "false", "null", '":', '",', '{"', "},", "],", "\n  ", "\n    ", " ", ", ", ": "];
    for (const w of words) pieces.add(w);
    const vocab = [...pieces].map((s, id) => ({ id, bytes: enc.encode(s) }));
    // byte-level tokens that split characters
    for (let b = 0; b < 256; b++) vocab.push({ id: vocab.length, bytes: Uint8Array.of(b) });

    const m = GrammarMatcher.fromGrammar(new CompiledGrammar(parseGbnf(JSON_OBJECT_GBNF))); // fresh caches: the first pass is cold
    const docBytes = enc.encode(sampleDoc);
    let calls = 0;
    let allowed = 0;
    let coldTime = 0;
    let warmTime = 0;
    const steps: number[] = [];
    for (let i = 0; i < docBytes.length; i += 3) steps.push(i);
    for (const pass of [0, 1]) {
      m.reset();
      let pos = 0;
      for (const next of steps.slice(1).concat([docBytes.length])) {
        const t0 = performance.now();
        for (const c of vocab) if (m.accepts(c.bytes)) allowed++;
        const dt = performance.now() - t0;
        if (pass === 0) coldTime += dt;
        else warmTime += dt;
        calls += vocab.length;
        m.advance(docBytes.subarray(pos, next));
        pos = next;
      }
      expect(m.isDone()).toBe(true);
    }
    const perCallCold = (coldTime * 1000) / (calls / 2);
    const perCallWarm = (warmTime * 1000) / (calls / 2);
    console.log(
      `accepts: ${vocab.length} candidates x ${steps.length} steps; cold ${perCallCold.toFixed(3)} us/candidate, warm ${perCallWarm.toFixed(3)} us/candidate (${m.grammar.cachedStates} states cached, ${allowed} allowed)`,
    );
    expect(perCallWarm).toBeLessThan(20);
    expect(perCallCold).toBeLessThan(100);
  });
});
