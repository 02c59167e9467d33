// bloomery grammar: writing GBNF text (literals, character classes, JSON-string encodings of code-point sets) for the converters.
import { intersectRanges, normalizeRanges, subtractRanges, type Ranges } from "./charclass.ts";

function hex(cp: number, digits: number): string {
  return cp.toString(16).toUpperCase().padStart(digits, "0");
}

/** A code point inside a GBNF `"..."` literal. */
function literalChar(cp: number): string {
  switch (cp) {
    case 0x22:
      return '\\"';
    case 0x5c:
      return "\\\\";
    case 0x0a:
      return "\\n";
    case 0x0d:
      return "\\r";
    case 0x09:
      return "\\t";
  }
  if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) return `\\x${hex(cp, 2)}`;
  if (cp >= 0xd800 && cp <= 0xdfff) throw new RangeError("surrogate code point in a grammar literal");
  return String.fromCodePoint(cp);
}

/** A code point inside a GBNF `[...]` class. */
function classChar(cp: number): string {
  if (cp === 0x5c || cp === 0x5d || cp === 0x2d || cp === 0x5e || cp === 0x5b) return `\\x${hex(cp, 2)}`;
  if (cp >= 0x20 && cp < 0x7f) return String.fromCharCode(cp);
  if (cp <= 0xff) return `\\x${hex(cp, 2)}`;
  if (cp <= 0xffff) return `\\u${hex(cp, 4)}`;
  return `\\U${hex(cp, 8)}`;
}

/** GBNF literal matching exactly `text`. */
export function gbnfLiteral(text: string): string {
  let out = '"';
  for (const ch of text) out += literalChar(ch.codePointAt(0)!);
  return out + '"';
}

/** GBNF class matching exactly the set `ranges` (must be non-empty). */
export function gbnfClass(ranges: Ranges): string {
  if (ranges.length === 0) throw new RangeError("empty character class");
  let out = "[";
  for (let i = 0; i < ranges.length; i += 2) {
    const lo = ranges[i];
    const hi = ranges[i + 1];
    out += classChar(lo);
    if (hi > lo + 1) out += "-" + classChar(hi);
    else if (hi === lo + 1) out += classChar(hi);
  }
  return out + "]";
}

/** Code points a JSON string may hold unescaped (as the converter writes them: no DEL either, like llama.cpp's `char`). */
export const JSON_RAW_CHARS: Ranges = subtractRanges(normalizeRanges([0, 0x10ffff]), normalizeRanges([0, 0x1f, 0x22, 0x22, 0x5c, 0x5c, 0x7f, 0x7f, 0xd800, 0xdfff]));

const SHORT_ESCAPES = new Map<number, string>([
  [0x22, '\\"'],
  [0x5c, "\\\\"],
  [0x08, "\\b"],
  [0x0c, "\\f"],
  [0x0a, "\\n"],
  [0x0d, "\\r"],
  [0x09, "\\t"],
]);

/**
 * GBNF for one character of the *encoded* content of a JSON string whose decoded value is in
 * `ranges`: raw where JSON allows it, the short escape for `"` `\` and the usual controls, and
 * `\u00XX` for the other control characters and DEL. Returns null for an empty set.
 */
export function jsonEncodedCharSet(ranges: Ranges): string | null {
  const alts: string[] = [];
  const raw = intersectRanges(ranges, JSON_RAW_CHARS);
  if (raw.length > 0) alts.push(gbnfClass(raw));
  const escaped = subtractRanges(ranges, JSON_RAW_CHARS);
  const unicodeEscapes: number[] = [];
  for (let i = 0; i < escaped.length; i += 2) {
    for (let cp = escaped[i]; cp <= escaped[i + 1]; cp++) {
      if (cp >= 0xd800) break; // only controls, quote, backslash and DEL are left here
      const short = SHORT_ESCAPES.get(cp);
      if (short !== undefined) alts.push(gbnfLiteral(short));
      else unicodeEscapes.push(cp);
    }
  }
  if (unicodeEscapes.length > 0) {
    const codes = unicodeEscapes.map((cp) => gbnfLiteral(hex(cp, 2).toLowerCase()));
    alts.push(`"\\\\u00" ${codes.length === 1 ? codes[0] : `(${codes.join(" | ")})`}`);
  }
  if (alts.length === 0) return null;
  return alts.length === 1 ? alts[0] : `(${alts.join(" | ")})`;
}
