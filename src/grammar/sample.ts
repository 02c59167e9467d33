// bloomery grammar: random and shortest documents of a grammar, by walking a matcher byte by byte (tests, synthetic workloads).
import type { GrammarMatcher } from "./match.ts";

const ONE_BYTE: Uint8Array[] = Array.from({ length: 256 }, (_, b) => Uint8Array.of(b));

/** The bytes the matcher allows next. */
export function allowedBytes(m: GrammarMatcher): number[] {
  const out: number[] = [];
  for (let b = 0; b < 256; b++) if (m.accepts(ONE_BYTE[b])) out.push(b);
  return out;
}

/**
 * Whole characters to try from `m`: every allowed ASCII byte, and for each allowed UTF-8 lead
 * byte one representative character (the smallest allowed continuation bytes). From a partial
 * character, the smallest allowed completion of it.
 */
function nextCharacters(m: GrammarMatcher): Uint8Array[] {
  const out: Uint8Array[] = [];
  const complete = (prefix: number[]): void => {
    const probe = m.clone();
    const bytes = [...prefix];
    probe.advance(Uint8Array.from(prefix));
    while (probe.inPartialCharacter()) {
      let found = -1;
      for (let b = 0x80; b < 0xc0; b++) {
        if (probe.accepts(ONE_BYTE[b])) {
          found = b;
          break;
        }
      }
      if (found < 0) return;
      probe.advance(ONE_BYTE[found]);
      bytes.push(found);
    }
    out.push(Uint8Array.from(bytes));
  };
  if (m.inPartialCharacter()) {
    complete([]);
    return out;
  }
  for (let b = 0; b < 0x80; b++) if (m.accepts(ONE_BYTE[b])) out.push(ONE_BYTE[b]);
  for (let b = 0xc2; b <= 0xf4; b++) if (m.accepts(ONE_BYTE[b])) complete([b]);
  return out;
}

/**
 * A short byte string (fewest characters, trying one representative character per UTF-8 lead
 * byte) that takes the matcher to a state where the grammar can end, by breadth-first search
 * over automaton states; null when none is found within `maxStates`. Does not change `m`.
 */
export function shortestCompletion(m: GrammarMatcher, maxStates = 200_000): Uint8Array | null {
  if (m.canEnd()) return new Uint8Array(0);
  const seen = new Set<string>([m.stateId()]);
  let frontier: { m: GrammarMatcher; path: number[] }[] = [{ m: m.clone(), path: [] }];
  while (frontier.length > 0 && seen.size < maxStates) {
    const next: { m: GrammarMatcher; path: number[] }[] = [];
    for (const node of frontier) {
      for (const ch of nextCharacters(node.m)) {
        const child = node.m.clone();
        child.advance(ch);
        const path = [...node.path, ...ch];
        if (child.canEnd()) return Uint8Array.from(path);
        const id = child.stateId();
        if (seen.has(id)) continue;
        seen.add(id);
        next.push({ m: child, path });
      }
    }
    frontier = next;
  }
  return null;
}

export interface RandomDocumentOptions {
  /** Uniform random numbers in [0, 1). */
  readonly rng: () => number;
  /** After this many bytes, finish by the shortest completion (default 300). */
  readonly softLimit?: number;
  /** Chance to stop at each point where the grammar can end (default 0.1). */
  readonly stopProbability?: number;
  /** Relative weight of choosing byte b among the allowed ones (default favours JSON punctuation and digits). */
  readonly weight?: (b: number) => number;
}

function defaultWeight(b: number): number {
  if (b === 0x22 || b === 0x7b || b === 0x7d || b === 0x5b || b === 0x5d || b === 0x2c || b === 0x3a) return 12;
  if (b >= 0x30 && b <= 0x39) return 4;
  if (b < 0x80) return 1;
  return 0.4;
}

/**
 * A random document of the grammar from the matcher's current state: allowed bytes are drawn
 * by weight, and past `softLimit` the document is finished by the shortest completion.
 * Returns the bytes; the matcher itself is not changed.
 */
export function randomDocument(start: GrammarMatcher, options: RandomDocumentOptions): Uint8Array {
  const { rng } = options;
  const softLimit = options.softLimit ?? 300;
  const stop = options.stopProbability ?? 0.1;
  const weight = options.weight ?? defaultWeight;
  const m = start.clone();
  const out: number[] = [];
  for (;;) {
    if (m.isDone()) break;
    if (m.canEnd() && rng() < stop) break;
    if (out.length >= softLimit) {
      const tail = shortestCompletion(m);
      if (tail === null) throw new Error("grammar walk: no completion found");
      out.push(...tail);
      break;
    }
    const allowed = allowedBytes(m);
    if (allowed.length === 0) throw new Error("grammar walk: no byte allowed and the grammar cannot end");
    let total = 0;
    for (const b of allowed) total += weight(b);
    let r = rng() * total;
    let pick = allowed[allowed.length - 1];
    for (const b of allowed) {
      r -= weight(b);
      if (r < 0) {
        pick = b;
        break;
      }
    }
    m.advance(ONE_BYTE[pick]);
    out.push(pick);
  }
  return Uint8Array.from(out);
}
