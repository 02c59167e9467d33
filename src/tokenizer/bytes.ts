// Byte helpers for tokenizers: GPT-2's byte<->unicode alphabet and a reusable UTF-8 encoder.

/** byte -> code point of GPT-2's printable stand-in for it (bytes_to_unicode). */
export const BYTE_TO_CP: Uint16Array = (() => {
  const map = new Uint16Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    map[b] = printable ? b : 256 + extra++;
  }
  return map;
})();

/** code point (< 512) -> byte, or -1 when the code point is not in the alphabet. */
export const CP_TO_BYTE: Int16Array = (() => {
  const inv = new Int16Array(512).fill(-1);
  for (let b = 0; b < 256; b++) inv[BYTE_TO_CP[b]] = b;
  return inv;
})();

/** The byte-level string (GPT-2 alphabet) for raw bytes. */
export function byteLevelString(bytes: Uint8Array, start = 0, end = bytes.length): string {
  let s = "";
  for (let i = start; i < end; i++) s += String.fromCharCode(BYTE_TO_CP[bytes[i]]);
  return s;
}

const textEncoder = new TextEncoder();

/** UTF-8 of a string (lone surrogates become U+FFFD). */
export function utf8(s: string): Uint8Array {
  return textEncoder.encode(s);
}

/**
 * Encodes `s` as UTF-8 into a growing scratch buffer and returns the byte count.
 * Lone surrogates are written as U+FFFD, as TextEncoder does.
 */
export class Utf8Scratch {
  buf = new Uint8Array(256);

  encode(s: string): number {
    const n = s.length;
    if (this.buf.length < n * 3) this.buf = new Uint8Array(Math.max(n * 3, this.buf.length * 2));
    const b = this.buf;
    let o = 0;
    for (let i = 0; i < n; i++) {
      let c = s.charCodeAt(i);
      if (c < 0x80) {
        b[o++] = c;
      } else if (c < 0x800) {
        b[o++] = 0xc0 | (c >> 6);
        b[o++] = 0x80 | (c & 63);
      } else {
        if (c >= 0xd800 && c <= 0xdfff) {
          const d = i + 1 < n ? s.charCodeAt(i + 1) : 0;
          if (c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) {
            c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
            i++;
            b[o++] = 0xf0 | (c >> 18);
            b[o++] = 0x80 | ((c >> 12) & 63);
            b[o++] = 0x80 | ((c >> 6) & 63);
            b[o++] = 0x80 | (c & 63);
            continue;
          }
          c = 0xfffd;
        }
        b[o++] = 0xe0 | (c >> 12);
        b[o++] = 0x80 | ((c >> 6) & 63);
        b[o++] = 0x80 | (c & 63);
      }
    }
    return o;
  }
}

/** Parses an SPM byte piece "<0xNN>" to its byte, or -1. */
export function parseBytePiece(text: string): number {
  if (text.length !== 6 || !text.startsWith("<0x") || text[5] !== ">") return -1;
  const hex = text.slice(3, 5);
  if (!/^[0-9A-Fa-f]{2}$/.test(hex)) return -1;
  return parseInt(hex, 16);
}

/** The SPM byte piece for a byte: "<0x0A>". */
export function bytePiece(b: number): string {
  return "<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">";
}
