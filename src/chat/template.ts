// bloomery chat: rendering a chat template into a prompt exactly as llama-server's
// /apply-template does (common/chat.cpp: message shaping, capability workarounds, context vars).
import { type TemplateCaps, preserveReasoningVars, probeCaps, reasoningEffortVars } from "./caps.ts";
import {
  type ContinuationMode,
  type ReasoningDelimiters,
  continuationText,
  probeReasoningDelimiters,
  resolveContinuation,
} from "./continuation.ts";
import { ChatInputError } from "./errors.ts";
import { type SourceInfo, inspectTemplateSource } from "./families.ts";
import { type Program, compileTemplate, runTemplate, toVars } from "./jinja-env.ts";
import {
  type NormalizedMessage,
  type TemplateMessage,
  joinTextParts,
  messageToTemplate,
  parseMessages,
  parseTools,
} from "./messages.ts";
import { strftime } from "./strftime.ts";
import type { ChatMessage, Json, ToolDef } from "./types.ts";

export { TemplateError } from "./errors.ts";

/** What to render. Field names follow the OpenAI request where there is one. */
export interface RenderRequest {
  messages: ChatMessage[];
  tools?: ToolDef[];
  /** Append the assistant turn's opening (default true, as llama-server). */
  addGenerationPrompt?: boolean;
  /** `chat_template_kwargs`: extra template variables (e.g. `enable_thinking: false`). */
  kwargs?: Record<string, unknown>;
  bosToken?: string;
  eosToken?: string;
  /** The clock for `strftime_now` and the `datetime` / `date_string` variables (default: now). */
  now?: Date;
  /**
   * `enable_thinking` when `kwargs` does not set it. Default: whether the template supports
   * thinking (llama-server's default with `--reasoning auto`).
   */
  enableThinking?: boolean;
  /** The tokenizer adds BOS itself: drop a leading `bosToken` from the prompt (llama's add_bos). */
  addBos?: boolean;
  /** The tokenizer adds EOS itself: drop a trailing `eosToken` (llama's add_eos). */
  addEos?: boolean;
  /**
   * llama's `continue_final_message`: true (content or reasoning, decided by the message),
   * "content" or "reasoning_content": the last message is continued instead of answered.
   * Needs `addGenerationPrompt: false`, as in llama-server.
   */
  continueFinalMessage?: boolean | "content" | "reasoning_content";
  /** A trailing assistant message is continued (llama-server's default; `--no-prefill-assistant`). */
  prefillAssistant?: boolean;
}

/** A rendered prompt and the facts about its end that the output parsers need. */
export interface ChatPrompt {
  prompt: string;
  /** What the generation prompt added (render with it minus render without it). */
  generationPrompt: string;
  /**
   * When the generation prompt leaves a `<think>` block open, its text from `<think>` on
   * (e.g. "<think>\n"): the model's output starts inside reasoning. Null otherwise.
   */
  thinkingPrefill: string | null;
  /** The enable_thinking value the template was given. */
  enableThinking: boolean;
  /** The request continues its last message ("content" or "reasoning"), or null. */
  continuation: ContinuationMode | null;
  /**
   * Text the output parser must read before the model's output (OutputOptions.prefix): the
   * open think block, or the continued message's reasoning and content, which llama-server
   * returns as part of the reply.
   */
  parsePrefix: string;
}

/** Source patches llama.cpp applies before parsing (templates that raise on valid input). */
function patchSource(src: string): string {
  let out = src;
  if (out.includes("<|channel|>") && out.includes("in message.content or")) {
    out = out.replaceAll(
      '{%- if "<|channel|>analysis<|message|>" in message.content or "<|channel|>final<|message|>" in message.content %}',
      "{%- if false %}",
    );
  }
  if (out.includes("[TOOL_CALLS]") && out.includes("if (message['content'] is none or")) {
    out = out.replaceAll(
      "{%- if (message['content'] is none or message['content'] == '' or message['content']|length == 0) and " +
        "(message['tool_calls'] is not defined or message['tool_calls'] is none or message['tool_calls']|length == 0) %}",
      "{%- if false %}",
    );
  }
  return out;
}

const STEPFUN_MARKER = "You have access to the following functions in JSONSchema format";

function trimWs(s: string): string {
  return s.replace(/^[ \t\n\r\f\v]+|[ \t\n\r\f\v]+$/g, "");
}

function suffixAfterCommonPrefix(a: string, b: string): string {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return a.slice(i);
}

/** The generation prompt's open `<think>` block (from `<think>` on), or null. */
export function thinkingPrefillOf(generationPrompt: string, start = "<think>", end = "</think>"): string | null {
  const at = generationPrompt.lastIndexOf(start);
  if (at < 0) return null;
  if (generationPrompt.indexOf(end, at) >= 0) return null;
  return generationPrompt.slice(at);
}

/** A parsed chat template with its probed capabilities; render many requests with one. */
export class ChatTemplate {
  /** The source as rendered (after llama's compatibility patches). */
  readonly source: string;
  readonly info: SourceInfo;
  private readonly program: Program;
  private capsCache: TemplateCaps | null = null;

  /** @throws TemplateError ("parse") when the source is not a valid template. */
  constructor(readonly original: string) {
    this.source = patchSource(original);
    this.program = compileTemplate(this.source);
    this.info = inspectTemplateSource(this.source);
  }

  /** What the template can take (computed once, by probe renders). */
  get caps(): TemplateCaps {
    return (this.capsCache ??= probeCaps(this.program));
  }

  /** Renders the prompt. @throws ChatInputError for a bad request, TemplateError when the template fails. */
  render(req: RenderRequest): string {
    return this.build(req, false).prompt;
  }

  /** Renders the prompt and works out the generation prompt and what the output parser needs. */
  apply(req: RenderRequest): ChatPrompt {
    return this.build(req, true);
  }

  private build(req: RenderRequest, full: boolean): ChatPrompt {
    const enableThinking = this.enableThinking(req);
    parseMessages(req.messages); // validate everything, the continued message included
    const cont = resolveContinuation(req.messages, req.continueFinalMessage, req.addGenerationPrompt, req.prefillAssistant ?? true);
    if (cont === null) {
      const addGen = req.addGenerationPrompt ?? true;
      const raw = this.renderDirect(req, req.messages, addGen);
      const prompt = addGen ? raw : this.endTurn(raw);
      if (!full) return { prompt, generationPrompt: "", thinkingPrefill: null, enableThinking, continuation: null, parsePrefix: "" };
      const generationPrompt = addGen ? suffixAfterCommonPrefix(raw, this.renderDirect(req, req.messages, false)) : "";
      const tags = this.info.thinking;
      const thinkingPrefill = tags ? thinkingPrefillOf(generationPrompt, tags.start, tags.end) : null;
      return { prompt, generationPrompt, thinkingPrefill, enableThinking, continuation: null, parsePrefix: thinkingPrefill ?? "" };
    }
    const history = req.messages.slice(0, -1);
    const base = this.endTurn(this.renderDirect(req, history, false));
    const genPrompt = suffixAfterCommonPrefix(this.renderDirect(req, history, true), this.renderDirect(req, history, false));
    const family = this.info.toolCalls === "qwen3-xml" ? "qwen3-xml" : this.info.family === "gpt-oss" ? "gpt-oss" : "other";
    const thinks = this.source.includes("<think>");
    const delims = family === "other" ? this.reasoningDelimiters() : null;
    const { text, parsePrefix } = continuationText(family, thinks, genPrompt, delims, cont);
    return {
      prompt: base + text,
      generationPrompt: text,
      thinkingPrefill: null,
      enableThinking,
      continuation: cont.mode,
      parsePrefix,
    };
  }

  /** gpt-oss ends a final reply with <|return|>; in a prompt that goes on it is <|end|> (llama). */
  private endTurn(prompt: string): string {
    if (this.info.family !== "gpt-oss") return prompt;
    const at = prompt.lastIndexOf("<|return|>");
    return at < 0 ? prompt : `${prompt.slice(0, at)}<|end|>${prompt.slice(at + "<|return|>".length)}`;
  }

  private delimsCache: ReasoningDelimiters | null | undefined;

  /** How this template writes reasoning (tags and whitespace), probed once. */
  reasoningDelimiters(): ReasoningDelimiters | null {
    if (this.delimsCache === undefined) {
      this.delimsCache = probeReasoningDelimiters((messages, addGen, thinking) => {
        try {
          return this.renderDirect({ messages, enableThinking: thinking }, messages, addGen);
        } catch {
          return null;
        }
      });
    }
    return this.delimsCache;
  }

  /** The `enable_thinking` value a request gets (kwargs first, then the request default). */
  enableThinking(req: RenderRequest): boolean {
    const kw = req.kwargs?.enable_thinking;
    if (typeof kw === "boolean") return kw;
    if (typeof kw === "string") {
      throw new ChatInputError("chat_template_kwargs.enable_thinking", "invalid type (expected boolean, got string)");
    }
    return req.enableThinking ?? this.info.supportsThinking;
  }

  /** The messages exactly as the template receives them. */
  templateMessages(messages: ChatMessage[]): TemplateMessage[] {
    let msgs: NormalizedMessage[] = parseMessages(messages);
    if (this.source.includes(STEPFUN_MARKER)) {
      msgs = msgs.map((m) => ({
        ...m,
        content: trimWs(m.content),
        reasoning_content: trimWs(m.reasoning_content),
        parts: m.parts.map((p) => ({ ...p, text: trimWs(p.text) })),
      }));
    }
    const caps = this.caps;
    const onlyString = caps.supports_string_content && !caps.supports_typed_content;
    const onlyTyped = !caps.supports_string_content && caps.supports_typed_content;
    let out = msgs.map((m) => {
      const jm = messageToTemplate(m);
      if (onlyTyped && typeof jm.content === "string") jm.content = [{ type: "text", text: jm.content }];
      else if (onlyString && Array.isArray(jm.content)) jm.content = joinTextParts(jm.content);
      return jm;
    });
    const isGptOss = this.source.includes("<|channel|>");
    if (!isGptOss) for (const m of out) if (m.role === "developer") m.role = "system";
    if (!caps.supports_system_role && out.length > 0 && out[0].role === "system") {
      if (out.length > 1) {
        const [first, second] = out;
        if (typeof first.content !== "string" || typeof second.content !== "string") {
          throw new ChatInputError("messages[0].content", "a system message merged into the next message must be a string");
        }
        second.content = `${first.content}\n${second.content}`;
      }
      out = out.slice(1);
    }
    if (caps.supports_tool_calls) for (const m of out) if (m.tool_calls !== undefined && m.content === undefined) m.content = "";
    if (caps.supports_object_arguments) {
      out.forEach((m, i) => {
        if (!Array.isArray(m.tool_calls)) return;
        m.tool_calls.forEach((tc, j) => {
          const fn = (tc as Record<string, Json>).function as Record<string, Json>;
          if (typeof fn.arguments !== "string") return;
          try {
            fn.arguments = JSON.parse(fn.arguments) as Json;
          } catch (e) {
            throw new ChatInputError(
              `messages[${i}].tool_calls[${j}].function.arguments`,
              `failed to parse tool call arguments as JSON: ${e instanceof Error ? e.message : String(e)}`,
            );
          }
        });
      });
    }
    if (isGptOss) {
      out = out.map((m) => {
        if (typeof m.reasoning_content !== "string") return m;
        const adjusted: TemplateMessage = { ...m, thinking: m.reasoning_content };
        if (Array.isArray(m.tool_calls) && m.tool_calls.length > 0) delete adjusted.content;
        return adjusted;
      });
    }
    return out;
  }

  /** One render of `messages` with the request's context (llama's direct apply). */
  renderDirect(req: RenderRequest, messages: ChatMessage[], addGenerationPrompt: boolean): string {
    const now = req.now ?? new Date();
    const tools = parseTools(req.tools);
    const bos = req.bosToken ?? "";
    const eos = req.eosToken ?? "";
    const ctx: Record<string, unknown> = {
      messages: this.templateMessages(messages),
      bos_token: bos,
      eos_token: eos,
      enable_thinking: this.enableThinking(req),
    };
    if (tools.length > 0) ctx.tools = tools;
    ctx.datetime = strftime(now, "%b %d %Y");
    ctx.date_string = strftime(now, "%d %b %Y");
    for (const [k, v] of Object.entries(req.kwargs ?? {})) ctx[k] = v;
    if (addGenerationPrompt) ctx.add_generation_prompt = true;
    const aliases: Record<string, unknown> = {};
    if (typeof ctx.preserve_reasoning === "boolean") Object.assign(aliases, preserveReasoningVars(ctx.preserve_reasoning));
    if (typeof ctx.reasoning_effort === "string" && ctx.reasoning_effort !== "") {
      Object.assign(aliases, reasoningEffortVars(ctx.reasoning_effort));
    }
    let prompt = runTemplate(this.program, { now, vars: toVars({ ...aliases, ...ctx }) });
    if (req.addBos && bos !== "" && prompt.startsWith(bos)) prompt = prompt.slice(bos.length);
    if (req.addEos && eos !== "" && prompt.endsWith(eos)) prompt = prompt.slice(0, prompt.length - eos.length);
    return prompt;
  }
}

const cache = new Map<string, ChatTemplate>();
const CACHE_LIMIT = 16;

/** The ChatTemplate for a source text, parsed and probed once (a small LRU of recent sources). */
export function getChatTemplate(source: string): ChatTemplate {
  const hit = cache.get(source);
  if (hit) {
    cache.delete(source);
    cache.set(source, hit);
    return hit;
  }
  const t = new ChatTemplate(source);
  cache.set(source, t);
  if (cache.size > CACHE_LIMIT) cache.delete(cache.keys().next().value as string);
  return t;
}

/**
 * Renders `template` for a chat request exactly as llama-server's `/apply-template`.
 * @throws TemplateError when the template does not parse, raises or fails; ChatInputError for a bad request.
 */
export function renderChat(template: string, req: RenderRequest): string {
  return getChatTemplate(template).render(req);
}

/** Like renderChat, plus the generation prompt and whether the output starts inside `<think>`. */
export function applyChatTemplate(template: string, req: RenderRequest): ChatPrompt {
  return getChatTemplate(template).apply(req);
}
