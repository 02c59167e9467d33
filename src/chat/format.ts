// bloomery chat: the chat format a template implies: its family, tool-call syntax and how it
// thinks (which decides how model output is parsed back into content, reasoning and tool calls).
import { type ChatFamily, type ThinkingTags, type ToolCallSyntax, inspectTemplateSource } from "./families.ts";
import { getChatTemplate } from "./template.ts";

export type { ChatFamily, ThinkingTags, ToolCallSyntax } from "./families.ts";

export interface ChatFormat {
  family: ChatFamily;
  /** How the model writes tool calls. */
  toolCalls: ToolCallSyntax;
  /** Whether the chat layer parses this syntax back into tool calls (tools.ts, harmony.ts). */
  toolCallsParsed: boolean;
  /** The template reasons (think tags, or gpt-oss's analysis channel). */
  supportsThinking: boolean;
  /** `<think>`/`</think>` when reasoning is written in think tags; null otherwise. */
  thinking: ThinkingTags | null;
  /**
   * With thinking enabled, the generation prompt itself opens `<think>` (Qwen3.5, GLM-4.7,
   * MiniMax-M2, DeepSeek-V3.1, Nemotron-3): the model's output starts inside reasoning.
   */
  promptOpensThinking: boolean;
  /** The template reads `enable_thinking` (so `chat_template_kwargs.enable_thinking` matters). */
  readsEnableThinking: boolean;
}

const PARSED: ReadonlySet<ToolCallSyntax> = new Set(["hermes", "qwen3-xml", "glm-xml", "deepseek-v3.1", "gpt-oss"]);

/**
 * Names the chat format of a template by its contents. `promptOpensThinking` comes from one
 * probe render (a user message, thinking on); a template that cannot render it reports false.
 * @throws TemplateError when the template does not parse.
 */
export function detectChatFormat(template: string): ChatFormat {
  const tpl = getChatTemplate(template);
  const info = inspectTemplateSource(tpl.source);
  let promptOpensThinking = false;
  if (info.thinking) {
    try {
      const probe = tpl.apply({ messages: [{ role: "user", content: "test" }], enableThinking: true });
      promptOpensThinking = probe.thinkingPrefill !== null;
    } catch {
      promptOpensThinking = false;
    }
  }
  return {
    family: info.family,
    toolCalls: info.toolCalls,
    toolCallsParsed: PARSED.has(info.toolCalls),
    supportsThinking: info.supportsThinking,
    thinking: info.thinking,
    promptOpensThinking,
    readsEnableThinking: info.readsEnableThinking,
  };
}

/** The markers of each tool-call syntax that llama-server keeps in the output text (preserved_tokens). */
const TOOL_MARKERS: Partial<Record<ToolCallSyntax, string[]>> = {
  hermes: ["<tool_call>", "</tool_call>"],
  "qwen3-xml": ["<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>"],
  "glm-xml": ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"],
  "deepseek-v3.1": ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"],
};

/**
 * The texts the output parser reads that a vocabulary may hold as control tokens (GLM's
 * `<tool_call>`, DeepSeek's `<｜tool▁calls▁begin｜>`): the engine must write them out as text, as
 * llama-server does with its preserved_tokens. Think tags always; tool-call markers with tools.
 */
export function outputMarkers(format: Pick<ChatFormat, "thinking" | "toolCalls">, withTools: boolean): string[] {
  const out: string[] = [];
  if (format.thinking) out.push(format.thinking.start, format.thinking.end);
  if (withTools) out.push(...(TOOL_MARKERS[format.toolCalls] ?? []));
  return out;
}
