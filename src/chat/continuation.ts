// bloomery chat: continuing a final assistant message (llama-server's assistant prefill and
// `continue_final_message`): the history renders without it, then the assistant turn is opened
// and the message's reasoning and content are written into it for the model to continue.
import { ChatInputError } from "./errors.ts";
import type { ChatMessage } from "./types.ts";

/** What kind of continuation: go on writing the content, or go on reasoning. */
export type ContinuationMode = "content" | "reasoning";

/** What the caller asked for: llama's `continue_final_message` (true = decide by the message). */
export type ContinueRequest = boolean | "content" | "reasoning_content" | undefined;

export interface Continuation {
  mode: ContinuationMode;
  /** The message continued (the request's last). */
  reasoning: string;
  /** Its content (text parts joined with "\n"). */
  content: string;
}

function textOf(m: ChatMessage): string {
  if (typeof m.content === "string") return m.content;
  if (Array.isArray(m.content)) {
    return m.content
      .filter((p) => p.type === "text")
      .map((p) => p.text ?? "")
      .join("\n");
  }
  return "";
}

/**
 * Decides whether the request continues its last message, as llama-server does:
 * an explicit `continue_final_message`, or (with `prefillAssistant`, on by default) a trailing
 * assistant message. Returns null for a normal turn.
 * @throws ChatInputError for the combinations llama-server refuses.
 */
export function resolveContinuation(
  messages: ChatMessage[],
  explicit: ContinueRequest,
  addGenerationPrompt: boolean | undefined,
  prefillAssistant: boolean,
): Continuation | null {
  let mode: "auto" | ContinuationMode | null =
    explicit === true ? "auto" : explicit === "content" ? "content" : explicit === "reasoning_content" ? "reasoning" : null;
  const last = messages.length > 0 ? messages[messages.length - 1] : undefined;
  if (mode === null && prefillAssistant && last?.role === "assistant") {
    if (messages.length >= 2 && messages[messages.length - 2].role === "assistant") {
      throw new ChatInputError("messages", "cannot have 2 or more assistant messages at the end of the list");
    }
    mode = "auto"; // and no generation prompt, whatever was asked
  } else if (mode !== null && addGenerationPrompt !== false) {
    // llama-server's add_generation_prompt defaults to true, so it must be turned off explicitly
    throw new ChatInputError("continue_final_message", "cannot set both add_generation_prompt and continue_final_message to true");
  }
  if (mode === null || !last) return null;
  if (last.role === "assistant" && Array.isArray(last.tool_calls) && last.tool_calls.length > 0) {
    throw new ChatInputError("messages", "cannot continue an assistant message that contains tool calls");
  }
  const reasoning = typeof last.reasoning_content === "string" ? last.reasoning_content : "";
  const content = textOf(last);
  if (mode === "auto") mode = reasoning !== "" && content === "" ? "reasoning" : "content";
  return { mode, reasoning, content };
}

/** Reasoning delimiters as a template writes them around reasoning_content (with their whitespace). */
export interface ReasoningDelimiters {
  start: string;
  end: string;
}

/**
 * The text that opens the continued turn, per family (llama's specialised handlers for the
 * Qwen3-XML and gpt-oss families; the autoparser's rule for the others).
 * `generationPrompt` is the normal generation prompt of the history without the message.
 * Returns the text and the part of it the output parser should see before the model's output.
 */
export function continuationText(
  family: "qwen3-xml" | "gpt-oss" | "other",
  thinks: boolean,
  generationPrompt: string,
  delims: ReasoningDelimiters | null,
  c: Continuation,
): { text: string; parsePrefix: string } {
  const content = c.mode === "content" ? c.content : "";
  if (family === "qwen3-xml") {
    const head = "<|im_start|>assistant\n";
    const body = (thinks ? `<think>\n${c.reasoning}${c.mode === "content" ? "\n</think>\n\n" : ""}` : "") + content;
    return { text: head + body, parsePrefix: body };
  }
  if (family === "gpt-oss") {
    // the harmony parser starts after the turn's `<|start|>assistant`, as after a generation prompt
    const head = "<|start|>assistant";
    let body = `<|channel|>analysis<|message|>${c.reasoning}`;
    if (c.mode === "content") body += `<|end|><|start|>assistant<|channel|>final<|message|>${content}`;
    return { text: head + body, parsePrefix: body };
  }
  if (delims && delims.start !== "") {
    const at = generationPrompt.indexOf(delims.start);
    const head = at >= 0 ? generationPrompt.slice(0, at) : generationPrompt;
    const body = delims.start + c.reasoning + (c.mode === "content" ? delims.end : "") + content;
    return { text: head + body, parsePrefix: body };
  }
  return { text: generationPrompt + content, parsePrefix: content };
}

const PROBE_REASONING = "REASON_PART I am thinking END_R";

/**
 * Finds how a template writes reasoning: render a reply with reasoning_content and take the tags
 * (and whitespace) around it; failing that, the difference thinking on/off makes to the
 * generation prompt. Null when the template shows neither.
 */
export function probeReasoningDelimiters(render: (messages: ChatMessage[], addGen: boolean, thinking: boolean) => string | null): ReasoningDelimiters | null {
  const withReasoning = render(
    [
      { role: "user", content: "U_USER_MSG Hello END_U" },
      { role: "assistant", content: "A_ASST_MSG I can help END_A", reasoning_content: PROBE_REASONING },
    ],
    false,
    true,
  );
  if (withReasoning !== null) {
    const i = withReasoning.indexOf(PROBE_REASONING);
    if (i >= 0) {
      const pre = /(<[^<>\s]+>)(\s*)$/.exec(withReasoning.slice(0, i));
      const post = /^\s*<\/?[^<>\s]+>\s*/.exec(withReasoning.slice(i + PROBE_REASONING.length));
      if (pre && post) return { start: pre[0], end: post[0] };
      if (post) return { start: "", end: post[0] };
    }
  }
  const user: ChatMessage[] = [{ role: "user", content: "U_USER_MSG Hello END_U" }];
  const off = render(user, true, false);
  const on = render(user, true, true);
  if (off === null || on === null) return null;
  let k = 0;
  while (k < off.length && k < on.length && off[k] === on[k]) k++;
  const left = off.slice(k);
  const right = on.slice(k);
  if (left.trim() === "" && right.trim() !== "" && on.endsWith(right.trim())) return { start: right, end: "" };
  if (right.trim() === "" && left.trim() !== "" && off.endsWith(left.trim())) {
    const before = /(<[^<>\s]+>)\s*$/.exec(off.slice(0, off.length - left.length));
    return { start: before ? before[1] : "", end: left };
  }
  return null;
}
