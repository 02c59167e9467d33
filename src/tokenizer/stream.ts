// Incremental detokenizer: turns generated token ids into text without ever emitting half a
// UTF-8 character; an incomplete or invalid sequence becomes U+FFFD (at the latest on flush).
import type { Tokenizer } from "./tokenizer.ts";

const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

/** Bytes a sequence starting with lead byte `b` has in all (0 for a byte that cannot lead). */
function seqLen(b: number): number {
  if (b < 0x80) return 1;
  if (b >= 0xc2 && b <= 0xdf) return 2;
  if (b >= 0xe0 && b <= 0xef) return 3;
  if (b >= 0xf0 && b <= 0xf4) return 4;
  return 0;
}

/** Whether `b` may follow lead byte `lead` as its second byte (WHATWG's ranges). */
function secondOk(lead: number, b: number): boolean {
  if (lead === 0xe0) return b >= 0xa0 && b <= 0xbf;
  if (lead === 0xed) return b >= 0x80 && b <= 0x9f;
  if (lead === 0xf0) return b >= 0x90 && b <= 0xbf;
  if (lead === 0xf4) return b >= 0x80 && b <= 0x8f;
  return b >= 0x80 && b <= 0xbf;
}

/**
 * How many leading bytes of buf[0..len) can be decoded now: all of them, unless the buffer
 * ends in the valid beginning of a character that more bytes would complete.
 */
export function completePrefix(buf: Uint8Array, len: number): number {
  for (let i = len - 1; i >= 0 && i >= len - 3; i--) {
    const b = buf[i];
    if ((b & 0xc0) === 0x80) continue; // continuation byte: look further back
    const need = seqLen(b);
    const have = len - i;
    if (need <= have) return len; // complete (or invalid): decode everything
    for (let k = i + 1; k < len; k++) {
      const ok = k === i + 1 ? secondOk(b, buf[k]) : (buf[k] & 0xc0) === 0x80;
      if (!ok) return len;
    }
    return i;
  }
  return len;
}

export interface StreamDecoderOptions {
  /** Leave out control and unknown tokens (as llama-server does for generated text). */
  skipSpecial?: boolean;
  /** Special tokens rendered even with skipSpecial (llama-server's preserved_tokens: a chat format's markers). */
  keep?: ReadonlySet<number>;
}

/** Feeds token ids one at a time; each push returns the text completed by that token. */
export class StreamDecoder {
  private buf = new Uint8Array(64);
  private len = 0;
  private readonly skipSpecial: boolean;
  private readonly keep: ReadonlySet<number> | null;

  constructor(private readonly tok: Tokenizer, opts: StreamDecoderOptions = {}) {
    this.skipSpecial = opts.skipSpecial ?? false;
    this.keep = opts.keep && opts.keep.size > 0 ? opts.keep : null;
  }

  /** Adds one token; returns the complete text it finishes (may be ""). */
  push(id: number): string {
    if (this.skipSpecial && this.tok.isSpecial(id) && !this.keep?.has(id)) return "";
    const bytes = this.tok.tokenBytes(id);
    if (this.len + bytes.length > this.buf.length) {
      const b = new Uint8Array(Math.max(this.buf.length * 2, this.len + bytes.length));
      b.set(this.buf.subarray(0, this.len));
      this.buf = b;
    }
    this.buf.set(bytes, this.len);
    this.len += bytes.length;
    const cut = completePrefix(this.buf, this.len);
    if (cut === 0) return "";
    const text = decoder.decode(this.buf.subarray(0, cut));
    this.buf.copyWithin(0, cut, this.len);
    this.len -= cut;
    return text;
  }

  /** Bytes held back for a character that has not completed. */
  get pendingBytes(): number {
    return this.len;
  }

  /** Emits whatever is held back (an unfinished character becomes U+FFFD) and resets. */
  flush(): string {
    if (this.len === 0) return "";
    const text = decoder.decode(this.buf.subarray(0, this.len));
    this.len = 0;
    return text;
  }
}
