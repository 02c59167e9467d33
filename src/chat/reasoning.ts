// bloomery chat: splitting `<think>...</think>` reasoning out of model output per llama's
// reasoning_format (none / deepseek / deepseek-legacy / auto), whole or streamed.
import { ChatInputError } from "./errors.ts";
import type { ThinkingTags } from "./families.ts";
import { REASONING_FORMATS, type ReasoningFormat } from "./types.ts";

export interface ReasoningOptions {
  format: ReasoningFormat;
  /**
   * The generation prompt's open think block (e.g. "<think>\n", see `ChatPrompt.thinkingPrefill`):
   * the output starts inside reasoning. With format "none" this text is part of the content, as
   * llama-server returns it.
   */
  prefill?: string | null;
  /** Default `<think>` / `</think>`. */
  tags?: ThinkingTags;
  /**
   * Markers that end reasoning without a closing tag and stay in the content (e.g. "<tool_call>"
   * when tools are on: a model may open a tool call straight from its thoughts).
   */
  endBefore?: string[];
}

export interface ReasoningSplit {
  reasoning: string;
  content: string;
}

export type ReasoningDelta = { kind: "reasoning" | "content"; text: string };

const DEFAULT_TAGS: ThinkingTags = { start: "<think>", end: "</think>" };

/** Checks a client-given reasoning_format. @throws ChatInputError naming the bad value. */
export function parseReasoningFormat(value: unknown, field = "reasoning_format"): ReasoningFormat {
  if (typeof value === "string" && (REASONING_FORMATS as readonly string[]).includes(value)) return value as ReasoningFormat;
  throw new ChatInputError(field, `unknown reasoning format ${JSON.stringify(value)} (expected one of ${REASONING_FORMATS.join(", ")})`);
}

function isWs(c: string): boolean {
  return c === " " || c === "\n" || c === "\t" || c === "\r";
}

function trimWs(s: string): string {
  let a = 0;
  let b = s.length;
  while (a < b && isWs(s[a])) a++;
  while (b > a && isWs(s[b - 1])) b--;
  return s.slice(a, b);
}

function trimStartWs(s: string): string {
  let a = 0;
  while (a < s.length && isWs(s[a])) a++;
  return s.slice(a);
}

/** First occurrence of any marker at or after `from`: [index, marker], or null. */
function findFirst(text: string, markers: string[], from = 0): [number, string] | null {
  let best: [number, string] | null = null;
  for (const m of markers) {
    if (m === "") continue;
    const i = text.indexOf(m, from);
    if (i >= 0 && (best === null || i < best[0] || (i === best[0] && m.length > best[1].length))) best = [i, m];
  }
  return best;
}

/** Splits a whole model output into reasoning and content. */
export function splitReasoning(text: string, opts: ReasoningOptions): ReasoningSplit {
  const format = opts.format;
  const raw = (opts.prefill ?? "") + text;
  if (format === "none") return { reasoning: "", content: raw };
  const tags = opts.tags ?? DEFAULT_TAGS;
  let body: string;
  if (opts.prefill) {
    body = text;
  } else {
    const lead = trimStartWs(text);
    if (!lead.startsWith(tags.start)) return { reasoning: "", content: format === "deepseek-legacy" ? raw : text };
    body = lead.slice(tags.start.length);
  }
  const hit = findFirst(body, [tags.end, ...(opts.endBefore ?? [])]);
  let reasoning: string;
  let content: string;
  if (hit === null) {
    reasoning = body;
    content = "";
  } else if (hit[1] === tags.end) {
    reasoning = body.slice(0, hit[0]);
    content = trimStartWs(body.slice(hit[0] + hit[1].length));
  } else {
    reasoning = body.slice(0, hit[0]);
    content = body.slice(hit[0]);
  }
  return { reasoning: trimWs(reasoning), content: format === "deepseek-legacy" ? raw : content };
}

type State = "start" | "reasoning" | "after-end" | "content";

/** The deepseek-style splitter as a state machine over streamed text. */
class Splitter {
  private state: State;
  private pending = "";
  /** Reasoning has produced non-whitespace text (leading whitespace is dropped). */
  private reasoningBegun = false;
  /** Whitespace held at the end of the reasoning (dropped if the block ends there). */
  private heldWs = "";
  private readonly endMarkers: string[];

  constructor(
    private readonly tags: ThinkingTags,
    endBefore: string[],
    prefilled: boolean,
  ) {
    this.state = prefilled ? "reasoning" : "start";
    this.endMarkers = [tags.end, ...endBefore];
  }

  push(text: string, out: ReasoningDelta[], final: boolean): void {
    this.pending += text;
    for (;;) {
      const before = this.state;
      this.step(out, final);
      if (this.state === before) break;
    }
    if (final) {
      // A reasoning block left open: its held trailing whitespace is trimmed away.
      this.heldWs = "";
    }
  }

  private emitReasoning(text: string, out: ReasoningDelta[]): void {
    let t = text;
    if (!this.reasoningBegun) {
      t = trimStartWs(t);
      if (t === "") return;
      this.reasoningBegun = true;
    }
    let end = t.length;
    while (end > 0 && isWs(t[end - 1])) end--;
    const body = t.slice(0, end);
    if (body !== "") {
      out.push({ kind: "reasoning", text: this.heldWs + body });
      this.heldWs = "";
    }
    this.heldWs += t.slice(end);
  }

  private step(out: ReasoningDelta[], final: boolean): void {
    switch (this.state) {
      case "start": {
        const lead = trimStartWs(this.pending);
        if (lead.startsWith(this.tags.start)) {
          this.pending = lead.slice(this.tags.start.length);
          this.state = "reasoning";
        } else if (!final && this.tags.start.startsWith(lead)) {
          // still could become "<think>": wait
        } else {
          this.state = "content";
        }
        return;
      }
      case "reasoning": {
        const hit = findFirst(this.pending, this.endMarkers);
        if (hit !== null) {
          this.emitReasoning(this.pending.slice(0, hit[0]), out);
          this.heldWs = "";
          if (hit[1] === this.tags.end) {
            this.pending = this.pending.slice(hit[0] + hit[1].length);
            this.state = "after-end";
          } else {
            this.pending = this.pending.slice(hit[0]);
            this.state = "content";
          }
          return;
        }
        const keep = final ? 0 : partialSuffix(this.pending, this.endMarkers);
        this.emitReasoning(this.pending.slice(0, this.pending.length - keep), out);
        this.pending = this.pending.slice(this.pending.length - keep);
        return;
      }
      case "after-end": {
        const rest = trimStartWs(this.pending);
        if (rest !== "") {
          this.pending = rest;
          this.state = "content";
        } else {
          this.pending = "";
        }
        return;
      }
      case "content": {
        if (this.pending !== "") out.push({ kind: "content", text: this.pending });
        this.pending = "";
        return;
      }
    }
  }
}

/** Length of the longest suffix of `text` that is a proper prefix of one of `markers`. */
export function partialSuffix(text: string, markers: string[]): number {
  let best = 0;
  for (const m of markers) {
    const max = Math.min(m.length - 1, text.length);
    for (let n = max; n > best; n--) {
      if (text.endsWith(m.slice(0, n))) {
        best = n;
        break;
      }
    }
  }
  return best;
}

/**
 * Streaming reasoning splitter: `push` text as the model writes it and get reasoning / content
 * deltas back; no delta ever holds part of a think tag, and the deltas of any chunking add up to
 * what `splitReasoning` gives for the whole text. Call `finish` at the end of the output.
 */
export class ReasoningStream {
  private readonly splitter: Splitter | null;
  private readonly raw: boolean;
  private prefillSent = false;

  constructor(private readonly opts: ReasoningOptions) {
    const format = opts.format;
    this.raw = format === "none" || format === "deepseek-legacy";
    this.splitter = format === "none" ? null : new Splitter(opts.tags ?? DEFAULT_TAGS, opts.endBefore ?? [], !!opts.prefill);
  }

  push(text: string): ReasoningDelta[] {
    return this.feed(text, false);
  }

  finish(): ReasoningDelta[] {
    return this.feed("", true);
  }

  private feed(text: string, final: boolean): ReasoningDelta[] {
    const out: ReasoningDelta[] = [];
    if (this.splitter) {
      const parts: ReasoningDelta[] = [];
      this.splitter.push(text, parts, final);
      for (const d of parts) if (!this.raw || d.kind === "reasoning") out.push(d);
    }
    if (this.raw) {
      let t = text;
      if (!this.prefillSent) {
        this.prefillSent = true;
        t = (this.opts.prefill ?? "") + t;
      }
      if (t !== "") out.push({ kind: "content", text: t });
    }
    return out;
  }
}
