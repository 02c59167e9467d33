// bloomery GGUF: writes GGUF v3 files (tests, `synth`); tensor data comes from bytes in
// memory or from a filler that produces it in chunks, so multi-GB files stream to disk.
import { openSync, writeSync, closeSync } from "node:fs";
import { open } from "node:fs/promises";
import { GgufValueType, TYPE_INFO } from "./types.ts";
import { tensorBytes } from "./reader.ts";

/** Fills `dst` with the tensor's bytes from byte `start`; chunks hold whole blocks. */
export type TensorFiller = (dst: Uint8Array, start: number) => void;

interface PendingTensor {
  name: string;
  type: number;
  ne: number[];
  nbytes: number;
  data: Uint8Array | TensorFiller;
}

type Scalar = { type: GgufValueType; value: number | bigint | boolean | string };
type ArrayVal = { type: GgufValueType.ARRAY; elemType: GgufValueType; value: ArrayLike<number | bigint | boolean | string> };

class ByteSink {
  private chunks: Uint8Array[] = [];
  private cur = new Uint8Array(1 << 16);
  private view = new DataView(this.cur.buffer);
  private n = 0;
  length = 0;
  private room(k: number): void {
    if (this.n + k <= this.cur.length) return;
    this.chunks.push(this.cur.subarray(0, this.n));
    this.cur = new Uint8Array(Math.max(1 << 16, k));
    this.view = new DataView(this.cur.buffer);
    this.n = 0;
  }
  u8(v: number) { this.room(1); this.view.setUint8(this.n, v); this.n += 1; this.length += 1; }
  i8(v: number) { this.room(1); this.view.setInt8(this.n, v); this.n += 1; this.length += 1; }
  u16(v: number) { this.room(2); this.view.setUint16(this.n, v, true); this.n += 2; this.length += 2; }
  i16(v: number) { this.room(2); this.view.setInt16(this.n, v, true); this.n += 2; this.length += 2; }
  u32(v: number) { this.room(4); this.view.setUint32(this.n, v, true); this.n += 4; this.length += 4; }
  i32(v: number) { this.room(4); this.view.setInt32(this.n, v, true); this.n += 4; this.length += 4; }
  f32(v: number) { this.room(4); this.view.setFloat32(this.n, v, true); this.n += 4; this.length += 4; }
  f64(v: number) { this.room(8); this.view.setFloat64(this.n, v, true); this.n += 8; this.length += 8; }
  u64(v: number | bigint) { this.room(8); this.view.setBigUint64(this.n, BigInt(v), true); this.n += 8; this.length += 8; }
  i64(v: number | bigint) { this.room(8); this.view.setBigInt64(this.n, BigInt(v), true); this.n += 8; this.length += 8; }
  bytes(b: Uint8Array) { this.room(b.length); this.cur.set(b, this.n); this.n += b.length; this.length += b.length; }
  str(s: string) { const b = Buffer.from(s, "utf8"); this.u64(b.length); this.bytes(b); }
  pad(align: number) { while (this.length % align !== 0) this.u8(0); }
  finish(): Uint8Array {
    this.chunks.push(this.cur.subarray(0, this.n));
    return Buffer.concat(this.chunks);
  }
}

function writeValue(s: ByteSink, t: GgufValueType, v: number | bigint | boolean | string): void {
  switch (t) {
    case GgufValueType.U8: return s.u8(v as number);
    case GgufValueType.I8: return s.i8(v as number);
    case GgufValueType.U16: return s.u16(v as number);
    case GgufValueType.I16: return s.i16(v as number);
    case GgufValueType.U32: return s.u32(v as number);
    case GgufValueType.I32: return s.i32(v as number);
    case GgufValueType.F32: return s.f32(v as number);
    case GgufValueType.F64: return s.f64(v as number);
    case GgufValueType.U64: return s.u64(v as number | bigint);
    case GgufValueType.I64: return s.i64(v as number | bigint);
    case GgufValueType.BOOL: return s.u8(v ? 1 : 0);
    case GgufValueType.STRING: return s.str(v as string);
    default: throw new Error(`GgufWriter: cannot write value type ${t}`);
  }
}

export class GgufWriter {
  private kv = new Map<string, Scalar | ArrayVal>();
  private tensors: PendingTensor[] = [];
  alignment = 32;

  set(key: string, type: GgufValueType, value: number | bigint | boolean | string): this {
    this.kv.set(key, { type, value });
    return this;
  }
  setArray(key: string, elemType: GgufValueType, value: ArrayLike<number | bigint | boolean | string>): this {
    this.kv.set(key, { type: GgufValueType.ARRAY, elemType, value });
    return this;
  }
  u32(key: string, v: number): this { return this.set(key, GgufValueType.U32, v); }
  i32(key: string, v: number): this { return this.set(key, GgufValueType.I32, v); }
  f32(key: string, v: number): this { return this.set(key, GgufValueType.F32, v); }
  bool(key: string, v: boolean): this { return this.set(key, GgufValueType.BOOL, v); }
  str(key: string, v: string): this { return this.set(key, GgufValueType.STRING, v); }

  addTensor(name: string, type: number, ne: number[], data: Uint8Array | TensorFiller): this {
    const nbytes = tensorBytes("<writer>", name, type, ne);
    if (data instanceof Uint8Array && data.length !== nbytes) {
      throw new Error(`GgufWriter: tensor '${name}' has ${data.length} bytes, its shape needs ${nbytes}`);
    }
    this.tensors.push({ name, type, ne, nbytes, data });
    return this;
  }

  /** Header, metadata and tensor index, padded to the alignment (the data section follows). */
  encodeHeader(): Uint8Array {
    if (!this.kv.has("general.alignment") && this.alignment !== 32) this.u32("general.alignment", this.alignment);
    const s = new ByteSink();
    s.bytes(Buffer.from("GGUF"));
    s.u32(3);
    s.u64(this.tensors.length);
    s.u64(this.kv.size);
    for (const [k, v] of this.kv) {
      s.str(k);
      s.i32(v.type);
      if (v.type === GgufValueType.ARRAY) {
        const a = v as ArrayVal;
        s.i32(a.elemType);
        s.u64(a.value.length);
        for (let i = 0; i < a.value.length; i++) writeValue(s, a.elemType, a.value[i]);
      } else {
        writeValue(s, v.type, (v as Scalar).value);
      }
    }
    let off = 0;
    for (const t of this.tensors) {
      s.str(t.name);
      s.u32(t.ne.length);
      for (const d of t.ne) s.i64(d);
      s.i32(t.type);
      s.u64(off);
      off += Math.ceil(t.nbytes / this.alignment) * this.alignment;
    }
    s.pad(this.alignment);
    return s.finish();
  }

  /** The size the file will have. */
  fileBytes(): number {
    let n = this.encodeHeader().length;
    for (const t of this.tensors) n += Math.ceil(t.nbytes / this.alignment) * this.alignment;
    return n;
  }

  /** Write the file; returns its size in bytes. */
  write(path: string, chunkBytes = 64 << 20): number {
    const header = this.encodeHeader();
    const fd = openSync(path, "w");
    try {
      let pos = 0;
      const put = (b: Uint8Array) => {
        let done = 0;
        while (done < b.length) done += writeSync(fd, b, done, b.length - done, pos + done);
        pos += b.length;
      };
      put(header);
      let buf: Uint8Array | null = null;
      const zeros = new Uint8Array(this.alignment);
      for (const t of this.tensors) {
        if (t.data instanceof Uint8Array) put(t.data);
        else {
          buf ??= new Uint8Array(chunkBytes);
          const bb = TYPE_INFO[t.type].blockBytes;
          const chunk = Math.floor(chunkBytes / bb) * bb;
          for (let start = 0; start < t.nbytes; start += chunk) {
            const n = Math.min(chunk, t.nbytes - start);
            const view = buf.subarray(0, n);
            t.data(view, start);
            put(view);
          }
        }
        const padTo = Math.ceil(t.nbytes / this.alignment) * this.alignment;
        if (padTo > t.nbytes) put(zeros.subarray(0, padTo - t.nbytes));
      }
      return pos;
    } finally {
      closeSync(fd);
    }
  }

  /**
   * Write the file, filling the next chunk while the previous one is written (two buffers),
   * so generated tensors stream at the speed of the slower of the two. Returns the size.
   */
  async writeAsync(path: string, chunkBytes = 64 << 20): Promise<number> {
    const header = this.encodeHeader();
    const fh = await open(path, "w");
    try {
      let pos = 0;
      let pending: Promise<unknown> = Promise.resolve();
      const bufs = [new Uint8Array(chunkBytes), new Uint8Array(chunkBytes)];
      let which = 0;
      const put = async (b: Uint8Array) => {
        const at = pos;
        pos += b.length;
        await pending;
        pending = (async () => {
          let done = 0;
          while (done < b.length) done += (await fh.write(b, done, b.length - done, at + done)).bytesWritten;
        })();
      };
      await put(header);
      const zeros = new Uint8Array(this.alignment);
      for (const t of this.tensors) {
        if (t.data instanceof Uint8Array) await put(t.data);
        else {
          const bb = TYPE_INFO[t.type].blockBytes;
          const chunk = Math.floor(chunkBytes / bb) * bb;
          for (let start = 0; start < t.nbytes; start += chunk) {
            const n = Math.min(chunk, t.nbytes - start);
            const view = bufs[which].subarray(0, n);
            which ^= 1;
            t.data(view, start);
            await put(view);
          }
        }
        const padTo = Math.ceil(t.nbytes / this.alignment) * this.alignment;
        if (padTo > t.nbytes) await put(zeros.subarray(0, padTo - t.nbytes));
      }
      await pending;
      return pos;
    } finally {
      await fh.close();
    }
  }
}
