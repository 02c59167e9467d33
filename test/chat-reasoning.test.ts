// Reasoning split (src/chat/reasoning.ts): every reasoning_format, generation prompts that open
// <think>, and streaming in any chunking equal to the whole-text split without leaking tag parts.
import { describe, expect, test } from "bun:test";
import {
  ChatInputError,
  type ReasoningFormat,
  type ReasoningOptions,
  ReasoningStream,
  parseReasoningFormat,
  splitReasoning,
} from "../src/chat/index.ts";

function stream(text: string, opts: ReasoningOptions, chunks: string[]): { reasoning: string; content: string } {
  const s = new ReasoningStream(opts);
  let reasoning = "";
  let content = "";
  const take = (ds: { kind: string; text: string }[]) => {
    for (const d of ds) {
      expect(d.text).not.toBe("");
      if (d.kind === "reasoning") reasoning += d.text;
      else content += d.text;
    }
  };
  for (const c of chunks) take(s.push(c));
  take(s.finish());
  expect(chunks.join("")).toBe(text);
  return { reasoning, content };
}

/** Deterministic pseudo-random chunkings (by code point). */
function chunkings(text: string, seeds = 5): string[][] {
  const cps = Array.from(text);
  const out: string[][] = [cps, [text]];
  for (let seed = 1; seed <= seeds; seed++) {
    let x = seed * 2654435761;
    const chunks: string[] = [];
    let i = 0;
    while (i < cps.length) {
      x = (x * 1103515245 + 12345) >>> 0;
      const n = 1 + (x % 7);
      chunks.push(cps.slice(i, i + n).join(""));
      i += n;
    }
    out.push(chunks);
  }
  return out;
}

interface Case {
  name: string;
  text: string;
  prefill?: string;
  endBefore?: string[];
  expect: Partial<Record<ReasoningFormat, { reasoning: string; content: string }>>;
}

const T = "<think>\nI'm\nthinking\n</think>\n\nHello, world!\nWhat's up?";
const cases: Case[] = [
  {
    name: "think block at the start",
    text: T,
    expect: {
      deepseek: { reasoning: "I'm\nthinking", content: "Hello, world!\nWhat's up?" },
      auto: { reasoning: "I'm\nthinking", content: "Hello, world!\nWhat's up?" },
      none: { reasoning: "", content: T },
      "deepseek-legacy": { reasoning: "I'm\nthinking", content: T },
    },
  },
  {
    name: "generation prompt opened <think>",
    text: "I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?",
    prefill: "<think>\n",
    expect: {
      deepseek: { reasoning: "I'm\nthinking", content: "Hello, world!\nWhat's up?" },
      none: { reasoning: "", content: "<think>\nI'm\nthinking\n</think>\n\nHello, world!\nWhat's up?" },
      "deepseek-legacy": { reasoning: "I'm\nthinking", content: "<think>\nI'm\nthinking\n</think>\n\nHello, world!\nWhat's up?" },
    },
  },
  {
    name: "opened by the prompt and closed at once",
    text: "</think>Hello, world!",
    prefill: "<think>\n",
    expect: { deepseek: { reasoning: "", content: "Hello, world!" } },
  },
  {
    name: "cut off inside reasoning",
    text: "Let me think about 안녕 👋 and more  \n",
    prefill: "<think>\n",
    expect: { deepseek: { reasoning: "Let me think about 안녕 👋 and more", content: "" } },
  },
  {
    name: "no think block",
    text: "Hello <think>not reasoning</think> there",
    expect: {
      deepseek: { reasoning: "", content: "Hello <think>not reasoning</think> there" },
      "deepseek-legacy": { reasoning: "", content: "Hello <think>not reasoning</think> there" },
    },
  },
  {
    name: "whitespace before the think block",
    text: "\n\n <think>a < b</think>  b > a\n",
    expect: { deepseek: { reasoning: "a < b", content: "b > a\n" } },
  },
  {
    name: "whitespace-only reasoning is dropped",
    text: "<think>\n\n</think>\n\nHi",
    expect: { deepseek: { reasoning: "", content: "Hi" } },
  },
  {
    name: "a second think block stays content",
    text: "<think>one</think>two<think>three</think>",
    expect: { deepseek: { reasoning: "one", content: "two<think>three</think>" } },
  },
  {
    name: "a partial opening tag at the end is content",
    text: "<thi",
    expect: { deepseek: { reasoning: "", content: "<thi" }, none: { reasoning: "", content: "<thi" } },
  },
  {
    name: "a partial closing tag at the end is reasoning text",
    text: "<think>abc</thi",
    expect: { deepseek: { reasoning: "abc</thi", content: "" } },
  },
  {
    name: "a tool call ends prefilled reasoning and stays in the content",
    text: "Need to inspect the current directory.\n<tool_call>\n{}</tool_call>",
    prefill: "<think>\n",
    endBefore: ["<tool_call>"],
    expect: { deepseek: { reasoning: "Need to inspect the current directory.", content: "<tool_call>\n{}</tool_call>" } },
  },
  {
    name: "tags split across unicode",
    text: "<think>생각 🤔\n중</think>\n답: «ok»",
    expect: { deepseek: { reasoning: "생각 🤔\n중", content: "답: «ok»" } },
  },
];

describe("splitReasoning (whole text)", () => {
  for (const c of cases) {
    for (const [format, want] of Object.entries(c.expect)) {
      test(`${c.name} [${format}]`, () => {
        const got = splitReasoning(c.text, { format: format as ReasoningFormat, prefill: c.prefill, endBefore: c.endBefore });
        expect(got).toEqual(want!);
      });
    }
  }
});

describe("ReasoningStream equals splitReasoning in every chunking", () => {
  const formats: ReasoningFormat[] = ["none", "deepseek", "deepseek-legacy", "auto"];
  for (const c of cases) {
    for (const format of formats) {
      test(`${c.name} [${format}]`, () => {
        const opts: ReasoningOptions = { format, prefill: c.prefill, endBefore: c.endBefore };
        const whole = splitReasoning(c.text, opts);
        for (const chunks of chunkings(c.text)) expect(stream(c.text, opts, chunks)).toEqual(whole);
      });
    }
  }

  test("1-character streaming never emits part of a tag", () => {
    const s = new ReasoningStream({ format: "deepseek" });
    const deltas: { kind: string; text: string }[] = [];
    for (const ch of "<think>ab\nc</think>\nde") deltas.push(...s.push(ch));
    deltas.push(...s.finish());
    expect(deltas).toEqual([
      { kind: "reasoning", text: "a" },
      { kind: "reasoning", text: "b" },
      { kind: "reasoning", text: "\nc" },
      { kind: "content", text: "d" },
      { kind: "content", text: "e" },
    ]);
  });

  test("reasoning streams as it arrives (held back only for a possible tag or trailing space)", () => {
    const s = new ReasoningStream({ format: "deepseek", prefill: "<think>\n" });
    expect(s.push("Hello")).toEqual([{ kind: "reasoning", text: "Hello" }]);
    expect(s.push(" wor")).toEqual([{ kind: "reasoning", text: " wor" }]);
    expect(s.push("ld </")).toEqual([{ kind: "reasoning", text: "ld" }]);
    expect(s.push("thinking>")).toEqual([{ kind: "reasoning", text: " </thinking>" }]);
    expect(s.push("</think>\n\nOK")).toEqual([{ kind: "content", text: "OK" }]);
    expect(s.finish()).toEqual([]);
  });

  test("none streams content untouched, the prefill first", () => {
    const s = new ReasoningStream({ format: "none", prefill: "<think>\n" });
    expect(s.push("a</think>")).toEqual([{ kind: "content", text: "<think>\na</think>" }]);
    expect(s.push("b")).toEqual([{ kind: "content", text: "b" }]);
  });
});

describe("parseReasoningFormat", () => {
  test("accepts llama's names and rejects others with the field named", () => {
    for (const f of ["none", "deepseek", "deepseek-legacy", "auto"]) expect(parseReasoningFormat(f)).toBe(f as ReasoningFormat);
    expect(() => parseReasoningFormat("think")).toThrow(ChatInputError);
    expect(() => parseReasoningFormat(3)).toThrow("reasoning_format");
  });
});
