// bloomery server: the Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens):
// requests mapped onto an OpenAI chat request (system, text / thinking / tool_use / tool_result
// blocks, tools, tool_choice, stop_sequences, thinking budget), answers as Anthropic messages or
// its event stream (message_start, content blocks, message_delta, message_stop).
import type { ChatDelta, ParsedMessage } from "../chat/index.ts";
import type { DoneEvent } from "../engine/protocol.ts";
import { prepareChat, renderChatPrompt } from "./chat-request.ts";
import { chatEvents, collectChat } from "./chat-stream.ts";
import { randomString } from "./common.ts";
import { ApiError, badField, badRequest, engineError, errorResponse, shownValue } from "./errors.ts";
import { GenerationSet } from "./runner.ts";
import { sseEvent, sseResponse } from "./sse.ts";
import type { ServerContext } from "./state.ts";

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/**
 * Claude Code's first system block carries a per-request checksum ("x-anthropic-billing-header:
 * cc_version=...; cch=a5145;"): its five characters are masked, as llama-server does, so the
 * prompt stays the same from turn to turn and the prompt cache keeps it.
 */
export function normalizeBillingHeader(text: string): string {
  if (!text.startsWith("x-anthropic-billing-header:")) return text;
  const i = text.indexOf("cch=", "x-anthropic-billing-header:".length);
  if (i < 0 || text[i + 9] !== ";") return text;
  return `${text.slice(0, i + 4)}fffff${text.slice(i + 9)}`;
}

function blocksText(blocks: unknown[], field: string): string {
  const parts: string[] = [];
  blocks.forEach((b, i) => {
    if (!isObj(b)) throw badField(`${field}[${i}]`, "expected a content block object");
    if (b.type === "text") {
      if (typeof b.text !== "string") throw badField(`${field}[${i}].text`, "expected a string");
      parts.push(b.text);
    } else if (b.type === "image" || b.type === "document") {
      throw badRequest(`${b.type} input is not supported by this model`);
    }
  });
  return parts.join("\n");
}

/** Converts an Anthropic Messages request into an OpenAI chat request body. */
export function anthropicToChat(body: Obj): Obj {
  const messages: Obj[] = [];
  const sys = body.system;
  if (typeof sys === "string") {
    if (sys !== "") messages.push({ role: "system", content: normalizeBillingHeader(sys) });
  } else if (Array.isArray(sys)) {
    const text = blocksText(sys.map((b) => (isObj(b) && typeof b.text === "string" ? { ...b, text: normalizeBillingHeader(b.text) } : b)), "system");
    if (text !== "") messages.push({ role: "system", content: text });
  }
  if (!Array.isArray(body.messages)) throw badField("messages", "'messages' is required");
  body.messages.forEach((m, i) => {
    if (!isObj(m)) throw badField(`messages[${i}]`, "expected an object");
    const role = m.role;
    // llama-server passes other roles through to the template: Claude Code sends "system" turns
    // inside messages (reminders between user turns)
    if (role !== "user" && role !== "assistant" && role !== "system") throw badField(`messages[${i}].role`, `expected "user", "assistant" or "system", got ${shownValue(role)}`);
    const content = m.content;
    if (typeof content === "string") {
      messages.push({ role, content });
      return;
    }
    if (!Array.isArray(content)) throw badField(`messages[${i}].content`, "expected a string or an array of content blocks");
    const texts: string[] = [];
    let reasoning = "";
    const toolCalls: Obj[] = [];
    const toolResults: Obj[] = [];
    content.forEach((b, j) => {
      const f = `messages[${i}].content[${j}]`;
      if (!isObj(b)) throw badField(f, "expected a content block object");
      switch (b.type) {
        case "text":
          if (typeof b.text !== "string") throw badField(`${f}.text`, "expected a string");
          texts.push(b.text);
          break;
        case "thinking":
          if (typeof b.thinking === "string") reasoning += b.thinking;
          break;
        case "redacted_thinking":
          break;
        case "tool_use":
          if (typeof b.name !== "string") throw badField(`${f}.name`, "expected a string");
          toolCalls.push({ id: typeof b.id === "string" ? b.id : "", type: "function", function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) } });
          break;
        case "tool_result": {
          const c = b.content;
          const text = typeof c === "string" ? c : Array.isArray(c) ? blocksText(c, `${f}.content`) : "";
          toolResults.push({ role: "tool", tool_call_id: typeof b.tool_use_id === "string" ? b.tool_use_id : "", content: b.is_error === true && text !== "" ? `Error: ${text}` : text });
          break;
        }
        case "image":
        case "document":
          throw badRequest(`${String(b.type)} input is not supported by this model`);
        default:
          throw badField(`${f}.type`, `unsupported content block type ${shownValue(b.type)}`);
      }
    });
    // tool results answer the previous assistant turn: they come before the user's text
    messages.push(...toolResults);
    if (texts.length || toolCalls.length || reasoning) {
      const msg: Obj = { role, content: texts.join("\n") };
      if (toolCalls.length) msg.tool_calls = toolCalls;
      if (reasoning) msg.reasoning_content = reasoning;
      messages.push(msg);
    }
  });
  const out: Obj = { messages };
  if (Array.isArray(body.tools)) {
    const tools: Obj[] = [];
    body.tools.forEach((t, i) => {
      if (!isObj(t)) throw badField(`tools[${i}]`, "expected an object");
      if (t.input_schema === undefined && typeof t.type === "string" && t.type !== "custom") return; // server tools have no client-side schema
      tools.push({ type: "function", function: { name: t.name, description: typeof t.description === "string" ? t.description : "", parameters: isObj(t.input_schema) ? t.input_schema : {} } });
    });
    if (tools.length) out.tools = tools;
  }
  const tc = body.tool_choice;
  if (isObj(tc)) {
    if (tc.type === "auto") out.tool_choice = "auto";
    else if (tc.type === "any") out.tool_choice = "required";
    else if (tc.type === "none") out.tool_choice = "none";
    else if (tc.type === "tool") {
      if (typeof tc.name !== "string") throw badField("tool_choice.name", "expected a string");
      out.tool_choice = { type: "function", function: { name: tc.name } };
    } else throw badField("tool_choice.type", `expected auto, any, tool or none, got ${shownValue(tc.type)}`);
    if (tc.disable_parallel_tool_use === true) out.parallel_tool_calls = false;
  }
  if (body.stop_sequences !== undefined && body.stop_sequences !== null) out.stop = body.stop_sequences;
  out.max_tokens = body.max_tokens ?? 4096;
  for (const k of ["temperature", "top_p", "top_k", "stream", "chat_template_kwargs", "seed"]) if (body[k] !== undefined) out[k] = body[k];
  const th = body.thinking;
  if (isObj(th)) {
    if (th.type === "enabled") out.thinking_budget_tokens = typeof th.budget_tokens === "number" ? th.budget_tokens : 10000;
    else if (th.type === "disabled") out.chat_template_kwargs = { ...(isObj(out.chat_template_kwargs) ? out.chat_template_kwargs : {}), enable_thinking: false };
  }
  return out;
}

function stopReason(d: DoneEvent, m: ParsedMessage): string {
  if (d.stopType === "word") return m.tool_calls.length ? "tool_use" : "stop_sequence";
  if (d.stopType === "eos") return m.tool_calls.length ? "tool_use" : "end_turn";
  return "max_tokens";
}

function usage(d: DoneEvent): Obj {
  return { cache_read_input_tokens: d.tokensCached, input_tokens: d.tokensEvaluated - d.tokensCached, output_tokens: d.tokensPredicted };
}

function contentBlocks(m: ParsedMessage): Obj[] {
  const out: Obj[] = [];
  if (m.reasoning_content) out.push({ type: "thinking", thinking: m.reasoning_content, signature: "" });
  if (m.content) out.push({ type: "text", text: m.content });
  for (const c of m.tool_calls) {
    let input: unknown = {};
    try {
      input = JSON.parse(c.function.arguments);
    } catch {
      input = {};
    }
    out.push({ type: "tool_use", id: c.id, name: c.function.name, input });
  }
  return out;
}

function anthropicError(e: ApiError): Obj {
  const type = e.status === 400 ? "invalid_request_error" : e.status === 401 ? "authentication_error" : e.status === 503 ? "overloaded_error" : "api_error";
  return { type: "error", error: { type, message: e.message } };
}

export async function anthropicMessages(ctx: ServerContext, body: Obj, request: Request): Promise<Response> {
  const chat = anthropicToChat(body);
  chat.n = 1;
  const prep = await prepareChat(ctx, chat);
  const set = GenerationSet.start(ctx, prep.specs, request.signal);
  const id = `msg_${randomString(24)}`;
  const nPrompt = prep.tokens.length;
  if (!prep.settings.stream) {
    const [r] = await collectChat(set, prep.parser);
    if (r.done.error) return errorResponse(engineError(r.done.error, nPrompt, ctx.nCtxSlot));
    return Response.json({
      id,
      type: "message",
      role: "assistant",
      content: contentBlocks(r.message),
      model: ctx.modelName,
      stop_reason: stopReason(r.done, r.message),
      stop_sequence: r.done.stopType === "word" && r.done.stoppingWord ? r.done.stoppingWord : null,
      usage: usage(r.done),
    });
  }
  const err = await set.firstError();
  if (err) return errorResponse(engineError(err, nPrompt, ctx.nCtxSlot));
  async function* frames(): AsyncGenerator<string, void> {
    let block = -1;
    let open: string | null = null; // "thinking" | "text" | "tool:<index>"
    const stopBlock = function* (): Generator<string> {
      if (open === null) return;
      if (open === "thinking") yield sseEvent("content_block_delta", { type: "content_block_delta", index: block, delta: { type: "signature_delta", signature: "" } });
      yield sseEvent("content_block_stop", { type: "content_block_stop", index: block });
      open = null;
    };
    const deltaFrames = function* (d: ChatDelta): Generator<string> {
      const key = d.kind === "tool_call" ? `tool:${d.delta.index}` : d.kind === "reasoning" ? "thinking" : "text";
      if (key !== open) {
        if (d.kind !== "tool_call" && d.text === "") return;
        yield* stopBlock();
        block++;
        open = key;
        const cb = d.kind === "reasoning" ? { type: "thinking", thinking: "", signature: "" } : d.kind === "content" ? { type: "text", text: "" } : { type: "tool_use", id: d.delta.id ?? "", name: d.delta.function.name ?? "", input: {} };
        yield sseEvent("content_block_start", { type: "content_block_start", index: block, content_block: cb });
      }
      if (d.kind === "reasoning") {
        if (d.text) yield sseEvent("content_block_delta", { type: "content_block_delta", index: block, delta: { type: "thinking_delta", thinking: d.text } });
      } else if (d.kind === "content") {
        if (d.text) yield sseEvent("content_block_delta", { type: "content_block_delta", index: block, delta: { type: "text_delta", text: d.text } });
      } else if (d.delta.function.arguments) {
        yield sseEvent("content_block_delta", { type: "content_block_delta", index: block, delta: { type: "input_json_delta", partial_json: d.delta.function.arguments } });
      }
    };
    for await (const e of chatEvents(set, prep.parser)) {
      if (e.kind === "start") {
        yield sseEvent("message_start", {
          type: "message_start",
          message: { id, type: "message", role: "assistant", content: [], model: ctx.modelName, stop_reason: null, stop_sequence: null, usage: { cache_read_input_tokens: 0, input_tokens: nPrompt, output_tokens: 0 } },
        });
      } else if (e.kind === "deltas") {
        for (const d of e.deltas) yield* deltaFrames(d);
      } else {
        const d = e.done;
        if (d.error) {
          yield* stopBlock();
          yield sseEvent("error", anthropicError(engineError(d.error, nPrompt, ctx.nCtxSlot)));
          set.abort();
          return;
        }
        yield* stopBlock();
        yield sseEvent("message_delta", {
          type: "message_delta",
          delta: { stop_reason: stopReason(d, e.message), stop_sequence: d.stopType === "word" && d.stoppingWord ? d.stoppingWord : null },
          usage: { output_tokens: d.tokensPredicted, input_tokens: d.tokensEvaluated - d.tokensCached, cache_read_input_tokens: d.tokensCached },
        });
        yield sseEvent("message_stop", { type: "message_stop" });
      }
    }
  }
  return sseResponse(frames(), () => set.abort(), request.signal);
}

/** POST /v1/messages/count_tokens: {"input_tokens": N} of the rendered prompt. */
export async function anthropicCountTokens(ctx: ServerContext, body: Obj): Promise<Response> {
  const chat = anthropicToChat(body);
  const r = renderChatPrompt(ctx, chat);
  const n = (await ctx.encodePrompt(r.prompt, { addSpecial: true, parseSpecial: true })).length;
  return Response.json({ input_tokens: n });
}
