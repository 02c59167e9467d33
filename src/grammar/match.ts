// bloomery grammar: the incremental GBNF matcher (a set of pushdown stacks, as llama.cpp's llama-grammar.cpp) run as a lazily built byte-level automaton.
//
// A matcher state is a set of stacks (each stack a chain of grammar positions, hash-consed so that
// equal stacks are the same object) plus, between the bytes of one UTF-8 character, the partial
// code point read so far. States are interned per compiled grammar and every (state, byte)
// transition is computed once and cached, so after warm-up `accepts` costs one array lookup per
// byte. A state is only ever created when some continuation can still complete the grammar (the
// parser prunes alternatives that cannot finish, and a partial character is kept only when a
// completion of it can match), so a sampler following `accepts` never walks into a dead end.
import { GrammarMatchError } from "./errors.ts";
import { MAX_CODE_POINT, rangesContain, rangesIntersect, type Ranges } from "./charclass.ts";
import { parseGbnf, type ParsedGrammar } from "./parse.ts";

const K_END = 0;
const K_CHARS = 1;
const K_REF = 2;

/** Smallest code point of a UTF-8 sequence of each length (smaller ones would be overlong). */
const MIN_CP_FOR_LEN = [0, 0, 0x80, 0x800, 0x10000];

class StackNode {
  constructor(
    readonly id: number,
    readonly pos: number,
    readonly next: StackNode | null,
  ) {}
}

class DState {
  /** Cached transitions by byte; `undefined` = not computed yet. */
  trans: (DState | undefined)[] | undefined = undefined;
  /** Partial-character states hanging off this (full) state, by packed (value, remaining, length). */
  partials: Map<number, DState> | undefined = undefined;
  constructor(
    readonly id: number,
    readonly epoch: number,
    /** Stacks whose top is a character class; for a partial state, those of its base. */
    readonly stacks: readonly StackNode[],
    /** The root rule can be complete here (an empty stack is in the set). */
    readonly accepting: boolean,
    /** For a state inside a UTF-8 sequence: the full state before the sequence; else null. */
    readonly base: DState | null,
    readonly partialValue: number,
    readonly partialRemaining: number,
    readonly partialLength: number,
  ) {}
}

/** The state from which nothing is accepted. */
const DEAD = new DState(-1, -1, [], false, null, 0, 0, 0);

export interface CompiledGrammarOptions {
  /** Cached automaton states kept before the caches are dropped and rebuilt (default 50,000). */
  maxStates?: number;
}

/**
 * A grammar ready for matching: the rules flattened into position arrays, and the automaton
 * caches that all matchers of this grammar share. Build once per grammar text and make a
 * `GrammarMatcher` per generation from it.
 */
export class CompiledGrammar {
  readonly ruleCount: number;
  private readonly kind: Uint8Array;
  private readonly val: Int32Array;
  private readonly ruleAlts: Int32Array[];
  private readonly classes: Ranges[];
  private readonly startPos: number;
  private readonly nPos: number;
  readonly maxStates: number;

  private epochNo = 0;
  private nodes = new Map<number, StackNode>();
  private states = new Map<string, DState>();
  private nodeIds = 1;
  private stateIds = 0;
  private stateCount = 0;
  private initialState: DState;

  constructor(parsed: ParsedGrammar, options: CompiledGrammarOptions = {}) {
    this.maxStates = options.maxStates ?? 50_000;
    const kind: number[] = [];
    const val: number[] = [];
    this.ruleAlts = [];
    for (const rule of parsed.rules) {
      const starts: number[] = [];
      for (const alt of rule.alts) {
        starts.push(kind.length);
        for (const e of alt) {
          if (e.kind === "chars") {
            kind.push(K_CHARS);
            val.push(e.cls);
          } else {
            kind.push(K_REF);
            val.push(e.rule);
          }
        }
        kind.push(K_END);
        val.push(0);
      }
      this.ruleAlts.push(Int32Array.from(starts));
    }
    // A virtual start sequence: a reference to root followed by the end marker.
    this.startPos = kind.length;
    kind.push(K_REF, K_END);
    val.push(parsed.root, 0);
    this.kind = Uint8Array.from(kind);
    this.val = Int32Array.from(val);
    this.nPos = kind.length;
    this.classes = parsed.classes;
    this.ruleCount = parsed.rules.length;
    this.initialState = this.makeInitial();
  }

  /** Number of automaton states currently cached. */
  get cachedStates(): number {
    return this.stateCount;
  }

  /** The current cache generation; states of older generations are re-interned on use. */
  get epoch(): number {
    return this.epochNo;
  }

  /** @internal the start state of the current epoch. */
  initial(): DState {
    return this.initialState;
  }

  private push(next: StackNode | null, pos: number): StackNode {
    const key = (next === null ? 0 : next.id) * this.nPos + pos;
    let node = this.nodes.get(key);
    if (node === undefined) {
      node = new StackNode(this.nodeIds++, pos, next);
      this.nodes.set(key, node);
    }
    return node;
  }

  /** Expand `start` until every stack has a character class on top; collect into `out`. */
  private expand(start: StackNode | null, out: Map<number, StackNode>, seen: Set<number>): boolean {
    const { kind, val } = this;
    let accepting = false;
    const todo: (StackNode | null)[] = [start];
    while (todo.length > 0) {
      const s = todo.pop()!;
      if (s === null) {
        accepting = true;
        continue;
      }
      if (seen.has(s.id)) continue;
      seen.add(s.id);
      if (kind[s.pos] === K_CHARS) {
        out.set(s.id, s);
        continue;
      }
      // a rule reference: replace it by each alternative, keeping the continuation below
      const cont = s.pos + 1;
      const base = kind[cont] === K_END ? s.next : this.push(s.next, cont);
      const alts = this.ruleAlts[val[s.pos]];
      for (let i = 0; i < alts.length; i++) {
        const a = alts[i];
        todo.push(kind[a] === K_END ? base : this.push(base, a));
      }
    }
    return accepting;
  }

  private intern(out: Map<number, StackNode>, accepting: boolean): DState {
    if (out.size === 0 && !accepting) return DEAD;
    const stacks = [...out.values()].sort((a, b) => a.id - b.id);
    let key = "";
    for (const s of stacks) key += s.id + ",";
    if (accepting) key += "!";
    let st = this.states.get(key);
    if (st === undefined) {
      st = new DState(this.stateIds++, this.epochNo, stacks, accepting, null, 0, 0, 0);
      this.states.set(key, st);
      this.stateCount++;
    }
    return st;
  }

  private makeInitial(): DState {
    const out = new Map<number, StackNode>();
    const accepting = this.expand(this.push(null, this.startPos), out, new Set());
    return this.intern(out, accepting);
  }

  /** The full state after code point `cp` from full state `s`. */
  private step(s: DState, cp: number): DState {
    const { kind, val, classes } = this;
    const out = new Map<number, StackNode>();
    const seen = new Set<number>();
    let accepting = false;
    for (const st of s.stacks) {
      if (!rangesContain(classes[val[st.pos]], cp)) continue;
      const next = st.pos + 1;
      const base = kind[next] === K_END ? st.next : this.push(st.next, next);
      if (this.expand(base, out, seen)) accepting = true;
    }
    return this.intern(out, accepting);
  }

  /** The state inside a UTF-8 sequence, or DEAD when no completion of it can match. */
  private partial(base: DState, value: number, remaining: number, length: number): DState {
    const key = value * 64 + remaining * 8 + length;
    let st = base.partials?.get(key);
    if (st !== undefined) return st;
    const span = 2 ** (6 * remaining);
    const lo = Math.max(value * span, MIN_CP_FOR_LEN[length]);
    const hi = Math.min(value * span + span - 1, MAX_CODE_POINT);
    let live = false;
    if (lo <= hi) {
      for (const s of base.stacks) {
        if (rangesIntersect(this.classes[this.val[s.pos]], lo, hi)) {
          live = true;
          break;
        }
      }
    }
    st = live ? new DState(this.stateIds++, this.epochNo, base.stacks, false, base, value, remaining, length) : DEAD;
    (base.partials ??= new Map()).set(key, st);
    if (live) this.stateCount++;
    return st;
  }

  /** @internal the transition of `s` on byte `b`, computed and cached. */
  next(s: DState, b: number): DState {
    if (s === DEAD) return DEAD;
    let t: DState;
    if (s.base === null) {
      if (b < 0x80) t = this.step(s, b);
      else if (b >= 0xc2 && b <= 0xdf) t = this.partial(s, b & 0x1f, 1, 2);
      else if (b >= 0xe0 && b <= 0xef) t = this.partial(s, b & 0x0f, 2, 3);
      else if (b >= 0xf0 && b <= 0xf4) t = this.partial(s, b & 0x07, 3, 4);
      else t = DEAD;
    } else if ((b & 0xc0) !== 0x80) {
      t = DEAD;
    } else {
      const v = s.partialValue * 64 + (b & 0x3f);
      const r = s.partialRemaining - 1;
      if (r > 0) t = this.partial(s.base, v, r, s.partialLength);
      else if (v < MIN_CP_FOR_LEN[s.partialLength] || v > MAX_CODE_POINT || (v >= 0xd800 && v <= 0xdfff)) t = DEAD;
      else t = this.step(s.base, v);
    }
    (s.trans ??= new Array<DState | undefined>(256))[b] = t;
    return t;
  }

  /** @internal drop every cache when too many states piled up; returns the state to continue from. */
  refresh(s: DState): DState {
    if (this.stateCount > this.maxStates) {
      this.epochNo++;
      this.nodes = new Map();
      this.states = new Map();
      this.stateCount = 0;
      this.initialState = this.makeInitial();
    }
    return s === DEAD || s.epoch === this.epochNo ? s : this.reintern(s);
  }

  private reinternStack(node: StackNode): StackNode {
    const chain: number[] = [];
    for (let n: StackNode | null = node; n !== null; n = n.next) chain.push(n.pos);
    let top: StackNode | null = null;
    for (let i = chain.length - 1; i >= 0; i--) top = this.push(top, chain[i]);
    return top!;
  }

  private reintern(s: DState): DState {
    if (s.base !== null) {
      return this.partial(this.reintern(s.base), s.partialValue, s.partialRemaining, s.partialLength);
    }
    const out = new Map<number, StackNode>();
    for (const st of s.stacks) {
      const n = this.reinternStack(st);
      out.set(n.id, n);
    }
    return this.intern(out, s.accepting);
  }
}

function showBytes(bytes: Uint8Array): string {
  const text = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  return JSON.stringify(text);
}

const textEncoder = new TextEncoder();
const compileCache = new Map<string, CompiledGrammar>();
const COMPILE_CACHE_SIZE = 16;

/** Parse and compile GBNF text (throws `GrammarError`). Compiled grammars are cached by text (a small LRU). */
export function compileGrammar(gbnf: string): CompiledGrammar {
  const hit = compileCache.get(gbnf);
  if (hit !== undefined) {
    compileCache.delete(gbnf);
    compileCache.set(gbnf, hit);
    return hit;
  }
  const compiled = new CompiledGrammar(parseGbnf(gbnf));
  compileCache.set(gbnf, compiled);
  if (compileCache.size > COMPILE_CACHE_SIZE) compileCache.delete(compileCache.keys().next().value!);
  return compiled;
}

/**
 * Where generation stands in a grammar. `accepts` asks whether a candidate token's bytes may
 * come next (tokens may split UTF-8 characters; the partial character is carried), `advance`
 * commits them. `clone` is O(1): matchers are immutable views of shared automaton states.
 */
export class GrammarMatcher {
  private constructor(
    readonly grammar: CompiledGrammar,
    private state: DState,
  ) {}

  /** Parse and compile `gbnf` (throws `GrammarError`) and start at its beginning. */
  static compile(gbnf: string): GrammarMatcher {
    const g = compileGrammar(gbnf);
    return new GrammarMatcher(g, g.initial());
  }

  /** A fresh matcher at the start of an already compiled grammar. */
  static fromGrammar(grammar: CompiledGrammar): GrammarMatcher {
    return new GrammarMatcher(grammar, grammar.initial());
  }

  clone(): GrammarMatcher {
    return new GrammarMatcher(this.grammar, this.state);
  }

  /** Whether `bytes` may come next. Empty input is accepted (it changes nothing). */
  accepts(bytes: Uint8Array): boolean {
    const g = this.grammar;
    let s = (this.state = g.refresh(this.state));
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i];
      const t = s.trans?.[b];
      s = t !== undefined ? t : g.next(s, b);
      if (s === DEAD) return false;
    }
    return true;
  }

  /** Commit `bytes`; throws `GrammarMatchError` (and leaves the matcher unchanged) when they are not allowed. */
  advance(bytes: Uint8Array): void {
    const g = this.grammar;
    let s = (this.state = g.refresh(this.state));
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i];
      const t = s.trans?.[b];
      s = t !== undefined ? t : g.next(s, b);
      if (s === DEAD) {
        throw new GrammarMatchError(`byte ${i} (0x${b.toString(16).padStart(2, "0")}) of ${showBytes(bytes)} is not allowed here`);
      }
    }
    this.state = s;
  }

  acceptsText(text: string): boolean {
    return this.accepts(textEncoder.encode(text));
  }

  advanceText(text: string): void {
    this.advance(textEncoder.encode(text));
  }

  /** The root rule can be complete here: end of generation (EOS) is allowed. */
  canEnd(): boolean {
    return this.state.base === null && this.state.accepting;
  }

  /** Nothing more can follow: the root is complete and no longer text is allowed. */
  isDone(): boolean {
    return this.state.base === null && this.state.accepting && this.state.stacks.length === 0;
  }

  /** Inside a UTF-8 character: some bytes of it were advanced but not all. */
  inPartialCharacter(): boolean {
    return this.state.base !== null;
  }

  /** Back to the start of the grammar. */
  reset(): void {
    this.state = this.grammar.initial();
  }

  /**
   * An identifier of the current automaton state (equal ids = same state, within one cache
   * epoch). For callers that cache per-state results, e.g. token masks.
   */
  stateId(): string {
    this.state = this.grammar.refresh(this.state);
    return `${this.grammar.epoch}:${this.state.id}`;
  }
}

export interface Candidate {
  readonly id: number;
  readonly bytes: Uint8Array;
}

export interface FilterOptions {
  /** End-of-generation token ids: allowed exactly when `matcher.canEnd()`, whatever their bytes. */
  readonly eos?: ReadonlySet<number>;
}

/**
 * The candidates the grammar allows next, in the given order, at most `limit` of them.
 * Candidates with empty bytes (that are not end tokens) are allowed: they do not change the text.
 */
export function filterCandidates<C extends Candidate>(matcher: GrammarMatcher, candidates: readonly C[], limit = Infinity, options: FilterOptions = {}): C[] {
  const out: C[] = [];
  if (limit <= 0) return out;
  const eos = options.eos;
  const canEnd = eos !== undefined && eos.size > 0 ? matcher.canEnd() : false;
  for (const c of candidates) {
    const ok = eos !== undefined && eos.has(c.id) ? canEnd : matcher.accepts(c.bytes);
    if (ok) {
      out.push(c);
      if (out.length >= limit) break;
    }
  }
  return out;
}
