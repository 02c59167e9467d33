// Chat templates: the 56 llama-server renderings of the fixture, llama's message shaping and
// capability workarounds, context variables, and clear errors (src/chat/template.ts and friends).
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import {
  ChatInputError,
  ChatTemplate,
  type ChatMessage,
  TemplateError,
  type ToolDef,
  applyChatTemplate,
  renderChat,
} from "../src/chat/index.ts";
import { cppDouble } from "../src/chat/jinja-json.ts";
import { strftime } from "../src/chat/strftime.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";

interface Rendering {
  request: { messages: ChatMessage[]; tools?: ToolDef[]; chat_template_kwargs?: Record<string, unknown> };
  prompt: string;
}
interface Fixture {
  templates: Record<string, { template: string; renderings: Record<string, Rendering> }>;
}

const fixture: Fixture | null = hasFixtures
  ? ((await Bun.file(join(FIXTURES, "templates", "renderings.json")).json()) as Fixture)
  : null;

/** The date the fixture was rendered on (gpt-oss prints it); local noon so any zone agrees. */
const FIXTURE_NOW = new Date(2026, 10, 29, 12, 0, 0);
/** The fixture's model had BOS "<|endoftext|>" and does not add it itself (DeepSeek prints it). */
const BOS = "<|endoftext|>";

function template(name: string): string {
  if (!fixture) throw new Error("no fixtures");
  return fixture.templates[name].template;
}

describe.skipIf(!fixture)("llama-server /apply-template renderings (fixture)", () => {
  const entries = fixture ? Object.entries(fixture.templates) : [];
  test("the fixture has 8 templates with 7 requests each", () => {
    expect(entries.length).toBe(8);
    for (const [, t] of entries) expect(Object.keys(t.renderings).length).toBe(7);
  });
  for (const [name, t] of entries) {
    for (const [kind, r] of Object.entries(t.renderings)) {
      test(`${name} / ${kind}`, () => {
        const prompt = renderChat(t.template, {
          messages: r.request.messages,
          tools: r.request.tools,
          kwargs: r.request.chat_template_kwargs,
          bosToken: BOS,
          eosToken: "<|im_end|>",
          now: FIXTURE_NOW,
        });
        expect(prompt).toBe(r.prompt);
      });
    }
  }

  test("gpt-oss prints the date it is given", () => {
    const src = template("openai-gpt-oss-120b.jinja");
    const p = renderChat(src, { messages: [{ role: "user", content: "Hi" }], now: new Date(2025, 0, 2, 12) });
    expect(p).toContain("Current date: 2025-01-02");
    expect(p).not.toContain("2026-11-29");
  });

  test("Qwen3: an assistant tool call given with object arguments renders like the JSON-string form", () => {
    const src = template("Qwen-Qwen3-0.6B.jinja");
    const r = fixture!.templates["Qwen-Qwen3-0.6B.jinja"].renderings.tool_roundtrip;
    const messages = structuredClone(r.request.messages);
    const call = messages[1].tool_calls![0];
    call.function.arguments = JSON.parse(call.function.arguments as string) as Record<string, unknown>;
    expect(renderChat(src, { messages, tools: r.request.tools, now: FIXTURE_NOW })).toBe(r.prompt);
  });

  test("enable_thinking defaults to the template's support and kwargs override it", () => {
    const src = template("Qwen3.5-4B.jinja");
    const messages = [{ role: "user", content: "Hi" }];
    expect(renderChat(src, { messages }).endsWith("<|im_start|>assistant\n<think>\n")).toBe(true);
    expect(renderChat(src, { messages, enableThinking: false }).endsWith("<think>\n\n</think>\n\n")).toBe(true);
    expect(renderChat(src, { messages, enableThinking: false, kwargs: { enable_thinking: true } }).endsWith("<think>\n")).toBe(true);
    expect(() => renderChat(src, { messages, kwargs: { enable_thinking: "false" } })).toThrow(ChatInputError);
  });

  test("addGenerationPrompt: false leaves the assistant turn unopened", () => {
    const src = template("Qwen-Qwen3-0.6B.jinja");
    const p = renderChat(src, { messages: [{ role: "user", content: "Hi" }], addGenerationPrompt: false });
    expect(p).toBe("<|im_start|>user\nHi<|im_end|>\n");
  });

  test("addBos drops the leading BOS the tokenizer will add", () => {
    const src = template("deepseek-ai-DeepSeek-V3.1.jinja");
    const req = { messages: [{ role: "user", content: "Hi" }], bosToken: BOS };
    expect(renderChat(src, req).startsWith(BOS)).toBe(true);
    expect(renderChat(src, { ...req, addBos: true }).startsWith("<｜User｜>Hi")).toBe(true);
  });

  test("apply() reports the generation prompt and an open think block", () => {
    const q35 = applyChatTemplate(template("Qwen3.5-4B.jinja"), { messages: [{ role: "user", content: "Hi" }] });
    expect(q35.generationPrompt).toBe("<|im_start|>assistant\n<think>\n");
    expect(q35.thinkingPrefill).toBe("<think>\n");
    const off = applyChatTemplate(template("Qwen3.5-4B.jinja"), {
      messages: [{ role: "user", content: "Hi" }],
      kwargs: { enable_thinking: false },
    });
    expect(off.thinkingPrefill).toBeNull();
    const q3 = applyChatTemplate(template("Qwen-Qwen3-0.6B.jinja"), { messages: [{ role: "user", content: "Hi" }] });
    expect(q3.generationPrompt).toBe("<|im_start|>assistant\n");
    expect(q3.thinkingPrefill).toBeNull();
    const glm = applyChatTemplate(template("GLM-4.7-Flash.jinja"), { messages: [{ role: "user", content: "Hi" }] });
    expect(glm.thinkingPrefill).toBe("<think>");
  });
});

describe.skipIf(!fixture)("template capabilities (probed like llama's caps.cpp)", () => {
  test("per fixture template", () => {
    const caps = (n: string) => new ChatTemplate(template(n)).caps;
    expect(caps("Qwen-Qwen3-0.6B.jinja")).toMatchObject({
      supports_string_content: true,
      supports_typed_content: false,
      supports_tools: true,
      supports_tool_calls: true,
      supports_system_role: true,
      supports_object_arguments: true,
    });
    // Qwen3.5 renders both strings and text parts itself
    expect(caps("Qwen3.5-4B.jinja")).toMatchObject({ supports_string_content: true, supports_typed_content: true });
    // DeepSeek-V3.1 never describes tools to the model, but renders calls
    expect(caps("deepseek-ai-DeepSeek-V3.1.jinja")).toMatchObject({ supports_tools: false, supports_tool_calls: true });
    // gpt-oss reads only the first tool call of a message, and reads reasoning_effort
    expect(caps("openai-gpt-oss-120b.jinja")).toMatchObject({
      supports_parallel_tool_calls: false,
      supports_reasoning_effort: true,
    });
    expect(caps("Qwen-Qwen3-0.6B.jinja").supports_reasoning_effort).toBe(false);
    // GLM-4.7 keeps older reasoning when clear_thinking is false
    expect(caps("GLM-4.7-Flash.jinja").supports_preserve_reasoning).toBe(true);
  });

  test("string content only", () => {
    const t = new ChatTemplate("{% for message in messages %}{{ message['role'] + ': ' + message['content'] }}{% endfor %}");
    expect(t.caps.supports_string_content).toBe(true);
    expect(t.caps.supports_typed_content).toBe(false);
  });

  test("typed content, raises on string", () => {
    const t = new ChatTemplate(
      "{% for message in messages %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}" +
        "{{ content['text'] }}{% endfor %}{% endfor %}",
    );
    expect(t.caps.supports_string_content).toBe(false);
    expect(t.caps.supports_typed_content).toBe(true);
  });

  test("typed content, silently drops string", () => {
    const t = new ChatTemplate("{% for message in messages %}{{ message['content'][0]['text'] }}{% endfor %}");
    expect(t.caps.supports_string_content).toBe(false);
    expect(t.caps.supports_typed_content).toBe(true);
  });

  test("a template that ignores the system message does not support the system role", () => {
    const t = new ChatTemplate(
      "{% for m in messages %}{% if m.role != 'system' %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}",
    );
    expect(t.caps.supports_system_role).toBe(false);
    expect(new ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}").caps.supports_system_role).toBe(true);
  });
});

describe("message shaping before rendering (llama-server semantics)", () => {
  const echo =
    "{% for m in messages %}[{{ m.role }}|{{ m.content | tojson }}" +
    "{% if m.tool_calls %}{% for tc in m.tool_calls %}|{{ tc.function.name }}:{{ tc.function.arguments | tojson }}{% endfor %}{% endif %}]{% endfor %}";

  test("text parts are joined with newlines for a string-only template", () => {
    const p = renderChat("{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}", {
      messages: [{ role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] }],
    });
    expect(p).toBe("user=a\nb;");
  });

  test("strings become one text part for a typed-only template", () => {
    const src = "{% for m in messages %}{% for p in m.content %}<{{ p.type }}:{{ p.text }}>{% endfor %}{% endfor %}";
    expect(renderChat(src, { messages: [{ role: "user", content: "hi" }] })).toBe("<text:hi>");
  });

  test("tool-call arguments given as a JSON string reach the template as an object", () => {
    const p = renderChat(echo, {
      messages: [
        { role: "user", content: "q" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: '{"a":[1,2],"b":"ü"}' } }],
        },
      ],
      prefillAssistant: false,
    });
    expect(p).toBe('[user|"q"][assistant|""|f:{"a": [1, 2], "b": "ü"}]');
  });

  test("arguments that are not JSON are a ChatInputError naming the field", () => {
    const bad = () =>
      renderChat(echo, {
        messages: [{ role: "assistant", tool_calls: [{ type: "function", function: { name: "f", arguments: "{oops" } }] }],
        prefillAssistant: false,
      });
    expect(bad).toThrow(ChatInputError);
    expect(bad).toThrow("messages[0].tool_calls[0].function.arguments");
  });

  test("a template that never reads arguments keys gets them as the JSON string", () => {
    const src =
      "{% for m in messages %}{% for tc in m.tool_calls %}{{ tc.function.arguments }}{% endfor %}{% endfor %}";
    const p = renderChat(src, {
      messages: [{ role: "assistant", tool_calls: [{ type: "function", function: { name: "f", arguments: '{"a":1}' } }] }],
      prefillAssistant: false,
    });
    expect(p).toBe('{"a":1}');
  });

  test("developer becomes system, and the system message merges into the next when unsupported", () => {
    const noSystem = "{% for m in messages %}{% if m.role != 'system' %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}";
    const p = renderChat(noSystem, {
      messages: [
        { role: "developer", content: "Be brief." },
        { role: "user", content: "Hi" },
      ],
    });
    expect(p).toBe("<user>Be brief.\nHi");
  });

  test("message fields reach the template in llama's shape (empty fields dropped)", () => {
    const src = "{% for m in messages %}{{ m | tojson }};{% endfor %}";
    const p = renderChat(src, {
      messages: [
        { role: "user", content: "x", name: "" },
        { role: "assistant", content: "y", reasoning_content: "r" },
        { role: "tool", content: "z", tool_call_id: "c1", name: "f" },
      ],
    });
    expect(p).toBe(
      '{"role": "user", "content": "x"};' +
        '{"role": "assistant", "content": "y", "reasoning_content": "r"};' +
        '{"role": "tool", "content": "z", "name": "f", "tool_call_id": "c1"};',
    );
  });

  test("tools reach the template as {type, function: {name, description, parameters}}", () => {
    const src = "{{ tools | tojson }}";
    const p = renderChat(src, {
      messages: [{ role: "user", content: "x" }],
      tools: [{ type: "function", function: { name: "f", strict: true } } as unknown as ToolDef],
    });
    expect(p).toBe('[{"type": "function", "function": {"name": "f", "description": "", "parameters": {}}}]');
    expect(renderChat("{{ tools is defined }}", { messages: [{ role: "user", content: "x" }], tools: [] })).toBe("False");
  });

  test("context variables: add_generation_prompt only when set, bos/eos, dates, kwargs", () => {
    const src =
      "{{ add_generation_prompt is defined }}|{{ bos_token }}|{{ eos_token }}|{{ datetime }}|{{ date_string }}|" +
      "{{ strftime_now('%Y-%m-%d %a %B %-d') }}|{{ custom | tojson }}";
    const req = {
      messages: [{ role: "user", content: "x" }],
      bosToken: "<s>",
      eosToken: "</s>",
      now: new Date(2026, 2, 5, 9, 30),
      kwargs: { custom: [1, "two"] },
    };
    expect(renderChat(src, req)).toBe('True|<s>|</s>|Mar 05 2026|05 Mar 2026|2026-03-05 Thu March 5|[1, "two"]');
    expect(renderChat(src, { ...req, addGenerationPrompt: false }).startsWith("False|")).toBe(true);
  });

  test("reasoning_effort and preserve_reasoning kwargs set llama's alias variables", () => {
    const src = "{{ reasoning_strength }}|{{ clear_thinking }}|{{ preserve_thinking }}";
    const p = renderChat(src, {
      messages: [{ role: "user", content: "x" }],
      kwargs: { reasoning_effort: "high", preserve_reasoning: true },
    });
    expect(p).toBe("high|False|True");
  });

  test("tojson spacing is Python's (', ' and ': '), indent and separators honoured", () => {
    const src = "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(separators=(',', ':')) }}";
    const p = renderChat(src, { messages: [{ role: "user", content: "" }], kwargs: { x: { a: [1, 2], b: "é\"" } } });
    expect(p).toBe('{"a": [1, 2], "b": "é\\""}|{\n  "a": [\n    1,\n    2\n  ],\n  "b": "é\\""\n}|{"a":[1,2],"b":"é\\""}');
  });
});

describe.skipIf(!fixture)("continuing a final assistant message (prefill, continue_final_message)", () => {
  const history: ChatMessage[] = [{ role: "user", content: "Hi" }];
  const prefill = (m: Partial<ChatMessage>): ChatMessage[] => [...history, { role: "assistant", content: "", ...m }];

  test("Qwen3.5 (Qwen3-XML handler): history, then the turn reopened with reasoning and content", () => {
    const src = template("Qwen3.5-4B.jinja");
    const base = renderChat(src, { messages: history, addGenerationPrompt: false });
    const p = applyChatTemplate(src, { messages: prefill({ content: "Hello, ", reasoning_content: "I'm thinking" }) });
    expect(p.continuation).toBe("content");
    expect(p.prompt).toBe(`${base}<|im_start|>assistant\n<think>\nI'm thinking\n</think>\n\nHello, `);
    expect(p.parsePrefix).toBe("<think>\nI'm thinking\n</think>\n\nHello, ");
  });

  test("reasoning only: the think block stays open", () => {
    const src = template("Qwen3.5-4B.jinja");
    const p = applyChatTemplate(src, { messages: prefill({ reasoning_content: "I'm" }) });
    expect(p.continuation).toBe("reasoning");
    expect(p.prompt.endsWith("<|im_start|>assistant\n<think>\nI'm")).toBe(true);
  });

  test("Qwen3 (generic rule): reasoning delimiters as the template writes them", () => {
    const src = template("Qwen-Qwen3-0.6B.jinja");
    expect(new ChatTemplate(src).reasoningDelimiters()).toEqual({ start: "<think>\n", end: "\n</think>\n\n" });
    const p = renderChat(src, { messages: prefill({ content: "Hello, ", reasoning_content: "I'm thinking" }) });
    expect(p).toBe("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nI'm thinking\n</think>\n\nHello, ");
  });

  test("Qwen3-Coder (no thinking): only the content is prefilled", () => {
    const src = template("Qwen3-Coder.jinja");
    const p = applyChatTemplate(src, { messages: prefill({ content: "def f(" }) });
    expect(p.prompt).toBe("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\ndef f(");
    expect(p.parsePrefix).toBe("def f(");
  });

  test("gpt-oss: analysis then final channel", () => {
    const src = template("openai-gpt-oss-120b.jinja");
    const p = renderChat(src, { messages: prefill({ content: "Hello", reasoning_content: "Think" }), now: FIXTURE_NOW });
    expect(p.endsWith("<|start|>assistant<|channel|>analysis<|message|>Think<|end|><|start|>assistant<|channel|>final<|message|>Hello")).toBe(true);
  });

  test("prefillAssistant: false renders the assistant message as history", () => {
    const src = template("Qwen3-Coder.jinja");
    const p = renderChat(src, { messages: prefill({ content: "Done." }), prefillAssistant: false, addGenerationPrompt: false });
    expect(p).toBe("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nDone.<|im_end|>\n");
  });

  test("explicit continue_final_message needs addGenerationPrompt: false (as llama-server)", () => {
    const src = template("Qwen3-Coder.jinja");
    const msgs: ChatMessage[] = [...history, { role: "assistant", content: "Do" }];
    expect(() => renderChat(src, { messages: msgs, prefillAssistant: false, continueFinalMessage: true })).toThrow(ChatInputError);
    const p = renderChat(src, { messages: msgs, prefillAssistant: false, continueFinalMessage: "content", addGenerationPrompt: false });
    expect(p.endsWith("<|im_start|>assistant\nDo")).toBe(true);
  });

  test("refused: two trailing assistant messages; continuing a message with tool calls", () => {
    const src = template("Qwen3-Coder.jinja");
    expect(() =>
      renderChat(src, { messages: [...history, { role: "assistant", content: "a" }, { role: "assistant", content: "b" }] }),
    ).toThrow("2 or more assistant messages");
    expect(() =>
      renderChat(src, {
        messages: [...history, { role: "assistant", tool_calls: [{ type: "function", function: { name: "f", arguments: "{}" } }] }],
      }),
    ).toThrow("tool calls");
  });
});

describe("llama.cpp jinja semantics where @huggingface/jinja differs", () => {
  const r = (src: string, kwargs: Record<string, unknown> = {}) =>
    renderChat(src, { messages: [{ role: "user", content: "x" }], kwargs });

  test("printing: booleans as Python, none and objects print nothing, lists flatten", () => {
    expect(r("{{ true }}|{{ false }}|{{ none }}|{{ undefined_name }}|{{ d }}|{{ [1, 'a', [2.5]] }}|{{ 2.0 }}", { d: { a: 1 } })).toBe(
      "True|False||||1a2.5|2.0",
    );
  });

  test("| string gives Python reprs", () => {
    expect(r("{{ true | string }}|{{ none | string }}|{{ l | string }}|{{ d | string }}", {
      l: [1, "a", false, null],
      d: { k: "it's", n: { m: 0.5 } },
    })).toBe(`True|None|[1, 'a', False, None]|{'k': "it's", 'n': {'m': 0.5}}`);
  });

  test("concatenation: none and undefined next to a string are empty; ~ stringifies", () => {
    expect(r("{{ 'a' + none + 'b' }}|{{ nothing + 'c' }}|{{ 'x' ~ true ~ 1 }}")).toBe("ab|c|xTrue1");
  });

  test("a loop over undefined is empty (its else block runs)", () => {
    expect(r("{% for t in tools %}T{% else %}none{% endfor %}|{% for t in missing if t %}x{% endfor %}.")).toBe("none|.");
  });

  test("filters on undefined and none give empty values", () => {
    expect(r("[{{ u | trim }}][{{ u | length }}][{{ u | items | list | length }}][{{ n | selectattr('x') | list | length }}]", { n: null })).toBe(
      "[][0][0][0]",
    );
  });

  test("tojson: floats as C++ streams print them, ensure_ascii in lowercase hex, positional arguments", () => {
    expect(r("{{ x | tojson }}", { x: { pi: 3.14159265, big: 123456789.5, small: 0.00001, n: 7, s: "é😀" } })).toBe(
      '{"pi": 3.14159, "big": 1.23457e+08, "small": 1e-05, "n": 7, "s": "é😀"}',
    );
    expect(r("{{ x | tojson(true) }}|{{ x | tojson(ensure_ascii=true, indent=1) }}", { x: ["é😀"] })).toBe(
      '["\\u00e9\\ud83d\\ude00"]|[\n "\\u00e9\\ud83d\\ude00"\n]',
    );
  });

  test("cppDouble is %g with 6 significant digits", () => {
    const cases: [number, string][] = [
      [0.1, "0.1"], [1.5, "1.5"], [3.14159265, "3.14159"], [1e20, "1e+20"], [123456789.5, "1.23457e+08"],
      [0.0001, "0.0001"], [0.00001, "1e-05"], [100000, "100000"], [1000000, "1e+06"], [999999.5, "1e+06"], [-2.5e-7, "-2.5e-07"],
    ];
    for (const [x, want] of cases) expect(cppDouble(x)).toBe(want);
  });

  test("list.append / list.pop, str.format, min / max / sum", () => {
    expect(
      r("{% set ns = namespace(ids=[]) %}{% set _ = ns.ids.append('a') %}{% set _ = ns.ids.append('b') %}" +
        "{{ ns.ids.pop(0) }}{{ ns.ids | length }}{{ ns.ids.length }}|{{ '<{}|{}>'.format('x', 2) }}|" +
        "{{ [3, 1, 2] | min }}{{ [3, 1, 2] | max }}{{ [3, 1, 2] | sum }}"),
    ).toBe("a11|<x|2>|136");
  });

  test.skipIf(!fixture)("Qwen3-Coder renders boolean arguments and union types as llama (Python) does", () => {
    const tools: ToolDef[] = [
      {
        type: "function",
        function: {
          name: "set_flag",
          parameters: { type: "object", properties: { on: { type: "boolean" }, note: { type: ["string", "null"] } } },
        },
      },
    ];
    const p = renderChat(template("Qwen3-Coder.jinja"), {
      messages: [
        { role: "user", content: "go" },
        { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "set_flag", arguments: '{"on": true}' } }] },
        { role: "tool", content: "ok" },
        { role: "user", content: "thanks" },
      ],
      tools,
    });
    expect(p).toContain("<type>['string', 'null']</type>");
    expect(p).toContain("<parameter=on>\nTrue\n</parameter>");
  });
});

describe("errors", () => {
  test("a template that does not parse is a TemplateError of kind parse", () => {
    let err: unknown;
    try {
      renderChat("{% for m in messages %}{{ m.content }}", { messages: [{ role: "user", content: "x" }] });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TemplateError);
    expect((err as TemplateError).kind).toBe("parse");
  });

  test("raise_exception is a TemplateError of kind raise carrying the template's message", () => {
    let err: unknown;
    try {
      renderChat("{{ raise_exception('Conversation roles must alternate') }}", { messages: [{ role: "user", content: "x" }] });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TemplateError);
    expect((err as TemplateError).kind).toBe("raise");
    expect((err as TemplateError).message).toContain("Conversation roles must alternate");
  });

  test("a failure while rendering is a TemplateError of kind render", () => {
    let err: unknown;
    try {
      renderChat("{% for x in 5 %}{% endfor %}", { messages: [{ role: "user", content: "x" }] });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TemplateError);
    expect((err as TemplateError).kind).toBe("render");
  });

  const src = "{% for m in messages %}{{ m.content }}{% endfor %}";
  const bad: [string, unknown, string][] = [
    ["messages not an array", { role: "user" }, "messages"],
    ["message without role", [{ content: "x" }], "messages[0]"],
    ["user without content", [{ role: "user" }], "messages[0]"],
    ["content of a bad type", [{ role: "user", content: 5 }], "messages[0].content"],
    ["image part without multimodal", [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }], "messages[0].content[0]"],
    ["unknown part type", [{ role: "user", content: [{ type: "audio" }] }], "messages[0].content[0].type"],
    ["tool call without name", [{ role: "assistant", tool_calls: [{ type: "function", function: { arguments: "{}" } }] }], "messages[0].tool_calls[0].function.name"],
    ["assistant with neither content nor calls", [{ role: "assistant" }], "messages[0]"],
  ];
  for (const [what, messages, field] of bad) {
    test(`bad request: ${what}`, () => {
      let err: unknown;
      try {
        renderChat(src, { messages: messages as ChatMessage[] });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ChatInputError);
      expect((err as ChatInputError).field).toBe(field);
    });
  }

  test("bad tools are a ChatInputError", () => {
    expect(() =>
      renderChat(src, { messages: [{ role: "user", content: "x" }], tools: [{ type: "retrieval" } as unknown as ToolDef] }),
    ).toThrow(ChatInputError);
  });
});

describe("strftime (C locale)", () => {
  test("conversions", () => {
    const d = new Date(2026, 10, 29, 7, 5, 9);
    expect(strftime(d, "%Y-%m-%d %H:%M:%S")).toBe("2026-11-29 07:05:09");
    expect(strftime(d, "%a %A %b %B %e %j %I %p %y %%")).toBe("Sun Sunday Nov November 29 333 07 AM 26 %");
    expect(strftime(d, "%d %b %Y")).toBe("29 Nov 2026");
    expect(strftime(d, "%-m/%-d %Q")).toBe("11/29 %Q");
  });
});
