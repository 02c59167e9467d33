// Byte-level BPE (tokenizer.ggml.model = "gpt2"): pieces -> GPT-2 byte alphabet -> merges by
// rank (lowest first, leftmost on ties), with a per-piece cache. Follows llama.cpp's
// llm_tokenizer_bpe and Hugging Face's BPE model.
import { BYTE_TO_CP, CP_TO_BYTE, Utf8Scratch, byteLevelString, utf8 } from "./bytes.ts";
import { TokenizerError } from "./errors.ts";
import { KeyHeap } from "./heap.ts";
import type { SplitRule } from "./pretokenize.ts";
import { PreTokenizer } from "./pretokenize.ts";
import type { Vocab } from "./vocab.ts";

const POS = 2 ** 31; // heap key = mergeIndex * POS + position
const MISSING = -2; // a byte whose symbol is not in the vocabulary
const DEAD = -3; // a symbol merged into its left neighbour
const CACHE_LIMIT = 1 << 17;
const MAX_MERGES = 2 ** 21;

/** Open-addressed hash of symbol pairs -> merge index (the rank). First rank of a pair wins. */
class PairTable {
  private readonly ka: Int32Array;
  private readonly kb: Int32Array;
  private readonly val: Int32Array;
  private readonly mask: number;

  constructor(entries: number) {
    let cap = 16;
    while (cap < entries * 2) cap *= 2;
    this.ka = new Int32Array(cap).fill(-1);
    this.kb = new Int32Array(cap);
    this.val = new Int32Array(cap);
    this.mask = cap - 1;
  }

  private slot(a: number, b: number): number {
    return (Math.imul(a, 0x9e3779b1) ^ Math.imul(b ^ 0x5bd1e995, 0x85ebca77)) >>> 0;
  }

  setIfAbsent(a: number, b: number, v: number): void {
    let i = this.slot(a, b) & this.mask;
    for (;;) {
      const x = this.ka[i];
      if (x === -1) {
        this.ka[i] = a;
        this.kb[i] = b;
        this.val[i] = v;
        return;
      }
      if (x === a && this.kb[i] === b) return;
      i = (i + 1) & this.mask;
    }
  }

  get(a: number, b: number): number {
    if (a < 0 || b < 0) return -1;
    let i = this.slot(a, b) & this.mask;
    for (;;) {
      const x = this.ka[i];
      if (x === -1) return -1;
      if (x === a && this.kb[i] === b) return this.val[i];
      i = (i + 1) & this.mask;
    }
  }
}

/** Raw bytes of a byte-level string; characters outside the alphabet stand for their UTF-8. */
export function byteLevelDecode(s: string): Uint8Array {
  const out: number[] = [];
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    const b = cp < 512 ? CP_TO_BYTE[cp] : -1;
    if (b >= 0) out.push(b);
    else for (const x of utf8(ch)) out.push(x);
  }
  return Uint8Array.from(out);
}

export class ByteLevelBpe {
  private readonly nVocab: number;
  private readonly byteToId = new Int32Array(256);
  private readonly virtualBytes: Uint8Array[] = [];
  private readonly pairs: PairTable;
  private readonly mergeResult: Int32Array;
  private readonly pre: PreTokenizer;
  private readonly cache = new Map<string, Int32Array>();
  private readonly utf = new Utf8Scratch();
  private readonly heap = new KeyHeap();
  private sym = new Int32Array(256);
  private next = new Int32Array(256);
  private prev = new Int32Array(256);
  private readonly words: string[] = [];

  constructor(private readonly vocab: Vocab, merges: string[] | undefined, rule: SplitRule) {
    if (!Array.isArray(merges)) throw new TokenizerError("tokenizer.ggml.merges is missing; a gpt2 (BPE) vocabulary needs its merges");
    if (merges.length >= MAX_MERGES) throw new TokenizerError(`tokenizer.ggml.merges has ${merges.length} entries, more than ${MAX_MERGES} supported`);
    this.nVocab = vocab.size;
    this.pre = new PreTokenizer(rule);
    for (let b = 0; b < 256; b++) {
      this.byteToId[b] = vocab.idOf.get(String.fromCharCode(BYTE_TO_CP[b])) ?? MISSING;
    }

    // Strings that merges name but the vocabulary lacks get ids past the vocabulary
    // ("virtual" symbols); if one survives merging it is written out byte by byte.
    const virtualIds = new Map<string, number>();
    const symOf = (s: string): number => {
      const id = vocab.idOf.get(s);
      if (id !== undefined) return id;
      let v = virtualIds.get(s);
      if (v === undefined) {
        v = this.nVocab + this.virtualBytes.length;
        virtualIds.set(s, v);
        this.virtualBytes.push(byteLevelDecode(s));
      }
      return v;
    };
    this.pairs = new PairTable(merges.length);
    this.mergeResult = new Int32Array(merges.length);
    for (let r = 0; r < merges.length; r++) {
      const m = merges[r];
      if (typeof m !== "string") throw new TokenizerError(`tokenizer.ggml.merges[${r}] is not a string`);
      const sp = m.indexOf(" ", 1);
      if (sp < 0 || sp === m.length - 1) throw new TokenizerError(`tokenizer.ggml.merges[${r}] = ${JSON.stringify(m)} is not "left right"`);
      const left = m.slice(0, sp);
      const right = m.slice(sp + 1);
      this.pairs.setIfAbsent(symOf(left), symOf(right), r);
      this.mergeResult[r] = symOf(left + right);
    }
  }

  /** Appends the ids of a text fragment (no special tokens in it) to `out`. */
  encode(text: string, out: number[]): void {
    const words = this.words;
    words.length = 0;
    this.pre.split(text, (w) => words.push(w));
    for (let k = 0; k < words.length; k++) {
      const w = words[k];
      let ids = this.cache.get(w);
      if (ids === undefined) {
        ids = this.encodeWord(w);
        if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
        this.cache.set(w, ids);
      }
      for (let i = 0; i < ids.length; i++) out.push(ids[i]);
    }
    words.length = 0;
  }

  private encodeWord(word: string): Int32Array {
    const n = this.utf.encode(word);
    const bytes = this.utf.buf;
    if (this.pre.rule.ignoreMerges) {
      const whole = this.vocab.idOf.get(byteLevelString(bytes, 0, n));
      if (whole !== undefined) return Int32Array.of(whole);
    }
    if (this.sym.length < n) {
      const cap = Math.max(n, this.sym.length * 2);
      this.sym = new Int32Array(cap);
      this.next = new Int32Array(cap);
      this.prev = new Int32Array(cap);
    }
    const { sym, next, prev, pairs, heap, mergeResult } = this;
    for (let i = 0; i < n; i++) {
      sym[i] = this.byteToId[bytes[i]];
      next[i] = i + 1 < n ? i + 1 : -1;
      prev[i] = i - 1;
    }
    heap.clear();
    for (let i = 0; i + 1 < n; i++) {
      const m = pairs.get(sym[i], sym[i + 1]);
      if (m >= 0) heap.push(m * POS + i);
    }
    while (heap.size > 0) {
      const key = heap.pop();
      const m = Math.floor(key / POS);
      const i = key - m * POS;
      const j = next[i];
      if (j < 0 || sym[i] === DEAD || pairs.get(sym[i], sym[j]) !== m) continue; // stale
      sym[i] = mergeResult[m];
      sym[j] = DEAD;
      const k = next[j];
      next[i] = k;
      if (k >= 0) prev[k] = i;
      const p = prev[i];
      if (p >= 0) {
        const mp = pairs.get(sym[p], sym[i]);
        if (mp >= 0) heap.push(mp * POS + p);
      }
      if (k >= 0) {
        const mk = pairs.get(sym[i], sym[k]);
        if (mk >= 0) heap.push(mk * POS + i);
      }
    }
    const out: number[] = [];
    for (let i = n > 0 ? 0 : -1; i >= 0; i = next[i]) {
      const s = sym[i];
      if (s >= 0 && s < this.nVocab) out.push(s);
      else if (s === MISSING) {
        // llama.cpp drops a byte the vocabulary cannot spell; Hugging Face uses unk if it has one.
        if (this.vocab.unk >= 0) out.push(this.vocab.unk);
      } else if (s >= this.nVocab) {
        for (const b of this.virtualBytes[s - this.nVocab]) {
          const id = this.byteToId[b];
          if (id >= 0) out.push(id);
          else if (this.vocab.unk >= 0) out.push(this.vocab.unk);
        }
      }
    }
    return Int32Array.from(out);
  }
}
