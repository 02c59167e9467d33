// bloomery chat: gpt-oss's harmony output read back as an assistant message, streamed: analysis
// messages as reasoning, commentary preambles and the final message as content, calls addressed
// `to=functions.NAME` as tool calls (llama.cpp's gpt-oss handler, common/parsers/gpt-oss.cpp).
//
// The output is read as the sequence of messages it is: the prompt ends with `<|start|>assistant`,
// so it opens with a header (`<|channel|>analysis<|message|>`), a body runs to `<|end|>` (as in
// llama.cpp; `<|return|>` and `<|call|>` end the generation and never reach the text), and the
// next message opens with `<|start|>assistant`. Where llama.cpp fails the request because the output
// does not fit (text outside any message, an unknown channel, a call that is not JSON), the text
// from there on is returned as content instead. Calls to recipients that are not callable tools
// (`to=python`, builtins, tools the request did not offer) are dropped, as llama.cpp does.
import {
  H_CALL,
  H_END,
  H_RETURN,
  H_START,
  type HarmonyHeader,
  JsonExtent,
  scanHeader,
} from "./harmony-scan.ts";
import { partialSuffix } from "./reasoning.ts";
import { randomToolCallId } from "./tool-stream.ts";
import type { ChatDelta, ParsedMessage, ToolCall, ToolDef } from "./types.ts";

export interface HarmonyOptions {
  /** reasoning_format other than none: analysis is reasoning; false: it stays in the content, markers and all. */
  extractReasoning: boolean;
  /** Tools the model may call (ToolPolicy.callable); empty: no call is parsed. */
  tools: ToolDef[];
  /** false keeps only the first call (later ones are dropped). */
  parallelToolCalls?: boolean;
  /** Tool-call id generator (default random, as llama-server). */
  genId?: () => string;
}

type Body = "reasoning" | "content" | "raw-analysis" | "skip";
type Mode =
  | { m: "first" }
  | { m: "header" }
  | { m: "between" }
  | { m: "body"; body: Body }
  | { m: "args-start"; name: string }
  | { m: "args"; scanner: JsonExtent }
  | { m: "after-call" }
  | { m: "raw" };

/** What may follow a call's arguments before the next message (`<|call|>` when a client renders it). */
const CALL_ENDS = [H_CALL, H_END, H_RETURN];

function isWs(c: string): boolean {
  return c === " " || c === "\n" || c === "\t" || c === "\r";
}

function trimStartWs(s: string): string {
  let i = 0;
  while (i < s.length && isWs(s[i])) i++;
  return i === 0 ? s : s.slice(i);
}

/**
 * Streaming harmony parser: push detokenized text, get content / reasoning / tool-call deltas;
 * the deltas of any chunking add up to `message`, and to what the whole text parses to.
 */
export class HarmonyStream {
  private mode: Mode = { m: "first" };
  private pending = "";
  /** The header being read, then the last complete one (for a call that turns out not to be one). */
  private header = "";
  private readonly out: ChatDelta[] = [];
  private content = "";
  private reasoning = "";
  /** Leading whitespace of the reasoning, held until something else comes (llama drops all-blank reasoning). */
  private heldReasoning = "";
  private readonly calls: ToolCall[] = [];
  private current: ToolCall | null = null;
  private muted = false;
  private readonly toolNames: Set<string>;
  private finished = false;

  constructor(private readonly opts: HarmonyOptions) {
    this.toolNames = new Set(opts.tools.map((t) => t.function.name));
  }

  get message(): ParsedMessage {
    return {
      content: this.content,
      reasoning_content: this.reasoning,
      tool_calls: this.calls.map((c) => ({ ...c, function: { ...c.function } })),
    };
  }

  push(text: string): ChatDelta[] {
    if (this.finished) throw new Error("HarmonyStream: push after finish");
    this.pending += text;
    this.drain(false);
    return this.out.splice(0);
  }

  finish(): ChatDelta[] {
    if (this.finished) return [];
    this.drain(true);
    this.finished = true;
    if (this.mode.m === "args") this.args(this.mode.scanner.closers());
    return this.out.splice(0);
  }

  private drain(final: boolean): void {
    while (this.step(final)) {
      // each step either changes mode (go on) or waits for more text
    }
  }

  /** One step of the current mode; true when it moved on and the loop should continue. */
  private step(final: boolean): boolean {
    const mode = this.mode;
    switch (mode.m) {
      case "first": {
        // the prompt opened the turn; an output that opens it again is read the same
        if (this.pending.startsWith(H_START)) {
          this.pending = this.pending.slice(H_START.length);
        } else if (!final && H_START.startsWith(this.pending)) {
          return false;
        }
        this.mode = { m: "header" };
        return true;
      }
      case "header":
        return this.readHeader(final);
      case "between": {
        const t = trimStartWs(this.pending);
        if (t.startsWith(H_START)) {
          this.pending = t.slice(H_START.length);
          this.header = "";
          this.mode = { m: "header" };
          return true;
        }
        if (t === "" || (!final && H_START.startsWith(t))) {
          if (final) this.pending = "";
          return false;
        }
        this.mode = { m: "raw" };
        return true;
      }
      case "body":
        return this.readBody(mode.body, final);
      case "args-start": {
        const t = trimStartWs(this.pending);
        if (t === "") {
          if (final) this.pending = "";
          return false;
        }
        if (t[0] !== "{") {
          // not a call after all: its header and body are content
          this.pending = this.header + this.pending;
          this.mode = { m: "raw" };
          return true;
        }
        this.open(mode.name);
        this.pending = t;
        this.mode = { m: "args", scanner: new JsonExtent() };
        return true;
      }
      case "args": {
        const text = this.pending;
        this.pending = "";
        const at = mode.scanner.feed(text);
        if (at === -1) {
          this.args(text);
          return false;
        }
        if (at >= 0) {
          this.args(text.slice(0, at));
          this.pending = text.slice(at);
          this.current = null;
          this.mode = { m: "after-call" };
          return true;
        }
        // a bracket that does not pair: the call ends there, the rest is content
        const bad = -at - 2;
        this.args(text.slice(0, bad));
        this.args(mode.scanner.closers());
        this.current = null;
        this.pending = text.slice(bad);
        this.mode = { m: "raw" };
        return true;
      }
      case "after-call": {
        const t = trimStartWs(this.pending);
        if (t === "") {
          this.pending = "";
          return false;
        }
        for (const m of CALL_ENDS) {
          if (t.startsWith(m)) {
            this.pending = t.slice(m.length);
            this.mode = { m: "between" };
            return true;
          }
        }
        if (!final && CALL_ENDS.some((m) => m.startsWith(t))) return false;
        this.pending = t;
        this.mode = { m: "between" };
        return true;
      }
      case "raw":
        if (this.pending !== "") this.emitContent(this.pending);
        this.pending = "";
        return false;
    }
  }

  private readHeader(final: boolean): boolean {
    this.header += this.pending;
    this.pending = "";
    const r = scanHeader(this.header);
    if (r.status === "partial") {
      if (final) this.header = ""; // cut off inside a header: nothing to show
      return false;
    }
    if (r.status === "invalid") {
      this.pending = this.header;
      this.header = "";
      this.mode = { m: "raw" };
      return true;
    }
    this.pending = this.header.slice(r.header.end);
    this.header = this.header.slice(0, r.header.end);
    this.mode = this.bodyMode(r.header);
    if (this.mode.m === "raw") this.pending = this.header + this.pending;
    else if (this.mode.m === "body" && this.mode.body === "raw-analysis") this.emitContent(this.header);
    return true;
  }

  /** What a complete header opens. */
  private bodyMode(h: HarmonyHeader): Mode {
    const to = h.recipient;
    if (to !== null && to !== "assistant") {
      const name = to.startsWith("functions.") ? to.slice("functions.".length) : null;
      if (name !== null && this.toolNames.has(name)) return { m: "args-start", name };
      return { m: "body", body: "skip" };
    }
    switch (h.channel) {
      case "analysis":
        return { m: "body", body: this.opts.extractReasoning ? "reasoning" : "raw-analysis" };
      case "commentary":
      case "final":
      case null:
        return { m: "body", body: "content" };
      default:
        return { m: "raw" };
    }
  }

  private readBody(body: Body, final: boolean): boolean {
    const at = this.pending.indexOf(H_END);
    if (at < 0) {
      const keep = final ? 0 : partialSuffix(this.pending, [H_END]);
      this.emitBody(body, this.pending.slice(0, this.pending.length - keep));
      this.pending = this.pending.slice(this.pending.length - keep);
      return false;
    }
    this.emitBody(body, this.pending.slice(0, at));
    if (body === "raw-analysis") this.emitContent(H_END);
    this.pending = this.pending.slice(at + H_END.length);
    this.mode = { m: "between" };
    return true;
  }

  private emitBody(body: Body, text: string): void {
    if (text === "") return;
    if (body === "reasoning") this.emitReasoning(text);
    else if (body !== "skip") this.emitContent(text);
  }

  private emitContent(text: string): void {
    if (text === "") return;
    this.content += text;
    this.out.push({ kind: "content", text });
  }

  private emitReasoning(text: string): void {
    let t = text;
    if (this.reasoning === "") {
      this.heldReasoning += t;
      let i = 0;
      while (i < this.heldReasoning.length && isWs(this.heldReasoning[i])) i++;
      if (i === this.heldReasoning.length) return;
      t = this.heldReasoning;
      this.heldReasoning = "";
    }
    this.reasoning += t;
    this.out.push({ kind: "reasoning", text: t });
  }

  private open(name: string): void {
    this.muted = this.opts.parallelToolCalls === false && this.calls.length > 0;
    this.current = null;
    if (this.muted) return;
    const call: ToolCall = { id: (this.opts.genId ?? randomToolCallId)(), type: "function", function: { name, arguments: "" } };
    this.current = call;
    this.calls.push(call);
    this.out.push({ kind: "tool_call", delta: { index: this.calls.length - 1, id: call.id, type: "function", function: { name, arguments: "" } } });
  }

  private args(fragment: string): void {
    if (this.muted || !this.current || fragment === "") return;
    this.current.function.arguments += fragment;
    this.out.push({ kind: "tool_call", delta: { index: this.calls.length - 1, function: { arguments: fragment } } });
  }
}

/** Parses a whole harmony output. */
export function parseHarmony(text: string, opts: HarmonyOptions): ParsedMessage {
  const s = new HarmonyStream(opts);
  s.push(text);
  s.finish();
  return s.message;
}
