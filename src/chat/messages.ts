// bloomery chat: validating OpenAI chat messages and tools and shaping them into what the
// template sees, following llama-server (tools/server oaicompat parsing, common/chat.cpp).
import { ChatInputError } from "./errors.ts";
import type { Json } from "./types.ts";

/** A message after validation, in llama's `common_chat_msg` form. */
export interface NormalizedMessage {
  role: string;
  /** String content ("" when absent, null, or given as parts). */
  content: string;
  /** Text parts when content was given as an array. */
  parts: { type: string; text: string }[];
  reasoning_content: string;
  /** The message's `name` (llama's tool_name). */
  name: string;
  tool_call_id: string;
  tool_calls: { id: string; name: string; arguments: string }[];
}

/** A message object as the template receives it (JSON, keys in llama's order). */
export type TemplateMessage = Record<string, Json>;

/** A tool as the template receives it: `{type, function: {name, description, parameters}}`. */
export type TemplateTool = { type: "function"; function: { name: string; description: string; parameters: Json } };

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function optString(msg: Record<string, unknown>, key: string, field: string): string {
  const v = msg[key];
  if (v === undefined || v === null) return "";
  if (typeof v !== "string") throw new ChatInputError(`${field}.${key}`, `expected a string, got ${typeof v}`);
  return v;
}

/**
 * Validates `messages` the way llama-server does before templating and returns them in
 * llama's internal form. Errors name the message and field.
 */
export function parseMessages(messages: unknown): NormalizedMessage[] {
  if (!Array.isArray(messages)) throw new ChatInputError("messages", "expected an array");
  return messages.map((raw, i) => {
    const field = `messages[${i}]`;
    if (!isObject(raw)) throw new ChatInputError(field, "expected an object");
    if (!("role" in raw)) throw new ChatInputError(field, "missing 'role'");
    if (typeof raw.role !== "string") throw new ChatInputError(`${field}.role`, "expected a string");
    const role = raw.role;
    const hasContent = "content" in raw && raw.content !== undefined;
    const hasToolCalls = "tool_calls" in raw && raw.tool_calls !== undefined && raw.tool_calls !== null;
    if (role !== "assistant" && !hasContent) {
      throw new ChatInputError(field, "all non-assistant messages must contain 'content'");
    }
    if (role === "assistant" && !hasContent && !hasToolCalls) {
      throw new ChatInputError(field, "assistant message must contain either 'content' or 'tool_calls'");
    }
    const msg: NormalizedMessage = {
      role,
      content: "",
      parts: [],
      reasoning_content: optString(raw, "reasoning_content", field),
      name: optString(raw, "name", field),
      tool_call_id: optString(raw, "tool_call_id", field),
      tool_calls: [],
    };
    const content = raw.content;
    if (typeof content === "string") {
      msg.content = content;
    } else if (Array.isArray(content)) {
      content.forEach((part, j) => {
        const pf = `${field}.content[${j}]`;
        if (!isObject(part)) throw new ChatInputError(pf, "expected an object");
        if (!("type" in part)) throw new ChatInputError(pf, "missing content part type");
        if (part.type === "image_url" || part.type === "input_audio" || part.type === "input_video" || part.type === "video_url") {
          throw new ChatInputError(pf, `${String(part.type)} input is not supported by this model`);
        }
        if (part.type !== "text") throw new ChatInputError(`${pf}.type`, "unsupported content[].type");
        if (typeof part.text !== "string") throw new ChatInputError(`${pf}.text`, "expected a string");
        msg.parts.push({ type: "text", text: part.text });
      });
    } else if (content !== null && content !== undefined) {
      throw new ChatInputError(`${field}.content`, `expected a string or an array, got ${typeof content}`);
    }
    if (hasToolCalls) {
      if (!Array.isArray(raw.tool_calls)) throw new ChatInputError(`${field}.tool_calls`, "expected an array");
      raw.tool_calls.forEach((tc, j) => {
        const tf = `${field}.tool_calls[${j}]`;
        if (!isObject(tc)) throw new ChatInputError(tf, "expected an object");
        if (!("type" in tc)) throw new ChatInputError(tf, "missing tool call type");
        if (tc.type !== "function") throw new ChatInputError(`${tf}.type`, `unsupported tool call type ${JSON.stringify(tc.type)}`);
        const fn = tc.function;
        if (!isObject(fn)) throw new ChatInputError(`${tf}.function`, "missing tool call function");
        if (typeof fn.name !== "string") throw new ChatInputError(`${tf}.function.name`, "missing tool call name");
        if (!("arguments" in fn) || fn.arguments === undefined) {
          throw new ChatInputError(`${tf}.function.arguments`, "missing tool call arguments");
        }
        const args = typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments);
        const id = tc.id === undefined || tc.id === null ? "" : tc.id;
        if (typeof id !== "string") throw new ChatInputError(`${tf}.id`, "expected a string");
        msg.tool_calls.push({ id, name: fn.name, arguments: args });
      });
    }
    return msg;
  });
}

/** The message as llama hands it to the template (`common_chat_msg::to_json_oaicompat`). */
export function messageToTemplate(msg: NormalizedMessage): TemplateMessage {
  const out: TemplateMessage = { role: msg.role };
  if (msg.content !== "") out.content = msg.content;
  else if (msg.parts.length > 0) out.content = msg.parts.map((p) => ({ type: p.type, text: p.text }));
  else out.content = "";
  if (msg.reasoning_content !== "") out.reasoning_content = msg.reasoning_content;
  if (msg.name !== "") out.name = msg.name;
  if (msg.tool_call_id !== "") out.tool_call_id = msg.tool_call_id;
  if (msg.tool_calls.length > 0) {
    out.tool_calls = msg.tool_calls.map((tc) => {
      const call: Record<string, Json> = { type: "function", function: { name: tc.name, arguments: tc.arguments } };
      if (tc.id !== "") call.id = tc.id;
      return call;
    });
  }
  return out;
}

/** Joins text parts with "\n", as llama does for templates that only take string content. */
export function joinTextParts(parts: Json[]): string {
  let text = "";
  for (const p of parts) {
    if (!isObject(p) || p.type !== "text") continue;
    if (text !== "") text += "\n";
    text += typeof p.text === "string" ? p.text : "";
  }
  return text;
}

/**
 * Validates `tools` as llama-server does and returns them as the template sees them; `[]` for
 * none. Extra keys of a tool are dropped; a missing description becomes "", missing parameters {}.
 */
export function parseTools(tools: unknown): TemplateTool[] {
  if (tools === undefined || tools === null) return [];
  if (!Array.isArray(tools)) throw new ChatInputError("tools", "expected an array");
  return tools.map((t, i) => {
    const field = `tools[${i}]`;
    if (!isObject(t)) throw new ChatInputError(field, "expected an object");
    if (!("type" in t)) throw new ChatInputError(field, "missing tool type");
    if (t.type !== "function") throw new ChatInputError(`${field}.type`, `unsupported tool type ${JSON.stringify(t.type)}`);
    const fn = t.function;
    if (!isObject(fn)) throw new ChatInputError(`${field}.function`, "missing tool function");
    if (typeof fn.name !== "string") throw new ChatInputError(`${field}.function.name`, "expected a string");
    const description = fn.description === undefined || fn.description === null ? "" : fn.description;
    if (typeof description !== "string") throw new ChatInputError(`${field}.function.description`, "expected a string");
    const parameters = fn.parameters === undefined || fn.parameters === null ? {} : fn.parameters;
    if (!isObject(parameters)) throw new ChatInputError(`${field}.function.parameters`, "expected an object");
    return {
      type: "function" as const,
      function: { name: fn.name, description, parameters: JSON.parse(JSON.stringify(parameters)) as Json },
    };
  });
}
