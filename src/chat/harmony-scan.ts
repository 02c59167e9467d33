// bloomery chat: the small scanners of gpt-oss's harmony format: a message header (recipient,
// channel, constraint up to `<|message|>`) and the extent of a tool call's JSON arguments.

export const H_START = "<|start|>assistant";
export const H_MESSAGE = "<|message|>";
export const H_CHANNEL = "<|channel|>";
export const H_CONSTRAIN = "<|constrain|>";
export const H_END = "<|end|>";
export const H_RETURN = "<|return|>";
export const H_CALL = "<|call|>";
const TO = " to=";

/** A header longer than this without `<|message|>` is not a header. */
const HEADER_LIMIT = 1024;

/** One message header, from after `<|start|>assistant` to `<|message|>`. */
export interface HarmonyHeader {
  /** The last `<|channel|>` name ("analysis", "commentary", "final"); null when there is none. */
  channel: string | null;
  /**
   * The `to=` recipient ("functions.NAME", "python", ...). A `to=assistant` (gpt-oss-20b's stray
   * `<|channel|>commentary to=assistant` before the real channel) counts only when it is the only one.
   */
  recipient: string | null;
  /** `<|constrain|>json` or the bare ` json` of the template's own rendering. */
  constraint: string | null;
  /** Length of the header text up to and including `<|message|>`. */
  end: number;
}

export type HeaderScan = { status: "partial" } | { status: "invalid" } | { status: "done"; header: HarmonyHeader };

const MARKERS = [H_MESSAGE, H_CHANNEL, H_CONSTRAIN, TO];

function isWs(c: string): boolean {
  return c === " " || c === "\n" || c === "\t" || c === "\r";
}

function isWord(c: string): boolean {
  return /[A-Za-z0-9_-]/.test(c);
}

/** Reads a run of characters from `i` while `ok` holds; returns its end. */
function run(h: string, i: number, ok: (c: string) => boolean): number {
  let j = i;
  while (j < h.length && ok(h[j])) j++;
  return j;
}

/**
 * Scans a header: `[ to=R]<|channel|>C[ to=R][ [<|constrain|>]TYPE]<|message|>` in any order of
 * those parts, as the real model writes them (recipient in the role or in the channel part).
 * "partial": a proper prefix of a header (wait for more text); "invalid": it cannot be one.
 */
export function scanHeader(h: string): HeaderScan {
  let channel: string | null = null;
  let recipient: string | null = null;
  let constraint: string | null = null;
  let i = 0;
  for (;;) {
    if (i >= h.length) return i > HEADER_LIMIT ? { status: "invalid" } : { status: "partial" };
    if (i > HEADER_LIMIT) return { status: "invalid" };
    if (h.startsWith(H_MESSAGE, i)) {
      return { status: "done", header: { channel, recipient, constraint, end: i + H_MESSAGE.length } };
    }
    if (h.startsWith(H_CHANNEL, i)) {
      const a = i + H_CHANNEL.length;
      const b = run(h, a, isWord);
      if (b === a && b < h.length) return { status: "invalid" };
      channel = h.slice(a, b);
      i = b;
      continue;
    }
    if (h.startsWith(H_CONSTRAIN, i)) {
      const a = i + H_CONSTRAIN.length;
      const b = run(h, a, isWord);
      constraint = h.slice(a, b);
      i = b;
      continue;
    }
    if (h.startsWith(TO, i)) {
      const a = i + TO.length;
      const b = run(h, a, (c) => !isWs(c) && c !== "<");
      if (b === a && b < h.length) return { status: "invalid" };
      const r = h.slice(a, b);
      if (recipient === null || recipient === "assistant") recipient = r;
      i = b;
      continue;
    }
    const rest = h.slice(i, i + 16);
    if (MARKERS.some((m) => m.length > rest.length && m.startsWith(rest))) return { status: "partial" };
    const c = h[i];
    if (isWs(c)) {
      i++;
      continue;
    }
    if (isWord(c) && (channel !== null || recipient !== null)) {
      const b = run(h, i, isWord);
      constraint = h.slice(i, b);
      i = b;
      continue;
    }
    return { status: "invalid" };
  }
}

/**
 * Finds where a JSON value that starts with `{` or `[` ends, fed chunk by chunk (linear in the
 * text). Strings and escapes are followed and brackets must pair; other characters are not checked.
 */
export class JsonExtent {
  private readonly stack: string[] = [];
  private inStr = false;
  private esc = false;

  /**
   * Feeds the next chunk. Returns the index just after the value's end in `text`, -1 when the
   * value goes on, or `-(i + 2)` for a bracket at `i` that does not pair (not JSON).
   */
  feed(text: string): number {
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if (this.inStr) {
        if (this.esc) this.esc = false;
        else if (c === "\\") this.esc = true;
        else if (c === '"') this.inStr = false;
        continue;
      }
      if (c === '"') this.inStr = true;
      else if (c === "{" || c === "[") this.stack.push(c);
      else if (c === "}" || c === "]") {
        const open = this.stack[this.stack.length - 1];
        if (open === undefined || (open === "{") !== (c === "}")) return -(i + 2);
        this.stack.pop();
        if (this.stack.length === 0) return i + 1;
      }
    }
    return -1;
  }

  /** What closes a value cut off here (an open string, then the open brackets), so it stays JSON-shaped. */
  closers(): string {
    let tail = this.inStr ? (this.esc ? '\\"' : '"') : "";
    for (let i = this.stack.length - 1; i >= 0; i--) tail += this.stack[i] === "{" ? "}" : "]";
    return tail;
  }
}
