// gpt-oss through the server's routes (chat completions, Anthropic messages, Responses,
// /apply-template) with a scripted engine writing harmony output: reasoning_content / thinking
// blocks / reasoning items, tool calls whole and streamed, reasoning_effort and reasoning_format,
// the forced-call and structured-reply grammars, the reasoning budget, malformed output.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { parseArgs } from "../src/cli/flags.ts";
import { GrammarMatcher } from "../src/grammar/index.ts";
import { type FakeServer, type Script, fakeServer } from "./fake-engine.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";
import { parseSse } from "./server-helpers.ts";

const GGUF = join(FIXTURES, "families", "gpt_oss", "gpt_oss.gguf");
const fixture = hasFixtures
  ? ((await Bun.file(join(FIXTURES, "templates", "renderings.json")).json()) as {
      templates: Record<string, { template: string; renderings: Record<string, { request: Record<string, unknown>; prompt: string }> }>;
    })
  : null;
const TEMPLATE = fixture?.templates["openai-gpt-oss-120b.jinja"].template ?? "";

const WEATHER = {
  type: "function",
  function: { name: "get_weather", description: "Get the weather for a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
};
const USER = [{ role: "user", content: "Weather in Seoul?" }];
const THOUGHT = "<|channel|>analysis<|message|>The user wants the weather.<|end|>";
const FINAL = "<|start|>assistant<|channel|>final<|message|>It is sunny in Seoul.";
const CALL = '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Seoul"}';

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

/** The current-date line is the clock's; the rest must be the fixture's. */
const undated = (p: string) => p.replace(/Current date: \d{4}-\d\d-\d\d/, "Current date: X");

describe.skipIf(!fixture)("gpt-oss through the server (scripted engine)", () => {
  test("/apply-template renders the fixture's requests as llama-server did", async () => {
    const s = server(() => "");
    for (const [kind, r] of Object.entries(fixture!.templates["openai-gpt-oss-120b.jinja"].renderings)) {
      const got = await json(await s.post("/apply-template", r.request));
      expect(undated(got.prompt), kind).toBe(undated(r.prompt));
    }
  });

  test("reasoning_effort: the request field, chat_template_kwargs, --chat-template-kwargs; none keeps the default", async () => {
    const s = server(() => "");
    const effort = async (body: Record<string, unknown>, srv = s) => /Reasoning: (\w+)/.exec((await json(await srv.post("/apply-template", { messages: USER, ...body }))).prompt)?.[1];
    expect(await effort({})).toBe("medium");
    expect(await effort({ reasoning_effort: "high" })).toBe("high");
    expect(await effort({ chat_template_kwargs: { reasoning_effort: "low" } })).toBe("low");
    expect(await effort({ reasoning_effort: "high", chat_template_kwargs: { reasoning_effort: "low" } })).toBe("high");
    expect(await effort({ reasoning_effort: "none", chat_template_kwargs: { reasoning_effort: "low" } })).toBe("medium");
    expect(await effort({ reasoning_effort: "" })).toBe("medium");
    const flagged = server(() => "", { chatTemplateKwargs: { reasoning_effort: "low" } });
    expect(await effort({}, flagged)).toBe("low");
    expect(await effort({ reasoning_effort: "high" }, flagged)).toBe("high");
    // --reasoning-effort LEVEL (parsed as the command line has it)
    const parsed = parseArgs(["-m", GGUF, "--reasoning-effort", "high"], {});
    if (parsed.action !== "serve") throw new Error("expected serve options");
    expect(parsed.options.reasoningEffort).toBe("high");
    const level = server(() => "", { reasoningEffort: parsed.options.reasoningEffort });
    expect(await effort({}, level)).toBe("high");
    expect(await effort({ reasoning_effort: "low" }, level)).toBe("low");
    expect(await effort({}, server(() => "", { reasoningEffort: "default" }))).toBe("medium");
    // the Responses API's reasoning.effort is the same field
    const rs = server(() => `${THOUGHT}${FINAL}`);
    await rs.post("/v1/responses", { input: "Hi", reasoning: { effort: "high" } });
    expect(rs.ctx.tokenizer.decode(rs.engine.requests[0].prompt)).toContain("Reasoning: high");
  });

  test("chat completion: analysis as reasoning_content, final as content", async () => {
    const s = server(() => `${THOUGHT}${FINAL}`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER }));
    expect(r.choices[0].message).toEqual({ role: "assistant", content: "It is sunny in Seoul.", reasoning_content: "The user wants the weather." });
    expect(r.choices[0].finish_reason).toBe("stop");
    // the prompt the engine got ends with the generation prompt
    expect(s.ctx.tokenizer.decode(s.engine.requests[0].prompt).endsWith("<|start|>assistant")).toBe(true);
  });

  test("reasoning_format none (request and --reasoning-format) keeps the analysis in the content", async () => {
    const want = { role: "assistant", content: "<|channel|>analysis<|message|>The user wants the weather.<|end|>It is sunny in Seoul." };
    const s = server(() => `${THOUGHT}${FINAL}`);
    expect((await json(await s.post("/v1/chat/completions", { messages: USER, reasoning_format: "none" }))).choices[0].message).toEqual(want);
    const flagged = server(() => `${THOUGHT}${FINAL}`, { reasoningFormat: "none" });
    expect((await json(await flagged.post("/v1/chat/completions", { messages: USER }))).choices[0].message).toEqual(want);
  });

  test("streamed: reasoning_content deltas, then content deltas, that add up to the message", async () => {
    for (const seed of [1, 2, 3]) {
      const s = server(() => `${THOUGHT}${FINAL}`);
      s.engine.seed = seed;
      const events = await sse(await s.post("/v1/chat/completions", { messages: USER, stream: true }));
      expect(events[events.length - 1]).toBe("[DONE]");
      const chunks = events.slice(0, -1);
      expect(chunks[0].choices[0].delta).toEqual({ role: "assistant", content: null });
      let reasoning = "";
      let content = "";
      let order = "";
      for (const c of chunks.slice(1)) {
        const d = c.choices[0]?.delta ?? {};
        if (d.reasoning_content) (reasoning += d.reasoning_content), (order += order.endsWith("r") ? "" : "r");
        if (d.content) (content += d.content), (order += order.endsWith("c") ? "" : "c");
      }
      expect({ reasoning, content, order }).toEqual({ reasoning: "The user wants the weather.", content: "It is sunny in Seoul.", order: "rc" });
      expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe("stop");
    }
  });

  test("tool call: message.tool_calls with the arguments as written, finish_reason tool_calls", async () => {
    const s = server(() => `${THOUGHT}${CALL}`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER] }));
    const m = r.choices[0].message;
    expect(r.choices[0].finish_reason).toBe("tool_calls");
    expect(m.content).toBe("");
    expect(m.reasoning_content).toBe("The user wants the weather.");
    expect(m.tool_calls).toHaveLength(1);
    expect(m.tool_calls[0]).toMatchObject({ type: "function", function: { name: "get_weather", arguments: '{"city": "Seoul"}' } });
    expect(m.tool_calls[0].id).toMatch(/^[A-Za-z0-9]{32}$/);
    // the template told the model about the tool
    expect(s.ctx.tokenizer.decode(s.engine.requests[0].prompt)).toContain("type get_weather = (_: {");
  });

  test("tool call streamed: id and name first, then argument fragments", async () => {
    const s = server(() => `${THOUGHT}${CALL}`);
    const events = await sse(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER], stream: true }));
    const calls = events.flatMap((e) => (e === "[DONE]" ? [] : (e.choices[0]?.delta?.tool_calls ?? [])));
    expect(calls.length).toBeGreaterThan(2);
    expect(calls[0]).toMatchObject({ index: 0, type: "function", function: { name: "get_weather", arguments: "" } });
    expect(typeof calls[0].id).toBe("string");
    for (const c of calls.slice(1)) {
      expect(c.id).toBeUndefined();
      expect(c.function.name).toBeUndefined();
    }
    expect(calls.map((c) => c.function.arguments).join("")).toBe('{"city": "Seoul"}');
    const last = events[events.length - 2];
    expect(last.choices[0].finish_reason).toBe("tool_calls");
  });

  test("tool_choice required: a harmony grammar that the model's call satisfies", async () => {
    const s = server(() => `${THOUGHT}${CALL}`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER], tool_choice: "required" }));
    expect(r.choices[0].message.tool_calls[0].function.arguments).toBe('{"city": "Seoul"}');
    const g = s.engine.requests[0].grammar!;
    expect(g).toContain("to=functions.get_weather");
    const m = GrammarMatcher.compile(g);
    expect(m.clone().accepts(new TextEncoder().encode(`${THOUGHT}${CALL}`))).toBe(true);
    expect(m.clone().accepts(new TextEncoder().encode(`${THOUGHT}${FINAL}`))).toBe(false);
  });

  test("response_format json_schema: the JSON is the final message (after any analysis)", async () => {
    const s = server(() => `${THOUGHT}<|start|>assistant<|channel|>final <|constrain|>json<|message|>{"city": "Seoul"}`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, response_format: { type: "json_schema", json_schema: { schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } } }));
    expect(r.choices[0].message).toEqual({ role: "assistant", content: '{"city": "Seoul"}', reasoning_content: "The user wants the weather." });
    const m = GrammarMatcher.compile(s.engine.requests[0].grammar!);
    expect(m.clone().accepts(new TextEncoder().encode(`${THOUGHT}<|start|>assistant<|channel|>final<|message|>{"city": "Seoul"}`))).toBe(true);
    expect(m.clone().accepts(new TextEncoder().encode('{"city": "Seoul"}'))).toBe(false);
  });

  test("reasoning budget: the analysis is cut, <|end|> forced, and generation goes on", async () => {
    const long = "<|channel|>analysis<|message|>one two three four five six seven eight nine ten eleven twelve thirteen<|end|>";
    const s = server((_req, call) => (call === 0 ? `${long}${FINAL}` : FINAL));
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, reasoning_budget_tokens: 3 }));
    expect(s.engine.requests.length).toBe(2);
    const second = s.ctx.tokenizer.decode(s.engine.requests[1].prompt);
    expect(second.endsWith("<|end|>")).toBe(true);
    const m = r.choices[0].message;
    expect(m.content).toBe("It is sunny in Seoul.");
    expect(m.reasoning_content.length).toBeGreaterThan(0);
    expect("one two three four five six seven eight nine ten eleven twelve thirteen".startsWith(m.reasoning_content)).toBe(true);
    expect(m.reasoning_content.length).toBeLessThan(30);
  });

  test("reasoning budget 0 ends the analysis as soon as it opens; before a forced call the grammar goes on after <|end|>", async () => {
    const long = "<|channel|>analysis<|message|>one two three four five<|end|>";
    // token by token through the harmony specials, so the kept tokens are real ones
    const specials = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"];
    const s = fakeServer(TEMPLATE, GGUF, (_req, call) => (call === 0 ? `${long}${FINAL}<|return|>` : `${FINAL}<|return|>`), {}, { specials, tokens: true });
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, reasoning_budget_tokens: 0 }));
    expect(r.choices[0].message).toEqual({ role: "assistant", content: "It is sunny in Seoul." });
    expect(s.ctx.tokenizer.decode(s.engine.requests[1].prompt).endsWith("<|channel|>analysis<|message|><|end|>")).toBe(true);
    const t = server((_req, call) => (call === 0 ? `${long}${CALL}` : CALL));
    const rt = await json(await t.post("/v1/chat/completions", { messages: USER, tools: [WEATHER], tool_choice: "required", reasoning_budget_tokens: 2 }));
    expect(rt.choices[0].message.tool_calls[0].function.arguments).toBe('{"city": "Seoul"}');
    const after = GrammarMatcher.compile(t.engine.requests[1].grammar!);
    expect(after.clone().accepts(new TextEncoder().encode(CALL))).toBe(true);
    expect(after.clone().accepts(new TextEncoder().encode(CALL.slice("<|start|>assistant".length)))).toBe(false);
  });

  test("malformed output is content, never an error", async () => {
    for (const text of ["Just plain text.", `${THOUGHT}garbage after the analysis`, "<|channel|>bogus<|message|>x"]) {
      const s = server(() => text);
      const res = await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER] });
      expect(res.status).toBe(200);
      const m = (await json(res)).choices[0].message;
      expect(m.content.length).toBeGreaterThan(0);
      expect(text.endsWith(m.content)).toBe(true);
    }
  });

  test("Anthropic messages: a thinking block, a text block; tool_use with its input", async () => {
    const s = server(() => `${THOUGHT}${FINAL}`);
    const r = await json(await s.post("/v1/messages", { model: "x", max_tokens: 100, messages: [{ role: "user", content: "Weather in Seoul?" }] }));
    expect(r.content).toEqual([
      { type: "thinking", thinking: "The user wants the weather.", signature: "" },
      { type: "text", text: "It is sunny in Seoul." },
    ]);
    const t = server(() => `${THOUGHT}${CALL}`);
    const tools = [{ name: "get_weather", description: "Get the weather", input_schema: WEATHER.function.parameters }];
    const rt = await json(await t.post("/v1/messages", { model: "x", max_tokens: 100, tools, messages: [{ role: "user", content: "Weather in Seoul?" }] }));
    expect(rt.stop_reason).toBe("tool_use");
    expect(rt.content[0]).toEqual({ type: "thinking", thinking: "The user wants the weather.", signature: "" });
    expect(rt.content[1]).toMatchObject({ type: "tool_use", name: "get_weather", input: { city: "Seoul" } });
  });

  test("Anthropic messages streamed: thinking_delta, then input_json_delta", async () => {
    const s = server(() => `${THOUGHT}${CALL}`);
    const tools = [{ name: "get_weather", input_schema: WEATHER.function.parameters }];
    const events = await sse(await s.post("/v1/messages", { model: "x", max_tokens: 100, stream: true, tools, messages: [{ role: "user", content: "Weather in Seoul?" }] }));
    const starts = events.filter((e) => e.type === "content_block_start").map((e) => e.content_block.type);
    expect(starts).toEqual(["thinking", "tool_use"]);
    const thinking = events.filter((e) => e.delta?.type === "thinking_delta").map((e) => e.delta.thinking).join("");
    const input = events.filter((e) => e.delta?.type === "input_json_delta").map((e) => e.delta.partial_json).join("");
    expect(thinking).toBe("The user wants the weather.");
    expect(JSON.parse(input)).toEqual({ city: "Seoul" });
  });

  test("Responses: a reasoning item, then the message; a function_call item for a call", async () => {
    const s = server(() => `${THOUGHT}${FINAL}`);
    const r = await json(await s.post("/v1/responses", { input: "Weather in Seoul?" }));
    expect(r.output.map((o: any) => o.type)).toEqual(["reasoning", "message"]);
    expect(r.output[0].content[0].text).toBe("The user wants the weather.");
    expect(r.output[1].content[0].text).toBe("It is sunny in Seoul.");
    const t = server(() => `${THOUGHT}${CALL}`);
    const tools = [{ type: "function", name: "get_weather", parameters: WEATHER.function.parameters }];
    const rt = await json(await t.post("/v1/responses", { input: "Weather in Seoul?", tools }));
    expect(rt.output.map((o: any) => o.type)).toEqual(["reasoning", "function_call"]);
    expect(rt.output[1]).toMatchObject({ name: "get_weather", arguments: '{"city": "Seoul"}' });
    const events = await sse(await t.post("/v1/responses", { input: "Weather in Seoul?", tools, stream: true }));
    expect(events.filter((e) => e.type === "response.reasoning_text.delta").map((e) => e.delta).join("")).toBe("The user wants the weather.");
    expect(events.filter((e) => e.type === "response.function_call_arguments.delta").map((e) => e.delta).join("")).toBe('{"city": "Seoul"}');
  });

  test("a tool-call turn sent back renders its analysis and the call as harmony history", async () => {
    const s = server(() => FINAL);
    const messages = [
      ...USER,
      { role: "assistant", content: "", reasoning_content: "The user wants the weather.", tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city": "Seoul"}' } }] },
      { role: "tool", tool_call_id: "c1", content: "sunny" },
    ];
    await s.post("/v1/chat/completions", { messages, tools: [WEATHER] });
    const prompt = s.ctx.tokenizer.decode(s.engine.requests[0].prompt);
    expect(prompt).toContain(
      '<|start|>assistant<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Seoul"}<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|><|start|>assistant',
    );
  });
});

describe.skipIf(!fixture)("gpt-oss's special tokens, token by token as the engine streams them", () => {
  // the harmony specials as gpt-oss's GGUF holds them: control tokens
  const SPECIALS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"];
  const tokenServer = (script: Script) => fakeServer(TEMPLATE, GGUF, script, {}, { specials: SPECIALS, tokens: true });

  test("the vocabulary: <|return|> and <|call|> end the generation, <|end|> and the markers are text", () => {
    const tok = tokenServer(() => "").ctx.tokenizer;
    const id = (t: string) => tok.encode(t, { addSpecial: false, parseSpecial: true });
    for (const t of SPECIALS) expect(id(t)).toHaveLength(1);
    expect(tok.isEog(id("<|return|>")[0])).toBe(true);
    expect(tok.isEog(id("<|call|>")[0])).toBe(true);
    for (const t of ["<|end|>", "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"]) {
      expect(tok.isEog(id(t)[0])).toBe(false);
      expect(tok.decode(id(t), { skipSpecial: true })).toBe(t);
    }
  });

  test("a final reply ends at <|return|>", async () => {
    const s = tokenServer(() => `${THOUGHT}${FINAL}<|return|><|start|>assistant<|channel|>final<|message|>never read`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER }));
    expect(r.choices[0]).toMatchObject({ finish_reason: "stop", message: { content: "It is sunny in Seoul.", reasoning_content: "The user wants the weather." } });
  });

  test("a call ends the turn at <|call|>, streamed", async () => {
    const s = tokenServer(() => `${THOUGHT}${CALL}<|call|><|start|>assistant<|channel|>final<|message|>never read`);
    const events = await sse(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER], stream: true }));
    const deltas = events.flatMap((e) => (e === "[DONE]" ? [] : e.choices.map((c: any) => c.delta)));
    expect(deltas.map((d) => d.reasoning_content ?? "").join("")).toBe("The user wants the weather.");
    expect(deltas.map((d) => d.content ?? "").join("")).toBe("");
    const args = deltas.flatMap((d) => d.tool_calls ?? []).map((c: any) => c.function.arguments).join("");
    expect(args).toBe('{"city": "Seoul"}');
    expect(events[events.length - 2].choices[0].finish_reason).toBe("tool_calls");
  });

  test("the template's own call form, as the model copies it from the history", async () => {
    const s = tokenServer(() => `${THOUGHT}<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Busan"}<|call|>`);
    const r = await json(await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER] }));
    expect(r.choices[0].message.tool_calls[0].function).toEqual({ name: "get_weather", arguments: '{"city":"Busan"}' });
  });
});
