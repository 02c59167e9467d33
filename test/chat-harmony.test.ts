// gpt-oss's harmony format, the chat side (src/chat/harmony*.ts, template.ts): the fixture's seven
// llama-server renderings byte for byte, reasoning_effort and reasoning in history, and the output
// parser (llama.cpp's gpt-oss cases and more): whole, in every chunking, rebuilt from its deltas,
// with malformed output degrading to content.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import {
  type ChatDelta,
  ChatOutputParser,
  type ChatMessage,
  type OutputOptions,
  type ParsedMessage,
  type ReasoningFormat,
  type ToolCall,
  type ToolDef,
  applyChatTemplate,
  detectChatFormat,
  parseChatOutput,
  renderChat,
} from "../src/chat/index.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";

interface Rendering {
  request: { messages: ChatMessage[]; tools?: ToolDef[]; chat_template_kwargs?: Record<string, unknown> };
  prompt: string;
}
const fixture = hasFixtures
  ? ((await Bun.file(join(FIXTURES, "templates", "renderings.json")).json()) as {
      templates: Record<string, { template: string; renderings: Record<string, Rendering> }>;
    })
  : null;
const GPT_OSS = fixture?.templates["openai-gpt-oss-120b.jinja"];
/** The day llama-server rendered the fixture (the template prints it); local noon so any zone agrees. */
const FIXTURE_NOW = new Date(2026, 10, 29, 12, 0, 0);

const WEATHER: ToolDef = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string", enum: ["c", "f"] } }, required: ["city"] },
  },
};
const SPECIAL: ToolDef = { type: "function", function: { name: "special_function", parameters: { type: "object", properties: { arg1: { type: "integer" } }, required: ["arg1"] } } };
const EDIT: ToolDef = {
  type: "function",
  function: {
    name: "edit",
    description: "Edit a file",
    parameters: { type: "object", properties: { oldString: { type: "string" }, newString: { type: "string" }, replaceAll: { type: "boolean" } }, required: ["oldString", "newString"] },
  },
};
const TOOLS = [WEATHER, SPECIAL, EDIT];

describe.skipIf(!GPT_OSS)("gpt-oss renderings (llama-server /apply-template fixture)", () => {
  const src = GPT_OSS?.template ?? "";
  for (const [kind, r] of Object.entries(GPT_OSS?.renderings ?? {})) {
    test(`${kind}: byte-identical`, () => {
      const prompt = renderChat(src, {
        messages: r.request.messages,
        tools: r.request.tools,
        kwargs: r.request.chat_template_kwargs,
        bosToken: "<|startoftext|>",
        eosToken: "<|return|>",
        now: FIXTURE_NOW,
      });
      expect(prompt).toBe(r.prompt);
    });
  }

  test("the format is found by the template's <|channel|> markers, not by a name", () => {
    const f = detectChatFormat(src);
    expect(f).toMatchObject({ family: "gpt-oss", toolCalls: "gpt-oss", toolCallsParsed: true, supportsThinking: true, thinking: null });
    // any template that speaks harmony is gpt-oss's format
    const tiny = "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}<|start|>assistant<|channel|>";
    expect(detectChatFormat(tiny).family).toBe("gpt-oss");
  });

  const user: ChatMessage[] = [{ role: "user", content: "Hi" }];
  const reasoningLine = (p: string) => /Reasoning: (\w+)/.exec(p)?.[1];

  test("reasoning_effort reaches the template (and its default is medium)", () => {
    expect(reasoningLine(renderChat(src, { messages: user, now: FIXTURE_NOW }))).toBe("medium");
    for (const effort of ["low", "high"]) {
      expect(reasoningLine(renderChat(src, { messages: user, kwargs: { reasoning_effort: effort }, now: FIXTURE_NOW }))).toBe(effort);
    }
  });

  test("a developer message is the template's developer instructions, a system one too (llama keeps the role)", () => {
    const p = renderChat(src, { messages: [{ role: "developer", content: "Be brief." }, ...user], now: FIXTURE_NOW });
    expect(p).toContain("<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>");
  });

  const call = { id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city": "Seoul"}' } };
  const CALL_TEXT = '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Seoul"}<|call|>';
  const TOOL_TEXT = '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"3 C"<|end|>';

  test("multi-turn with reasoning: a tool call's analysis is kept until a final reply follows it", () => {
    const pending: ChatMessage[] = [
      ...user,
      { role: "assistant", content: "", reasoning_content: "Need the weather.", tool_calls: [call] },
      { role: "tool", tool_call_id: "c1", content: "3 C" },
    ];
    const p = renderChat(src, { messages: pending, tools: [WEATHER], now: FIXTURE_NOW });
    expect(p.endsWith(`<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>${CALL_TEXT}${TOOL_TEXT}<|start|>assistant`)).toBe(true);
    const answered: ChatMessage[] = [...pending, { role: "assistant", content: "It is 3 C.", reasoning_content: "Easy." }, { role: "user", content: "And Busan?" }];
    const q = renderChat(src, { messages: answered, tools: [WEATHER], now: FIXTURE_NOW });
    expect(q).not.toContain("Need the weather.");
    expect(q).not.toContain("Easy.");
    expect(q.endsWith(`<|start|>user<|message|>Hi<|end|>${CALL_TEXT}${TOOL_TEXT}<|start|>assistant<|channel|>final<|message|>It is 3 C.<|end|><|start|>user<|message|>And Busan?<|end|><|start|>assistant`)).toBe(true);
  });

  test("a continued turn: the prompt reopens analysis (and final), and the parser reads that prefill first", () => {
    const content = applyChatTemplate(src, { messages: [...user, { role: "assistant", content: "Hello, ", reasoning_content: "I'm thinking" }], now: FIXTURE_NOW });
    expect(content.prompt.endsWith("<|start|>assistant<|channel|>analysis<|message|>I'm thinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, ")).toBe(true);
    const m = parseChatOutput("world!\nWhat's up?", { syntax: "gpt-oss", thinking: null, prefix: content.parsePrefix });
    expect(m).toEqual({ content: "Hello, world!\nWhat's up?", reasoning_content: "I'm thinking", tool_calls: [] });
    const reasoning = applyChatTemplate(src, { messages: [...user, { role: "assistant", content: "", reasoning_content: "I'm" }], now: FIXTURE_NOW });
    expect(reasoning.continuation).toBe("reasoning");
    expect(reasoning.prompt.endsWith("<|start|>assistant<|channel|>analysis<|message|>I'm")).toBe(true);
    const r = parseChatOutput(" thinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?", { syntax: "gpt-oss", thinking: null, prefix: reasoning.parsePrefix });
    expect(r).toEqual({ content: "Hello, world!\nWhat's up?", reasoning_content: "I'm thinking", tool_calls: [] });
  });
});

// ---------------------------------------------------------------------------------------------
// The output parser

function ids(): () => string {
  let n = 0;
  return () => `call_${n++}`;
}

const tc = (id: string, name: string, args: string): ToolCall => ({ id, type: "function", function: { name, arguments: args } });

/** Deterministic pseudo-random chunkings (by code point), plus one character at a time and the whole. */
function chunkings(text: string, seeds = 6): string[][] {
  const cps = Array.from(text);
  const out: string[][] = [cps, [text]];
  for (let seed = 1; seed <= seeds; seed++) {
    let x = seed * 2654435761;
    const chunks: string[] = [];
    let i = 0;
    while (i < cps.length) {
      x = (x * 1103515245 + 12345) >>> 0;
      const n = 1 + (x % 9);
      chunks.push(cps.slice(i, i + n).join(""));
      i += n;
    }
    out.push(chunks);
  }
  return out;
}

/** Rebuilds the message from deltas alone, checking their OpenAI shape. */
function fromDeltas(deltas: ChatDelta[]): ParsedMessage {
  let content = "";
  let reasoning = "";
  const calls: ToolCall[] = [];
  for (const d of deltas) {
    if (d.kind === "content" || d.kind === "reasoning") {
      expect(d.text).not.toBe("");
      if (d.kind === "content") content += d.text;
      else reasoning += d.text;
      continue;
    }
    const { index, id, function: fn } = d.delta;
    if (index === calls.length) {
      expect(typeof id).toBe("string");
      expect(d.delta.type).toBe("function");
      expect(typeof fn.name).toBe("string");
      calls.push(tc(id!, fn.name!, fn.arguments));
    } else {
      expect(index).toBe(calls.length - 1);
      expect(id).toBeUndefined();
      expect(fn.name).toBeUndefined();
      expect(fn.arguments).not.toBe("");
      calls[index].function.arguments += fn.arguments;
    }
  }
  return { content, reasoning_content: reasoning, tool_calls: calls };
}

interface Opts {
  tools?: ToolDef[];
  reasoningFormat?: ReasoningFormat;
  parallel?: boolean;
  prefix?: string;
}

function options(o: Opts): OutputOptions {
  return { syntax: "gpt-oss", thinking: null, tools: o.tools ?? [], reasoningFormat: o.reasoningFormat, parallelToolCalls: o.parallel, prefix: o.prefix, genId: ids() };
}

const MARKUP = /<\|(channel|message|start|end|constrain|call|return)\|>| to=/;

/** Whole text, every chunking and the deltas must agree; returns the message. */
function parseEverywhere(text: string, o: Opts): ParsedMessage {
  const whole = parseChatOutput(text, options(o));
  for (const chunks of chunkings(text)) {
    const p = new ChatOutputParser(options(o));
    const deltas: ChatDelta[] = [];
    for (const c of chunks) deltas.push(...p.push(c));
    deltas.push(...p.finish());
    expect(p.message).toEqual(whole);
    expect(fromDeltas(deltas)).toEqual(whole);
    // no delta ever carries a part of the format's markup, unless the output fell back to content
    if (!MARKUP.test(whole.content)) for (const d of deltas) if (d.kind !== "tool_call") expect(d.text).not.toMatch(/<\|/);
  }
  return whole;
}

interface Case {
  name: string;
  text: string;
  opts?: Opts;
  expect: Partial<ParsedMessage>;
}

const A = "<|channel|>analysis<|message|>I'm\nthinking<|end|>";
const F = "<|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?";
const CONTENT = "Hello, world!\nWhat's up?";
const THOUGHTS = { content: CONTENT, reasoning_content: "I'm\nthinking", tool_calls: [] };
const ARGS = '{"arg1": 1}';
const CALL1 = [tc("call_0", "special_function", ARGS)];

const CASES: Case[] = [
  // llama.cpp's tests/test-chat.cpp gpt-oss cases
  { name: "plain final", text: "<|channel|>final<|message|>Hello, world!\nWhat's up?", expect: { content: CONTENT, reasoning_content: "", tool_calls: [] } },
  { name: "commentary only", text: "<|channel|>commentary<|message|>Hello, world!\nWhat's up?", expect: { content: CONTENT, reasoning_content: "" } },
  { name: "analysis + final", text: A + F, expect: THOUGHTS },
  { name: "analysis + final, reasoning_format auto", text: A + F, opts: { reasoningFormat: "auto" }, expect: THOUGHTS },
  { name: "analysis + final, reasoning_format deepseek", text: A + F, opts: { reasoningFormat: "deepseek" }, expect: THOUGHTS },
  { name: "analysis + final, reasoning_format deepseek-legacy", text: A + F, opts: { reasoningFormat: "deepseek-legacy" }, expect: THOUGHTS },
  {
    name: "reasoning_format none keeps the analysis, markers and all, in the content",
    text: A + F,
    opts: { reasoningFormat: "none" },
    expect: { content: `${A}${CONTENT}`, reasoning_content: "" },
  },
  { name: "analysis cut off", text: "<|channel|>analysis<|message|>I'm\nthinking", expect: { content: "", reasoning_content: "I'm\nthinking" } },
  { name: "call, recipient in the role, analysis channel", text: ` to=functions.special_function<|channel|>analysis<|message|>${ARGS}`, opts: { tools: TOOLS }, expect: { content: "", tool_calls: CALL1 } },
  { name: "call, recipient in the channel", text: `<|channel|>analysis to=functions.special_function<|message|>${ARGS}`, opts: { tools: TOOLS }, expect: { tool_calls: CALL1 } },
  { name: "call with <|constrain|>", text: ` to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>${ARGS}`, opts: { tools: TOOLS }, expect: { tool_calls: CALL1 } },
  { name: "call in commentary, no constraint", text: `<|channel|>commentary to=functions.special_function<|message|>${ARGS}`, opts: { tools: TOOLS }, expect: { tool_calls: CALL1 } },
  {
    name: "analysis, then a call",
    text: `${A}<|start|>assistant to=functions.special_function<|channel|>analysis<|message|>${ARGS}`,
    opts: { tools: TOOLS },
    expect: { content: "", reasoning_content: "I'm\nthinking", tool_calls: CALL1 },
  },
  {
    name: "an edit call whose strings hold braces",
    text:
      "<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary to=functions.edit <|constrain|>json" +
      '<|message|>{"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAll": false}',
    opts: { tools: TOOLS },
    expect: {
      reasoning_content: "Thinking about edit...",
      tool_calls: [tc("call_0", "edit", '{"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAll": false}')],
    },
  },
  {
    name: "structured output in the final channel",
    text: '<|channel|>analysis<|message|>I need to output the invoice details in JSON<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|>{"amount": 123.45, "date": "2025-12-03"}',
    expect: { reasoning_content: "I need to output the invoice details in JSON", content: '{"amount": 123.45, "date": "2025-12-03"}' },
  },
  {
    name: "unsolicited builtin call, recipient in the role: dropped",
    text: "<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant to=container.exec<|channel|>commentary<|message|>python3 -c 'print(\"hello\")'",
    expect: { reasoning_content: "I will execute python to say hello", content: "", tool_calls: [] },
  },
  {
    name: "unsolicited builtin call, recipient in the channel: dropped",
    text: "<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant<|channel|>commentary to=python <|constrain|>code<|message|>print(\"hello\")",
    expect: { reasoning_content: "I will execute python to say hello", content: "" },
  },
  { name: "stray commentary to=assistant before the analysis", text: `<|channel|>commentary to=assistant${A}${F}`, expect: THOUGHTS },
  { name: "stray commentary to=assistant before the final", text: `${A}<|start|>assistant<|channel|>commentary to=assistant<|channel|>final<|message|>${CONTENT}`, expect: THOUGHTS },
  // the real model's forms and more
  {
    name: "the template's own form (recipient in the role, bare json), ended by a rendered <|call|>",
    text: '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Seoul"}<|call|>',
    opts: { tools: TOOLS },
    expect: { content: "", reasoning_content: "Need weather.", tool_calls: [tc("call_0", "get_weather", '{"city": "Seoul"}')] },
  },
  {
    name: "a commentary preamble, then a call",
    text: '<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Busan","unit":"c"}',
    opts: { tools: TOOLS },
    expect: { content: "Let me check.", tool_calls: [tc("call_0", "get_weather", '{"city":"Busan","unit":"c"}')] },
  },
  {
    name: "several calls with parallel_tool_calls",
    text: `${A}<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Seoul"}<|call|><|start|>assistant<|channel|>commentary to=functions.special_function <|constrain|>json<|message|>${ARGS}<|call|>`,
    opts: { tools: TOOLS, parallel: true },
    expect: { reasoning_content: "I'm\nthinking", tool_calls: [tc("call_0", "get_weather", '{"city": "Seoul"}'), tc("call_1", "special_function", ARGS)] },
  },
  {
    name: "several calls without parallel_tool_calls: the first only",
    text: ` to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Seoul"}<|call|><|start|>assistant to=functions.special_function<|channel|>commentary json<|message|>${ARGS}`,
    opts: { tools: TOOLS, parallel: false },
    expect: { content: "", tool_calls: [tc("call_0", "get_weather", '{"city": "Seoul"}')] },
  },
  {
    name: "a call to a tool the request did not offer: dropped",
    text: ` to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Seoul"}`,
    opts: { tools: [SPECIAL] },
    expect: { content: "", tool_calls: [] },
  },
  {
    name: "no tools in the request: calls are not read",
    text: `${A}<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Seoul"}`,
    expect: { content: "", reasoning_content: "I'm\nthinking", tool_calls: [] },
  },
  {
    name: "arguments cut off are closed",
    text: ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Seo',
    opts: { tools: TOOLS },
    expect: { tool_calls: [tc("call_0", "get_weather", '{"city": "Seo"}')] },
  },
  {
    name: "reasoning_format none still reads calls",
    text: `${A}<|start|>assistant to=functions.special_function<|channel|>commentary json<|message|>${ARGS}`,
    opts: { tools: TOOLS, reasoningFormat: "none" },
    expect: { content: A, reasoning_content: "", tool_calls: CALL1 },
  },
  {
    name: "two analysis messages concatenate",
    text: "<|channel|>analysis<|message|>First. <|end|><|start|>assistant<|channel|>analysis<|message|>Second.<|end|><|start|>assistant<|channel|>final<|message|>Done",
    expect: { reasoning_content: "First. Second.", content: "Done" },
  },
  { name: "blank reasoning is dropped", text: "<|channel|>analysis<|message|> \n <|end|><|start|>assistant<|channel|>final<|message|>Hi", expect: { reasoning_content: "", content: "Hi" } },
  { name: "reasoning keeps its own whitespace", text: "<|channel|>analysis<|message|>\n a \n<|end|><|start|>assistant<|channel|>final<|message|> Hi ", expect: { reasoning_content: "\n a \n", content: " Hi " } },
  { name: "an output that reopens the turn", text: `<|start|>assistant${A}${F}`, expect: THOUGHTS },
  {
    name: "marker-like text inside a body stays there (only <|end|> ends it, as in llama.cpp)",
    text: "<|channel|>analysis<|message|>About <|start|> and <|return|><|end|><|start|>assistant<|channel|>final<|message|>Use <|call|> or <|start|>x",
    expect: { reasoning_content: "About <|start|> and <|return|>", content: "Use <|call|> or <|start|>x" },
  },
  { name: "unicode split anywhere", text: "<|channel|>analysis<|message|>생각 🤔<|end|><|start|>assistant<|channel|>final<|message|>안녕 👋 «ok»", expect: { reasoning_content: "생각 🤔", content: "안녕 👋 «ok»" } },
  { name: "empty output", text: "", expect: { content: "", reasoning_content: "", tool_calls: [] } },
  { name: "cut off inside a header", text: `${A}<|start|>assistant<|channel|>fin`, expect: { content: "", reasoning_content: "I'm\nthinking" } },
  // malformed output: from where it stops fitting, the text is content (llama-server fails the request)
  { name: "malformed: plain text", text: "Hello there, no channels.", expect: { content: "Hello there, no channels.", reasoning_content: "" } },
  { name: "malformed: text after a message", text: "<|channel|>analysis<|message|>x<|end|>Hello", expect: { reasoning_content: "x", content: "Hello" } },
  { name: "malformed: unknown channel", text: "<|channel|>summary<|message|>abc", expect: { content: "<|channel|>summary<|message|>abc" } },
  { name: "malformed: a broken marker", text: "<|channel|analysis<|message|>abc", expect: { content: "<|channel|analysis<|message|>abc" } },
  { name: "malformed: another role's message", text: "<|channel|>analysis<|message|>x<|end|><|start|>user<|message|>hi", expect: { reasoning_content: "x", content: "<|start|>user<|message|>hi" } },
  {
    name: "malformed: a call whose body is not JSON is content",
    text: " to=functions.get_weather<|channel|>commentary<|message|>Seoul please",
    opts: { tools: TOOLS },
    expect: { content: " to=functions.get_weather<|channel|>commentary<|message|>Seoul please", tool_calls: [] },
  },
  {
    name: "malformed: arguments whose brackets do not pair end the call",
    text: ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": [1} and more',
    opts: { tools: TOOLS },
    expect: { content: "} and more", tool_calls: [tc("call_0", "get_weather", '{"city": [1]}')] },
  },
  { name: "malformed: a header that never ends", text: `<|channel|>final ${"x".repeat(1500)}`, expect: { content: `<|channel|>final ${"x".repeat(1500)}` } },
];

describe("harmony output parser: whole, in every chunking, and from its deltas", () => {
  for (const c of CASES) {
    test(c.name, () => {
      const m = parseEverywhere(c.text, c.opts ?? {});
      expect(m).toMatchObject(c.expect);
    });
  }

  test("the arguments stream as the model writes them", () => {
    const p = new ChatOutputParser(options({ tools: TOOLS }));
    const pieces = [" to=functions.get_weather<|channel|>commentary json<|message|>", '{"city"', ': "Se', 'oul"}'];
    const got = pieces.map((t) => p.push(t));
    expect(got[0]).toEqual([]);
    expect(got[1]).toEqual([
      { kind: "tool_call", delta: { index: 0, id: "call_0", type: "function", function: { name: "get_weather", arguments: "" } } },
      { kind: "tool_call", delta: { index: 0, function: { arguments: '{"city"' } } },
    ]);
    expect(got[2]).toEqual([{ kind: "tool_call", delta: { index: 0, function: { arguments: ': "Se' } } }]);
    expect(got[3]).toEqual([{ kind: "tool_call", delta: { index: 0, function: { arguments: 'oul"}' } } }]);
    expect(p.finish()).toEqual([]);
  });

  test("reasoning and content stream as they come, holding back only what may be a marker", () => {
    const p = new ChatOutputParser(options({}));
    expect(p.push("<|channel|>analysis<|message|>Thin")).toEqual([{ kind: "reasoning", text: "Thin" }]);
    expect(p.push("king<|")).toEqual([{ kind: "reasoning", text: "king" }]);
    expect(p.push("end|><|start|>assistant<|channel|>final<|message|>Hi <")).toEqual([{ kind: "content", text: "Hi " }]);
    expect(p.push("3")).toEqual([{ kind: "content", text: "<3" }]);
    expect(p.finish()).toEqual([]);
  });

  test("a continued message's prefill comes with the first push (bloomery's prefix semantics)", () => {
    const p = new ChatOutputParser(options({ prefix: "<|channel|>analysis<|message|>I'm" }));
    expect(p.push(" sure")).toEqual([{ kind: "reasoning", text: "I'm" }, { kind: "reasoning", text: " sure" }]);
  });
});

describe("long harmony outputs stream in linear time", () => {
  const body = "line of code x = 1 + 2  # comment {with braces}\n".repeat(5000); // ~250 KB
  const cases: [string, string, Opts][] = [
    ["analysis and final", `<|channel|>analysis<|message|>${body}<|end|><|start|>assistant<|channel|>final<|message|>${body}`, {}],
    ["call arguments", ` to=functions.edit<|channel|>commentary json<|message|>${JSON.stringify({ oldString: body, newString: body })}`, { tools: TOOLS }],
    ["malformed, as content", `Hello ${body}`, {}],
  ];
  for (const [name, text, o] of cases) {
    test(`${name}: 4-character chunks`, () => {
      const p = new ChatOutputParser(options(o));
      const t0 = performance.now();
      for (let i = 0; i < text.length; i += 4) p.push(text.slice(i, i + 4));
      p.finish();
      expect(performance.now() - t0).toBeLessThan(3000);
      const m = p.message;
      if (o.tools) expect(JSON.parse(m.tool_calls[0].function.arguments)).toEqual({ oldString: body, newString: body });
      else expect(m.content.length).toBeGreaterThan(body.length - 1);
    });
  }
});
