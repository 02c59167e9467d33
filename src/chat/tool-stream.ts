// bloomery chat: splitting model output into content and tool calls (Hermes JSON, Qwen3 XML,
// GLM's arg_key/arg_value or DeepSeek V3.1's syntax), streamed: content deltas never hold part of a tool-call tag, tool calls come as
// OpenAI deltas (index, id and name first, then argument fragments).
import type { ToolCallSyntax } from "./families.ts";
import { type CallMachine, type CallSink, isWs, partialMarker } from "./tool-call-machine.ts";
import { DS_CALL_BEGIN, DS_CALLS_BEGIN, DeepSeekCall } from "./tool-deepseek.ts";
import { GlmCall } from "./tool-glm.ts";
import { HermesCall } from "./tool-hermes.ts";
import { XmlCall } from "./tool-xml.ts";
import type { ChatDelta, ToolCall, ToolDef } from "./types.ts";

/** The tool-call syntaxes parsed here. */
export type ParsedToolSyntax = Extract<ToolCallSyntax, "hermes" | "qwen3-xml" | "glm-xml" | "deepseek-v3.1">;

/** The markers that open a call in each parsed syntax (they also end an unclosed think block). */
export function toolCallMarkers(syntax: ParsedToolSyntax): string[] {
  if (syntax === "qwen3-xml") return ["<tool_call>", "<function="];
  if (syntax === "deepseek-v3.1") return [DS_CALLS_BEGIN, DS_CALL_BEGIN];
  return ["<tool_call>"];
}

/** The syntaxes ToolCallStream parses. */
export function isParsedToolSyntax(syntax: ToolCallSyntax): syntax is ParsedToolSyntax {
  return syntax === "hermes" || syntax === "qwen3-xml" || syntax === "glm-xml" || syntax === "deepseek-v3.1";
}

export interface ToolStreamOptions {
  syntax: ParsedToolSyntax;
  /** The request's tools: calls to other names are not calls (they stay content). */
  tools: ToolDef[];
  /** false: only the first call is kept (later ones are dropped, not turned into content). */
  parallelToolCalls?: boolean;
  /** Id for each new call (default: 32 random letters and digits, as llama-server). */
  genId?: () => string;
}

const ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/** A random tool-call id like llama-server's (32 letters and digits). */
export function randomToolCallId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  let s = "";
  for (const b of bytes) s += ALNUM[b % ALNUM.length];
  return s;
}

type State = "content" | "call" | "after-call";

export class ToolCallStream {
  private state: State = "content";
  private pending = "";
  private heldWs = "";
  private machine: CallMachine | null = null;
  private marker = "";
  private callText = "";
  private muted = false;
  private readonly markers: string[];
  private readonly toolMap: Map<string, ToolDef>;
  private readonly out: ChatDelta[] = [];
  private content = "";
  private readonly calls: ToolCall[] = [];
  private current: ToolCall | null = null;

  constructor(private readonly opts: ToolStreamOptions) {
    this.toolMap = new Map(opts.tools.map((t) => [t.function.name, t]));
    this.markers = toolCallMarkers(opts.syntax);
  }

  /** Content so far and the calls so far (complete after `finish`). */
  get result(): { content: string; tool_calls: ToolCall[] } {
    return { content: this.content, tool_calls: this.calls.map((c) => ({ ...c, function: { ...c.function } })) };
  }

  push(text: string): ChatDelta[] {
    return this.run(text, false);
  }

  finish(): ChatDelta[] {
    return this.run("", true);
  }

  private run(text: string, final: boolean): ChatDelta[] {
    this.out.length = 0;
    if (this.state === "call") this.feedCall(text, final);
    else this.pending += text;
    this.drain(final);
    if (final) this.emitContent("", false);
    return this.out.splice(0);
  }

  /** Emits content; with `holdTrailingWs` its trailing whitespace waits (dropped before a call). */
  private emitContent(text: string, holdTrailingWs: boolean): void {
    let end = text.length;
    if (holdTrailingWs) while (end > 0 && isWs(text[end - 1])) end--;
    const body = text.slice(0, end);
    if (body !== "") {
      this.pushContent(this.heldWs + body);
      this.heldWs = "";
    }
    this.heldWs += text.slice(end);
    if (!holdTrailingWs && this.heldWs !== "") {
      this.pushContent(this.heldWs);
      this.heldWs = "";
    }
  }

  private pushContent(t: string): void {
    this.content += t;
    this.out.push({ kind: "content", text: t });
  }

  private sink(): CallSink {
    if (this.muted) return { open: () => {}, args: () => {} };
    return {
      open: (name) => {
        const call: ToolCall = { id: (this.opts.genId ?? randomToolCallId)(), type: "function", function: { name, arguments: "" } };
        this.current = call;
        this.calls.push(call);
        this.out.push({
          kind: "tool_call",
          delta: { index: this.calls.length - 1, id: call.id, type: "function", function: { name, arguments: "" } },
        });
      },
      args: (fragment) => {
        if (!this.current || fragment === "") return;
        this.current.function.arguments += fragment;
        this.out.push({ kind: "tool_call", delta: { index: this.calls.length - 1, function: { arguments: fragment } } });
      },
    };
  }

  private startCall(marker: string): void {
    const keepOnlyFirst = this.opts.parallelToolCalls === false;
    this.muted = keepOnlyFirst && this.calls.length > 0;
    const sink = this.sink();
    this.marker = marker;
    this.callText = "";
    this.current = null;
    const known = (n: string) => this.toolMap.has(n);
    const syntax = this.opts.syntax;
    this.machine =
      syntax === "hermes"
        ? new HermesCall(sink, known)
        : syntax === "glm-xml"
          ? new GlmCall(sink, this.toolMap)
          : syntax === "deepseek-v3.1"
            ? new DeepSeekCall(sink, known, marker === DS_CALLS_BEGIN)
            : new XmlCall(sink, this.toolMap, marker === "<tool_call>");
    this.state = "call";
  }

  /** Feeds the open call; on its end, what follows goes back to `pending`. */
  private feedCall(text: string, final: boolean): void {
    const machine = this.machine;
    if (!machine) return;
    this.callText += text;
    const step = machine.feed(text, final);
    if (step.status === "more") return;
    this.machine = null;
    this.current = null;
    if (step.status === "fail") {
      // Not a call: its opening marker is content, and the rest is read again.
      this.emitContent(this.marker, true);
      this.pending = this.callText + this.pending;
      this.state = "content";
      return;
    }
    this.heldWs = "";
    this.pending = step.rest + this.pending;
    this.state = "after-call";
  }

  private drain(final: boolean): void {
    for (;;) {
      if (this.state === "call") {
        if (this.pending === "" && !final) return;
        const text = this.pending;
        this.pending = "";
        this.feedCall(text, final);
        if (this.state === "call") return;
        continue;
      }
      if (this.state === "after-call") {
        let i = 0;
        while (i < this.pending.length && isWs(this.pending[i])) i++;
        this.pending = this.pending.slice(i);
        if (this.pending === "") return;
        this.state = "content";
        continue;
      }
      // content
      if (this.toolMap.size === 0) {
        this.emitContent(this.pending, !final);
        this.pending = "";
        return;
      }
      const hit = firstMarker(this.pending, this.markers);
      if (hit) {
        this.emitContent(this.pending.slice(0, hit.index), true);
        this.pending = this.pending.slice(hit.index + hit.marker.length);
        this.startCall(hit.marker);
        continue;
      }
      let keep = 0;
      if (!final) for (const m of this.markers) keep = Math.max(keep, partialMarker(this.pending, m));
      this.emitContent(this.pending.slice(0, this.pending.length - keep), true);
      this.pending = this.pending.slice(this.pending.length - keep);
      return;
    }
  }
}

function firstMarker(text: string, markers: string[]): { index: number; marker: string } | null {
  let best: { index: number; marker: string } | null = null;
  for (const m of markers) {
    const i = text.indexOf(m);
    if (i >= 0 && (best === null || i < best.index)) best = { index: i, marker: m };
  }
  return best;
}

/** Parses a whole output into content and tool calls (the streaming parser, fed at once). */
export function parseToolCalls(text: string, opts: ToolStreamOptions): { content: string; tool_calls: ToolCall[] } {
  const s = new ToolCallStream(opts);
  s.push(text);
  s.finish();
  return s.result;
}
