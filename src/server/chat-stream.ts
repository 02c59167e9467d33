// bloomery server: a chat request's generations read back as assistant-message events: per
// choice a start, the content / reasoning / tool-call deltas of each token (with its probs), and
// the end with the whole parsed message. OpenAI, Anthropic and Responses format these.
import { type ChatDelta, ChatOutputParser, type OutputOptions, type ParsedMessage } from "../chat/index.ts";
import type { DoneEvent, TokenEvent } from "../engine/protocol.ts";
import type { GenerationSet } from "./runner.ts";

export type ChatEvent =
  | { index: number; kind: "start" }
  | { index: number; kind: "deltas"; deltas: ChatDelta[]; tokens: TokenEvent[] }
  | { index: number; kind: "end"; done: DoneEvent; message: ParsedMessage };

/** Reads a generation set as chat events (a failed choice ends with its done.error set). */
export async function* chatEvents(set: GenerationSet, opts: OutputOptions): AsyncGenerator<ChatEvent, void> {
  const parsers = new Map<number, ChatOutputParser>();
  const parserOf = (i: number) => {
    let p = parsers.get(i);
    if (!p) {
      p = new ChatOutputParser(opts);
      parsers.set(i, p);
    }
    return p;
  };
  for (let e = await set.next(); e; e = await set.next()) {
    const i = e.index;
    const fresh = !parsers.has(i);
    const parser = parserOf(i);
    if (fresh) yield { index: i, kind: "start" };
    if (e.kind === "tokens") {
      for (const t of e.events) {
        const deltas = parser.push(t.text);
        yield { index: i, kind: "deltas", deltas, tokens: [t] };
      }
    } else {
      const deltas = e.done.error ? [] : [...parser.push(e.done.text), ...parser.finish()];
      if (deltas.length) yield { index: i, kind: "deltas", deltas, tokens: [] };
      yield { index: i, kind: "end", done: e.done, message: parser.message };
    }
  }
}

/** Collects every choice's final message, tokens and done event (non-streamed responses). */
export async function collectChat(set: GenerationSet, opts: OutputOptions): Promise<{ message: ParsedMessage; done: DoneEvent; tokens: TokenEvent[] }[]> {
  const out: { message?: ParsedMessage; done?: DoneEvent; tokens: TokenEvent[] }[] = set.specs.map(() => ({ tokens: [] }));
  for await (const e of chatEvents(set, opts)) {
    if (e.kind === "deltas") out[e.index].tokens.push(...e.tokens);
    else if (e.kind === "end") {
      out[e.index].message = e.message;
      out[e.index].done = e.done;
    }
  }
  return out.map((o) => ({ message: o.message!, done: o.done!, tokens: o.tokens }));
}
