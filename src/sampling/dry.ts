// bloomery sampling: DRY ("don't repeat yourself", llama.cpp's llama_sampler_dry, after
// koboldcpp): sequence breakers as token sequences (from the vocabulary's bytes), and the
// penalty of each token that would extend a sequence already repeated in the history.
import { SamplingError } from "./errors.ts";

/** What DRY needs from the vocabulary (a Tokenizer fits). */
export interface DryVocab {
  readonly nVocab: number;
  /** The bytes token `id` stands for (special tokens: their text). */
  tokenBytes(id: number): Uint8Array;
  /** Token ids of `text` (no special-token parsing). */
  encode(text: string): number[];
}

/** Head token -> the tails that complete a breaker after it (an empty tail: the head alone breaks). */
export type DryBreakers = ReadonlyMap<number, readonly (readonly number[])[]>;

const MAX_BREAKER_BYTES = 40;
const MAX_TAIL_TOKENS = 20;
const FLOAT_MAX_LOG = 88.7228391;

const utf8 = new TextEncoder();
const utf8d = new TextDecoder("utf-8", { fatal: false });

function indexOf(hay: Uint8Array, needle: Uint8Array): number {
  const n = needle.length;
  if (n === 0) return 0;
  const first = needle[0];
  for (let i = hay.indexOf(first); i >= 0 && i + n <= hay.length; i = hay.indexOf(first, i + 1)) {
    let j = 1;
    while (j < n && hay[i + j] === needle[j]) j++;
    if (j === n) return i;
  }
  return -1;
}

function sameTail(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/**
 * llama's processing of one breaker string: every token whose text contains it breaks alone;
 * a token whose text ends with a proper prefix of it (starting anywhere in the token) breaks
 * when followed by the tokens of the rest of the string (at most 20 of them).
 */
function addBreaker(vocab: DryVocab, text: string, out: Map<number, number[][]>): void {
  let s = utf8.encode(text);
  if (s.length === 0) return;
  if (s.length > MAX_BREAKER_BYTES) s = s.subarray(0, MAX_BREAKER_BYTES);
  const push = (id: number, tail: number[]): void => {
    const list = out.get(id);
    if (!list) out.set(id, [tail]);
    else if (!list.some((t) => sameTail(t, tail))) list.push(tail);
  };
  for (let id = 0; id < vocab.nVocab; id++) {
    const word = vocab.tokenBytes(id);
    if (indexOf(word, s) >= 0) {
      push(id, []);
      continue;
    }
    for (let pos = word.indexOf(s[0]); pos >= 0; pos = word.indexOf(s[0], pos + 1)) {
      let i = 1;
      let match = true;
      for (; i < s.length && i + pos < word.length; i++) {
        if (word[pos + i] !== s[i]) {
          match = false;
          break;
        }
      }
      if (!match) continue;
      const tail = vocab.encode(utf8d.decode(s.subarray(i)));
      push(id, tail.length > MAX_TAIL_TOKENS ? tail.slice(0, MAX_TAIL_TOKENS) : tail);
    }
  }
}

const cache = new WeakMap<object, Map<string, DryBreakers>>();

/** The breakers of `texts` over `vocab` (one vocabulary scan per breaker; cached per vocabulary object). */
export function dryBreakers(vocab: DryVocab, texts: readonly string[]): DryBreakers {
  const key = JSON.stringify(texts);
  let perVocab = cache.get(vocab);
  if (!perVocab) {
    perVocab = new Map();
    cache.set(vocab, perVocab);
  }
  let b = perVocab.get(key);
  if (!b) {
    const m = new Map<number, number[][]>();
    for (const t of texts) addBreaker(vocab, t, m);
    b = m;
    perVocab.set(key, b);
  }
  return b;
}

/** Breakers given directly as token sequences (the first token is the head), as llama's tests build them. */
export function dryBreakersFromTokens(seqs: readonly (readonly number[])[]): DryBreakers {
  const m = new Map<number, number[][]>();
  for (const s of seqs) {
    if (s.length === 0) continue;
    const tail = s.slice(1);
    const list = m.get(s[0]);
    if (!list) m.set(s[0], [tail]);
    else if (!list.some((t) => sameTail(t, tail))) list.push(tail);
  }
  return m;
}

export interface DryParams {
  readonly multiplier: number;
  readonly base: number;
  readonly allowedLength: number;
  /** Window: 0 off, -1 the whole history. */
  readonly penaltyLastN: number;
}

export function dryEnabled(p: DryParams): boolean {
  return p.multiplier !== 0 && p.base >= 1 && p.penaltyLastN !== 0;
}

/**
 * The DRY penalty (to subtract from the logit) of every token that would extend a repeat of
 * at least `allowedLength` tokens ending at the end of `history`, as llama computes it:
 * repeats are cut at the latest sequence breaker, lengths found with the Z-algorithm over the
 * reversed window, penalty = multiplier * base^(length - allowedLength) (exponent capped so it
 * stays a float); single-token breakers are never penalized.
 */
export function dryPenalties(history: readonly number[], p: DryParams, breakers: DryBreakers): Map<number, number> {
  const out = new Map<number, number>();
  if (!dryEnabled(p)) return out;
  const L = p.penaltyLastN < 0 ? history.length : Math.min(history.length, p.penaltyLastN);
  if (L <= p.allowedLength) return out;
  const base = history.length - L;
  const r = new Int32Array(L); // r[i]: the i-th token from the end
  for (let i = 0; i < L; i++) {
    const t = history[base + L - 1 - i];
    if (!Number.isInteger(t)) throw new SamplingError(`sampling: history holds a bad token id ${String(t)}`);
    r[i] = t;
  }

  // The latest breaker limits how far back a repeat may reach.
  let repLimit = L;
  for (let i = 0; i < L; i++) {
    const tails = breakers.get(r[i]);
    if (!tails) continue;
    let longest = -1;
    for (const tail of tails) {
      const n = tail.length;
      if (n <= longest || n > i) continue;
      let ok = true;
      for (let o = 0; o < n && ok; o++) ok = tail[o] === r[i - o - 1];
      if (ok) longest = n;
    }
    if (longest >= 0) {
      repLimit = i - longest;
      break;
    }
  }
  if (repLimit < p.allowedLength) return out;

  // z[k]: length of the common prefix of r and r[k..] (the suffix of the window repeated k back).
  const z = new Int32Array(L);
  for (let k = 1, lo = 0, hi = 0; k < L; k++) {
    let n = k < hi ? Math.min(hi - k, z[k - lo]) : 0;
    while (k + n < L && r[n] === r[k + n]) n++;
    z[k] = n;
    if (k + n > hi) {
      lo = k;
      hi = k + n;
    }
  }
  const maxRepeat = new Map<number, number>();
  for (let k = 1; k < L; k++) {
    const len = Math.min(z[k], repLimit);
    if (len < p.allowedLength) continue;
    const tok = r[k - 1]; // the token that followed the earlier occurrence
    const prev = maxRepeat.get(tok);
    if (prev === undefined || prev < len) maxRepeat.set(tok, len);
  }

  const b = Math.fround(p.base);
  const maxExp = b > 1.000001 ? Math.trunc(Math.fround(FLOAT_MAX_LOG / Math.fround(Math.log(b)))) : 0;
  const mult = Math.fround(p.multiplier);
  for (const [tok, len] of maxRepeat) {
    if (breakers.get(tok)?.some((t) => t.length === 0)) continue;
    let e = len - p.allowedLength;
    if (maxExp > 0 && e > maxExp) e = maxExp;
    out.set(tok, mult * Math.pow(b, e));
  }
  return out;
}
