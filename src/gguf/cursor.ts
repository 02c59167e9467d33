// bloomery GGUF: a bounds-checked little-endian reader over a file that reads on demand,
// so a header is parsed without reading (or trusting) the whole file.
import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";
import { GgufError } from "./errors.ts";

const CHUNK = 1 << 20;

export class FileCursor {
  private fd: number;
  readonly size: number;
  private buf = new Uint8Array(0);
  private view = new DataView(this.buf.buffer);
  private bufStart = 0; // file offset of buf[0]
  pos = 0; // file offset of the next read
  private dec = new TextDecoder("utf-8", { fatal: false });

  constructor(readonly path: string) {
    try {
      // O_NONBLOCK: a FIFO put in the file's place opens at once (and is refused below) instead of
      // blocking until a writer comes; it changes nothing for a regular file
      this.fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
    } catch (e) {
      throw new GgufError(path, `cannot open: ${(e as Error).message}`);
    }
    const st = fstatSync(this.fd);
    if (!st.isFile()) {
      closeSync(this.fd);
      throw new GgufError(path, st.isDirectory() ? "is a directory, not a GGUF file" : "is not a regular file (a FIFO, socket or device): a model is read from a GGUF file on disk", "not-a-file");
    }
    this.size = st.size;
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }

  get remaining(): number {
    return this.size - this.pos;
  }

  /** Ensure n bytes at pos are buffered; `what` names the field for the error. */
  private need(n: number, what: string): number {
    if (n > this.size - this.pos) {
      throw new GgufError(this.path, `truncated: ${what} needs ${n} bytes at offset ${this.pos}, file has ${this.size - this.pos} left`);
    }
    const off = this.pos - this.bufStart;
    if (off >= 0 && off + n <= this.buf.length) return off;
    const len = Math.min(Math.max(n, CHUNK), this.size - this.pos);
    const b = new Uint8Array(len);
    let got = 0;
    while (got < len) {
      const r = readSync(this.fd, b, got, len - got, this.pos + got);
      if (r <= 0) throw new GgufError(this.path, `read failed at offset ${this.pos + got}`);
      got += r;
    }
    this.buf = b;
    this.view = new DataView(b.buffer);
    this.bufStart = this.pos;
    return 0;
  }

  u8(what: string): number { const o = this.need(1, what); this.pos += 1; return this.view.getUint8(o); }
  i8(what: string): number { const o = this.need(1, what); this.pos += 1; return this.view.getInt8(o); }
  u16(what: string): number { const o = this.need(2, what); this.pos += 2; return this.view.getUint16(o, true); }
  i16(what: string): number { const o = this.need(2, what); this.pos += 2; return this.view.getInt16(o, true); }
  u32(what: string): number { const o = this.need(4, what); this.pos += 4; return this.view.getUint32(o, true); }
  i32(what: string): number { const o = this.need(4, what); this.pos += 4; return this.view.getInt32(o, true); }
  f32(what: string): number { const o = this.need(4, what); this.pos += 4; return this.view.getFloat32(o, true); }
  f64(what: string): number { const o = this.need(8, what); this.pos += 8; return this.view.getFloat64(o, true); }
  u64(what: string): bigint { const o = this.need(8, what); this.pos += 8; return this.view.getBigUint64(o, true); }
  i64(what: string): bigint { const o = this.need(8, what); this.pos += 8; return this.view.getBigInt64(o, true); }

  /** A u64 that must fit a safe integer no larger than `max` (else a clear error). */
  count(what: string, max: number): number {
    const v = this.u64(what);
    if (v > BigInt(max)) throw new GgufError(this.path, `${what} is ${v}, more than the ${max} the rest of the file can hold (truncated or corrupt)`);
    return Number(v);
  }

  /** Raw bytes (copied) of length n. */
  bytes(n: number, what: string): Uint8Array {
    const o = this.need(n, what);
    this.pos += n;
    return this.buf.slice(o, o + n);
  }

  /** A GGUF string: u64 length then UTF-8 bytes. */
  string(what: string): string {
    const n = this.count(`${what} length`, this.remaining - 8);
    const o = this.need(n, what);
    this.pos += n;
    return this.dec.decode(this.buf.subarray(o, o + n));
  }

  /** n fixed-size elements copied into a fresh, aligned buffer. */
  block(n: number, elemSize: number, what: string): ArrayBuffer {
    const bytes = n * elemSize;
    const o = this.need(bytes, what);
    this.pos += bytes;
    return this.buf.slice(o, o + bytes).buffer;
  }
}
