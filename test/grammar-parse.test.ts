// bloomery tests: the GBNF parser (syntax coverage, errors with line/column, left recursion, limits).
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { GrammarError, GrammarMatcher, parseGbnf } from "../src/grammar/index.ts";

function full(gbnf: string, text: string): boolean {
  const m = GrammarMatcher.compile(gbnf);
  return m.acceptsText(text) && (m.advanceText(text), m.canEnd());
}

function parseError(gbnf: string): GrammarError {
  try {
    parseGbnf(gbnf);
  } catch (e) {
    expect(e).toBeInstanceOf(GrammarError);
    return e as GrammarError;
  }
  throw new Error(`expected a GrammarError for ${JSON.stringify(gbnf)}`);
}

describe("GBNF syntax", () => {
  test("literals with every escape", () => {
    const g = String.raw`root ::= "a\n\t\r\\\"\x41\u00e9\U0001F600\[\]\-"`;
    expect(full(g, 'a\n\t\r\\"Aé😀[]-')).toBe(true);
    expect(full(g, 'a\n\t\r\\"Aé😀[]')).toBe(false);
  });

  test("character classes: ranges, negation, escapes, literal '-' at the edges", () => {
    const g = String.raw`root ::= [a-cx] [^0-9\n] [-+] [a-] [\]\\] [\x30-\x32]`;
    expect(full(g, "b#-a]1")).toBe(true);
    expect(full(g, "x!+-\\0")).toBe(true);
    expect(full(g, "d#-a]1")).toBe(false); // d not in [a-cx]
    expect(full(g, "b5-a]1")).toBe(false); // digit in [^0-9\n]
    expect(full(g, "b\n-a]1")).toBe(false);
    expect(full(g, "b#-a]3")).toBe(false);
  });

  test("any character, including newline and astral code points", () => {
    const g = `root ::= . . .`;
    expect(full(g, "a\n😀")).toBe(true);
    expect(full(g, "ab")).toBe(false);
  });

  test("repetition operators and counted repetition", () => {
    expect(full(`root ::= "a"* "b"+ "c"?`, "bbb")).toBe(true);
    expect(full(`root ::= "a"* "b"+ "c"?`, "aabc")).toBe(true);
    expect(full(`root ::= "a"* "b"+ "c"?`, "aac")).toBe(false);
    for (let n = 0; n <= 7; n++) {
      const s = "x".repeat(n);
      expect(full(`root ::= "x"{3}`, s)).toBe(n === 3);
      expect(full(`root ::= "x"{2,}`, s)).toBe(n >= 2);
      expect(full(`root ::= "x"{2,5}`, s)).toBe(n >= 2 && n <= 5);
      expect(full(`root ::= "x"{0,2}`, s)).toBe(n <= 2);
      expect(full(`root ::= "x"{ 1 , 3 }`, s)).toBe(n >= 1 && n <= 3);
    }
    // a literal repeats as a whole; a group as a whole
    expect(full(`root ::= "ab"{2}`, "abab")).toBe(true);
    expect(full(`root ::= ("a" | "bc"){2}`, "bca")).toBe(true);
    expect(full(`root ::= ("a" | "bc"){2}`, "abcx")).toBe(false);
  });

  test("grouping, alternation, rule references, comments, multi-line rules", () => {
    const g = `
# a comment line
root ::= greeting (", " name)* "!"   # trailing comment
greeting ::= "hello" |
             "hi"
name ::= (
    [A-Z] [a-z]+   # capitalised
  | "you"
)
`;
    expect(full(g, "hello, Bob, you!")).toBe(true);
    expect(full(g, "hi!")).toBe(true);
    expect(full(g, "hey!")).toBe(false);
    expect(full(g, "hi, bob!")).toBe(false);
  });

  test("empty alternatives and empty literals", () => {
    expect(full(`root ::= "a" | `, "")).toBe(true);
    expect(full(`root ::= "" "a" ""`, "a")).toBe(true);
    expect(full(`root ::= ""`, "")).toBe(true);
    expect(full(`root ::= ("")*`, "")).toBe(true);
  });

  test("CRLF line endings", () => {
    expect(full(`root ::= a\r\na ::= "x"\r\n`, "x")).toBe(true);
  });

  test("a later definition of a rule replaces the earlier one (as llama.cpp)", () => {
    expect(full(`root ::= a\na ::= "x"\na ::= "y"`, "y")).toBe(true);
    expect(full(`root ::= a\na ::= "x"\na ::= "y"`, "x")).toBe(false);
  });

  test("tail-position self reference and nullable loops are not left recursion", () => {
    expect(full(`root ::= x\nx ::= x | "a"`, "a")).toBe(true);
    expect(full(`root ::= ("a"?)*`, "aaa")).toBe(true);
    expect(full(`root ::= ("a"? "b"?)* "c"`, "abbac")).toBe(true);
  });

  test("right recursion nests deeply", () => {
    const g = `root ::= "(" root ")" | "x"`;
    const depth = 2000;
    expect(full(g, "(".repeat(depth) + "x" + ")".repeat(depth))).toBe(true);
    expect(full(g, "(".repeat(depth) + "x" + ")".repeat(depth - 1))).toBe(false);
  });

  test("llama.cpp's example grammars parse (when the reference checkout is present)", () => {
    const dir = "/work/llama/llama.cpp/grammars";
    if (!existsSync(dir)) {
      console.log("skipped: llama.cpp grammars not present");
      return;
    }
    const files = readdirSync(dir).filter((f) => f.endsWith(".gbnf"));
    expect(files.length).toBeGreaterThan(3);
    for (const f of files) parseGbnf(readFileSync(join(dir, f), "utf8"));
    const json = readFileSync(join(dir, "json.gbnf"), "utf8");
    expect(full(json, `{"a": [1, -2.5e3, "x\\u00e9y", true, null], "b": {"c": "日本"}}`)).toBe(true);
    expect(full(json, `{"a": [1, 2,]}`)).toBe(false);
  });
});

describe("GBNF errors carry line and column", () => {
  const cases: [string, number, number, RegExp][] = [
    [`root ::= "abc`, 1, 10, /unterminated string literal/],
    [`root ::= [a-`, 1, 10, /unterminated character class/],
    [`root ::= foo`, 1, 10, /undefined rule 'foo'/],
    [`root ::= "é" bar`, 1, 14, /undefined rule 'bar'/],
    [`root ::= "a"\n\nx ::= "b" y`, 3, 11, /undefined rule 'y'/],
    [`foo ::= "a"`, 1, 1, /no 'root' rule/],
    [``, 1, 1, /no 'root' rule/],
    [`root ::= ( "a"`, 1, 15, /expecting '\)'/],
    [`root ::= ( "a"\n  "b"`, 2, 6, /expecting '\)' to close the group opened at line 1, column 10/],
    [`root ::= "a" )`, 1, 14, /unbalanced '\)'/],
    [`root ::= * "a"`, 1, 10, /'\*' has nothing before it/],
    [`root ::= "a" | +`, 1, 16, /'\+' has nothing before it/],
    [`root ::= "a"{3,1}`, 1, 13, /maximum below minimum/],
    [`root ::= "a"{x}`, 1, 14, /expecting an integer/],
    [`root ::= "a"{2`, 1, 15, /expecting '\}'/],
    [`root ::= "\\q"`, 1, 11, /unknown escape '\\q'/],
    [`root ::= "\\x4"`, 1, 11, /exactly 2 hex digits/],
    [`root ::= "\\U00110000"`, 1, 11, /above U\+10FFFF/],
    [`root ::= "\\uD800"`, 1, 11, /surrogate/],
    [`root = "a"`, 1, 6, /expecting '::='/],
    [`::= "a"`, 1, 1, /expecting a rule name/],
    [`root ::= "a"\n  | "b"`, 2, 3, /expecting a rule name/],
    [`root ::= [z-a]`, 1, 11, /reversed/],
    [`root ::= []`, 1, 10, /empty character class/],
    [`root ::= [^\\x00-\\U0010FFFF]`, 1, 10, /matches no character/],
    [`root ::= <[123]>`, 1, 10, /token references/],
    [`root ::= !<think>`, 1, 10, /token references/],
    [`root ::= "a" @`, 1, 14, /unexpected '@'/],
    [`root ::= "a"{20000}`, 1, 13, /above the limit/],
    [`root ::= expr\nexpr ::= expr "+" term | term\nterm ::= [0-9]`, 2, 1, /left recursion in rule 'expr'/],
    [`root ::= a\na ::= b "x" | "y"\nb ::= a "z"`, 2, 1, /left recursion/],
    [`root ::= a\na ::= n a "x" | "y"\nn ::= "n"?`, 2, 1, /left recursion in rule 'a'/],
    [`root ::= x\nx ::= "a" x`, 1, 1, /rule 'root' can never complete/],
  ];
  for (const [gbnf, line, column, message] of cases) {
    test(JSON.stringify(gbnf), () => {
      const e = parseError(gbnf);
      expect(e.message).toMatch(message);
      expect({ line: e.line, column: e.column }).toEqual({ line, column });
      expect(e.message).toContain(`line ${line}, column ${column}`);
    });
  }

  test("the llama-server test's invalid grammar is refused", () => {
    expect(parseError("root ::= this is (not valid GBNF").message).toMatch(/expecting '\)'/);
  });

  test("non-string input is a GrammarError, not a crash", () => {
    expect(() => parseGbnf(42 as unknown as string)).toThrow(GrammarError);
  });

  test("alternatives that can never finish are pruned, the rest still works", () => {
    const m = GrammarMatcher.compile(`root ::= "a" loop | "ab"\nloop ::= "x" loop`);
    expect(m.acceptsText("ax")).toBe(false); // would be a dead end
    expect(full(`root ::= "a" loop | "ab"\nloop ::= "x" loop`, "ab")).toBe(true);
  });

  test("huge repetition counts above the limit are read as unbounded maximums (as llama.cpp)", () => {
    expect(full(`root ::= "a"{0,50000}`, "a".repeat(12000))).toBe(true);
  });

  test("deep nesting is a GrammarError, not a stack overflow", () => {
    expect(() => parseGbnf(`root ::= ${"(".repeat(100000)}"a"${")".repeat(100000)}`)).toThrow(/nest deeper/);
    expect(() => parseGbnf(`root ::= "a"${"?".repeat(100000)}`)).toThrow(/nest deeper/);
    expect(full(`root ::= ${"(".repeat(200)}"a"${")".repeat(200)}`, "a")).toBe(true);
  });

  test("a grammar that expands to too many elements is refused", () => {
    expect(() => parseGbnf(`root ::= (("a"{1000}){1000}){10}`)).toThrow(/too large/);
  });
});
