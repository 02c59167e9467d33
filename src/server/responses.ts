// bloomery server: the OpenAI Responses API (POST /v1/responses, /responses) mapped onto chat:
// input items -> messages, function tools, text.format -> response_format; answers as a response
// object or its event stream (response.created ... output_text.delta ... response.completed).
import type { ParsedMessage } from "../chat/index.ts";
import type { DoneEvent } from "../engine/protocol.ts";
import { prepareChat, renderChatPrompt } from "./chat-request.ts";
import { chatEvents, collectChat } from "./chat-stream.ts";
import { nowSeconds, randomString } from "./common.ts";
import { badField, badRequest, engineError, errorResponse, shownValue } from "./errors.ts";
import { GenerationSet } from "./runner.ts";
import { sseEvent, sseResponse } from "./sse.ts";
import type { ServerContext } from "./state.ts";

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function partsText(content: unknown, field: string, allowed: string[]): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) throw badField(field, "expected a string or an array of content parts");
  const out: string[] = [];
  content.forEach((p, i) => {
    if (!isObj(p)) throw badField(`${field}[${i}]`, "expected an object");
    if (p.type === "input_image" || p.type === "input_file") throw badRequest(`${shownValue(p.type)} is not supported by this model`);
    if (typeof p.type !== "string" || !allowed.includes(p.type)) throw badField(`${field}[${i}].type`, `must be one of ${allowed.map((a) => `'${a}'`).join(", ")}`);
    const text = p.type === "refusal" ? p.refusal : p.text;
    if (typeof text !== "string") throw badField(`${field}[${i}]`, `${shownValue(p.type)} requires text`);
    out.push(text);
  });
  return out.join("\n");
}

/** Converts a Responses request into an OpenAI chat request body. */
export function responsesToChat(body: Obj): Obj {
  if (body.input === undefined) throw badField("input", "'input' is required");
  if (typeof body.previous_response_id === "string" && body.previous_response_id !== "") throw badRequest("bloomery does not support 'previous_response_id' (responses are not stored); send the whole conversation in 'input'");
  const messages: Obj[] = [];
  if (typeof body.instructions === "string") messages.push({ role: "system", content: body.instructions });
  const lastAssistant = (): Obj | undefined => {
    const m = messages[messages.length - 1];
    return m && m.role === "assistant" ? m : undefined;
  };
  if (typeof body.input === "string") messages.push({ role: "user", content: body.input });
  else if (Array.isArray(body.input)) {
    body.input.forEach((item, i) => {
      const f = `input[${i}]`;
      if (!isObj(item)) throw badField(f, "expected an object");
      const type = item.type ?? "message";
      if (type === "message" && (item.role === "user" || item.role === "system" || item.role === "developer")) {
        messages.push({ role: item.role, content: partsText(item.content, `${f}.content`, ["input_text"]) });
      } else if (type === "message" && item.role === "assistant") {
        const text = partsText(item.content, `${f}.content`, ["output_text", "input_text", "refusal"]);
        const prev = lastAssistant();
        if (prev && !prev.tool_calls) prev.content = `${String(prev.content ?? "")}${text}`;
        else messages.push({ role: "assistant", content: text });
      } else if (type === "function_call") {
        if (typeof item.name !== "string" || typeof item.call_id !== "string") throw badField(f, "a function_call needs 'name' and 'call_id'");
        const call = { id: item.call_id, type: "function", function: { name: item.name, arguments: typeof item.arguments === "string" ? item.arguments : "{}" } };
        const prev = lastAssistant();
        if (prev) prev.tool_calls = [...((prev.tool_calls as Obj[] | undefined) ?? []), call];
        else messages.push({ role: "assistant", content: "", tool_calls: [call] });
      } else if (type === "function_call_output") {
        if (typeof item.call_id !== "string") throw badField(`${f}.call_id`, "expected a string");
        const out = typeof item.output === "string" ? item.output : partsText(item.output, `${f}.output`, ["input_text"]);
        messages.push({ role: "tool", tool_call_id: item.call_id, content: out });
      } else if (type === "reasoning") {
        const c = Array.isArray(item.content) && isObj(item.content[0]) ? item.content[0].text : undefined;
        if (typeof c === "string") {
          const prev = lastAssistant();
          if (prev) prev.reasoning_content = c;
          else messages.push({ role: "assistant", content: "", reasoning_content: c });
        }
      } else throw badField(f, "Cannot determine type of 'item'");
    });
  } else throw badField("input", "'input' must be a string or array of objects");
  const out: Obj = { ...body, messages };
  for (const k of ["input", "instructions", "tools", "max_output_tokens", "reasoning", "text", "previous_response_id"]) delete out[k];
  if (Array.isArray(body.tools)) {
    const tools = body.tools.filter((t): t is Obj => isObj(t) && t.type === "function").map((t) => {
      const { type: _t, ...fn } = t;
      return { type: "function", function: fn };
    });
    if (tools.length) out.tools = tools;
  }
  if (isObj(body.tool_choice) && body.tool_choice.type === "function" && typeof body.tool_choice.name === "string") {
    out.tool_choice = { type: "function", function: { name: body.tool_choice.name } };
  }
  if (body.max_output_tokens !== undefined) out.max_tokens = body.max_output_tokens;
  if (isObj(body.reasoning) && body.reasoning.effort !== undefined) out.reasoning_effort = body.reasoning.effort;
  const fmt = isObj(body.text) ? body.text.format : undefined;
  if (isObj(fmt)) {
    if (fmt.type === "json_schema") out.response_format = { type: "json_schema", json_schema: { schema: fmt.schema ?? {} } };
    else if (fmt.type === "json_object") out.response_format = { type: "json_object" };
    else if (fmt.type !== "text") throw badField("text.format.type", "must be text, json_object or json_schema");
  }
  return out;
}

interface Ids {
  resp: string;
  reasoning: string;
  message: string;
}

function usage(d: DoneEvent): Obj {
  return { input_tokens: d.tokensEvaluated, output_tokens: d.tokensPredicted, total_tokens: d.tokensEvaluated + d.tokensPredicted, input_tokens_details: { cached_tokens: d.tokensCached } };
}

function outputItems(m: ParsedMessage, ids: Ids): Obj[] {
  const out: Obj[] = [];
  if (m.reasoning_content) out.push({ id: ids.reasoning, summary: [], type: "reasoning", content: [{ text: m.reasoning_content, type: "reasoning_text" }], encrypted_content: "", status: "completed" });
  if (m.content) out.push({ content: [{ type: "output_text", annotations: [], logprobs: [], text: m.content }], id: ids.message, role: "assistant", status: "completed", type: "message" });
  for (const c of m.tool_calls) out.push({ id: `fc_${c.id}`, type: "function_call", status: "completed", arguments: c.function.arguments, call_id: `call_${c.id}`, name: c.function.name });
  return out;
}

export async function responsesCreate(ctx: ServerContext, body: Obj, request: Request): Promise<Response> {
  const chat = responsesToChat(body);
  chat.n = 1;
  const prep = await prepareChat(ctx, chat);
  const set = GenerationSet.start(ctx, prep.specs, request.signal);
  const ids: Ids = { resp: `resp_${randomString()}`, reasoning: `rs_${randomString()}`, message: `msg_${randomString()}` };
  const nPrompt = prep.tokens.length;
  const created = nowSeconds();
  const responseObj = (status: string, m: ParsedMessage | null, d: DoneEvent | null): Obj => ({
    id: ids.resp,
    object: "response",
    created_at: created,
    ...(status === "completed" || status === "incomplete" ? { completed_at: nowSeconds() } : {}),
    status,
    model: ctx.modelName,
    output: m ? outputItems(m, ids) : [],
    ...(d ? { usage: usage(d) } : {}),
    ...(status === "incomplete" ? { incomplete_details: { reason: "max_output_tokens" } } : {}),
  });
  const statusOf = (d: DoneEvent) => (d.stopType === "limit" ? "incomplete" : "completed");
  if (!prep.settings.stream) {
    const [r] = await collectChat(set, prep.parser);
    if (r.done.error) return errorResponse(engineError(r.done.error, nPrompt, ctx.nCtxSlot));
    return Response.json(responseObj(statusOf(r.done), r.message, r.done));
  }
  const err = await set.firstError();
  if (err) return errorResponse(engineError(err, nPrompt, ctx.nCtxSlot));
  async function* frames(): AsyncGenerator<string, void> {
    let seq = 0;
    const ev = (type: string, data: Obj) => sseEvent(type, { type, sequence_number: seq++, ...data });
    let outputIndex = -1;
    let reasoningStarted = false;
    let textStarted = false;
    const calls = new Map<number, { id: string; outputIndex: number }>();
    for await (const e of chatEvents(set, prep.parser)) {
      if (e.kind === "start") {
        yield ev("response.created", { response: responseObj("in_progress", null, null) });
        yield ev("response.in_progress", { response: responseObj("in_progress", null, null) });
      } else if (e.kind === "deltas") {
        for (const d of e.deltas) {
          if (d.kind === "reasoning" && d.text) {
            if (!reasoningStarted) {
              reasoningStarted = true;
              yield ev("response.output_item.added", { output_index: ++outputIndex, item: { id: ids.reasoning, summary: [], type: "reasoning", content: [], encrypted_content: "", status: "in_progress" } });
            }
            yield ev("response.reasoning_text.delta", { item_id: ids.reasoning, output_index: outputIndex, content_index: 0, delta: d.text });
          } else if (d.kind === "content" && d.text) {
            if (!textStarted) {
              textStarted = true;
              yield ev("response.output_item.added", { output_index: ++outputIndex, item: { content: [], id: ids.message, role: "assistant", status: "in_progress", type: "message" } });
              yield ev("response.content_part.added", { item_id: ids.message, output_index: outputIndex, content_index: 0, part: { type: "output_text", text: "", annotations: [] } });
            }
            yield ev("response.output_text.delta", { item_id: ids.message, output_index: outputIndex, content_index: 0, delta: d.text, logprobs: [] });
          } else if (d.kind === "tool_call") {
            let c = calls.get(d.delta.index);
            if (!c && d.delta.id !== undefined) {
              c = { id: d.delta.id, outputIndex: ++outputIndex };
              calls.set(d.delta.index, c);
              yield ev("response.output_item.added", { output_index: c.outputIndex, item: { id: `fc_${c.id}`, type: "function_call", status: "in_progress", arguments: "", call_id: `call_${c.id}`, name: d.delta.function.name ?? "" } });
            }
            if (c && d.delta.function.arguments) yield ev("response.function_call_arguments.delta", { item_id: `fc_${c.id}`, output_index: c.outputIndex, delta: d.delta.function.arguments });
          }
        }
      } else {
        const d = e.done;
        if (d.error) {
          yield ev("error", { code: String(d.error.code), message: d.error.message, param: null });
          set.abort();
          return;
        }
        const m = e.message;
        const items = outputItems(m, ids);
        for (const item of items) {
          if (item.type === "reasoning") yield ev("response.output_item.done", { output_index: 0, item });
          else if (item.type === "message") {
            const oi = reasoningStarted ? 1 : 0;
            yield ev("response.output_text.done", { item_id: ids.message, output_index: oi, content_index: 0, text: m.content, logprobs: [] });
            yield ev("response.content_part.done", { item_id: ids.message, output_index: oi, content_index: 0, part: (item.content as Obj[])[0] });
            yield ev("response.output_item.done", { output_index: oi, item });
          } else {
            const c = [...calls.values()].find((x) => item.id === `fc_${x.id}`);
            yield ev("response.function_call_arguments.done", { item_id: item.id, output_index: c?.outputIndex ?? 0, arguments: item.arguments });
            yield ev("response.output_item.done", { output_index: c?.outputIndex ?? 0, item });
          }
        }
        const status = statusOf(d);
        yield ev(status === "completed" ? "response.completed" : "response.incomplete", { response: responseObj(status, m, d) });
      }
    }
  }
  return sseResponse(frames(), () => set.abort(), request.signal);
}

/** POST /v1/responses/input_tokens: the prompt's token count. */
export async function responsesInputTokens(ctx: ServerContext, body: Obj): Promise<Response> {
  const r = renderChatPrompt(ctx, responsesToChat(body));
  return Response.json({ object: "response.input_tokens", input_tokens: (await ctx.encodePrompt(r.prompt, { addSpecial: true, parseSpecial: true })).length });
}
