// bloomery chat: the `tojson` filter as llama.cpp's jinja engine writes it (value_to_json in
// common/jinja/value.cpp): Python-style separators, its indent layout, floats as C++ streams
// print them (6 significant digits), and ensure_ascii escapes in lowercase hex.

/** A JSON-like tree read out of interpreter values (see jinja-compat.ts). */
export type JsonTree =
  | { kind: "null" }
  | { kind: "bool"; v: boolean }
  | { kind: "int"; v: number }
  | { kind: "float"; v: number }
  | { kind: "string"; v: string }
  | { kind: "array"; items: JsonTree[] }
  | { kind: "object"; entries: [string, JsonTree][] };

export interface JsonStyle {
  /** < 0: one line. */
  indent: number;
  itemSep: string;
  keySep: string;
  ensureAscii: boolean;
  sortKeys: boolean;
}

/** `%g` with precision 6, as `std::ostream << double` prints. */
export function cppDouble(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const exp = Number(x.toExponential(5).split("e")[1]); // exponent after rounding to 6 digits
  if (exp < -4 || exp >= 6) {
    const [mant, e] = x.toExponential(5).split("e");
    const m = mant.includes(".") ? mant.replace(/0+$/, "").replace(/\.$/, "") : mant;
    const n = Number(e);
    return `${m}e${n < 0 ? "-" : "+"}${String(Math.abs(n)).padStart(2, "0")}`;
  }
  const s = x.toFixed(Math.max(0, 5 - exp));
  return s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
}

function quote(s: string, ensureAscii: boolean): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0) ?? 0;
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\b") out += "\\b";
    else if (ch === "\f") out += "\\f";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (c < 0x20) out += `\\u${c.toString(16).padStart(4, "0")}`;
    else if (ensureAscii && c >= 0x80) {
      if (c <= 0xffff) out += `\\u${c.toString(16).padStart(4, "0")}`;
      else {
        const v = c - 0x10000;
        out += `\\u${(0xd800 + (v >> 10)).toString(16)}\\u${(0xdc00 + (v & 0x3ff)).toString(16)}`;
      }
    } else out += ch;
  }
  return `${out}"`;
}

/** Serialises like llama's value_to_json. */
export function llamaJson(t: JsonTree, style: JsonStyle, level = 0): string {
  const nl = style.indent >= 0 ? "\n" : "";
  const pad = (n: number) => (style.indent > 0 ? " ".repeat(n * style.indent) : "");
  switch (t.kind) {
    case "null":
      return "null";
    case "bool":
      return t.v ? "true" : "false";
    case "int":
      return String(t.v);
    case "float":
      return cppDouble(t.v);
    case "string":
      return quote(t.v, style.ensureAscii);
    case "array": {
      if (t.items.length === 0) return "[]";
      const parts = t.items.map((x) => pad(level + 1) + llamaJson(x, style, level + 1));
      return `[${nl}${parts.join(style.itemSep + nl)}${nl}${pad(level)}]`;
    }
    case "object": {
      if (t.entries.length === 0) return "{}";
      const entries = style.sortKeys ? [...t.entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)) : t.entries;
      const parts = entries.map(
        ([k, x]) => pad(level + 1) + quote(k, style.ensureAscii) + style.keySep + llamaJson(x, style, level + 1),
      );
      return `{${nl}${parts.join(style.itemSep + nl)}${nl}${pad(level)}}`;
    }
  }
}
