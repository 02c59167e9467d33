// Chat format detection (src/chat/format.ts, families.ts): family, tool-call syntax and thinking
// behaviour of the fixture's eight real templates, and of small synthetic ones.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { detectChatFormat, thinkingPrefillOf } from "../src/chat/index.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";

const fixture = hasFixtures
  ? ((await Bun.file(join(FIXTURES, "templates", "renderings.json")).json()) as {
      templates: Record<string, { template: string }>;
    })
  : null;

describe.skipIf(!fixture)("detectChatFormat on the fixture templates", () => {
  const expected: Record<string, [string, string, boolean, boolean, boolean]> = {
    // name: family, toolCalls, supportsThinking, promptOpensThinking, toolCallsParsed
    "Qwen-Qwen3-0.6B.jinja": ["qwen3", "hermes", true, false, true],
    "Qwen3-Coder.jinja": ["qwen3-coder", "qwen3-xml", false, false, true],
    "Qwen3.5-4B.jinja": ["qwen3.5", "qwen3-xml", true, true, true],
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": ["nemotron-3", "qwen3-xml", true, true, true],
    "GLM-4.7-Flash.jinja": ["glm-4.5", "glm-xml", true, true, true],
    "MiniMax-M2.jinja": ["minimax-m2", "minimax-xml", true, true, false],
    "deepseek-ai-DeepSeek-V3.1.jinja": ["deepseek-v3.1", "deepseek-v3.1", true, true, true],
    "openai-gpt-oss-120b.jinja": ["gpt-oss", "gpt-oss", true, false, true],
  };
  for (const [name, [family, toolCalls, thinks, opens, parsed]] of Object.entries(expected)) {
    test(name, () => {
      const f = detectChatFormat(fixture!.templates[name].template);
      expect(f.family).toBe(family as typeof f.family);
      expect(f.toolCalls).toBe(toolCalls as typeof f.toolCalls);
      expect(f.supportsThinking).toBe(thinks);
      expect(f.promptOpensThinking).toBe(opens);
      expect(f.toolCallsParsed).toBe(parsed);
      if (family === "gpt-oss" || !thinks) expect(f.thinking).toBeNull();
      else expect(f.thinking).toEqual({ start: "<think>", end: "</think>" });
    });
  }
});

describe("detectChatFormat on synthetic templates", () => {
  test("plain ChatML is chatml without tools or thinking", () => {
    const f = detectChatFormat(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    );
    expect(f).toMatchObject({ family: "chatml", toolCalls: "none", supportsThinking: false, promptOpensThinking: false });
  });

  test("a template with neither markers nor thinking is generic", () => {
    expect(detectChatFormat("{% for m in messages %}{{ m.content }}{% endfor %}").family).toBe("generic");
  });

  test("Hermes-style tool calls without thinking", () => {
    const f = detectChatFormat(
      "{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}<tool_call>{}</tool_call>{% endif %}",
    );
    expect(f).toMatchObject({ family: "hermes", toolCalls: "hermes", supportsThinking: false });
  });

  test("the no-newline <tool_call><function= variant is not Qwen3-XML", () => {
    const src =
      "{% for m in messages %}{% for tool_call in m.tool_calls %}{{ '<tool_call><function=' ~ tool_call.name ~ '>' }}" +
      "<parameter=x>{% endfor %}{% endfor %}";
    expect(detectChatFormat(src).toolCalls).not.toBe("qwen3-xml");
  });

  test("a generation prompt that opens <think> is seen; one that closes it is not", () => {
    const open = "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}A:<think>\n{% endif %}";
    const closed =
      "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}A:<think></think>{% endif %}";
    expect(detectChatFormat(open).promptOpensThinking).toBe(true);
    expect(detectChatFormat(closed).promptOpensThinking).toBe(false);
    expect(detectChatFormat(closed).supportsThinking).toBe(true);
  });
});

describe("thinkingPrefillOf", () => {
  test("open, closed and absent think blocks", () => {
    expect(thinkingPrefillOf("<|im_start|>assistant\n<think>\n")).toBe("<think>\n");
    expect(thinkingPrefillOf("<|im_start|>assistant\n<think>\n\n</think>\n\n")).toBeNull();
    expect(thinkingPrefillOf("<|im_start|>assistant\n")).toBeNull();
    expect(thinkingPrefillOf("<｜Assistant｜><think>")).toBe("<think>");
  });
});
