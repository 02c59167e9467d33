// bloomery grammar: the GBNF parser (llama.cpp's grammar syntax, grammars/README.md) and its lowering to rules over code-point classes.
import { GrammarError } from "./errors.ts";
import { MAX_CODE_POINT, complementRanges, normalizeRanges, rangesKey, withoutSurrogates, type Ranges } from "./charclass.ts";
import { checkGrammar } from "./check.ts";

/** One element of an alternative: a character class (by index) or a reference to a rule. */
export type GrammarElement = { readonly kind: "chars"; readonly cls: number } | { readonly kind: "ref"; readonly rule: number };

export interface GrammarRule {
  /** The rule's name; generated rules are named `<origin>_<n>`. */
  readonly name: string;
  /** The user rule this one was written in (itself for user rules). */
  readonly origin: string;
  /** Where the user rule is defined (1-based). */
  readonly line: number;
  readonly column: number;
  /** Alternatives; an empty alternative matches the empty string. */
  alts: GrammarElement[][];
}

/** A parsed, lowered and checked grammar. Character classes never contain surrogates and are never empty. */
export interface ParsedGrammar {
  readonly rules: GrammarRule[];
  readonly classes: Ranges[];
  readonly root: number;
}

/** Repetition counts above this are refused ({m,...}) or read as unbounded ({...,n}), as llama.cpp does with its own limit. */
export const MAX_REPETITION = 10000;
/** The grammar may not lower to more elements than this (repetitions are expanded into rules). */
export const MAX_ELEMENTS = 2_000_000;
/** Groups and repetition operators may not nest deeper than this. */
export const MAX_NESTING = 500;

type Node =
  | { readonly t: "lit"; readonly cps: number[] }
  | { readonly t: "cls"; readonly ranges: number[] }
  | { readonly t: "ref"; readonly name: string; readonly at: number }
  | { readonly t: "group"; readonly alts: Node[][] }
  | { readonly t: "rep"; readonly node: Node; readonly min: number; readonly max: number };

interface RuleDef {
  readonly name: string;
  readonly at: number;
  readonly alts: Node[][];
}

const ANY_CHAR: number[] = withoutSurrogates([0, MAX_CODE_POINT]);

function isWordChar(c: string | undefined): boolean {
  return c !== undefined && /^[a-zA-Z0-9-]$/.test(c);
}
function isDigit(c: string | undefined): boolean {
  return c !== undefined && c >= "0" && c <= "9";
}

/** Offsets where each line of `src` starts. */
function lineStarts(src: string): number[] {
  const starts = [0];
  for (let i = src.indexOf("\n"); i >= 0; i = src.indexOf("\n", i + 1)) starts.push(i + 1);
  return starts;
}

/** Line and column (1-based, column in code points) of UTF-16 offset `pos` in `src`. */
export function lineColumn(src: string, pos: number, starts: readonly number[] = lineStarts(src)): { line: number; column: number } {
  let lo = 0;
  let hi = starts.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (starts[mid] <= pos) lo = mid;
    else hi = mid - 1;
  }
  const column = Array.from(src.slice(starts[lo], Math.min(pos, src.length))).length + 1;
  return { line: lo + 1, column };
}

class GbnfParser {
  pos = 0;
  readonly defs = new Map<string, RuleDef>();
  /** How deeply each node nests groups and repetitions. */
  private readonly depth = new WeakMap<Node, number>();
  private openGroups = 0;

  nested(node: Node, depth: number, at: number): Node {
    if (depth > MAX_NESTING) this.fail(`groups and repetitions nest deeper than ${MAX_NESTING} levels`, at);
    this.depth.set(node, depth);
    return node;
  }

  depthOf(node: Node): number {
    return this.depth.get(node) ?? 0;
  }

  private starts: number[] | undefined;

  constructor(readonly src: string) {}

  lineColumn(at: number): { line: number; column: number } {
    return lineColumn(this.src, at, (this.starts ??= lineStarts(this.src)));
  }

  fail(detail: string, at = this.pos): never {
    const { line, column } = this.lineColumn(at);
    throw new GrammarError(detail, line, column);
  }

  peek(offset = 0): string | undefined {
    const i = this.pos + offset;
    return i < this.src.length ? this.src[i] : undefined;
  }

  describeHere(): string {
    const c = this.src.codePointAt(this.pos);
    if (c === undefined) return "end of input";
    if (c === 10) return "newline";
    if (c === 13) return "carriage return";
    return `'${String.fromCodePoint(c)}'`;
  }

  skipSpace(newlineOk: boolean): void {
    const s = this.src;
    while (this.pos < s.length) {
      const c = s[this.pos];
      if (c === " " || c === "\t") this.pos++;
      else if (c === "#") {
        while (this.pos < s.length && s[this.pos] !== "\n" && s[this.pos] !== "\r") this.pos++;
      } else if (newlineOk && (c === "\n" || c === "\r")) this.pos++;
      else break;
    }
  }

  parseName(): string {
    const start = this.pos;
    while (isWordChar(this.peek())) this.pos++;
    if (this.pos === start) this.fail(`expecting a rule name, found ${this.describeHere()}`);
    return this.src.slice(start, this.pos);
  }

  parseInt(): number {
    const start = this.pos;
    while (isDigit(this.peek())) this.pos++;
    if (this.pos === start) this.fail(`expecting an integer, found ${this.describeHere()}`);
    const text = this.src.slice(start, this.pos);
    const n = Number(text);
    if (!Number.isSafeInteger(n)) this.fail(`integer ${text} is too large`, start);
    return n;
  }

  parseHex(digits: number, at: number): number {
    let v = 0;
    for (let i = 0; i < digits; i++) {
      const c = this.peek();
      if (c === undefined || !/^[0-9a-fA-F]$/.test(c)) {
        this.fail(`escape needs exactly ${digits} hex digits`, at);
      }
      v = v * 16 + parseInt(c, 16);
      this.pos++;
    }
    if (v > MAX_CODE_POINT) this.fail(`escape names code point 0x${v.toString(16)}, above U+10FFFF`, at);
    return v;
  }

  /** One character of a literal or class, escapes decoded. */
  parseChar(): number {
    const at = this.pos;
    const c = this.src.codePointAt(this.pos);
    if (c === undefined) this.fail("unexpected end of input");
    if (c !== 0x5c) {
      this.pos += c > 0xffff ? 2 : 1;
      return c;
    }
    const e = this.peek(1);
    this.pos += 2;
    switch (e) {
      case "x":
        return this.parseHex(2, at);
      case "u":
        return this.parseHex(4, at);
      case "U":
        return this.parseHex(8, at);
      case "t":
        return 9;
      case "r":
        return 13;
      case "n":
        return 10;
      case "\\":
      case '"':
      case "[":
      case "]":
      case "-":
        return e.charCodeAt(0);
      case undefined:
        return this.fail("unexpected end of input after '\\'", at);
      default:
        return this.fail(`unknown escape '\\${e}'`, at);
    }
  }

  parseLiteral(): Node {
    const start = this.pos;
    this.pos++; // opening quote
    const cps: number[] = [];
    while (this.peek() !== '"') {
      if (this.peek() === undefined) this.fail("unterminated string literal", start);
      const at = this.pos;
      const cp = this.parseChar();
      if (cp >= 0xd800 && cp <= 0xdfff) {
        this.fail(`string literal contains surrogate code point U+${cp.toString(16).toUpperCase()}, which no UTF-8 text can contain`, at);
      }
      cps.push(cp);
    }
    this.pos++;
    return { t: "lit", cps };
  }

  parseClass(): Node {
    const start = this.pos;
    this.pos++; // [
    let negated = false;
    if (this.peek() === "^") {
      negated = true;
      this.pos++;
    }
    const pairs: number[] = [];
    while (this.peek() !== "]") {
      if (this.peek() === undefined) this.fail("unterminated character class", start);
      const itemAt = this.pos;
      const lo = this.parseChar();
      let hi = lo;
      if (this.peek() === "-" && this.peek(1) !== "]") {
        if (this.peek(1) === undefined) this.fail("unterminated character class", start);
        this.pos++;
        hi = this.parseChar();
        if (hi < lo) this.fail(`character range is reversed (U+${lo.toString(16).toUpperCase()} > U+${hi.toString(16).toUpperCase()})`, itemAt);
      }
      pairs.push(lo, hi);
    }
    this.pos++;
    if (pairs.length === 0) this.fail(negated ? "empty negated character class [^]" : "empty character class []", start);
    let ranges = normalizeRanges(pairs);
    if (negated) ranges = complementRanges(ranges);
    ranges = withoutSurrogates(ranges);
    if (ranges.length === 0) this.fail("character class matches no character", start);
    return { t: "cls", ranges };
  }

  parseAlternates(nested: boolean): Node[][] {
    const alts: Node[][] = [this.parseSequence(nested)];
    while (this.peek() === "|") {
      this.pos++;
      this.skipSpace(true);
      alts.push(this.parseSequence(nested));
    }
    return alts;
  }

  parseSequence(nested: boolean): Node[] {
    const seq: Node[] = [];
    const repeat = (min: number, max: number, opAt: number, op: string): void => {
      const last = seq.pop();
      if (last === undefined) this.fail(`'${op}' has nothing before it to repeat`, opAt);
      seq.push(this.nested({ t: "rep", node: last, min, max }, this.depthOf(last) + 1, opAt));
    };
    for (;;) {
      const c = this.peek();
      const at = this.pos;
      if (c === '"') {
        seq.push(this.parseLiteral());
      } else if (c === "[") {
        seq.push(this.parseClass());
      } else if (c === "<" || c === "!") {
        this.fail("token references (<[id]>, <name>, !<...>) are not supported; write the text as a string literal");
      } else if (isWordChar(c)) {
        const name = this.parseName();
        seq.push({ t: "ref", name, at });
      } else if (c === "(") {
        this.pos++;
        this.skipSpace(true);
        if (++this.openGroups > MAX_NESTING) this.fail(`groups nest deeper than ${MAX_NESTING} levels`, at);
        const alts = this.parseAlternates(true);
        this.openGroups--;
        if (this.peek() !== ")") this.fail(`expecting ')' to close the group opened at ${this.where(at)}, found ${this.describeHere()}`);
        this.pos++;
        const inner = Math.max(0, ...alts.flat().map((n) => this.depthOf(n)));
        seq.push(this.nested({ t: "group", alts }, inner + 1, at));
      } else if (c === ".") {
        this.pos++;
        seq.push({ t: "cls", ranges: ANY_CHAR });
      } else if (c === "*" || c === "+" || c === "?") {
        this.pos++;
        repeat(c === "+" ? 1 : 0, c === "?" ? 1 : Infinity, at, c);
      } else if (c === "{") {
        this.pos++;
        this.skipSpace(nested);
        const min = this.parseInt();
        this.skipSpace(nested);
        let max = min;
        if (this.peek() === ",") {
          this.pos++;
          this.skipSpace(nested);
          max = isDigit(this.peek()) ? this.parseInt() : Infinity;
          this.skipSpace(nested);
        }
        if (this.peek() !== "}") this.fail(`expecting '}' to close the repetition, found ${this.describeHere()}`);
        this.pos++;
        if (min > MAX_REPETITION) this.fail(`repetition minimum ${min} is above the limit ${MAX_REPETITION}`, at);
        if (max < min) this.fail(`repetition {${min},${max}} has maximum below minimum`, at);
        if (max > MAX_REPETITION) max = Infinity;
        repeat(min, max, at, "{");
      } else {
        break;
      }
      this.skipSpace(nested);
    }
    return seq;
  }

  where(at: number): string {
    const { line, column } = this.lineColumn(at);
    return `line ${line}, column ${column}`;
  }

  parseRule(): void {
    const at = this.pos;
    const name = this.parseName();
    this.skipSpace(false);
    if (!this.src.startsWith("::=", this.pos)) this.fail(`expecting '::=' after rule name '${name}', found ${this.describeHere()}`);
    this.pos += 3;
    this.skipSpace(true);
    const alts = this.parseAlternates(false);
    const c = this.peek();
    if (c === "\r") this.pos += this.peek(1) === "\n" ? 2 : 1;
    else if (c === "\n") this.pos++;
    else if (c !== undefined) {
      this.fail(c === ")" ? "unbalanced ')'" : `unexpected ${this.describeHere()} in rule '${name}'`);
    }
    this.skipSpace(true);
    // A later definition of the same name replaces the earlier one, as llama.cpp does.
    this.defs.set(name, { name, at, alts });
  }

  parseAll(): void {
    this.skipSpace(true);
    while (this.pos < this.src.length) this.parseRule();
  }
}

class Lowerer {
  readonly rules: GrammarRule[] = [];
  readonly classes: Ranges[] = [];
  private readonly classIds = new Map<string, number>();
  private readonly ruleIds = new Map<string, number>();
  private elements = 0;
  private readonly generatedCount = new Map<string, number>();

  constructor(
    readonly parser: GbnfParser,
    readonly defs: Map<string, RuleDef>,
  ) {
    for (const def of defs.values()) {
      const { line, column } = parser.lineColumn(def.at);
      this.ruleIds.set(def.name, this.rules.length);
      this.rules.push({ name: def.name, origin: def.name, line, column, alts: [] });
    }
  }

  classId(ranges: number[]): number {
    const key = rangesKey(ranges);
    let id = this.classIds.get(key);
    if (id === undefined) {
      id = this.classes.length;
      this.classes.push(ranges);
      this.classIds.set(key, id);
    }
    return id;
  }

  count(n: number): void {
    this.elements += n;
    if (this.elements > MAX_ELEMENTS) {
      throw new GrammarError(`grammar is too large after expanding repetitions (over ${MAX_ELEMENTS} elements)`);
    }
  }

  newRule(owner: GrammarRule, alts: GrammarElement[][]): number {
    const n = (this.generatedCount.get(owner.origin) ?? 0) + 1;
    this.generatedCount.set(owner.origin, n);
    const id = this.rules.length;
    this.rules.push({ name: `${owner.origin}_${n}`, origin: owner.origin, line: owner.line, column: owner.column, alts });
    for (const a of alts) this.count(a.length + 1);
    return id;
  }

  lowerAll(): void {
    for (const def of this.defs.values()) {
      const rule = this.rules[this.ruleIds.get(def.name)!];
      rule.alts = def.alts.map((seq) => this.lowerSeq(seq, rule));
      for (const a of rule.alts) this.count(a.length + 1);
    }
  }

  lowerSeq(seq: Node[], owner: GrammarRule): GrammarElement[] {
    const out: GrammarElement[] = [];
    for (const node of seq) this.lowerNode(node, owner, out);
    return out;
  }

  lowerNode(node: Node, owner: GrammarRule, out: GrammarElement[]): void {
    switch (node.t) {
      case "lit":
        for (const cp of node.cps) out.push({ kind: "chars", cls: this.classId([cp, cp]) });
        return;
      case "cls":
        out.push({ kind: "chars", cls: this.classId(node.ranges) });
        return;
      case "ref": {
        const id = this.ruleIds.get(node.name);
        if (id === undefined) this.parser.fail(`undefined rule '${node.name}'`, node.at);
        out.push({ kind: "ref", rule: id });
        return;
      }
      case "group":
        if (node.alts.length === 1) {
          for (const n of node.alts[0]) this.lowerNode(n, owner, out);
        } else {
          out.push({ kind: "ref", rule: this.newRule(owner, node.alts.map((s) => this.lowerSeq(s, owner))) });
        }
        return;
      case "rep":
        this.lowerRepetition(node.node, node.min, node.max, owner, out);
        return;
    }
  }

  /**
   * x{m,n} becomes m inline copies of x followed by an optional tail: for an unbounded maximum
   * T ::= x T | (empty); for a bounded one a chain T_k ::= x T_(k-1) | (empty), T_1 ::= x | (empty).
   */
  lowerRepetition(node: Node, min: number, max: number, owner: GrammarRule, out: GrammarElement[]): void {
    const unit: GrammarElement[] = [];
    this.lowerNode(node, owner, unit);
    if (unit.length === 0) return; // repeating the empty string is the empty string
    for (let i = 0; i < min; i++) {
      this.count(unit.length);
      out.push(...unit);
    }
    if (max === min) return;
    if (max === Infinity) {
      const id = this.rules.length;
      this.newRule(owner, [[...unit, { kind: "ref", rule: id }], []]);
      out.push({ kind: "ref", rule: id });
      return;
    }
    let tail = -1;
    for (let k = 1; k <= max - min; k++) {
      const alt: GrammarElement[] = tail < 0 ? [...unit] : [...unit, { kind: "ref", rule: tail }];
      tail = this.newRule(owner, [alt, []]);
    }
    out.push({ kind: "ref", rule: tail });
  }

  rootId(): number {
    const id = this.ruleIds.get("root");
    if (id === undefined) throw new GrammarError("grammar has no 'root' rule", 1, 1);
    return id;
  }
}

/**
 * Parse GBNF text into rules over code-point classes. Throws `GrammarError` (with line and column)
 * on a syntax error, an undefined rule, a missing `root`, left recursion, or a root that can never
 * complete. Token references (`<[id]>`, `<name>`) are refused.
 */
export function parseGbnf(src: string): ParsedGrammar {
  if (typeof src !== "string") throw new GrammarError("grammar must be a string");
  const parser = new GbnfParser(src);
  parser.parseAll();
  const lowerer = new Lowerer(parser, parser.defs);
  lowerer.lowerAll();
  const root = lowerer.rootId();
  const grammar: ParsedGrammar = { rules: lowerer.rules, classes: lowerer.classes, root };
  checkGrammar(grammar);
  return grammar;
}
