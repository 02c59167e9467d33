// gpt-oss's grammars (src/server/tool-grammar-harmony.ts): every document a forced-call or
// structured-reply grammar allows parses back, through the harmony parser, into a call of an
// allowed tool with arguments that fit its schema (or into the schema's JSON as the content).
import { describe, expect, test } from "bun:test";
import { type ToolDef, parseChatOutput, toolPromptPolicy } from "../src/chat/index.ts";
import { GrammarMatcher, convertJsonSchema, randomDocument } from "../src/grammar/index.ts";
import { type HarmonyGrammarStart, harmonyGrammars, harmonyResponseGrammar, harmonyToolGrammar } from "../src/server/tool-grammar-harmony.ts";

const TOOLS: ToolDef[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      parameters: {
        type: "object",
        properties: { city: { type: "string", maxLength: 16 }, days: { type: "integer", minimum: 1, maximum: 14 }, units: { enum: ["c", "f"] } },
        required: ["city", "days"],
      },
    },
  },
  { type: "function", function: { name: "search", parameters: { type: "object", properties: { query: { type: "string", maxLength: 20 }, exact: { type: "boolean" } }, required: ["query"] } } },
];

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

function checkArgs(name: string, args: Record<string, unknown>): void {
  if (name === "get_weather") {
    expect(typeof args.city).toBe("string");
    expect(Number.isInteger(args.days)).toBe(true);
    for (const k of Object.keys(args)) expect(["city", "days", "units"]).toContain(k);
  } else {
    expect(name).toBe("search");
    expect(typeof args.query).toBe("string");
  }
}

describe("gpt-oss forced tool-call grammar", () => {
  for (const choice of ["required", { type: "function", function: { name: "search" } }] as const) {
    const label = typeof choice === "string" ? choice : "named";
    test(`tool_choice ${label}: random documents parse into one valid call, after any analysis`, () => {
      const policy = toolPromptPolicy(choice, TOOLS);
      const m = GrammarMatcher.compile(harmonyToolGrammar(policy));
      const r = rng(label.length);
      let sawAnalysis = false;
      const forms = new Set<string>();
      for (let i = 0; i < 40; i++) {
        const doc = dec(randomDocument(m, { rng: r, softLimit: 400, stopProbability: 0.3 }));
        const msg = parseChatOutput(doc, { syntax: "gpt-oss", thinking: null, tools: policy.callable });
        if (msg.reasoning_content !== "") sawAnalysis = true;
        forms.add(/^(?:.*<\|start\|>assistant)?( to=|<\|channel\|>)/s.exec(doc)?.[1] ?? "?");
        expect(msg.tool_calls.length).toBe(1);
        const c = msg.tool_calls[0];
        if (typeof choice !== "string") expect(c.function.name).toBe("search");
        checkArgs(c.function.name, JSON.parse(c.function.arguments));
      }
      expect(sawAnalysis).toBe(true);
      expect(forms.has(" to=") && forms.has("<|channel|>")).toBe(true); // both header forms are allowed
    });
  }

  const policy = toolPromptPolicy("required", TOOLS);
  const accepts = (start: HarmonyGrammarStart, text: string) => GrammarMatcher.compile(harmonyToolGrammar(policy, start)).clone().accepts(enc(text));
  const CALL = ' to=functions.search<|channel|>commentary json<|message|>{"query": "x"}';

  test("the forms the model writes are allowed, plain text and other tools are not", () => {
    expect(accepts("header", CALL)).toBe(true);
    expect(accepts("header", '<|channel|>commentary to=functions.search <|constrain|>json<|message|>{"query": "x"}')).toBe(true);
    expect(accepts("header", `<|channel|>analysis<|message|>Let me search.<|end|><|start|>assistant${CALL}`)).toBe(true);
    expect(accepts("header", "<|channel|>final<|message|>Hi")).toBe(false);
    expect(accepts("header", "Hello")).toBe(false);
    expect(accepts("header", ' to=functions.python<|channel|>commentary json<|message|>{"code": "1"}')).toBe(false);
  });

  test("inside a continued analysis, and after a budget's forced <|end|>", () => {
    expect(accepts("analysis", `still thinking<|end|><|start|>assistant${CALL}`)).toBe(true);
    expect(accepts("analysis", CALL)).toBe(false);
    expect(accepts("after-end", `<|start|>assistant${CALL}`)).toBe(true);
    expect(accepts("after-end", CALL)).toBe(false);
  });
});

describe("gpt-oss structured reply grammar", () => {
  const schema = { type: "object", properties: { amount: { type: "number" }, date: { type: "string", maxLength: 10 } }, required: ["amount", "date"] };
  test("random documents are analysis, then the schema's JSON in the final channel", () => {
    const m = GrammarMatcher.compile(harmonyResponseGrammar(convertJsonSchema(schema).gbnf));
    const r = rng(7);
    for (let i = 0; i < 30; i++) {
      const doc = dec(randomDocument(m, { rng: r, softLimit: 300, stopProbability: 0.3 }));
      expect(doc).toContain("<|channel|>final");
      const msg = parseChatOutput(doc, { syntax: "gpt-oss", thinking: null });
      const v = JSON.parse(msg.content) as Record<string, unknown>;
      expect(typeof v.amount).toBe("number");
      expect(typeof v.date).toBe("string");
    }
  });

  test("which grammar a request gets: its own GBNF unchanged, else the schema, else a forced call", () => {
    const none = toolPromptPolicy("auto", undefined);
    expect(harmonyGrammars(none, undefined, 'root ::= "x"', false)).toEqual({ grammar: 'root ::= "x"' });
    expect(harmonyGrammars(none, undefined, undefined, false)).toEqual({});
    const rf = harmonyGrammars(policy(), convertJsonSchema(schema).gbnf, undefined, false);
    expect(rf.grammar).toContain('"<|channel|>final"');
    expect(rf.after).toContain('"<|start|>assistant"');
    const forced = harmonyGrammars(policy(), undefined, undefined, false);
    expect(forced.grammar).toContain("to=functions.search");
  });
  const policy = () => toolPromptPolicy("required", TOOLS);
});
