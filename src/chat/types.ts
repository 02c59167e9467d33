// bloomery chat: the OpenAI-shaped request and response types the chat layer reads and writes.

/** A JSON value as a client sends it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A JSON schema (only the parts the chat layer reads are typed). */
export interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  enum?: Json[];
  const?: Json;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  items?: JsonSchema;
  [key: string]: unknown;
}

/** One part of an array-valued message content (`{"type":"text","text":...}`). */
export interface ContentPart {
  type: string;
  text?: string;
  [key: string]: unknown;
}

/** A tool call inside an assistant message as clients send it back in history. */
export interface ToolCallIn {
  id?: string;
  type?: string;
  function: {
    name: string;
    /** A JSON string (OpenAI's shape) or an already-parsed object. */
    arguments?: string | Record<string, unknown>;
  };
}

/** A chat message in OpenAI's shape. */
export interface ChatMessage {
  role: string;
  content?: string | ContentPart[] | null;
  tool_calls?: ToolCallIn[];
  tool_call_id?: string;
  reasoning_content?: string | null;
  name?: string;
}

/** A tool definition (`tools[]` of a chat request). */
export interface ToolDef {
  type: string;
  function: {
    name: string;
    description?: string;
    parameters?: JsonSchema;
    [key: string]: unknown;
  };
}

/** A tool call the model made, in OpenAI's response shape. */
export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** One streamed tool-call fragment, in OpenAI's `delta.tool_calls[]` shape. */
export interface ToolCallDelta {
  index: number;
  /** Present on the first fragment of a call only. */
  id?: string;
  type?: "function";
  function: { name?: string; arguments: string };
}

/** One streamed change to the assistant message. */
export type ChatDelta =
  | { kind: "content"; text: string }
  | { kind: "reasoning"; text: string }
  | { kind: "tool_call"; delta: ToolCallDelta };

/** The assistant message parsed from a whole model output. */
export interface ParsedMessage {
  content: string;
  reasoning_content: string;
  tool_calls: ToolCall[];
}

/** llama's `--reasoning-format` / request `reasoning_format`. */
export type ReasoningFormat = "none" | "deepseek" | "deepseek-legacy" | "auto";

export const REASONING_FORMATS: readonly ReasoningFormat[] = ["none", "deepseek", "deepseek-legacy", "auto"];
