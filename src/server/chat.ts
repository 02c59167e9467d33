// bloomery server: POST /v1/chat/completions (and /chat/completions): OpenAI chat, plain and
// streamed (role chunk, content / reasoning_content / tool_calls deltas, finish chunk with
// timings, optional usage chunk, [DONE]), in llama-server's shapes.
import type { ChatDelta, ParsedMessage } from "../chat/index.ts";
import type { DoneEvent } from "../engine/protocol.ts";
import { prepareChat } from "./chat-request.ts";
import { chatEvents, collectChat } from "./chat-stream.ts";
import { BUILD_INFO, LiveTimings, chatCompletionId, finishReason, nowSeconds, probEntries, sumTimings, timingsJson, usageJson } from "./common.ts";
import { engineError, errorResponse } from "./errors.ts";
import { GenerationSet } from "./runner.ts";
import { SSE_DONE, sseData, sseResponse } from "./sse.ts";
import type { ServerContext } from "./state.ts";

type Body = Record<string, unknown>;

/** The assistant message as llama-server writes it (content "" when empty). */
export function messageJson(m: ParsedMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { role: "assistant", content: m.content };
  if (m.reasoning_content) out.reasoning_content = m.reasoning_content;
  if (m.tool_calls.length) out.tool_calls = m.tool_calls.map((c) => ({ type: "function", function: { name: c.function.name, arguments: c.function.arguments }, id: c.id }));
  return out;
}

export function deltaJson(d: ChatDelta): Record<string, unknown> {
  if (d.kind === "content") return { content: d.text };
  if (d.kind === "reasoning") return { reasoning_content: d.text };
  const t = d.delta;
  const call: Record<string, unknown> = { index: t.index };
  if (t.id !== undefined) {
    call.id = t.id;
    call.type = "function";
  }
  const fn: Record<string, unknown> = {};
  if (t.function.name !== undefined) fn.name = t.function.name;
  if (t.function.arguments !== "" || t.function.name !== undefined) fn.arguments = t.function.arguments;
  call.function = fn;
  return { tool_calls: [call] };
}

export async function chatCompletion(ctx: ServerContext, body: Body, request: Request): Promise<Response> {
  const prep = await prepareChat(ctx, body);
  const s = prep.settings;
  const set = GenerationSet.start(ctx, prep.specs, request.signal);
  const id = chatCompletionId();
  const nPrompt = prep.tokens.length;

  if (!s.stream) {
    const results = await collectChat(set, prep.parser);
    const failed = results.find((r) => r.done.error);
    if (failed) return errorResponse(engineError(failed.done.error!, nPrompt, ctx.nCtxSlot));
    const dones = results.map((r) => r.done);
    return Response.json({
      choices: results.map((r, i) => {
        const choice: Record<string, unknown> = {
          finish_reason: finishReason(r.done, r.message.tool_calls.length > 0),
          index: i,
          message: messageJson(r.message),
        };
        if (s.nProbs > 0) choice.logprobs = { content: probEntries(r.tokens, s.postSamplingProbs) };
        return choice;
      }),
      created: nowSeconds(),
      model: ctx.modelName,
      system_fingerprint: BUILD_INFO,
      object: "chat.completion",
      usage: usageJson(dones),
      id,
      timings: timingsJson(sumTimings(dones)),
    });
  }

  const err = await set.firstError();
  if (err) return errorResponse(engineError(err, nPrompt, ctx.nCtxSlot));
  const chunk = (index: number, delta: Record<string, unknown>, finish: string | null = null) => ({
    choices: [{ finish_reason: finish, index, delta }],
    created: nowSeconds(),
    id,
    model: ctx.modelName,
    system_fingerprint: BUILD_INFO,
    object: "chat.completion.chunk",
  });
  const live = new LiveTimings();
  const counts = prep.specs.map(() => 0);
  async function* frames(): AsyncGenerator<string, void> {
    const dones: DoneEvent[] = [];
    for await (const e of chatEvents(set, prep.parser)) {
      if (e.kind === "start") {
        yield sseData(chunk(e.index, { role: "assistant", content: null }));
      } else if (e.kind === "deltas") {
        const chunks: Record<string, unknown>[] = e.deltas.map((d) => chunk(e.index, deltaJson(d)));
        counts[e.index] += e.tokens.length;
        if (chunks.length && s.nProbs > 0 && e.tokens.length) {
          const c = (chunks[chunks.length - 1].choices as Record<string, unknown>[])[0];
          c.logprobs = { content: probEntries(e.tokens, s.postSamplingProbs) };
        }
        if (chunks.length && s.timingsPerToken) chunks[chunks.length - 1].timings = live.tokens(nPrompt, counts[e.index]);
        for (const c of chunks) yield sseData(c);
      } else {
        const d = e.done;
        if (d.error) {
          yield sseData({ error: engineError(d.error, nPrompt, ctx.nCtxSlot).body().error });
          set.abort();
          return;
        }
        dones.push(d);
        const last: Record<string, unknown> = chunk(e.index, {}, finishReason(d, e.message.tool_calls.length > 0));
        if (!s.includeUsage) last.timings = timingsJson(d);
        yield sseData(last);
      }
    }
    if (s.includeUsage) yield sseData({ ...chunk(0, {}), choices: [], usage: usageJson(dones), timings: timingsJson(sumTimings(dones)) });
    yield SSE_DONE;
  }
  return sseResponse(frames(), () => set.abort(), request.signal);
}
