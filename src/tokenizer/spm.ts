// SentencePiece BPE-by-score (tokenizer.ggml.model = "llama"), as llama.cpp's
// llm_tokenizer_spm does it: spaces -> U+2581, characters merged pairwise by the score of
// the piece they form (highest first, leftmost on ties), leftovers as <0xNN> byte pieces.
import { Utf8Scratch, bytePiece } from "./bytes.ts";
import { TokenizerError } from "./errors.ts";
import { TokenType, type Vocab } from "./vocab.ts";

/** A max-heap of candidate merges ordered by (score desc, left asc). */
class BigramHeap {
  score = new Float64Array(64);
  left = new Int32Array(64);
  right = new Int32Array(64);
  len = new Int32Array(64);
  size = 0;

  private before(a: number, b: number): boolean {
    const sa = this.score[a];
    const sb = this.score[b];
    return sa > sb || (sa === sb && this.left[a] < this.left[b]);
  }

  private swap(a: number, b: number): void {
    let t = this.score[a]; this.score[a] = this.score[b]; this.score[b] = t;
    t = this.left[a]; this.left[a] = this.left[b]; this.left[b] = t;
    t = this.right[a]; this.right[a] = this.right[b]; this.right[b] = t;
    t = this.len[a]; this.len[a] = this.len[b]; this.len[b] = t;
  }

  push(score: number, left: number, right: number, len: number): void {
    if (this.size === this.score.length) this.grow();
    let i = this.size++;
    this.score[i] = score;
    this.left[i] = left;
    this.right[i] = right;
    this.len[i] = len;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.before(i, p)) break;
      this.swap(i, p);
      i = p;
    }
  }

  /** Moves the top to slot `size` (read it there after the call) and restores the heap. */
  pop(): number {
    const last = --this.size;
    this.swap(0, last);
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= last) break;
      if (c + 1 < last && this.before(c + 1, c)) c++;
      if (!this.before(c, i)) break;
      this.swap(i, c);
      i = c;
    }
    return last;
  }

  private grow(): void {
    const n = this.score.length * 2;
    const s = new Float64Array(n); s.set(this.score); this.score = s;
    const l = new Int32Array(n); l.set(this.left); this.left = l;
    const r = new Int32Array(n); r.set(this.right); this.right = r;
    const z = new Int32Array(n); z.set(this.len); this.len = z;
  }
}

export class SpmEncoder {
  private readonly byteIds = new Int32Array(256);
  private readonly utf = new Utf8Scratch();
  private readonly heap = new BigramHeap();
  /** Code points that occur in some mergeable piece of two or more characters. */
  private readonly mergeChars = new Set<number>();

  constructor(private readonly vocab: Vocab) {
    for (let id = 0; id < vocab.size; id++) {
      const t = vocab.tokens[id];
      if (t.length < 2 || this.pieceId(t) < 0) continue;
      const cps = [...t];
      if (cps.length < 2) continue;
      for (const c of cps) this.mergeChars.add(c.codePointAt(0)!);
    }
    for (let b = 0; b < 256; b++) {
      // <0xNN> first; else the byte as a one-character piece, as llama.cpp's byte_to_token does.
      this.byteIds[b] = vocab.idOf.get(bytePiece(b)) ?? (b < 0x80 ? vocab.idOf.get(String.fromCharCode(b)) ?? -1 : -1);
    }
  }

  /** A piece that text may be merged into: not control, unknown, unused or a byte piece. */
  private pieceId(text: string): number {
    const id = this.vocab.idOf.get(text);
    if (id === undefined) return -1;
    const t = this.vocab.types[id];
    return t === TokenType.NORMAL || t === TokenType.USER_DEFINED || t === TokenType.UNDEFINED ? id : -1;
  }

  /** Appends the ids of a text fragment to `out`; `spacePrefix` puts a space before it. */
  encode(fragment: string, spacePrefix: boolean, out: number[]): void {
    const text = (spacePrefix ? " " + fragment : fragment).replaceAll(" ", "\u2581");
    if (text.length === 0) return;
    // One symbol per code point: start offset and length in UTF-16 units.
    const n = text.length;
    const start = new Int32Array(n);
    const len = new Int32Array(n);
    const next = new Int32Array(n);
    const prev = new Int32Array(n);
    const isolated = new Uint8Array(n);
    let count = 0;
    for (let i = 0; i < n; ) {
      const cp = text.codePointAt(i)!;
      const w = cp > 0xffff ? 2 : 1;
      start[count] = i;
      len[count] = w;
      isolated[count] = this.mergeChars.has(cp) ? 0 : 1;
      count++;
      i += w;
    }
    // A character that no multi-character piece contains never merges, so the text around it
    // can be merged separately with the same result (smaller queues, same order within each).
    for (let a = 0; a < count; ) {
      let b = a + 1;
      if (!isolated[a]) while (b < count && !isolated[b]) b++;
      this.mergeRun(text, a, b, start, len, next, prev, out);
      a = b;
    }
  }

  /** Merges symbols [a, b) by piece score and appends their ids. */
  private mergeRun(text: string, a: number, b: number, start: Int32Array, len: Int32Array, next: Int32Array, prev: Int32Array, out: number[]): void {
    for (let i = a; i < b; i++) {
      prev[i] = i - 1;
      next[i] = i + 1 < b ? i + 1 : -1;
    }
    prev[a] = -1;
    if (b - a > 1) {
      const scores = this.vocab.scores;
      const heap = this.heap;
      heap.size = 0;
      const tryAdd = (l: number, r: number): void => {
        if (l < 0 || r < 0) return;
        const id = this.pieceId(text.substr(start[l], len[l] + len[r]));
        if (id < 0) return;
        heap.push(scores ? scores[id] : 0, l, r, len[l] + len[r]);
      };
      for (let i = a; i + 1 < b; i++) tryAdd(i, i + 1);
      while (heap.size > 0) {
        const top = heap.pop();
        const l = heap.left[top];
        const r = heap.right[top];
        if (len[l] === 0 || len[r] === 0 || len[l] + len[r] !== heap.len[top]) continue; // stale
        len[l] += len[r];
        len[r] = 0;
        const k = next[r];
        next[l] = k;
        if (k >= 0) prev[k] = l;
        tryAdd(prev[l], l);
        tryAdd(l, k);
      }
    }

    for (let i = a; i >= 0; i = next[i]) {
      const piece = text.substr(start[i], len[i]);
      const id = this.pieceId(piece);
      if (id >= 0) {
        out.push(id);
        continue;
      }
      // Byte fallback; a piece the bytes cannot spell becomes the unknown token.
      const nb = this.utf.encode(piece);
      let spelled = true;
      for (let j = 0; j < nb; j++) if (this.byteIds[this.utf.buf[j]] < 0) spelled = false;
      if (spelled) {
        for (let j = 0; j < nb; j++) out.push(this.byteIds[this.utf.buf[j]]);
      } else if (this.vocab.unk >= 0) {
        out.push(this.vocab.unk);
      } else {
        throw new TokenizerError(`SPM vocabulary cannot spell ${JSON.stringify(piece)}: no piece, no <0xNN> byte pieces and no unknown token`);
      }
    }
  }
}
