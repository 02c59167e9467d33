// bloomery chat: the interface between the tool-call stream and the per-syntax call parsers.

/** Where a call parser reports a call as it is recognised. */
export interface CallSink {
  /** The call is recognised (its name is complete and known): the header delta. */
  open(name: string): void;
  /** A fragment of the call's arguments JSON text. */
  args(fragment: string): void;
}

/**
 * Result of feeding a call parser:
 * - `more`: needs more text to decide;
 * - `fail`: not a well-formed call (only before `open`): the text falls back to content;
 * - `done`: the call ended (its closing tag, or a deviation after `open`); `rest` is the text
 *   after it, to be read as content again.
 */
export type CallStep = { status: "more" } | { status: "fail" } | { status: "done"; rest: string };

/** A parser of one tool call, fed the text after the opening marker. */
export interface CallMachine {
  feed(text: string, final: boolean): CallStep;
}

/** Length of the longest suffix of `text` that is a proper prefix of `marker`. */
export function partialMarker(text: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(marker.slice(0, n))) return n;
  }
  return 0;
}

export function isWs(c: string): boolean {
  return c === " " || c === "\n" || c === "\t" || c === "\r";
}

/** Index of the first non-whitespace character at or after `from` (text.length if none). */
export function skipWs(text: string, from: number): number {
  let i = from;
  while (i < text.length && isWs(text[i])) i++;
  return i;
}

/**
 * JSON-escapes a fragment of a string value (without quotes). A trailing high surrogate is
 * returned as `held` so that escaping chunk by chunk equals escaping the whole.
 */
export function escapeFragment(text: string, final: boolean): { escaped: string; held: string } {
  let body = text;
  let held = "";
  if (!final && body.length > 0) {
    const last = body.charCodeAt(body.length - 1);
    if (last >= 0xd800 && last <= 0xdbff) {
      held = body.slice(-1);
      body = body.slice(0, -1);
    }
  }
  return { escaped: JSON.stringify(body).slice(1, -1), held };
}
