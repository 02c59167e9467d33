// bloomery chat: turning model output back into an assistant message (reasoning, content, tool
// calls) for a chat format, whole or streamed as OpenAI-style deltas.
import type { ThinkingTags, ToolCallSyntax } from "./families.ts";
import { HarmonyStream } from "./harmony.ts";
import { ReasoningStream } from "./reasoning.ts";
import { ToolCallStream, isParsedToolSyntax, toolCallMarkers } from "./tool-stream.ts";
import type { ChatDelta, ParsedMessage, ReasoningFormat, ToolCall, ToolDef } from "./types.ts";

export interface OutputOptions {
  /** The format's tool-call syntax (ChatFormat.toolCalls). */
  syntax: ToolCallSyntax;
  /** The format's think tags (ChatFormat.thinking); null: no reasoning is split out. */
  thinking: ThinkingTags | null;
  /** Default "auto" (= deepseek). For gpt-oss's channels, anything but "none" reads analysis as reasoning. */
  reasoningFormat?: ReasoningFormat;
  /**
   * ChatPrompt.parsePrefix: text read before the model's output (the think block the prompt
   * opened, or a continued message's reasoning and content). It is part of the reply, as in
   * llama-server: its deltas come with the first push.
   */
  prefix?: string;
  /** Tools the model may call (ToolPolicy.callable); empty or absent: no tool-call parsing. */
  tools?: ToolDef[];
  /** false keeps only the first call. */
  parallelToolCalls?: boolean;
  /** Tool-call id generator (default random, as llama-server). */
  genId?: () => string;
}

/**
 * Streaming parser of one assistant turn: push text as it is detokenized, get deltas back; the
 * deltas of any chunking add up to the same message. `message` is the message so far.
 */
export class ChatOutputParser {
  private readonly reasoning: ReasoningStream;
  private readonly tools: ToolCallStream | null;
  /** gpt-oss: the harmony parser reads everything (channels, reasoning and calls at once). */
  private readonly harmony: HarmonyStream | null = null;
  private content = "";
  private reasoningText = "";
  private finished = false;

  constructor(opts: OutputOptions) {
    if (opts.syntax === "gpt-oss") {
      this.harmony = new HarmonyStream({
        extractReasoning: (opts.reasoningFormat ?? "auto") !== "none",
        tools: opts.tools ?? [],
        parallelToolCalls: opts.parallelToolCalls,
        genId: opts.genId,
      });
    }
    const syntax = opts.syntax;
    const parsesCalls = isParsedToolSyntax(syntax) && (opts.tools?.length ?? 0) > 0;
    const format: ReasoningFormat = opts.thinking ? (opts.reasoningFormat ?? "auto") : "none";
    this.reasoning = new ReasoningStream({
      format,
      tags: opts.thinking ?? undefined,
      endBefore: parsesCalls && isParsedToolSyntax(syntax) ? toolCallMarkers(syntax).filter((m) => m !== "<function=") : [],
    });
    this.tools = parsesCalls && isParsedToolSyntax(syntax)
      ? new ToolCallStream({
          syntax,
          tools: opts.tools ?? [],
          parallelToolCalls: opts.parallelToolCalls,
          genId: opts.genId,
        })
      : null;
    if (this.harmony) this.initial = opts.prefix ? this.harmony.push(opts.prefix) : [];
    else this.initial = opts.prefix ? this.route(this.reasoning.push(opts.prefix), false) : [];
  }

  private initial: ChatDelta[];

  push(text: string): ChatDelta[] {
    if (this.finished) throw new Error("ChatOutputParser: push after finish");
    if (this.harmony) return this.takeInitial(this.harmony.push(text));
    return this.takeInitial(this.route(this.reasoning.push(text), false));
  }

  finish(): ChatDelta[] {
    if (this.finished) return [];
    this.finished = true;
    if (this.harmony) return this.takeInitial(this.harmony.finish());
    return this.takeInitial(this.route(this.reasoning.finish(), true));
  }

  private takeInitial(out: ChatDelta[]): ChatDelta[] {
    if (this.initial.length === 0) return out;
    const all = [...this.initial, ...out];
    this.initial = [];
    return all;
  }

  get message(): ParsedMessage {
    if (this.harmony) return this.harmony.message;
    const calls: ToolCall[] = this.tools ? this.tools.result.tool_calls : [];
    return { content: this.content, reasoning_content: this.reasoningText, tool_calls: calls };
  }

  private route(parts: { kind: "reasoning" | "content"; text: string }[], final: boolean): ChatDelta[] {
    const out: ChatDelta[] = [];
    for (const p of parts) {
      if (p.kind === "reasoning") {
        this.reasoningText += p.text;
        out.push({ kind: "reasoning", text: p.text });
      } else if (this.tools) {
        out.push(...this.tools.push(p.text));
      } else {
        out.push({ kind: "content", text: p.text });
      }
    }
    if (final && this.tools) out.push(...this.tools.finish());
    for (const d of out) if (d.kind === "content") this.content += d.text;
    return out;
  }
}

/** Parses a whole model output into an assistant message. */
export function parseChatOutput(text: string, opts: OutputOptions): ParsedMessage {
  const p = new ChatOutputParser(opts);
  p.push(text);
  p.finish();
  return p.message;
}
