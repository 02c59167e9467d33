// bloomery grammar: GBNF for a JSON object key that is none of the declared property names (for additionalProperties).
import { JSON_RAW_CHARS, gbnfClass, gbnfLiteral } from "./gbnf-text.ts";
import { normalizeRanges, subtractRanges } from "./charclass.ts";

interface TrieNode {
  terminal: boolean;
  readonly children: Map<string, TrieNode>;
}

/** Split the encoded content of a JSON string into units: one raw character, or one escape sequence. */
function encodedUnits(name: string): string[] {
  const enc = JSON.stringify(name).slice(1, -1);
  const units: string[] = [];
  const chars = Array.from(enc);
  for (let i = 0; i < chars.length; i++) {
    if (chars[i] === "\\") {
      const len = chars[i + 1] === "u" ? 6 : 2;
      units.push(chars.slice(i, i + len).join(""));
      i += len - 1;
    } else {
      units.push(chars[i]);
    }
  }
  return units;
}

const ESCAPE_LETTERS = ['"', "\\", "b", "f", "n", "r", "t"];

/**
 * GBNF (with the quotes) for a JSON string whose encoded content is none of `names` (each written
 * as JSON.stringify writes it). `char` is the rule for one encoded string character. The same key
 * written with a different escape (e.g. `\u0061` for `a`) is not caught; where a declared name
 * has an escape at some position, keys with other `\u` escapes at that position are not produced.
 */
export function notStringsRule(names: readonly string[], char: string): string {
  const root: TrieNode = { terminal: false, children: new Map() };
  for (const name of names) {
    let node = root;
    for (const u of encodedUnits(name)) {
      let next = node.children.get(u);
      if (next === undefined) {
        next = { terminal: false, children: new Map() };
        node.children.set(u, next);
      }
      node = next;
    }
    node.terminal = true;
  }
  const emit = (node: TrieNode): string => {
    const branches: string[] = [];
    const rawUsed: number[] = [];
    const lettersUsed = new Set<string>();
    for (const [unit, child] of node.children) {
      if (unit.startsWith("\\")) lettersUsed.add(unit[1]);
      else rawUsed.push(unit.codePointAt(0)!, unit.codePointAt(0)!);
      branches.push(child.children.size === 0 ? `${gbnfLiteral(unit)} ${char}+` : `${gbnfLiteral(unit)} ${emit(child)}`);
    }
    const firsts: string[] = [];
    const raw = subtractRanges(JSON_RAW_CHARS, normalizeRanges(rawUsed));
    if (raw.length > 0) firsts.push(gbnfClass(raw));
    const letters = ESCAPE_LETTERS.filter((l) => !lettersUsed.has(l));
    if (letters.length > 0) firsts.push(`"\\\\" ${gbnfClass(normalizeRanges(letters.flatMap((l) => [l.charCodeAt(0), l.charCodeAt(0)])))}`);
    if (!lettersUsed.has("u")) firsts.push(`"\\\\u" [0-9a-fA-F]{4}`);
    branches.push(`(${firsts.join(" | ")}) ${char}*`);
    return `(${branches.join(" | ")})${node.terminal ? "" : "?"}`;
  };
  return `"\\"" ${emit(root)} "\\""`;
}
