// GLM-4.5 .. 4.7 through the server's routes (/apply-template, chat completions, Anthropic
// messages, Responses) with a scripted engine: the GLM-4.7-Flash template as llama-server renders
// it (thinking on and off), <think> reasoning as reasoning_content, <tool_call>NAME<arg_key>..
// calls whole and streamed with schema-typed values, the forced-call grammar, malformed output.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { parseChatOutput } from "../src/chat/index.ts";
import { GrammarMatcher } from "../src/grammar/index.ts";
import { type FakeServer, type Script, fakeServer } from "./fake-engine.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";
import { parseSse } from "./server-helpers.ts";

const GGUF = join(FIXTURES, "families", "glm4_moe", "glm4_moe.gguf");
const NAME = "GLM-4.7-Flash.jinja";
const fixture = hasFixtures
  ? ((await Bun.file(join(FIXTURES, "templates", "renderings.json")).json()) as {
      templates: Record<string, { template: string; renderings: Record<string, { request: Record<string, unknown>; prompt: string }> }>;
    })
  : null;
const TEMPLATE = fixture?.templates[NAME].template ?? "";

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" }, unit: { type: "string", enum: ["c", "f"] } }, required: ["city"] },
  },
};
const TIME = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };
const USER = [{ role: "user", content: "Weather in Seoul?" }];
// the prompt opens <think>: the model's output starts inside its reasoning
const THOUGHT = "The user wants the weather.</think>";
const FINAL = "It is sunny in Seoul.";
const CALL = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Seoul</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>";
const CALL_ARGS = '{"city":"Seoul","days":3}';
// GLM-4.5 / 4.6 put newlines between the tags
const CALL_46 = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Seoul</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>";
const TWO_CALLS = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call><tool_call>get_time<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>";

function server(script: Script, opts = {}): FakeServer {
  return fakeServer(TEMPLATE, GGUF, script, opts);
}

async function json(r: Response): Promise<any> {
  const t = await r.text();
  try {
    return JSON.parse(t);
  } catch {
    throw new Error(`not JSON (${r.status}): ${t}`);
  }
}

async function sse(r: Response): Promise<any[]> {
  expect(r.status).toBe(200);
  return parseSse(await r.text()).map((e) => e.data);
}

describe.skipIf(!fixture)("GLM-4.7 through the server (scripted engine)", () => {
  test("/apply-template renders the fixture's 7 requests as llama-server did", async () => {
    const s = server(() => "");
    const cases = Object.entries(fixture!.templates[NAME].renderings);
    expect(cases.length).toBe(7);
    for (const [kind, r] of cases) {
      const got = await json(await s.post("/apply-template", r.request));
      expect(got.prompt, kind).toBe(r.prompt);
    }
  });

  test("thinking switches: chat_template_kwargs, --chat-template-kwargs, reasoning budget 0", async () => {
    const end = async (s: FakeServer, body: Record<string, unknown> = {}) => (await json(await s.post("/apply-template", { messages: USER, ...body }))).prompt as string;
    const s = server(() => "");
    expect((await end(s)).endsWith("<|assistant|><think>")).toBe(true);
    expect((await end(s, { chat_template_kwargs: { enable_thinking: false } })).endsWith("<|assistant|></think>")).toBe(true);
    expect((await end(server(() => "", { chatTemplateKwargs: { enable_thinking: false } }))).endsWith("<|assistant|></think>")).toBe(true);
    expect((await end(server(() => "", { reasoningBudget: 0 }))).endsWith("<|assistant|></think>")).toBe(true);
  });

  test("chat completion: reasoning_content, then content; thinking off: all content", async () => {
    const s = server(() => `${THOUGHT}${FINAL}`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER }));
    expect(r.choices[0].message).toEqual({ role: "assistant", content: FINAL, reasoning_content: "The user wants the weather." });
    expect(r.choices[0].finish_reason).toBe("stop");
    const off = server(() => FINAL);
    const ro = await json(await off.post("/v1/chat/completions", { messages: USER, chat_template_kwargs: { enable_thinking: false } }));
    expect(ro.choices[0].message).toEqual({ role: "assistant", content: FINAL });
    expect(off.ctx.tokenizer.decode(off.engine.requests[0].prompt).endsWith("<|assistant|></think>")).toBe(true);
  });

  test("reasoning_format none keeps the think block in the content", async () => {
    const s = server(() => `${THOUGHT}${FINAL}`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, reasoning_format: "none" }));
    expect(r.choices[0].message).toEqual({ role: "assistant", content: `<think>${THOUGHT}${FINAL}` });
  });

  test("tool call: values typed by the schema, finish_reason tool_calls; GLM-4.6's newline form", async () => {
    for (const call of [CALL, CALL_46]) {
      const s = server(() => `${THOUGHT}${call}`);
      const r = await json(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER] }));
      const m = r.choices[0].message;
      expect(r.choices[0].finish_reason).toBe("tool_calls");
      expect(m.reasoning_content).toBe("The user wants the weather.");
      expect(m.content).toBe("");
      expect(m.tool_calls).toHaveLength(1);
      expect(m.tool_calls[0]).toMatchObject({ type: "function", function: { name: "get_weather", arguments: CALL_ARGS } });
      expect(m.tool_calls[0].id).toMatch(/^[A-Za-z0-9]{32}$/);
    }
    // the tools are in the prompt's system block
    const s = server(() => CALL);
    await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER] });
    expect(s.ctx.tokenizer.decode(s.engine.requests[0].prompt)).toContain('<tools>\n{"type": "function", "function": {"name": "get_weather"');
  });

  test("a call straight from the thoughts, content before a call, two calls; a string value keeps its text", async () => {
    const s = server(() => `Let me check.${CALL}`);
    const m = (await json(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER] }))).choices[0].message;
    expect(m.reasoning_content).toBe("Let me check.");
    expect(m.tool_calls[0].function.arguments).toBe(CALL_ARGS);
    const t = server(() => `REASONING</think>CONTENT\n${TWO_CALLS}`);
    const mt = (await json(await t.post("/v1/chat/completions", { messages: USER, tools: [WEATHER, TIME] }))).choices[0].message;
    expect(mt.reasoning_content).toBe("REASONING");
    expect(mt.content).toBe("CONTENT");
    expect(mt.tool_calls.map((c: any) => c.function)).toEqual([
      { name: "get_weather", arguments: '{"city":"Paris"}' },
      { name: "get_time", arguments: '{"city":"Paris"}' },
    ]);
    const one = (await json(await t.post("/v1/chat/completions", { messages: USER, tools: [WEATHER, TIME], parallel_tool_calls: false }))).choices[0].message;
    expect(one.tool_calls.map((c: any) => c.function.name)).toEqual(["get_weather"]);
    const quoted = parseChatOutput('<tool_call>get_weather<arg_key>city</arg_key><arg_value>"São" <Paulo>\n</arg_value><arg_key>days</arg_key><arg_value>x</arg_value></tool_call>', {
      syntax: "glm-xml",
      thinking: null,
      tools: [WEATHER],
    });
    expect(JSON.parse(quoted.tool_calls[0].function.arguments)).toEqual({ city: '"São" <Paulo>\n', days: "x" });
  });

  test("tool call streamed: id and name first, then argument fragments, for any chunking", async () => {
    for (const seed of [1, 2, 3, 4]) {
      const s = server(() => `${THOUGHT}${TWO_CALLS}`);
      s.engine.seed = seed;
      const events = await sse(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER, TIME], stream: true }));
      const calls = events.flatMap((e) => (e === "[DONE]" ? [] : (e.choices[0]?.delta?.tool_calls ?? [])));
      const content = events.map((e) => (e === "[DONE]" ? "" : (e.choices[0]?.delta?.content ?? ""))).join("");
      expect(content).toBe("");
      for (const index of [0, 1]) {
        const mine = calls.filter((c: any) => c.index === index);
        expect(mine[0]).toMatchObject({ index, type: "function", function: { name: index === 0 ? "get_weather" : "get_time", arguments: "" } });
        expect(typeof mine[0].id).toBe("string");
        for (const c of mine.slice(1)) expect(c.id === undefined && c.function.name === undefined).toBe(true);
        expect(mine.map((c: any) => c.function.arguments).join("")).toBe('{"city":"Paris"}');
      }
      expect(events[events.length - 2].choices[0].finish_reason).toBe("tool_calls");
    }
  });

  test("malformed output is content, never an error", async () => {
    for (const bad of ["<tool_call>no_such_tool<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>", "<tool_call>not a call at all", "Just text."]) {
      const s = server(() => `${THOUGHT}${bad}`);
      const res = await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER] });
      expect(res.status).toBe(200);
      const r = await json(res);
      expect(r.choices[0].message.content).toBe(bad);
      expect(r.choices[0].message.tool_calls).toBeUndefined();
      expect(r.choices[0].finish_reason).toBe("stop");
    }
    // cut off inside a value: the call ends with what was written
    const cut = parseChatOutput("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Seo", { syntax: "glm-xml", thinking: null, tools: [WEATHER] });
    expect(cut.tool_calls[0].function).toEqual({ name: "get_weather", arguments: '{"city":"Seo"}' });
    for (const text of ["<tool_call>get_weather<arg_key>city</arg_key>", "<tool_call>get_weather<arg_key>city</arg_key><arg_val", "<tool_call>get_weather<arg_key>ci"]) {
      const p = parseChatOutput(text, { syntax: "glm-xml", thinking: null, tools: [WEATHER] });
      expect(JSON.parse(p.tool_calls[0].function.arguments), text).toEqual(text.includes("</arg_key>") ? { city: "" } : {});
    }
  });

  test("tool_choice required / named: a grammar the model's call satisfies", async () => {
    const s = server(() => `${THOUGHT}${CALL}`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER, TIME], tool_choice: "required" }));
    expect(r.choices[0].message.tool_calls[0].function.arguments).toBe(CALL_ARGS);
    const enc = (t: string) => new TextEncoder().encode(t);
    const m = GrammarMatcher.compile(s.engine.requests[0].grammar!);
    expect(m.clone().accepts(enc(`${THOUGHT}${CALL}`))).toBe(true);
    expect(m.clone().accepts(enc(`${THOUGHT}${CALL_46}`))).toBe(true);
    expect(m.clone().accepts(enc(`${THOUGHT}${TWO_CALLS.replace("</tool_call><tool_call>", "</tool_call>\n<tool_call>")}`))).toBe(true);
    expect(m.clone().accepts(enc(`${THOUGHT}${FINAL}`))).toBe(false);
    expect(m.clone().accepts(enc(`${THOUGHT}${CALL.replace("<arg_value>3<", "<arg_value>three<")}`))).toBe(false);
    expect(m.clone().accepts(enc(`${THOUGHT}<tool_call>get_weather<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>`))).toBe(false);
    const n = server(() => CALL);
    await n.post("/v1/chat/completions", { messages: USER, tools: [WEATHER, TIME], tool_choice: { type: "function", function: { name: "get_time" } }, chat_template_kwargs: { enable_thinking: false } });
    const g = GrammarMatcher.compile(n.engine.requests[0].grammar!);
    expect(g.clone().accepts(enc(CALL))).toBe(false);
    expect(g.clone().accepts(enc("<tool_call>get_time<arg_key>city</arg_key><arg_value>Seoul</arg_value></tool_call>"))).toBe(true);
  });

  test("Anthropic messages: a thinking block, text; tool_use with its input; streamed", async () => {
    const s = server(() => `${THOUGHT}${FINAL}`);
    const r = await json(await s.post("/v1/messages", { model: "x", max_tokens: 100, messages: USER }));
    expect(r.content).toEqual([
      { type: "thinking", thinking: "The user wants the weather.", signature: "" },
      { type: "text", text: FINAL },
    ]);
    const t = server(() => `${THOUGHT}${CALL}`);
    const tools = [{ name: "get_weather", description: "Get the weather", input_schema: WEATHER.function.parameters }];
    const rt = await json(await t.post("/v1/messages", { model: "x", max_tokens: 100, tools, messages: USER }));
    expect(rt.stop_reason).toBe("tool_use");
    expect(rt.content[1]).toMatchObject({ type: "tool_use", name: "get_weather", input: { city: "Seoul", days: 3 } });
    const events = await sse(await t.post("/v1/messages", { model: "x", max_tokens: 100, stream: true, tools, messages: USER }));
    expect(events.filter((e) => e.type === "content_block_start").map((e) => e.content_block.type)).toEqual(["thinking", "tool_use"]);
    expect(JSON.parse(events.filter((e) => e.delta?.type === "input_json_delta").map((e) => e.delta.partial_json).join(""))).toEqual({ city: "Seoul", days: 3 });
  });

  test("Responses: a reasoning item, then the message; a function_call item, streamed", async () => {
    const s = server(() => `${THOUGHT}${FINAL}`);
    const r = await json(await s.post("/v1/responses", { input: "Weather in Seoul?" }));
    expect(r.output.map((o: any) => o.type)).toEqual(["reasoning", "message"]);
    expect(r.output[0].content[0].text).toBe("The user wants the weather.");
    const t = server(() => `${THOUGHT}${CALL}`);
    const tools = [{ type: "function", name: "get_weather", parameters: WEATHER.function.parameters }];
    const rt = await json(await t.post("/v1/responses", { input: "Weather in Seoul?", tools }));
    expect(rt.output.map((o: any) => o.type)).toEqual(["reasoning", "function_call"]);
    expect(rt.output[1]).toMatchObject({ name: "get_weather", arguments: CALL_ARGS });
    const events = await sse(await t.post("/v1/responses", { input: "Weather in Seoul?", tools, stream: true }));
    expect(events.filter((e) => e.type === "response.function_call_arguments.delta").map((e) => e.delta).join("")).toBe(CALL_ARGS);
  });

  test("a tool-call turn sent back renders as GLM history (arguments as key/value pairs)", async () => {
    const s = server(() => FINAL);
    const messages = [
      ...USER,
      { role: "assistant", content: "", reasoning_content: "Look it up.", tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city": "Seoul", "days": 3}' } }] },
      { role: "tool", tool_call_id: "c1", content: "sunny" },
    ];
    await s.post("/v1/chat/completions", { messages, tools: [WEATHER] });
    expect(s.ctx.tokenizer.decode(s.engine.requests[0].prompt)).toContain(
      "<|assistant|><think>Look it up.</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Seoul</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call><|observation|><tool_response>sunny</tool_response><|assistant|><think>",
    );
  });
});
