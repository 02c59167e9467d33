// bloomery grammar: the fixed GBNF rules of JSON (values, strings, numbers, bounded whitespace, string formats) and integer-range grammars.

/**
 * Whitespace between JSON tokens: nothing, one space, or one or two newlines and up to 20
 * spaces or tabs of indentation. Bounded, so constrained generation cannot loop on whitespace
 * (the policy of llama.cpp's converter).
 */
export const SPACE_RULE = `| " " | "\\n"{1,2} [ \\t]{0,20}`;

export interface BuiltinRule {
  readonly body: string;
  readonly deps: readonly string[];
}

/** Primitive JSON rules by name. Numbers have at most 16 integral and 16 fraction digits. */
export const PRIMITIVE_RULES: Readonly<Record<string, BuiltinRule>> = {
  boolean: { body: `"true" | "false"`, deps: [] },
  null: { body: `"null"`, deps: [] },
  "integral-part": { body: `[0] | [1-9] [0-9]{0,15}`, deps: [] },
  "decimal-part": { body: `[0-9]{1,16}`, deps: [] },
  integer: { body: `"-"? integral-part`, deps: ["integral-part"] },
  number: { body: `"-"? integral-part ("." decimal-part)? ([eE] [-+]? integral-part)?`, deps: ["integral-part", "decimal-part"] },
  char: { body: `[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})`, deps: [] },
  string: { body: `"\\"" char* "\\""`, deps: ["char"] },
  value: { body: `object | array | string | number | boolean | null`, deps: ["object", "array", "string", "number", "boolean", "null"] },
  object: { body: `"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"`, deps: ["string", "value", "space"] },
  array: { body: `"[" space ( value ("," space value)* )? space "]"`, deps: ["value", "space"] },
  space: { body: SPACE_RULE, deps: [] },
  uuid: { body: `"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\\""`, deps: [] },
  // RFC 3339 full-date, full-time and date-time
  date: { body: `[0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])`, deps: [] },
  time: {
    body: `([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{3})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])`,
    deps: [],
  },
  "date-time": { body: `date "T" time`, deps: ["date", "time"] },
  "date-string": { body: `"\\"" date "\\""`, deps: ["date"] },
  "time-string": { body: `"\\"" time "\\""`, deps: ["time"] },
  "date-time-string": { body: `"\\"" date-time "\\""`, deps: ["date-time"] },
};

/** Names the converter must not give to schema-derived rules. */
export const RESERVED_RULE_NAMES: ReadonlySet<string> = new Set(["root", ...Object.keys(PRIMITIVE_RULES)]);

/** Digits of an unbounded integer magnitude, as `integral-part` allows. */
const MAX_DIGITS = 16;

function digitClass(from: number, to: number): string {
  return from === to ? `[${from}]` : `[${from}-${to}]`;
}

function anyDigits(n: number): string {
  return n === 0 ? "" : n === 1 ? "[0-9]" : `[0-9]{${n}}`;
}

function join(parts: string[]): string {
  return parts.filter((p) => p !== "").join(" ");
}

/** Digit strings of equal length n >= 1 between lo and hi (inclusive, lo <= hi). */
function sameLengthRange(lo: string, hi: string): string {
  if (lo === hi) return `"${lo}"`;
  if (lo[0] === hi[0]) {
    let k = 0;
    while (lo[k] === hi[k]) k++;
    return join([`"${lo.slice(0, k)}"`, sameLengthRange(lo.slice(k), hi.slice(k))]);
  }
  const rest = lo.length - 1;
  const a = Number(lo[0]);
  const b = Number(hi[0]);
  const parts: string[] = [];
  let from = a;
  let to = b;
  if (!/^0*$/.test(lo.slice(1))) {
    parts.push(join([`[${a}]`, wrap(sameLengthRange(lo.slice(1), "9".repeat(rest)))]));
    from = a + 1;
  }
  let upper = "";
  if (!/^9*$/.test(hi.slice(1))) {
    upper = join([`[${b}]`, wrap(sameLengthRange("0".repeat(rest), hi.slice(1)))]);
    to = b - 1;
  }
  if (from <= to) parts.push(join([digitClass(from, to), anyDigits(rest)]));
  if (upper !== "") parts.push(upper);
  return parts.length === 1 ? parts[0] : `(${parts.join(" | ")})`;
}

function wrap(expr: string): string {
  return expr.includes(" | ") && !(expr.startsWith("(") && expr.endsWith(")")) ? `(${expr})` : expr;
}

/** Non-negative integers lo..hi (hi null = unbounded, up to 16 digits or lo's length), no leading zeros. */
function magnitudeRange(lo: bigint, hi: bigint | null): string[] {
  const parts: string[] = [];
  const loS = lo.toString();
  if (hi === null) {
    parts.push(sameLengthRange(loS, "9".repeat(loS.length)));
    const maxDigits = Math.max(MAX_DIGITS, loS.length);
    if (loS.length < maxDigits) {
      const extra = maxDigits - 1;
      const min = loS.length;
      parts.push(`[1-9] [0-9]{${min}${min === extra ? "" : `,${extra}`}}`);
    }
    return parts;
  }
  const hiS = hi.toString();
  for (let d = loS.length; d <= hiS.length; d++) {
    const a = d === loS.length ? loS : "1" + "0".repeat(d - 1);
    const b = d === hiS.length ? hiS : "9".repeat(d);
    parts.push(sameLengthRange(a, b));
  }
  return parts;
}

/**
 * GBNF for the JSON integers in [min, max] (either bound may be null = unbounded; at least one
 * must be given, and min <= max). Unbounded sides reach 16 digits, like `integral-part`.
 */
export function integerRangeRule(min: bigint | null, max: bigint | null): string {
  if (min === null && max === null) throw new RangeError("integerRangeRule needs a bound");
  if (min !== null && max !== null && min > max) throw new RangeError("empty integer range");
  const parts: string[] = [];
  if (min === null || min < 0n) {
    const magLo = max !== null && max < 0n ? -max : 1n;
    const magHi = min === null ? null : -min;
    const mags = magnitudeRange(magLo, magHi);
    parts.push(`"-" ${mags.length === 1 ? wrap(mags[0]) : `(${mags.join(" | ")})`}`);
  }
  if (max === null || max >= 0n) {
    const lo = min === null || min < 0n ? 0n : min;
    parts.push(...magnitudeRange(lo, max));
  }
  return parts.join(" | ");
}
