// The grammar that forces tool calls: every document it allows parses back (through the chat
// layer's tool-call parsers) into calls of the allowed tools with arguments that fit their schemas.
import { describe, expect, test } from "bun:test";
import { parseChatOutput, toolCallWrapping, toolPromptPolicy, type ToolDef } from "../src/chat/index.ts";
import { GrammarMatcher, randomDocument } from "../src/grammar/index.ts";
import { prefixRules, toolCallGrammar } from "../src/server/tool-grammar.ts";

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

function checkArgs(name: string, args: Record<string, unknown>): void {
  if (name === "get_weather") {
    expect(typeof args.city).toBe("string");
    expect([...(args.city as string)].length).toBeLessThanOrEqual(16); // code points, as the schema counts
    expect(Number.isInteger(args.days)).toBe(true);
    if ("units" in args) expect(["c", "f"]).toContain(args.units as string);
    for (const k of Object.keys(args)) expect(["city", "days", "units"]).toContain(k);
  } else {
    expect(name).toBe("search");
    expect(typeof args.query).toBe("string");
    if ("exact" in args) expect(typeof args.exact).toBe("boolean");
  }
}

describe("forced tool-call grammar", () => {
  for (const syntax of ["hermes", "qwen3-xml"] as const) {
    for (const choice of ["required", { type: "function", function: { name: "search" } }] as const) {
      for (const parallel of [false, true]) {
        const label = `${syntax}, tool_choice ${typeof choice === "string" ? choice : "named"}, parallel ${parallel}`;
        test(`${label}: random documents parse into valid calls`, () => {
          const policy = toolPromptPolicy(choice, TOOLS);
          const thinking = { start: "<think>", end: "</think>" };
          const gbnf = toolCallGrammar(policy, { wrapping: toolCallWrapping(syntax)!, parallel, thinking, startsInsideThinking: false });
          const m = GrammarMatcher.compile(gbnf);
          const r = rng(syntax.length * 7 + (parallel ? 1 : 0) + (typeof choice === "string" ? 0 : 3));
          let sawThink = false;
          for (let i = 0; i < 25; i++) {
            const doc = new TextDecoder().decode(randomDocument(m, { rng: r, softLimit: 400, stopProbability: 0.3 }));
            const msg = parseChatOutput(doc, { syntax, thinking, tools: policy.callable, parallelToolCalls: parallel });
            expect(msg.content.trim()).toBe("");
            if (msg.reasoning_content !== "") sawThink = true;
            expect(msg.tool_calls.length).toBeGreaterThanOrEqual(1);
            if (!parallel) expect(msg.tool_calls.length).toBe(1);
            for (const c of msg.tool_calls) {
              if (typeof choice !== "string") expect(c.function.name).toBe("search");
              checkArgs(c.function.name, JSON.parse(c.function.arguments));
            }
          }
          expect(sawThink).toBe(true);
        });
      }
    }
  }

  test("a prompt that opened the think block: the grammar closes it, then calls", () => {
    const policy = toolPromptPolicy("required", TOOLS);
    const gbnf = toolCallGrammar(policy, { wrapping: toolCallWrapping("hermes")!, parallel: false, thinking: { start: "<think>", end: "</think>" }, startsInsideThinking: true });
    const m = GrammarMatcher.compile(gbnf);
    expect(m.clone().accepts(new TextEncoder().encode('some thought</think>\n<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>'))).toBe(true);
    // without closing the thoughts there is no call
    expect(m.clone().accepts(new TextEncoder().encode('<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>'))).toBe(false);
  });

  test("prefixRules renames rules and references, never literals, classes or counts", () => {
    const g = 'root ::= "root" space [a-z]{2,3} item\nitem ::= "x" | root\nspace ::= " "?';
    expect(prefixRules(g, "p-")).toBe('p-root ::=  "root" p-space [a-z]{2,3} p-item\np-item ::=  "x" | p-root\np-space ::=  " "?');
  });
});
