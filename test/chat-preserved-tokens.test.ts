// A chat format's markers held as control tokens (GLM's <tool_call>, <arg_key>.., DeepSeek's
// <｜tool▁calls▁begin｜>.., as llama.cpp's converter marks them): the engine's task writes them
// out when the request preserves them (llama-server's preserved_tokens), skips them otherwise;
// the chat routes preserve the format's markers, so the calls parse, token by token.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { Model } from "../src/engine/model.ts";
import type { GenerateRequest } from "../src/engine/protocol.ts";
import { Task, type TokenSampler } from "../src/engine/task.ts";
import { fakeServer } from "./fake-engine.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";

const fixture = hasFixtures
  ? ((await Bun.file(join(FIXTURES, "templates", "renderings.json")).json()) as { templates: Record<string, { template: string }> })
  : null;

const GLM_SPECIALS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"];
const DS_SPECIALS = ["<think>", "</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜end▁of▁sentence｜>"];
const WEATHER = { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };
const USER = [{ role: "user", content: "Weather in Seoul?" }];

function glm() {
  return fakeServer(fixture!.templates["GLM-4.7-Flash.jinja"].template, join(FIXTURES, "families", "glm4_moe", "glm4_moe.gguf"), () => "", {}, { specials: GLM_SPECIALS, tokens: true });
}

/** Runs the engine's Task over a fixed token sequence (a sampler that picks them in order). */
function runTask(s: ReturnType<typeof glm>, ids: number[], preservedTokens?: number[]): string {
  let i = 0;
  const sampler: TokenSampler = {
    sample: () => ({ id: ids[i++] }),
    accept: () => {},
    candidates: () => 0,
    sampleTop: () => ({ id: ids[i++] }),
  };
  const req: GenerateRequest = { id: 1, prompt: [1], params: {}, nPredict: -1, stop: [], ignoreEos: false, nProbs: 0, idSlot: -1, cachePrompt: false, preservedTokens };
  const task = new Task(req, { tokenizer: s.ctx.tokenizer } as unknown as Model, sampler);
  let text = "";
  for (let n = 0; n < ids.length; n++) text += task.next(new Float32Array(1), 1 + n, 1 << 20).event?.text ?? "";
  return text + task.finish("eos", 0).text;
}

describe.skipIf(!fixture)("preserved tokens", () => {
  const CALL = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Seoul</arg_value></tool_call>";

  test("the engine's task writes preserved control tokens out and skips the others", () => {
    const s = glm();
    const tok = s.ctx.tokenizer;
    const ids = tok.encode(`Hm.</think>${CALL}`, { addSpecial: false, parseSpecial: true });
    const special = GLM_SPECIALS.map((t) => tok.encode(t, { addSpecial: false, parseSpecial: true })).map((t) => t[0]);
    for (const id of special) expect(tok.isSpecial(id)).toBe(true);
    expect(runTask(s, ids)).toBe("Hm.get_weathercitySeoul");
    expect(runTask(s, ids, special)).toBe(`Hm.</think>${CALL}`);
  });

  test("GLM: the chat route preserves the format's markers; a call parses token by token", async () => {
    const s = glm();
    s.engine.script = () => `Let me look.</think>${CALL}`;
    const r = (await (await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER] })).json()) as any;
    expect(r.choices[0].message.reasoning_content).toBe("Let me look.");
    expect(r.choices[0].message.tool_calls[0].function).toEqual({ name: "get_weather", arguments: '{"city":"Seoul"}' });
    const tok = s.ctx.tokenizer;
    const names = s.engine.requests[0].preservedTokens!.map((id) => tok.decode([id]));
    expect(names.sort()).toEqual([...GLM_SPECIALS].sort());
    // no tools: only the think tags
    await s.post("/v1/chat/completions", { messages: USER });
    expect(s.engine.requests[1].preservedTokens!.map((id) => tok.decode([id])).sort()).toEqual(["</think>", "<think>"]);
  });

  test("DeepSeek V3.1: its call markers as control tokens, and <｜end▁of▁sentence｜> ends the turn", async () => {
    const s = fakeServer(fixture!.templates["deepseek-ai-DeepSeek-V3.1.jinja"].template, join(FIXTURES, "families", "deepseek_v3", "deepseek_v3.gguf"), () => "", {}, { specials: DS_SPECIALS, tokens: true });
    s.engine.script = () =>
      'Let me look.</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Seoul"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>never read';
    const r = (await (await s.post("/v1/chat/completions", { messages: USER, tools: [WEATHER] })).json()) as any;
    expect(r.choices[0].finish_reason).toBe("tool_calls");
    expect(r.choices[0].message.reasoning_content).toBe("Let me look.");
    expect(r.choices[0].message.content).toBe("");
    expect(r.choices[0].message.tool_calls[0].function).toEqual({ name: "get_weather", arguments: '{"city": "Seoul"}' });
    expect(s.engine.requests[0].preservedTokens).toHaveLength(7);
  });
});
