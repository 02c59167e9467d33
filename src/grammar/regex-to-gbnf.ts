// bloomery grammar: JSON-schema `pattern` (ECMA-262 regex subset) to GBNF over the JSON-encoded string content.
//
// The regex constrains the decoded string; the grammar produces its JSON encoding, so every
// character set is written with jsonEncodedCharSet (a `"` in the set becomes `\"`, a newline
// `\n`, ...). Supported: literals, escapes (\d \w \s and negations, \n \t \r \f \v \0 \xHH
// \uHHHH \u{H..} \cX, escaped punctuation), classes with ranges and negation, `.`, groups
// `(...)` `(?:...)` `(?<name>...)`, alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms
// too), and ^ / $ at the start / end of the pattern or of a top-level alternative. A pattern
// without ^ (or $) may have anything before (after) it, as JSON Schema's search semantics say.
// Refused with a clear error: lookaround, backreferences, \b \B, \p{...}, anchors elsewhere.
import { complementRanges, normalizeRanges, withoutSurrogates } from "./charclass.ts";
import { jsonEncodedCharSet } from "./gbnf-text.ts";
import { MAX_REPETITION } from "./parse.ts";

/** The pattern cannot be converted; `detail` says why. */
export class PatternError extends Error {
  constructor(
    readonly pattern: string,
    readonly detail: string,
    readonly unsupported: boolean,
  ) {
    super(`${unsupported ? "unsupported" : "invalid"} pattern ${JSON.stringify(pattern)}: ${detail}`);
    this.name = "PatternError";
  }
}

type RNode =
  | { readonly t: "set"; readonly ranges: number[] }
  | { readonly t: "seq"; readonly items: RNode[] }
  | { readonly t: "alt"; readonly alts: RNode[] }
  | { readonly t: "rep"; readonly node: RNode; readonly min: number; readonly max: number }
  | { readonly t: "anchor"; readonly start: boolean };

const DIGIT = [0x30, 0x39];
const WORD = normalizeRanges([0x30, 0x39, 0x41, 0x5a, 0x5f, 0x5f, 0x61, 0x7a]);
const SPACE = normalizeRanges([
  0x09, 0x0d, 0x20, 0x20, 0xa0, 0xa0, 0x1680, 0x1680, 0x2000, 0x200a, 0x2028, 0x2029, 0x202f, 0x202f, 0x205f, 0x205f, 0x3000, 0x3000, 0xfeff, 0xfeff,
]);
const DOT = withoutSurrogates(complementRanges(normalizeRanges([0x0a, 0x0a, 0x0d, 0x0d, 0x2028, 0x2029])));
const MAX_DEPTH = 100;
const MAX_PATTERN_LENGTH = 10000;

function isHex(cp: number | undefined): boolean {
  return cp !== undefined && ((cp >= 0x30 && cp <= 0x39) || (cp >= 0x41 && cp <= 0x46) || (cp >= 0x61 && cp <= 0x66));
}

class RegexParser {
  readonly cps: number[];
  i = 0;
  depth = 0;

  constructor(readonly pattern: string) {
    this.cps = Array.from(pattern, (c) => c.codePointAt(0)!);
  }

  invalid(detail: string): never {
    throw new PatternError(this.pattern, detail, false);
  }
  unsupported(detail: string): never {
    throw new PatternError(this.pattern, detail, true);
  }

  peek(k = 0): number | undefined {
    return this.cps[this.i + k];
  }
  ch(k = 0): string {
    const c = this.peek(k);
    return c === undefined ? "" : String.fromCodePoint(c);
  }

  parse(): RNode {
    const node = this.parseAlt();
    if (this.i < this.cps.length) this.invalid(`unbalanced ')' at offset ${this.i}`);
    return node;
  }

  parseAlt(): RNode {
    const alts = [this.parseSeq()];
    while (this.ch() === "|") {
      this.i++;
      alts.push(this.parseSeq());
    }
    return alts.length === 1 ? alts[0] : { t: "alt", alts };
  }

  parseSeq(): RNode {
    const items: RNode[] = [];
    for (;;) {
      const c = this.ch();
      if (c === "" || c === "|" || c === ")") break;
      const atom = this.parseAtom();
      items.push(this.parseQuantifiers(atom));
    }
    return items.length === 1 ? items[0] : { t: "seq", items };
  }

  /** {n}, {n,}, {n,m} at the current position, or null when the text there is not one. */
  readBraces(): { min: number; max: number; len: number } | null {
    const m = /^\{(\d+)(,(\d*))?\}/.exec(this.cps.slice(this.i, this.i + 40).map((c) => String.fromCodePoint(c)).join(""));
    if (m === null) return null;
    const min = Number(m[1]);
    const max = m[2] === undefined ? min : m[3] === "" ? Infinity : Number(m[3]);
    return { min, max, len: m[0].length };
  }

  /** At most one quantifier (optionally lazy) per atom, as ECMAScript has it. */
  parseQuantifiers(atom: RNode): RNode {
    const c = this.ch();
    let min: number;
    let max: number;
    if (c === "*" || c === "+" || c === "?") {
      this.i++;
      min = c === "+" ? 1 : 0;
      max = c === "?" ? 1 : Infinity;
    } else if (c === "{") {
      const q = this.readBraces();
      if (q === null) return atom;
      this.i += q.len;
      ({ min, max } = q);
      if (max < min) this.invalid(`quantifier {${min},${max}} has maximum below minimum`);
      if (min > MAX_REPETITION || (max !== Infinity && max > MAX_REPETITION)) this.unsupported(`repetition count above ${MAX_REPETITION}`);
    } else {
      return atom;
    }
    if (this.ch() === "?") this.i++; // lazy: the same set of strings
    if (atom.t === "anchor") this.invalid("quantifier after an anchor");
    const next = this.ch();
    if (next === "*" || next === "+" || next === "?" || (next === "{" && this.readBraces() !== null)) this.invalid(`nothing to repeat before '${next}'`);
    return { t: "rep", node: atom, min, max };
  }

  parseAtom(): RNode {
    const c = this.ch();
    switch (c) {
      case "(": {
        this.i++;
        if (this.ch() === "?") {
          if (this.ch(1) === ":") this.i += 2;
          else if (this.ch(1) === "<" && this.ch(2) !== "=" && this.ch(2) !== "!") {
            const close = this.cps.indexOf(0x3e, this.i);
            if (close < 0) this.invalid("unterminated group name");
            this.i = close + 1;
          } else this.unsupported("lookahead, lookbehind and inline flags are not supported");
        }
        if (++this.depth > MAX_DEPTH) this.unsupported("groups nested too deeply");
        const inner = this.parseAlt();
        this.depth--;
        if (this.ch() !== ")") this.invalid("missing ')'");
        this.i++;
        return inner;
      }
      case "[":
        return this.parseClass();
      case ".":
        this.i++;
        return { t: "set", ranges: DOT };
      case "^":
        this.i++;
        return { t: "anchor", start: true };
      case "$":
        this.i++;
        return { t: "anchor", start: false };
      case "\\":
        return this.parseEscape(false);
      case "*":
      case "+":
      case "?":
        return this.invalid(`nothing to repeat before '${c}'`);
      case "{":
        if (this.readBraces() !== null) this.invalid("nothing to repeat before '{'");
        break;
    }
    const cp = this.peek()!;
    this.i++;
    return { t: "set", ranges: [cp, cp] };
  }

  /** An escape; inside a class `\b` is backspace and the result must be a set. */
  parseEscape(inClass: boolean): { t: "set"; ranges: number[] } {
    this.i++; // backslash
    const e = this.ch();
    if (e === "") this.invalid("trailing backslash");
    this.i++;
    const single = (cp: number) => ({ t: "set" as const, ranges: [cp, cp] });
    switch (e) {
      case "d":
        return { t: "set", ranges: DIGIT };
      case "D":
        return { t: "set", ranges: withoutSurrogates(complementRanges(DIGIT)) };
      case "w":
        return { t: "set", ranges: WORD };
      case "W":
        return { t: "set", ranges: withoutSurrogates(complementRanges(WORD)) };
      case "s":
        return { t: "set", ranges: SPACE };
      case "S":
        return { t: "set", ranges: withoutSurrogates(complementRanges(SPACE)) };
      case "n":
        return single(0x0a);
      case "r":
        return single(0x0d);
      case "t":
        return single(0x09);
      case "f":
        return single(0x0c);
      case "v":
        return single(0x0b);
      case "0":
        if (this.peek() !== undefined && this.peek()! >= 0x30 && this.peek()! <= 0x39) this.unsupported("octal escapes are not supported");
        return single(0);
      case "b":
        if (inClass) return single(0x08);
        return this.unsupported("word boundary \\b is not supported");
      case "B":
        return this.unsupported("\\B is not supported");
      case "p":
      case "P":
        return this.unsupported(`Unicode property escapes \\${e}{...} are not supported`);
      case "k":
        return this.unsupported("named backreferences are not supported");
      case "c": {
        const l = this.peek();
        if (l === undefined || !((l >= 0x41 && l <= 0x5a) || (l >= 0x61 && l <= 0x7a))) this.invalid("\\c must be followed by a letter");
        this.i++;
        return single(l % 32);
      }
      case "x": {
        if (!isHex(this.peek()) || !isHex(this.peek(1))) this.invalid("\\x needs two hex digits");
        const v = parseInt(this.ch() + this.ch(1), 16);
        this.i += 2;
        return single(v);
      }
      case "u": {
        if (this.ch() === "{") {
          const close = this.cps.indexOf(0x7d, this.i);
          const digits = close < 0 ? "" : this.cps.slice(this.i + 1, close).map((c) => String.fromCodePoint(c)).join("");
          if (!/^[0-9a-fA-F]{1,6}$/.test(digits) || parseInt(digits, 16) > 0x10ffff) this.invalid("bad \\u{...} escape");
          this.i = close + 1;
          return single(parseInt(digits, 16));
        }
        for (let k = 0; k < 4; k++) if (!isHex(this.peek(k))) this.invalid("\\u needs four hex digits");
        let v = parseInt(this.cps.slice(this.i, this.i + 4).map((c) => String.fromCodePoint(c)).join(""), 16);
        this.i += 4;
        // a surrogate pair written as two \u escapes is one code point
        if (v >= 0xd800 && v <= 0xdbff && this.ch() === "\\" && this.ch(1) === "u" && [2, 3, 4, 5].every((k) => isHex(this.peek(k)))) {
          const lo = parseInt(this.cps.slice(this.i + 2, this.i + 6).map((c) => String.fromCodePoint(c)).join(""), 16);
          if (lo >= 0xdc00 && lo <= 0xdfff) {
            this.i += 6;
            v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
          }
        }
        if (v >= 0xd800 && v <= 0xdfff) this.unsupported("lone surrogate escapes are not supported");
        return single(v);
      }
    }
    if (/^[1-9]$/.test(e)) this.unsupported("backreferences are not supported");
    const cp = this.peek(-1)!;
    return single(cp); // identity escape: \. \* \\ \/ \- ...
  }

  parseClass(): RNode {
    const start = this.i;
    this.i++; // [
    let negated = false;
    if (this.ch() === "^") {
      negated = true;
      this.i++;
    }
    const pairs: number[] = [];
    const readItem = (): { ranges: number[]; single: boolean } => {
      if (this.ch() === "\\") {
        const set = this.parseEscape(true);
        return { ranges: set.ranges, single: set.ranges.length === 2 && set.ranges[0] === set.ranges[1] };
      }
      const cp = this.peek()!;
      this.i++;
      return { ranges: [cp, cp], single: true };
    };
    while (this.ch() !== "]") {
      if (this.ch() === "") this.invalid(`unterminated character class starting at offset ${start}`);
      const a = readItem();
      if (this.ch() === "-" && this.ch(1) !== "]" && this.ch(1) !== "") {
        this.i++;
        const b = readItem();
        if (a.single && b.single) {
          if (b.ranges[0] < a.ranges[0]) this.invalid("character class range out of order");
          pairs.push(a.ranges[0], b.ranges[0]);
          continue;
        }
        pairs.push(...a.ranges, 0x2d, 0x2d, ...b.ranges); // [\d-x]: the '-' is literal
        continue;
      }
      pairs.push(...a.ranges);
    }
    this.i++;
    let ranges = normalizeRanges(pairs);
    if (negated) ranges = complementRanges(ranges);
    ranges = withoutSurrogates(ranges);
    if (ranges.length === 0) this.unsupported("character class matches no character");
    return { t: "set", ranges };
  }
}

function emit(node: RNode, pattern: string): string {
  switch (node.t) {
    case "set": {
      const g = jsonEncodedCharSet(node.ranges);
      if (g === null) throw new PatternError(pattern, "character set matches no character", true);
      return g;
    }
    case "seq":
      return node.items.length === 0 ? '""' : node.items.map((n) => emit(n, pattern)).join(" ");
    case "alt":
      return `(${node.alts.map((n) => emit(n, pattern)).join(" | ")})`;
    case "rep": {
      const inner = emit(node.node, pattern);
      const unit = /^\[[^\]]*\]$/.test(inner) || /^"(?:[^"\\]|\\.)*"$/.test(inner) ? inner : `(${inner})`;
      const { min, max } = node;
      if (max === 0) return '""';
      if (min === 0 && max === Infinity) return `${unit}*`;
      if (min === 1 && max === Infinity) return `${unit}+`;
      if (min === 0 && max === 1) return `${unit}?`;
      if (min === max) return `${unit}{${min}}`;
      return `${unit}{${min},${max === Infinity ? "" : max}}`;
    }
    case "anchor":
      throw new PatternError(pattern, `'${node.start ? "^" : "$"}' is only supported at the start or end of the pattern`, true);
  }
}

/** Strip the anchors of one top-level branch; say which ends were anchored. */
function stripAnchors(node: RNode): { body: RNode; start: boolean; end: boolean } {
  let items = node.t === "seq" ? [...node.items] : [node];
  let start = false;
  let end = false;
  while (items.length > 0 && items[0].t === "anchor" && items[0].start) {
    items = items.slice(1);
    start = true;
  }
  while (items.length > 0 && items[items.length - 1].t === "anchor" && !(items[items.length - 1] as { start: boolean }).start) {
    items = items.slice(0, -1);
    end = true;
  }
  return { body: items.length === 1 ? items[0] : { t: "seq", items }, start, end };
}

/**
 * GBNF for the encoded content (without the quotes) of a JSON string matching `pattern`.
 * `anyChar` is the name of a rule matching one encoded JSON string character, used where the
 * pattern is not anchored. Throws `PatternError`.
 */
export function patternToGbnf(pattern: string, anyChar: string): string {
  if (pattern.length > MAX_PATTERN_LENGTH) throw new PatternError(pattern.slice(0, 40) + "...", `longer than ${MAX_PATTERN_LENGTH} characters`, true);
  const tree = new RegexParser(pattern).parse();
  const branches = tree.t === "alt" ? tree.alts : [tree];
  const parts = branches.map((b) => {
    const { body, start, end } = stripAnchors(b);
    const core = emit(body, pattern);
    return [start ? "" : `${anyChar}*`, core, end ? "" : `${anyChar}*`].filter((s) => s !== "").join(" ");
  });
  return parts.length === 1 ? parts[0] : `(${parts.join(" | ")})`;
}

/** Exposed for tests: the set a single-character pattern atom like `\d` or `[^a-z]` denotes. */
export function regexCharSet(atom: string): number[] {
  const node = new RegexParser(atom).parse();
  if (node.t !== "set") throw new PatternError(atom, "not a single character set", false);
  return [...node.ranges];
}
