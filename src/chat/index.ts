// bloomery chat: the public API of the chat layer (templates, reasoning and tool-call parsing).
export * from "./types.ts";
export { ChatInputError, TemplateError, type TemplateErrorKind } from "./errors.ts";
export {
  ChatTemplate,
  type ChatPrompt,
  type RenderRequest,
  applyChatTemplate,
  getChatTemplate,
  renderChat,
  thinkingPrefillOf,
} from "./template.ts";
export type { TemplateCaps } from "./caps.ts";
export { type ChatFamily, type ChatFormat, type ThinkingTags, type ToolCallSyntax, detectChatFormat, outputMarkers } from "./format.ts";
export {
  type ReasoningDelta,
  type ReasoningOptions,
  type ReasoningSplit,
  ReasoningStream,
  parseReasoningFormat,
  splitReasoning,
} from "./reasoning.ts";
export {
  type ToolCallWrapping,
  type ToolChoice,
  type ToolPolicy,
  ToolCallStream,
  type ToolStreamOptions,
  parseToolCalls,
  parseToolChoice,
  randomToolCallId,
  toolCallSchema,
  toolCallWrapping,
  toolParameters,
  toolPromptPolicy,
} from "./tools.ts";
export { ChatOutputParser, type OutputOptions, parseChatOutput } from "./output.ts";
export { type HarmonyOptions, HarmonyStream, parseHarmony } from "./harmony.ts";
