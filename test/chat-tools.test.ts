// Tool calls (src/chat/tools.ts, tool-*.ts, output.ts): Qwen3 Hermes JSON and Qwen3-Coder/3.5 XML
// parsing, whole and streamed (OpenAI deltas), malformed calls as content, tool_choice policy and
// the forced-call schema, and the combined reasoning + tool-call output parser.
import { describe, expect, test } from "bun:test";
import {
  type ChatDelta,
  ChatInputError,
  ChatOutputParser,
  type OutputOptions,
  type ParsedMessage,
  type ToolCall,
  ToolCallStream,
  type ToolDef,
  type ToolStreamOptions,
  parseChatOutput,
  parseToolCalls,
  parseToolChoice,
  toolCallSchema,
  toolCallWrapping,
  toolPromptPolicy,
} from "../src/chat/index.ts";
import { convertParamValue, schemaTypes } from "../src/chat/tools.ts";

const TOOLS: ToolDef[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the weather",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string" },
          days: { type: "integer" },
          opts: { type: "object" },
          tags: { type: "array", items: { type: "string" } },
          metric: { type: "boolean" },
          note: { type: ["string", "null"] },
          unit: { enum: ["c", "f"] },
        },
        required: ["city"],
      },
    },
  },
  {
    type: "function",
    function: { name: "python", parameters: { type: "object", properties: { code: { type: "string" } }, required: ["code"] } },
  },
  { type: "function", function: { name: "no_args" } },
];

function ids(): () => string {
  let n = 0;
  return () => `call_${n++}`;
}

function opts(syntax: "hermes" | "qwen3-xml", extra: Partial<ToolStreamOptions> = {}): ToolStreamOptions {
  return { syntax, tools: TOOLS, genId: ids(), ...extra };
}

/** Streams text in code-point chunks; returns the deltas and the parser's result. */
function streamChars(text: string, o: ToolStreamOptions): { deltas: ChatDelta[]; result: { content: string; tool_calls: ToolCall[] } } {
  const s = new ToolCallStream(o);
  const deltas: ChatDelta[] = [];
  for (const ch of Array.from(text)) deltas.push(...s.push(ch));
  deltas.push(...s.finish());
  return { deltas, result: s.result };
}

/** Rebuilds content and calls from deltas alone, checking their OpenAI shape on the way. */
function fromDeltas(deltas: ChatDelta[]): { content: string; tool_calls: ToolCall[] } {
  let content = "";
  const calls: ToolCall[] = [];
  for (const d of deltas) {
    if (d.kind === "content") {
      expect(d.text).not.toBe("");
      content += d.text;
    } else if (d.kind === "tool_call") {
      const { index, id, function: fn } = d.delta;
      if (index === calls.length) {
        // first fragment of a new call: id, type and name come first
        expect(typeof id).toBe("string");
        expect(d.delta.type).toBe("function");
        expect(typeof fn.name).toBe("string");
        calls.push({ id: id!, type: "function", function: { name: fn.name!, arguments: fn.arguments } });
      } else {
        expect(index).toBe(calls.length - 1);
        expect(id).toBeUndefined();
        expect(fn.name).toBeUndefined();
        calls[index].function.arguments += fn.arguments;
      }
    }
  }
  return { content, tool_calls: calls };
}

/** Whole parse, 1-character stream and delta reconstruction must all agree. */
function parseEverywhere(text: string, o: () => ToolStreamOptions) {
  const whole = parseToolCalls(text, o());
  const { deltas, result } = streamChars(text, o());
  expect(result).toEqual(whole);
  expect(fromDeltas(deltas)).toEqual(whole);
  // No part of a call's markup ever reaches the content (unless the call fell back to content).
  const markup = /<tool_call|<function=|<\/tool_call/;
  if (!/<tool_call|<function=|<\/tool_call/.test(whole.content)) {
    for (const d of deltas) if (d.kind === "content") expect(d.text).not.toMatch(markup);
  }
  return whole;
}

const call = (id: string, name: string, args: string): ToolCall => ({ id, type: "function", function: { name, arguments: args } });

describe("Hermes / Qwen3 JSON tool calls", () => {
  const o = () => opts("hermes");

  test("one call after content", () => {
    const r = parseEverywhere('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Seoul"}}\n</tool_call>', o);
    expect(r).toEqual({ content: "Let me check.", tool_calls: [call("call_0", "get_weather", '{"city": "Seoul"}')] });
  });

  test("several calls, nested JSON and unicode in the arguments (kept as the model wrote them)", () => {
    const args1 = '{"city": "서울 🌧", "opts": {"a": [1, {"b": "}{]["}], "q": "say \\"hi\\"\\n"}, "days": 3}';
    const args2 = '{"code": "print(\'«ok»\')"}';
    const text =
      `<tool_call>\n{"name": "get_weather", "arguments": ${args1}}\n</tool_call>\n` +
      `<tool_call>\n{"name": "python", "arguments": ${args2}}\n</tool_call>`;
    const r = parseEverywhere(text, o);
    expect(r.content).toBe("");
    expect(r.tool_calls).toEqual([call("call_0", "get_weather", args1), call("call_1", "python", args2)]);
    expect(JSON.parse(r.tool_calls[0].function.arguments).opts.a[1].b).toBe("}{][");
  });

  test("arguments before name, and a call without arguments", () => {
    const r = parseEverywhere(
      '<tool_call>{"arguments": {"code": "1+1"}, "name": "python"}</tool_call><tool_call>{"name": "no_args"}</tool_call>',
      o,
    );
    expect(r.tool_calls).toEqual([call("call_0", "python", '{"code": "1+1"}'), call("call_1", "no_args", "{}")]);
  });

  test("arguments given as a JSON string are unwrapped", () => {
    const r = parseEverywhere('<tool_call>\n{"name": "python", "arguments": "{\\"code\\": \\"x\\"}"}\n</tool_call>', o);
    expect(r.tool_calls[0].function.arguments).toBe('{"code": "x"}');
  });

  test("streaming: id and name first, then argument fragments as they arrive", () => {
    const s = new ToolCallStream(o());
    expect(s.push("Hi <tool_")).toEqual([{ kind: "content", text: "Hi" }]);
    expect(s.push('call>\n{"name": "pyth')).toEqual([]);
    expect(s.push('on", "arguments": {"co')).toEqual([
      { kind: "tool_call", delta: { index: 0, id: "call_0", type: "function", function: { name: "python", arguments: "" } } },
      { kind: "tool_call", delta: { index: 0, function: { arguments: '{"co' } } },
    ]);
    expect(s.push('de": "x"}}\n</tool_call>')).toEqual([
      { kind: "tool_call", delta: { index: 0, function: { arguments: 'de": "x"}' } } },
    ]);
    expect(s.finish()).toEqual([]);
    expect(s.result).toEqual({ content: "Hi", tool_calls: [call("call_0", "python", '{"code": "x"}')] });
  });

  test("content after a call is kept", () => {
    const r = parseEverywhere('<tool_call>{"name": "no_args", "arguments": {}}</tool_call>\n\nDone.', o);
    expect(r).toEqual({ content: "Done.", tool_calls: [call("call_0", "no_args", "{}")] });
  });

  const malformed: [string, string][] = [
    ["not JSON", "<tool_call>\nnot json\n</tool_call>"],
    ["an unknown tool", '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'],
    ["no name", '<tool_call>\n{"arguments": {"a": 1}}\n</tool_call>'],
    ["a name that is not a string", '<tool_call>\n{"name": 5, "arguments": {}}\n</tool_call>'],
    ["an unclosed opening tag at the end", 'Text <tool_call>\n{"na'],
    ["a stray closing tag", "a </tool_call> b"],
  ];
  for (const [what, text] of malformed) {
    test(`malformed (${what}) falls back to content`, () => {
      const r = parseEverywhere(text, o);
      expect(r.tool_calls).toEqual([]);
      expect(r.content).toBe(text.trimEnd());
    });
  }

  test("a malformed call does not hide a good one after it", () => {
    const text = '<tool_call>oops</tool_call>\n<tool_call>{"name": "no_args", "arguments": {}}</tool_call>';
    const r = parseEverywhere(text, o);
    expect(r.content).toBe("<tool_call>oops</tool_call>");
    expect(r.tool_calls).toEqual([call("call_0", "no_args", "{}")]);
  });

  test("a call cut off mid-arguments keeps what arrived, closed to valid JSON", () => {
    const r = parseEverywhere('<tool_call>\n{"name": "python", "arguments": {"code": "print([1, 2', o);
    expect(r.tool_calls).toEqual([call("call_0", "python", '{"code": "print([1, 2"}')]);
    expect(JSON.parse(r.tool_calls[0].function.arguments)).toEqual({ code: "print([1, 2" });
  });

  test("parallel_tool_calls: false keeps only the first call", () => {
    const text =
      '<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>\n' +
      '<tool_call>{"name": "python", "arguments": {"code": "2"}}</tool_call>';
    const r = parseEverywhere(text, () => opts("hermes", { parallelToolCalls: false }));
    expect(r).toEqual({ content: "", tool_calls: [call("call_0", "python", '{"code": "1"}')] });
  });

  test("without tools nothing is a call", () => {
    const text = '<tool_call>{"name": "python", "arguments": {}}</tool_call>';
    expect(parseToolCalls(text, { syntax: "hermes", tools: [] })).toEqual({ content: text, tool_calls: [] });
  });

  test("default ids are 32 random letters and digits", () => {
    const r = parseToolCalls('<tool_call>{"name": "no_args", "arguments": {}}</tool_call>', { syntax: "hermes", tools: TOOLS });
    expect(r.tool_calls[0].id).toMatch(/^[A-Za-z0-9]{32}$/);
  });
});

describe("Qwen3-Coder / Qwen3.5 XML tool calls", () => {
  const o = () => opts("qwen3-xml");
  const xml = (name: string, params: [string, string][]) =>
    `<tool_call>\n<function=${name}>\n${params.map(([k, v]) => `<parameter=${k}>\n${v}\n</parameter>\n`).join("")}</function>\n</tool_call>`;

  test("values converted by the schema type", () => {
    const text = xml("get_weather", [
      ["city", "Seoul"],
      ["days", "3"],
      ["opts", '{"a": [1, 2], "b": null}'],
      ["tags", '["x", "y"]'],
      ["metric", "True"],
      ["note", "null"],
      ["unit", "c"],
    ]);
    const r = parseEverywhere(`I'll look.\n\n${text}`, o);
    expect(r.content).toBe("I'll look.");
    expect(r.tool_calls).toHaveLength(1);
    expect(JSON.parse(r.tool_calls[0].function.arguments)).toEqual({
      city: "Seoul",
      days: 3,
      opts: { a: [1, 2], b: null },
      tags: ["x", "y"],
      metric: true,
      note: null,
      unit: "c",
    });
    expect(r.tool_calls[0].function.arguments).toBe(
      '{"city":"Seoul","days":3,"opts":{"a": [1, 2], "b": null},"tags":["x", "y"],"metric":true,"note":null,"unit":"c"}',
    );
  });

  test("strings stay strings even when they look like numbers or JSON", () => {
    const r = parseEverywhere(xml("get_weather", [["city", "42"], ["note", "{not json"]]), o);
    expect(JSON.parse(r.tool_calls[0].function.arguments)).toEqual({ city: "42", note: "{not json" });
  });

  test("multi-line code keeps indentation, quotes, backslashes and a trailing newline", () => {
    const code = 'def hello():\n    print("Hello, \\\\ world!")\n\nhello()\n';
    const r = parseEverywhere(xml("python", [["code", code]]), o);
    expect(JSON.parse(r.tool_calls[0].function.arguments)).toEqual({ code });
  });

  test("several calls, unicode, no-argument call", () => {
    const text = `${xml("python", [["code", "print('안녕 👋')"]])}\n${xml("no_args", [])}`;
    const r = parseEverywhere(text, o);
    expect(r.tool_calls.map((c) => c.function.name)).toEqual(["python", "no_args"]);
    expect(JSON.parse(r.tool_calls[0].function.arguments)).toEqual({ code: "print('안녕 👋')" });
    expect(r.tool_calls[1].function.arguments).toBe("{}");
    expect(r.tool_calls.map((c) => c.id)).toEqual(["call_0", "call_1"]);
  });

  test("a value containing a partial closing tag", () => {
    const r = parseEverywhere(xml("python", [["code", "s = '</param' + 'eter>'"]]), o);
    expect(JSON.parse(r.tool_calls[0].function.arguments)).toEqual({ code: "s = '</param' + 'eter>'" });
  });

  test("Qwen3-Coder may omit the opening <tool_call>", () => {
    const r = parseEverywhere("<function=python>\n<parameter=code>\n1\n</parameter>\n</function>\n</tool_call>", o);
    expect(r).toEqual({ content: "", tool_calls: [call("call_0", "python", '{"code":"1"}')] });
  });

  test("string values stream before the parameter closes", () => {
    const s = new ToolCallStream(o());
    const d1 = s.push("<tool_call>\n<function=python>\n<parameter=code>\nprint(1)\nx = ");
    expect(d1).toEqual([
      { kind: "tool_call", delta: { index: 0, id: "call_0", type: "function", function: { name: "python", arguments: "" } } },
      { kind: "tool_call", delta: { index: 0, function: { arguments: "{" } } },
      { kind: "tool_call", delta: { index: 0, function: { arguments: '"code":"' } } },
      { kind: "tool_call", delta: { index: 0, function: { arguments: "print(1)\\nx = " } } },
    ]);
    expect(s.push("2\n</param")).toEqual([{ kind: "tool_call", delta: { index: 0, function: { arguments: "2" } } }]);
    expect(s.push("eter>\n</function>\n</tool_call>")).toEqual([
      { kind: "tool_call", delta: { index: 0, function: { arguments: '"' } } },
      { kind: "tool_call", delta: { index: 0, function: { arguments: "}" } } },
    ]);
    expect(s.result.tool_calls[0].function.arguments).toBe('{"code":"print(1)\\nx = 2"}');
  });

  const malformed: [string, string][] = [
    ["an unknown function", "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>"],
    ["no function", "<tool_call>\nhello\n</tool_call>"],
    ["a name with a newline", "<tool_call>\n<function=py\nthon>\n</function>\n</tool_call>"],
    ["C++ text", "#include <functional>\nint main() {}"],
  ];
  for (const [what, text] of malformed) {
    test(`malformed (${what}) falls back to content`, () => {
      const r = parseEverywhere(text, o);
      expect(r).toEqual({ content: text, tool_calls: [] });
    });
  }

  test("a call cut off inside a value is closed", () => {
    const r = parseEverywhere("<tool_call>\n<function=python>\n<parameter=code>\nprint('hi", o);
    expect(r.tool_calls).toEqual([call("call_0", "python", '{"code":"print(\'hi"}')]);
  });

  test("a call closed without </function>", () => {
    const r = parseEverywhere("<tool_call>\n<function=python>\n<parameter=code>\n1\n</parameter>\n</tool_call>\nok", o);
    expect(r).toEqual({ content: "ok", tool_calls: [call("call_0", "python", '{"code":"1"}')] });
  });
});

describe("value conversion by schema", () => {
  test("schemaTypes", () => {
    expect(schemaTypes({ type: "string" })).toEqual(new Set(["string"]));
    expect(schemaTypes({ type: ["integer", "null"] })).toEqual(new Set(["integer", "null"]));
    expect(schemaTypes({ enum: ["a", 1] })).toEqual(new Set(["string", "number"]));
    expect(schemaTypes({ anyOf: [{ type: "number" }, { type: "boolean" }] })).toEqual(new Set(["number", "boolean"]));
    expect(schemaTypes({ description: "x" })).toBe("any");
    expect(schemaTypes(undefined)).toBe("any");
  });

  test("convertParamValue", () => {
    expect(convertParamValue("007", new Set(["string"]))).toBe('"007"');
    expect(convertParamValue(" 7 ", new Set(["integer"]))).toBe("7");
    expect(convertParamValue("7.5", new Set(["integer"]))).toBe("7.5"); // not a string type: JSON kept
    expect(convertParamValue("7.5", new Set(["integer", "string"]))).toBe('"7.5"');
    expect(convertParamValue("False", new Set(["boolean"]))).toBe("false");
    expect(convertParamValue("hello world", "any")).toBe('"hello world"');
    expect(convertParamValue("[1,2]", "any")).toBe("[1,2]");
    expect(convertParamValue('"quoted"', new Set(["string", "null"]))).toBe('"\\"quoted\\""');
    expect(convertParamValue("not json", new Set(["object"]))).toBe('"not json"');
  });
});

describe("tool_choice policy and the forced-call schema", () => {
  test("auto, none, required, named", () => {
    expect(toolPromptPolicy(undefined, TOOLS)).toMatchObject({ mode: "auto", parse: true, forced: false });
    expect(toolPromptPolicy("auto", TOOLS).callable).toHaveLength(3);
    const none = toolPromptPolicy("none", TOOLS);
    expect(none).toMatchObject({ mode: "none", parse: false, forced: false, callable: [] });
    expect(none.offered).toHaveLength(3); // llama-server still renders them
    expect(toolPromptPolicy("required", TOOLS)).toMatchObject({ mode: "required", parse: true, forced: true });
    const named = toolPromptPolicy({ type: "function", function: { name: "python" } }, TOOLS);
    expect(named).toMatchObject({ mode: "named", name: "python", forced: true });
    expect(named.callable.map((t) => t.function.name)).toEqual(["python"]);
    expect(toolPromptPolicy("required", [])).toMatchObject({ mode: "none", parse: false, forced: false });
  });

  test("bad tool_choice values are ChatInputErrors", () => {
    expect(() => parseToolChoice("sometimes")).toThrow(ChatInputError);
    expect(() => parseToolChoice({ type: "function" })).toThrow("tool_choice");
    expect(() => toolPromptPolicy({ type: "function", function: { name: "nope" } }, TOOLS)).toThrow("tool_choice.function.name");
  });

  test("schema of a named call pins the name and the tool's parameters", () => {
    const s = toolCallSchema(toolPromptPolicy({ type: "function", function: { name: "python" } }, TOOLS));
    expect(s).toEqual({
      type: "object",
      properties: { name: { const: "python" }, arguments: TOOLS[1].function.parameters! },
      required: ["name", "arguments"],
      additionalProperties: false,
    });
  });

  test("schema of a required call is anyOf the tools; a tool without parameters takes any object", () => {
    const s = toolCallSchema(toolPromptPolicy("required", TOOLS))!;
    expect(s.anyOf).toHaveLength(3);
    expect(s.anyOf![2].properties!.arguments).toEqual({ type: "object", properties: {} });
    expect(toolCallSchema(toolPromptPolicy("none", TOOLS))).toBeNull();
  });

  test("wrapping per syntax", () => {
    expect(toolCallWrapping("hermes")).toMatchObject({ open: "<tool_call>\n", close: "\n</tool_call>", body: "json" });
    expect(toolCallWrapping("qwen3-xml")).toMatchObject({ body: "xml" });
    expect(toolCallWrapping("gpt-oss")).toBeNull();
  });
});

describe("ChatOutputParser: reasoning and tool calls together", () => {
  function both(text: string, o: () => OutputOptions): ParsedMessage {
    const whole = parseChatOutput(text, o());
    const p = new ChatOutputParser(o());
    let reasoning = "";
    const rest: ChatDelta[] = [];
    const take = (ds: ChatDelta[]) => {
      for (const d of ds) {
        if (d.kind === "reasoning") reasoning += d.text;
        else rest.push(d);
      }
    };
    for (const ch of Array.from(text)) take(p.push(ch));
    take(p.finish());
    expect(p.message).toEqual(whole);
    const rebuilt = fromDeltas(rest);
    expect({ content: rebuilt.content, reasoning_content: reasoning, tool_calls: rebuilt.tool_calls }).toEqual(whole);
    return whole;
  }
  const think = { start: "<think>", end: "</think>" };

  test("Qwen3.5: prompt-opened thinking, then an XML call", () => {
    const o = (): OutputOptions => ({ syntax: "qwen3-xml", thinking: think, prefix: "<think>\n", tools: TOOLS, genId: ids() });
    const m = both("The user wants weather.\n</think>\n\nChecking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nBusan\n</parameter>\n</function>\n</tool_call>", o);
    expect(m).toEqual({
      content: "Checking.",
      reasoning_content: "The user wants weather.",
      tool_calls: [call("call_0", "get_weather", '{"city":"Busan"}')],
    });
  });

  test("a tool call ends prefilled reasoning without </think>", () => {
    const o = (): OutputOptions => ({ syntax: "qwen3-xml", thinking: think, prefix: "<think>\n", tools: TOOLS, genId: ids() });
    const m = both("Need to inspect.\n<tool_call>\n<function=python>\n<parameter=code>\nimport os\n</parameter>\n</function>\n</tool_call>", o);
    expect(m).toEqual({ content: "", reasoning_content: "Need to inspect.", tool_calls: [call("call_0", "python", '{"code":"import os"}')] });
  });

  test("Qwen3: a think block, content and a Hermes call", () => {
    const o = (): OutputOptions => ({ syntax: "hermes", thinking: think, tools: TOOLS, genId: ids() });
    const m = both('<think>\nCall it.\n</think>\n\nSure!\n<tool_call>\n{"name": "no_args", "arguments": {}}\n</tool_call>', o);
    expect(m).toEqual({ content: "Sure!", reasoning_content: "Call it.", tool_calls: [call("call_0", "no_args", "{}")] });
  });

  test("reasoning_format none keeps the think block in the content, calls still parsed", () => {
    const o = (): OutputOptions => ({ syntax: "hermes", thinking: think, reasoningFormat: "none", tools: TOOLS, genId: ids() });
    const m = both('<think>x</think>\n<tool_call>{"name": "no_args", "arguments": {}}</tool_call>', o);
    expect(m).toEqual({ content: "<think>x</think>", reasoning_content: "", tool_calls: [call("call_0", "no_args", "{}")] });
  });

  test("a template without think tags leaves <think> in the content; no tools: tags are content", () => {
    const o = (): OutputOptions => ({ syntax: "qwen3-xml", thinking: null, tools: [] });
    const text = "<think>a</think><tool_call>\n<function=python>\n</function>\n</tool_call>";
    expect(both(text, o)).toEqual({ content: text, reasoning_content: "", tool_calls: [] });
  });

  test("a continued message's prefix is part of the reply (llama-server semantics)", () => {
    const o = (): OutputOptions => ({ syntax: "hermes", thinking: think, prefix: "<think>\nI'm thinking\n</think>\n\nHello, " });
    expect(both("world!\nWhat's up?", o)).toEqual({
      content: "Hello, world!\nWhat's up?",
      reasoning_content: "I'm thinking",
      tool_calls: [],
    });
    const p = new ChatOutputParser({ syntax: "none", thinking: null, prefix: "def f(" });
    expect(p.push("x):")).toEqual([
      { kind: "content", text: "def f(" },
      { kind: "content", text: "x):" },
    ]);
  });

  test("formats without a parser give content only", () => {
    const o = (): OutputOptions => ({ syntax: "minimax-xml", thinking: think, tools: TOOLS });
    const call = '<minimax:tool_call>\n<invoke name="python">\n<parameter name="code">1</parameter>\n</invoke>\n</minimax:tool_call>';
    const m = both(`<think>r</think>${call}`, o);
    expect(m.reasoning_content).toBe("r");
    expect(m.tool_calls).toEqual([]);
    expect(m.content).toBe(call);
  });
});

describe("long outputs stream in linear time", () => {
  // A quadratic parser (re-reading the whole call on every chunk) takes many seconds here.
  const body = "line of code x = 1 + 2  # comment\n".repeat(6000); // ~200 KB
  const cases: [string, "hermes" | "qwen3-xml" | "glm-xml" | "deepseek-v3.1", string][] = [
    ["hermes", "hermes", `<tool_call>\n{"name": "python", "arguments": ${JSON.stringify({ code: body })}}\n</tool_call>`],
    ["xml", "qwen3-xml", `<tool_call>\n<function=python>\n<parameter=code>\n${body}\n</parameter>\n</function>\n</tool_call>`],
    ["glm", "glm-xml", `<tool_call>python<arg_key>code</arg_key><arg_value>${body}</arg_value></tool_call>`],
    ["deepseek", "deepseek-v3.1", `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>python<｜tool▁sep｜>${JSON.stringify({ code: body })}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`],
  ];
  for (const [name, syntax, text] of cases) {
    test(`${name}: a 200 KB argument in 4-character chunks`, () => {
      const p = new ChatOutputParser({ syntax, thinking: null, tools: TOOLS });
      const t0 = performance.now();
      for (let i = 0; i < text.length; i += 4) p.push(text.slice(i, i + 4));
      p.finish();
      expect(performance.now() - t0).toBeLessThan(3000);
      expect(JSON.parse(p.message.tool_calls[0].function.arguments)).toEqual({ code: body });
    });
  }
});

