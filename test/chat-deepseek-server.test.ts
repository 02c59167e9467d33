// DeepSeek V3.1 through the server's routes (/apply-template, chat completions, Anthropic
// messages, Responses) with a scripted engine: its template as llama-server renders it (thinking
// on and off), <think> reasoning as reasoning_content, its <｜tool▁calls▁begin｜> calls whole and
// streamed, the forced-call grammar, malformed output as content.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { parseChatOutput } from "../src/chat/index.ts";
import { GrammarMatcher } from "../src/grammar/index.ts";
import { type FakeServer, type Script, fakeServer } from "./fake-engine.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";
import { parseSse } from "./server-helpers.ts";

const GGUF = join(FIXTURES, "families", "deepseek_v3", "deepseek_v3.gguf");
const NAME = "deepseek-ai-DeepSeek-V3.1.jinja";
const fixture = hasFixtures
  ? ((await Bun.file(join(FIXTURES, "templates", "renderings.json")).json()) as {
      templates: Record<string, { template: string; renderings: Record<string, { request: Record<string, unknown>; prompt: string }> }>;
    })
  : null;
const TEMPLATE = fixture?.templates[NAME].template ?? "";

const WEATHER = {
  type: "function",
  function: { name: "get_weather", description: "Get the weather for a city", parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] } },
};
const TIME = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };
const USER = [{ role: "user", content: "Weather in Seoul?" }];
// the prompt opens <think>: the model's output starts inside its reasoning
const THOUGHT = "The user wants the weather.</think>";
const FINAL = "It is sunny in Seoul.";
const CALL = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Seoul"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>';
const TWO_CALLS =
  '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>';

/** The fixture's model printed "<|endoftext|>" as its BOS: so does this GGUF's vocabulary. */
function server(script: Script, opts = {}): FakeServer {
  const s = fakeServer(TEMPLATE, GGUF, script, opts);
  s.ctx.info = { ...s.ctx.info!, bosToken: "<|endoftext|>", eosToken: "<｜end▁of▁sentence｜>" };
  return s;
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

describe.skipIf(!fixture)("DeepSeek V3.1 through the server (scripted engine)", () => {
  test("/apply-template renders the fixture's 7 requests as llama-server did", async () => {
    const s = server(() => "");
    const cases = Object.entries(fixture!.templates[NAME].renderings);
    expect(cases.length).toBe(7);
    for (const [kind, r] of cases) {
      const got = await json(await s.post("/apply-template", r.request));
      expect(got.prompt, kind).toBe(r.prompt);
    }
  });

  test("thinking switches: enable_thinking and thinking kwargs, reasoning_budget 0", async () => {
    const s = server(() => "");
    const end = async (body: Record<string, unknown>) => ((await json(await s.post("/apply-template", { messages: USER, ...body }))).prompt as string).slice(-22);
    expect((await end({})).endsWith("<｜Assistant｜><think>")).toBe(true);
    expect((await end({ chat_template_kwargs: { enable_thinking: false } })).endsWith("<think></think>")).toBe(true);
    expect((await end({ chat_template_kwargs: { thinking: false } })).endsWith("<think></think>")).toBe(true);
    expect((await end({ chat_template_kwargs: { enable_thinking: false, thinking: true } })).endsWith("<｜Assistant｜><think>")).toBe(true);
    const off = server(() => "", { chatTemplateKwargs: { enable_thinking: false } });
    expect(((await json(await off.post("/apply-template", { messages: USER }))).prompt as string).endsWith("<think></think>")).toBe(true);
    const budget0 = server(() => "", { reasoningBudget: 0 });
    expect(((await json(await budget0.post("/apply-template", { messages: USER }))).prompt as string).endsWith("<think></think>")).toBe(true);
  });

  test("chat completion: reasoning_content, then content; thinking off: all content", async () => {
    const s = server(() => `${THOUGHT}${FINAL}`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER }));
    expect(r.choices[0].message).toEqual({ role: "assistant", content: FINAL, reasoning_content: "The user wants the weather." });
    expect(r.choices[0].finish_reason).toBe("stop");
    expect(s.ctx.tokenizer.decode(s.engine.requests[0].prompt).endsWith("<｜Assistant｜><think>")).toBe(true);
    const off = server(() => FINAL);
    const ro = await json(await off.post("/v1/chat/completions", { messages: USER, chat_template_kwargs: { enable_thinking: false } }));
    expect(ro.choices[0].message).toEqual({ role: "assistant", content: FINAL });
  });

  test("reasoning_format none keeps the think block in the content (with the prompt's <think>)", async () => {
    const s = server(() => `${THOUGHT}${FINAL}`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, reasoning_format: "none" }));
    expect(r.choices[0].message).toEqual({ role: "assistant", content: `<think>${THOUGHT}${FINAL}` });
    const d = await json(await s.post("/v1/chat/completions", { messages: USER, reasoning_format: "deepseek" }));
    expect(d.choices[0].message.reasoning_content).toBe("The user wants the weather.");
  });

  test("streamed reasoning then content adds up to the message", async () => {
    for (const seed of [1, 2, 3]) {
      const s = server(() => `${THOUGHT}${FINAL}`);
      s.engine.seed = seed;
      const events = await sse(await s.post("/v1/chat/completions", { messages: USER, stream: true }));
      let reasoning = "";
      let content = "";
      for (const e of events.slice(1, -1)) {
        const d = e.choices[0]?.delta ?? {};
        reasoning += d.reasoning_content ?? "";
        content += d.content ?? "";
        expect(`${d.content ?? ""}${d.reasoning_content ?? ""}`).not.toContain("think>");
      }
      expect({ reasoning, content }).toEqual({ reasoning: "The user wants the weather.", content: FINAL });
    }
  });

  test("tool call: tool_calls with the arguments as written, finish_reason tool_calls", async () => {
    const s = server(() => `${THOUGHT}${CALL}`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER] }));
    const m = r.choices[0].message;
    expect(r.choices[0].finish_reason).toBe("tool_calls");
    expect(m.reasoning_content).toBe("The user wants the weather.");
    expect(m.content).toBe("");
    expect(m.tool_calls).toHaveLength(1);
    expect(m.tool_calls[0]).toMatchObject({ type: "function", function: { name: "get_weather", arguments: '{"city": "Seoul"}' } });
    expect(m.tool_calls[0].id).toMatch(/^[A-Za-z0-9]{32}$/);
  });

  test("a call straight from the thoughts (no </think>), content before a call, two calls in one block", async () => {
    const s = server(() => `Let me check.${CALL}`);
    const m = (await json(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER] }))).choices[0].message;
    expect(m.reasoning_content).toBe("Let me check.");
    expect(m.tool_calls[0].function.arguments).toBe('{"city": "Seoul"}');
    const t = server(() => `REASONING</think>CONTENT${TWO_CALLS}`);
    const mt = (await json(await t.post("/v1/chat/completions", { messages: USER, tools: [WEATHER, TIME] }))).choices[0].message;
    expect(mt.reasoning_content).toBe("REASONING");
    expect(mt.content).toBe("CONTENT");
    expect(mt.tool_calls.map((c: any) => c.function)).toEqual([
      { name: "get_weather", arguments: '{"city": "Paris"}' },
      { name: "get_time", arguments: '{"city": "Paris"}' },
    ]);
    expect(new Set(mt.tool_calls.map((c: any) => c.id)).size).toBe(2);
    // parallel_tool_calls false keeps the first
    const one = (await json(await t.post("/v1/chat/completions", { messages: USER, tools: [WEATHER, TIME], parallel_tool_calls: false }))).choices[0].message;
    expect(one.tool_calls.map((c: any) => c.function.name)).toEqual(["get_weather"]);
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
        expect(mine.map((c: any) => c.function.arguments).join("")).toBe('{"city": "Paris"}');
      }
      expect(events[events.length - 2].choices[0].finish_reason).toBe("tool_calls");
    }
  });

  test("malformed output is content, never an error", async () => {
    const cases: [string, string][] = [
      ["Just plain text.", "Just plain text."],
      [`${THOUGHT}<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>no_such_tool<｜tool▁sep｜>{}<｜tool▁call▁end｜>`, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>no_such_tool<｜tool▁sep｜>{}<｜tool▁call▁end｜>"],
      [`${THOUGHT}<｜tool▁calls▁begin｜>garbage`, "<｜tool▁calls▁begin｜>garbage"],
    ];
    for (const [text, content] of cases) {
      const s = server(() => text);
      const res = await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER], chat_template_kwargs: text === "Just plain text." ? { enable_thinking: false } : undefined });
      expect(res.status).toBe(200);
      const r = await json(res);
      expect(r.choices[0].message.content).toBe(content);
      expect(r.choices[0].message.tool_calls).toBeUndefined();
      expect(r.choices[0].finish_reason).toBe("stop");
    }
    // a call cut off in its arguments still ends as a call with what was written
    const cut = parseChatOutput('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Se', {
      syntax: "deepseek-v3.1",
      thinking: null,
      tools: [WEATHER],
    });
    expect(cut.tool_calls[0].function).toEqual({ name: "get_weather", arguments: '{"city": "Se' });
  });

  test("tool_choice required / named: a grammar the model's call satisfies", async () => {
    const s = server(() => `${THOUGHT}${CALL}`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER, TIME], tool_choice: "required" }));
    expect(r.choices[0].message.tool_calls[0].function.arguments).toBe('{"city": "Seoul"}');
    const enc = (t: string) => new TextEncoder().encode(t);
    const m = GrammarMatcher.compile(s.engine.requests[0].grammar!);
    expect(m.clone().accepts(enc(`${THOUGHT}${CALL}`))).toBe(true);
    expect(m.clone().accepts(enc(`${THOUGHT}${TWO_CALLS}`))).toBe(true);
    expect(m.clone().accepts(enc(`${THOUGHT}${FINAL}`))).toBe(false);
    expect(m.clone().accepts(enc(`${THOUGHT}<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"town": "Seoul"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`))).toBe(false);
    // named: only that tool; thinking off: no think block first
    const n = server(() => CALL);
    await n.post("/v1/chat/completions", { messages: USER, tools: [WEATHER, TIME], tool_choice: { type: "function", function: { name: "get_time" } }, chat_template_kwargs: { enable_thinking: false } });
    const g = GrammarMatcher.compile(n.engine.requests[0].grammar!);
    expect(g.clone().accepts(enc(CALL))).toBe(false);
    expect(g.clone().accepts(enc(CALL.replace("get_weather", "get_time")))).toBe(true);
    expect(g.clone().accepts(enc(`${THOUGHT}${CALL.replace("get_weather", "get_time")}`))).toBe(false);
  });

  test("reasoning budget: the thoughts are cut, </think> forced, and the reply goes on", async () => {
    const long = "one two three four five six seven eight nine ten eleven twelve thirteen</think>";
    const s = server((_req, call) => (call === 0 ? `${long}${FINAL}` : FINAL));
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, reasoning_budget_tokens: 3 }));
    expect(s.engine.requests.length).toBe(2);
    expect(s.ctx.tokenizer.decode(s.engine.requests[1].prompt).endsWith("\n</think>\n\n")).toBe(true);
    const m = r.choices[0].message;
    expect(m.content).toBe(FINAL);
    expect(m.reasoning_content.length).toBeGreaterThan(0);
    expect(long.startsWith(m.reasoning_content)).toBe(true);
    expect(m.reasoning_content.length).toBeLessThan(30);
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
    expect(rt.content[0]).toEqual({ type: "thinking", thinking: "The user wants the weather.", signature: "" });
    expect(rt.content[1]).toMatchObject({ type: "tool_use", name: "get_weather", input: { city: "Seoul" } });
    const events = await sse(await t.post("/v1/messages", { model: "x", max_tokens: 100, stream: true, tools, messages: USER }));
    expect(events.filter((e) => e.type === "content_block_start").map((e) => e.content_block.type)).toEqual(["thinking", "tool_use"]);
    expect(events.filter((e) => e.delta?.type === "thinking_delta").map((e) => e.delta.thinking).join("")).toBe("The user wants the weather.");
    expect(JSON.parse(events.filter((e) => e.delta?.type === "input_json_delta").map((e) => e.delta.partial_json).join(""))).toEqual({ city: "Seoul" });
    // Anthropic's thinking switch reaches the template
    const off = server(() => FINAL);
    await off.post("/v1/messages", { model: "x", max_tokens: 100, messages: USER, thinking: { type: "disabled" } });
    expect(off.ctx.tokenizer.decode(off.engine.requests[0].prompt).endsWith("<think></think>")).toBe(true);
  });

  test("Responses: a reasoning item, then the message; a function_call item, streamed", async () => {
    const s = server(() => `${THOUGHT}${FINAL}`);
    const r = await json(await s.post("/v1/responses", { input: "Weather in Seoul?" }));
    expect(r.output.map((o: any) => o.type)).toEqual(["reasoning", "message"]);
    expect(r.output[0].content[0].text).toBe("The user wants the weather.");
    expect(r.output[1].content[0].text).toBe(FINAL);
    const t = server(() => `${THOUGHT}${CALL}`);
    const tools = [{ type: "function", name: "get_weather", parameters: WEATHER.function.parameters }];
    const rt = await json(await t.post("/v1/responses", { input: "Weather in Seoul?", tools }));
    expect(rt.output.map((o: any) => o.type)).toEqual(["reasoning", "function_call"]);
    expect(rt.output[1]).toMatchObject({ name: "get_weather", arguments: '{"city": "Seoul"}' });
    const events = await sse(await t.post("/v1/responses", { input: "Weather in Seoul?", tools, stream: true }));
    expect(events.filter((e) => e.type === "response.reasoning_text.delta").map((e) => e.delta).join("")).toBe("The user wants the weather.");
    expect(events.filter((e) => e.type === "response.function_call_arguments.delta").map((e) => e.delta).join("")).toBe('{"city": "Seoul"}');
  });

  test("a tool-call turn sent back renders as DeepSeek history", async () => {
    const s = server(() => FINAL);
    const messages = [
      ...USER,
      { role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city": "Seoul"}' } }] },
      { role: "tool", tool_call_id: "c1", content: "sunny" },
    ];
    await s.post("/v1/chat/completions", { messages, tools: [WEATHER] });
    expect(s.ctx.tokenizer.decode(s.engine.requests[0].prompt)).toContain(
      '<｜Assistant｜><think></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Seoul"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>',
    );
  });
});
