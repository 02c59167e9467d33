// bloomery web UI (browser): one streamed chat completion (POST v1/chat/completions, stream) - the
// messages as the API takes them, the deltas merged as they arrive (content, reasoning_content,
// tool_calls by index), the finish reason and the timings; an AbortSignal stops it (the server
// cancels the generation when the connection drops).
import { api, ApiError, sseEvents } from "./api.ts";
import type { ChatMessage, Timings, ToolCall } from "./store.ts";

export interface StreamState {
  content: string;
  reasoning: string;
  toolCalls: ToolCall[];
  finish?: string;
  timings?: Timings;
}

interface Delta {
  content?: string | null;
  reasoning_content?: string | null;
  tool_calls?: { index?: number; id?: string; function?: { name?: string; arguments?: string } }[];
}

interface Chunk {
  choices?: { delta?: Delta; finish_reason?: string | null }[];
  timings?: Timings;
  error?: { message?: string; type?: string; code?: number };
}

/** A user message's text with its attached files, as the model reads it. */
export function userText(m: ChatMessage): string {
  const files = (m.attachments ?? []).map((a) => `\n\n--- ${a.name} ---\n${a.text}`);
  return m.content + files.join("");
}

/** The conversation as the API's messages (the system message first when there is one). */
export function apiMessages(system: string, messages: readonly ChatMessage[]): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  if (system.trim() !== "") out.push({ role: "system", content: system });
  for (const m of messages) {
    if (m.role === "user") out.push({ role: "user", content: userText(m) });
    else {
      if (m.content === "" && !m.toolCalls?.length) continue; // an answer that failed or was stopped before its first token
      const o: Record<string, unknown> = { role: "assistant", content: m.content };
      if (m.toolCalls?.length) o.tool_calls = m.toolCalls.map((t) => ({ id: t.id, type: "function", function: { name: t.name, arguments: t.arguments } }));
      out.push(o);
    }
  }
  return out;
}

/** Applies one chunk's deltas to the state. */
export function applyChunk(s: StreamState, c: Chunk): void {
  if (c.error) throw new ApiError(c.error.message ?? "the generation failed", c.error.code ?? 500, c.error.type ?? "server_error");
  const choice = c.choices?.[0];
  const d = choice?.delta;
  if (d?.content) s.content += d.content;
  if (d?.reasoning_content) s.reasoning += d.reasoning_content;
  for (const t of d?.tool_calls ?? []) {
    const i = t.index ?? s.toolCalls.length;
    const call = (s.toolCalls[i] ??= { id: "", name: "", arguments: "" });
    if (t.id) call.id = t.id;
    if (t.function?.name) call.name += t.function.name;
    if (t.function?.arguments) call.arguments += t.function.arguments;
  }
  if (choice?.finish_reason) s.finish = choice.finish_reason;
  if (c.timings) s.timings = c.timings;
}

/**
 * Streams an answer; `onUpdate` sees the state after each chunk. Resolves with the final state;
 * when the signal aborts, resolves with what arrived so far and finish "stopped".
 */
export async function streamChat(body: Record<string, unknown>, signal: AbortSignal, onUpdate: (s: StreamState) => void): Promise<StreamState> {
  const s: StreamState = { content: "", reasoning: "", toolCalls: [] };
  try {
    const res = await api("v1/chat/completions", { method: "POST", body: JSON.stringify({ ...body, stream: true }), signal });
    for await (const ev of sseEvents(res)) {
      if (ev.data === "[DONE]") break;
      let chunk: Chunk;
      try {
        chunk = JSON.parse(ev.data) as Chunk;
      } catch {
        continue; // a keep-alive or a line this page does not know
      }
      applyChunk(s, chunk);
      onUpdate(s);
    }
  } catch (e) {
    if (signal.aborted) {
      s.finish = "stopped";
      return s;
    }
    throw e;
  }
  return s;
}
