// bloomery GGUF: the error every malformed or unreadable file gives (names file and what is wrong),
// and the escaping of the untrusted text a file carries (key and tensor names, string values) before
// it goes into a message: control characters shown as escapes, long text cut.

/** Longest message a GgufError carries (a crafted file's names cannot make a 5 MB error). */
const MAX_DETAIL = 2000;

// C0 controls (with TAB, LF, CR), DEL, C1 controls, the bidi overrides and isolates, line/paragraph
// separators and the BOM: anything that can move a terminal's cursor, recolour it or reorder the text
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g;
const UNSAFE_KEEP_NEWLINES = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g;

function escapeChar(c: string): string {
  const n = c.charCodeAt(0);
  return n <= 0xff ? `\\x${n.toString(16).padStart(2, "0")}` : `\\u${n.toString(16).padStart(4, "0")}`;
}

/**
 * Untrusted text made safe to print: control characters escaped (`\x1b`, `\u202e`), and at most
 * `max` characters kept (`...` and the full length after a cut). Newlines are escaped too unless
 * `keepNewlines`.
 */
export function safeText(s: string, max = 80, keepNewlines = false): string {
  const cut = s.length > max;
  const head = (cut ? s.slice(0, max) : s).replace(keepNewlines ? UNSAFE_KEEP_NEWLINES : UNSAFE, escapeChar);
  return cut ? `${head}... (${s.length} characters)` : head;
}

/** What kind of fault: the path names no file (missing, a dangling link, a link loop), a path that is no regular file (a directory, a FIFO), or the file's content. */
export type GgufFault = "missing" | "not-a-file" | "content";

export class GgufError extends Error {
  readonly detail: string;

  constructor(
    readonly file: string,
    detail: string,
    readonly fault: GgufFault = "content",
  ) {
    // every message is escaped and bounded here, whichever text it quotes; the sites that quote a
    // name from the file cut it shorter themselves (safeText), so the message keeps its end
    const d = safeText(detail, MAX_DETAIL);
    super(`${safeText(file, 400)}: ${d}`);
    this.detail = d;
    this.name = "GgufError";
  }
}
