// bloomery grammar: static checks of a lowered grammar (alternatives that can never finish are pruned; left recursion is refused).
import { GrammarError } from "./errors.ts";
import type { GrammarElement, GrammarRule, ParsedGrammar } from "./parse.ts";

/** Fixpoint: which rules can derive the empty string. */
export function nullableRules(rules: readonly GrammarRule[]): boolean[] {
  const nullable = new Array<boolean>(rules.length).fill(false);
  let changed = true;
  while (changed) {
    changed = false;
    for (let r = 0; r < rules.length; r++) {
      if (nullable[r]) continue;
      if (rules[r].alts.some((alt) => alt.every((e) => e.kind === "ref" && nullable[e.rule]))) {
        nullable[r] = true;
        changed = true;
      }
    }
  }
  return nullable;
}

/** Fixpoint: which rules can derive some finite string at all. */
function productiveRules(rules: readonly GrammarRule[]): boolean[] {
  const productive = new Array<boolean>(rules.length).fill(false);
  let changed = true;
  while (changed) {
    changed = false;
    for (let r = 0; r < rules.length; r++) {
      if (productive[r]) continue;
      if (rules[r].alts.some((alt) => alt.every((e) => e.kind === "chars" || productive[e.rule]))) {
        productive[r] = true;
        changed = true;
      }
    }
  }
  return productive;
}

/**
 * Strongly connected components (iterative Tarjan). Returns the component index of every node.
 */
function components(n: number, edges: readonly number[][]): Int32Array {
  const index = new Int32Array(n).fill(-1);
  const low = new Int32Array(n);
  const comp = new Int32Array(n).fill(-1);
  const onStack = new Uint8Array(n);
  const stack: number[] = [];
  let counter = 0;
  let nComp = 0;
  const work: [number, number][] = [];
  for (let s = 0; s < n; s++) {
    if (index[s] >= 0) continue;
    work.push([s, 0]);
    while (work.length > 0) {
      const frame = work[work.length - 1];
      const v = frame[0];
      if (frame[1] === 0 && index[v] < 0) {
        index[v] = low[v] = counter++;
        stack.push(v);
        onStack[v] = 1;
      }
      const out = edges[v];
      if (frame[1] < out.length) {
        const w = out[frame[1]++];
        if (index[w] < 0) work.push([w, 0]);
        else if (onStack[w]) low[v] = Math.min(low[v], index[w]);
        continue;
      }
      work.pop();
      if (work.length > 0) {
        const parent = work[work.length - 1][0];
        low[parent] = Math.min(low[parent], low[v]);
      }
      if (low[v] === index[v]) {
        for (;;) {
          const w = stack.pop()!;
          onStack[w] = 0;
          comp[w] = nComp;
          if (w === v) break;
        }
        nComp++;
      }
    }
  }
  return comp;
}

/**
 * Prune alternatives that reference rules which can never finish, refuse a root that can never
 * finish, and refuse left recursion. A left-recursive cycle that goes only through references in
 * the last position of their alternatives (e.g. `x ::= x | "a"`, or `(y?)*`) is harmless to a
 * pushdown matcher and allowed; any other cycle of leftmost references would grow the stack
 * without end and is a `GrammarError` naming the rule.
 */
export function checkGrammar(g: ParsedGrammar): void {
  const { rules } = g;
  const productive = productiveRules(rules);
  if (!productive[g.root]) {
    throw new GrammarError("rule 'root' can never complete: every alternative recurses without end", rules[g.root].line, rules[g.root].column);
  }
  for (const rule of rules) {
    rule.alts = rule.alts.filter((alt: GrammarElement[]) => alt.every((e) => e.kind === "chars" || productive[e.rule]));
  }

  const nullable = nullableRules(rules);
  const edges: number[][] = rules.map(() => []);
  const nonTail: [number, number][] = [];
  for (let a = 0; a < rules.length; a++) {
    for (const alt of rules[a].alts) {
      for (let i = 0; i < alt.length; i++) {
        const e = alt[i];
        if (e.kind === "chars") break;
        edges[a].push(e.rule);
        if (i < alt.length - 1) nonTail.push([a, e.rule]);
        if (!nullable[e.rule]) break;
      }
    }
  }
  const comp = components(rules.length, edges);
  for (const [a, b] of nonTail) {
    if (comp[a] === comp[b]) {
      const rule = rules[a];
      const via = rules[b].origin === rule.origin ? "" : ` (through rule '${rules[b].origin}')`;
      throw new GrammarError(`left recursion in rule '${rule.origin}'${via}: a rule may not start with itself`, rule.line, rule.column);
    }
  }
}
