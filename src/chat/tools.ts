// bloomery chat: tool calling as the server sees it: tool_choice policy, the JSON schema a
// forced call must satisfy (for the grammar module), and parsing calls out of model output.
import { ChatInputError } from "./errors.ts";
import type { ToolCallSyntax } from "./families.ts";
import { parseTools } from "./messages.ts";
import type { JsonSchema, ToolDef } from "./types.ts";

export { type ParsedToolSyntax, ToolCallStream, type ToolStreamOptions, parseToolCalls, randomToolCallId } from "./tool-stream.ts";
export { convertParamValue, schemaTypes } from "./tool-xml.ts";

/** OpenAI's `tool_choice`. */
export type ToolChoice = "auto" | "none" | "required" | { type: "function"; function: { name: string } };

export interface ToolPolicy {
  /**
   * none: the model must not call tools (output is not parsed for calls); auto: it may;
   * required: it must call one of the tools; named: it must call `name`.
   */
  mode: "none" | "auto" | "required" | "named";
  /** Tools handed to the chat template (llama-server renders them even for "none"). */
  offered: ToolDef[];
  /** Tools the model may call (for "named" only that one; empty for "none"). */
  callable: ToolDef[];
  /** The forced tool for "named". */
  name?: string;
  /** Parse the output for tool calls. */
  parse: boolean;
  /** A grammar must force a call (required / named): see toolCallSchema. */
  forced: boolean;
}

/** Validates a client's `tool_choice` (absent or null is "auto"). @throws ChatInputError */
export function parseToolChoice(value: unknown): ToolChoice {
  if (value === undefined || value === null) return "auto";
  if (value === "auto" || value === "none" || value === "required") return value;
  if (typeof value === "string") {
    throw new ChatInputError("tool_choice", `invalid tool_choice ${JSON.stringify(value)} (expected auto, none, required or an object naming a function)`);
  }
  if (typeof value === "object" && !Array.isArray(value)) {
    const v = value as Record<string, unknown>;
    const fn = v.function as Record<string, unknown> | undefined;
    const name = typeof fn === "object" && fn !== null ? fn.name : v.name;
    if (v.type === "function" && typeof name === "string" && name !== "") return { type: "function", function: { name } };
  }
  throw new ChatInputError("tool_choice", 'expected auto, none, required or {"type": "function", "function": {"name": ...}}');
}

/**
 * What a request's `tool_choice` and `tools` mean for the prompt and the output.
 * @throws ChatInputError for a bad tool_choice, bad tools, or a named tool that is not in `tools`.
 */
export function toolPromptPolicy(toolChoice: unknown, tools: ToolDef[] | undefined): ToolPolicy {
  const choice = parseToolChoice(toolChoice);
  parseTools(tools); // validates
  const offered = tools ?? [];
  if (typeof choice === "object") {
    const name = choice.function.name;
    const tool = offered.find((t) => t.function.name === name);
    if (!tool) throw new ChatInputError("tool_choice.function.name", `no tool named ${JSON.stringify(name)} in tools`);
    return { mode: "named", offered, callable: [tool], name, parse: true, forced: true };
  }
  if (offered.length === 0 || choice === "none") {
    return { mode: offered.length === 0 ? "none" : choice === "none" ? "none" : "auto", offered, callable: [], parse: false, forced: false };
  }
  if (choice === "required") return { mode: "required", offered, callable: offered, parse: true, forced: true };
  return { mode: "auto", offered, callable: offered, parse: true, forced: false };
}

/** A tool's parameters schema; an absent or empty one is any object (as llama-server). */
export function toolParameters(tool: ToolDef): JsonSchema {
  const p = tool.function.parameters;
  if (p && typeof p === "object" && Object.keys(p).length > 0) return p;
  return { type: "object", properties: {} };
}

/**
 * The JSON schema one tool call must satisfy: `{"name": <one of the callable tools>,
 * "arguments": <its parameters>}` (anyOf over the tools). Null when no call is forced or allowed.
 * The grammar module renders the call in the template's syntax (see toolCallWrapping).
 */
export function toolCallSchema(policy: ToolPolicy): JsonSchema | null {
  if (policy.callable.length === 0) return null;
  const one = (t: ToolDef): JsonSchema => ({
    type: "object",
    properties: { name: { const: t.function.name }, arguments: toolParameters(t) },
    required: ["name", "arguments"],
    additionalProperties: false,
  });
  return policy.callable.length === 1 ? one(policy.callable[0]) : { anyOf: policy.callable.map(one) };
}

/** How a call is written around its body, for building a grammar from toolCallSchema. */
export interface ToolCallWrapping {
  syntax: ToolCallSyntax;
  /** Text before the call body. */
  open: string;
  /** Text after it. */
  close: string;
  /**
   * json: the body is the schema's object as JSON; xml: `<function=NAME>\n` then per argument
   * `<parameter=KEY>\nVALUE\n</parameter>\n` (strings raw, other values as JSON) then `</function>\n`;
   * glm: `NAME` then per argument `<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>` (strings raw);
   * deepseek: one or more `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{arguments JSON}<｜tool▁call▁end｜>`
   * (the block's open / close hold all of a turn's calls).
   */
  body: "json" | "xml" | "glm" | "deepseek";
}

/** The wrapping of the syntaxes this module parses; null for the others. */
export function toolCallWrapping(syntax: ToolCallSyntax): ToolCallWrapping | null {
  if (syntax === "hermes") return { syntax, open: "<tool_call>\n", close: "\n</tool_call>", body: "json" };
  if (syntax === "qwen3-xml") return { syntax, open: "<tool_call>\n", close: "</tool_call>", body: "xml" };
  if (syntax === "glm-xml") return { syntax, open: "<tool_call>", close: "</tool_call>", body: "glm" };
  if (syntax === "deepseek-v3.1") return { syntax, open: "<｜tool▁calls▁begin｜>", close: "<｜tool▁calls▁end｜>", body: "deepseek" };
  return null;
}
