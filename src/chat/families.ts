// bloomery chat: naming a chat template's family, tool-call syntax and thinking tags from its
// source text (the markers llama.cpp's common/chat.cpp keys its specialised handlers on).

/** How a family writes tool calls in its output. */
export type ToolCallSyntax =
  /** `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` (Qwen3, Qwen2.5, Hermes) */
  | "hermes"
  /** `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>` */
  | "qwen3-xml"
  /** `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>` (GLM-4.5 .. 4.7) */
  | "glm-xml"
  /** `<minimax:tool_call>\n<invoke name="N">\n<parameter name="P">V</parameter>\n</invoke>\n</minimax:tool_call>` */
  | "minimax-xml"
  /** `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>...` */
  | "deepseek-v3.1"
  /** Harmony channels: `<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{json}<|call|>` */
  | "gpt-oss"
  /** The template has no tool-call syntax. */
  | "none";

export type ChatFamily =
  | "qwen3"
  | "qwen3-coder"
  | "qwen3.5"
  | "nemotron-3"
  | "glm-4.5"
  | "minimax-m2"
  | "deepseek-v3.1"
  | "gpt-oss"
  | "hermes"
  | "chatml"
  | "generic";

export interface ThinkingTags {
  start: string;
  end: string;
}

export interface SourceInfo {
  family: ChatFamily;
  toolCalls: ToolCallSyntax;
  /** `<think>` tags when the template knows them; null for none (and for gpt-oss's channels). */
  thinking: ThinkingTags | null;
  /** The template reasons at all (think tags, or gpt-oss's analysis channel). */
  supportsThinking: boolean;
  /** The template reads `enable_thinking`. */
  readsEnableThinking: boolean;
}

const THINK: ThinkingTags = { start: "<think>", end: "</think>" };

/** Inspects template source text; pure and cheap. */
export function inspectTemplateSource(src: string): SourceInfo {
  const hasThink = src.includes("<think>") || src.includes("</think>");
  const readsEnableThinking = src.includes("enable_thinking");
  const base = { thinking: hasThink ? THINK : null, supportsThinking: hasThink, readsEnableThinking };
  if (src.includes("<|channel|>")) {
    return { family: "gpt-oss", toolCalls: "gpt-oss", thinking: null, supportsThinking: true, readsEnableThinking };
  }
  if (src.includes("<minimax:tool_call>") || (src.includes("<invoke name=") && src.includes("]~b]"))) {
    return { family: "minimax-m2", toolCalls: "minimax-xml", ...base };
  }
  if (src.includes("<｜tool▁calls▁begin｜>") && src.includes("<｜tool▁sep｜>")) {
    return { family: "deepseek-v3.1", toolCalls: "deepseek-v3.1", ...base };
  }
  if (src.includes("<arg_key>") && src.includes("<arg_value>") && src.includes("<tool_call>")) {
    return { family: "glm-4.5", toolCalls: "glm-xml", ...base };
  }
  if (
    src.includes("<tool_call>") &&
    src.includes("<function=") &&
    src.includes("<parameter=") &&
    !src.includes("'<tool_call><function=' ~ tool_call.name ~ '>'")
  ) {
    const family: ChatFamily = !hasThink
      ? "qwen3-coder"
      : src.includes("truncate_history_thinking")
        ? "nemotron-3"
        : "qwen3.5";
    return { family, toolCalls: "qwen3-xml", ...base };
  }
  if (src.includes("<tool_call>")) {
    const family: ChatFamily = hasThink && src.includes("<|im_start|>") ? "qwen3" : "hermes";
    return { family, toolCalls: "hermes", ...base };
  }
  if (src.includes("<|im_start|>")) return { family: "chatml", toolCalls: "none", ...base };
  return { family: "generic", toolCalls: "none", ...base };
}
