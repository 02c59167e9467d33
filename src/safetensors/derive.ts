// bloomery safetensors: the tensors a family cannot map as stored, made at load by a copy (transposed,
// de-interleaved, sliced, reordered, stacked, widened to F32 and mapped v + add or -exp(v) there) into one
// unlinked file the engine maps like any other.
import { closeSync, existsSync, openSync, readSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GgmlType } from "../gguf/index.ts";
import type { HfTensor } from "../models/types.ts";
import { SafetensorsError, type SafetensorsTensor } from "./reader.ts";

const ALIGN = 64;

/** A stored tensor's bytes, read from its file. */
export function readTensorBytes(t: SafetensorsTensor): Uint8Array {
  const fd = openSync(t.file, "r");
  try {
    const b = new Uint8Array(t.nbytes);
    let got = 0;
    while (got < b.length) {
      const r = readSync(fd, b, got, b.length - got, t.fileOffset + got);
      if (r <= 0) throw new SafetensorsError(t.file, `read failed: tensor '${t.name}' at offset ${t.fileOffset + got}`);
      got += r;
    }
    return b;
  } finally {
    closeSync(fd);
  }
}

const f16 = (h: number): number => {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
};
const bf16 = (h: number): number => new Float32Array(new Uint32Array([h << 16]).buffer)[0];

/** The GGUF type a stored dtype maps to. */
export function ggmlTypeOf(dtype: string): GgmlType {
  return dtype === "F32" ? GgmlType.F32 : dtype === "F16" ? GgmlType.F16 : GgmlType.BF16;
}

/** One derived tensor: its values in GGUF order and type, and its GGUF dims (ne[0] contiguous). */
export interface Derived {
  type: GgmlType;
  ne: number[];
  data: Uint8Array;
}

/** Per-expert tensors stacked into one (same dtype and shape each): GGUF dims gain the experts outermost. */
export function stack(spec: HfTensor, parts: SafetensorsTensor[], shapeOnly = false): Derived {
  const first = parts[0];
  for (const t of parts) {
    if (t.dtype !== first.dtype || t.shape.join() !== first.shape.join()) {
      throw new SafetensorsError(t.file, `tensor '${t.name}' is ${t.dtype} [${t.shape.join(", ")}], but '${first.name}' of the same stack is ${first.dtype} [${first.shape.join(", ")}]`);
    }
  }
  const each = parts.map((t) => derive({ ...spec, hf: t.name }, t, shapeOnly));
  const data = new Uint8Array(each.reduce((a, d) => a + d.data.length, 0));
  let at = 0;
  for (const d of each) {
    data.set(d.data, at);
    at += d.data.length;
  }
  return { type: each[0].type, ne: [...each[0].ne, parts.length], data };
}

/** The copy `spec` asks of the stored tensor `src` (F32, F16 or BF16; or F32 values `raw` given for it); with `shapeOnly` its type and dims alone (no data). */
export function derive(spec: HfTensor, src: SafetensorsTensor, shapeOnly = false, raw?: Uint8Array): Derived {
  const stored = spec.view ?? src.shape;
  if (spec.view && spec.view.reduce((a, b) => a * b, 1) !== src.shape.reduce((a, b) => a * b, 1)) {
    throw new SafetensorsError(src.file, `tensor '${src.name}' of shape [${src.shape.join(", ")}] cannot be read as [${spec.view.join(", ")}]`);
  }
  const shape = stored.length === 1 ? [1, stored[0]] : stored;
  const Ls = shape[shape.length - 1], As = shape[shape.length - 2];
  const [r0, A] = spec.gather ? [0, spec.gather.length] : spec.rows ?? [0, As];
  if (r0 + A > As) throw new SafetensorsError(src.file, `tensor '${src.name}': rows ${r0}..${r0 + A} of ${As}`);
  if (spec.gather?.some((g) => g < 0 || g >= As)) throw new SafetensorsError(src.file, `tensor '${src.name}': a reordering past its ${As} rows`);
  if (spec.gatherLast && (spec.parity !== undefined || spec.gatherLast.some((g) => g < 0 || g >= Ls))) {
    throw new SafetensorsError(src.file, `tensor '${src.name}': a reordering past its last dimension of ${Ls}`);
  }
  if ((spec.add !== undefined || spec.negExp) && !spec.f32) throw new SafetensorsError(src.file, `tensor '${src.name}': values mapped only as F32`);
  const R = shape.slice(0, -2).reduce((a, b) => a * b, 1);
  if (spec.parity !== undefined && Ls % 2) throw new SafetensorsError(src.file, `tensor '${src.name}' has an odd last dimension ${Ls}: it cannot hold interleaved pairs`);
  const B = spec.gatherLast ? spec.gatherLast.length : spec.parity !== undefined ? Ls / 2 : Ls;
  const step = spec.parity !== undefined ? 2 : 1, off = spec.parity ?? 0;
  const wide = spec.f32 || src.dtype === "F32";
  // GGUF dims: the stored dims reversed, the last one halved, the last two swapped when transposed
  const dims = stored.length === 1 ? [B] : [...stored.slice(0, -2), ...(spec.transpose ? [B, A] : [A, B])];
  const type = wide ? GgmlType.F32 : ggmlTypeOf(src.dtype);
  if (shapeOnly) return { type, ne: dims.reverse(), data: new Uint8Array(0) };
  raw ??= readTensorBytes(src);
  const n = R * A * B;
  const out = wide ? new Float32Array(n) : new Uint16Array(n);
  const inF32 = src.dtype === "F32" ? new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4) : undefined;
  const in16 = inF32 ? undefined : new Uint16Array(raw.buffer, raw.byteOffset, raw.byteLength / 2);
  const cvt = src.dtype === "F16" ? f16 : bf16;
  const gl = spec.gatherLast;
  for (let r = 0; r < R; r++) {
    for (let a = 0; a < A; a++) {
      const srow = r * As * Ls + (spec.gather ? spec.gather[a] : r0 + a) * Ls;
      for (let b = 0; b < B; b++) {
        const si = srow + (gl ? gl[b] : b * step + off);
        const di = spec.transpose ? r * A * B + b * A + a : r * A * B + a * B + b;
        if (inF32) out[di] = inF32[si];
        else if (wide) out[di] = cvt(in16![si]);
        else out[di] = in16![si];
      }
    }
  }
  if (out instanceof Float32Array && (spec.add !== undefined || spec.negExp)) {
    for (let i = 0; i < n; i++) out[i] = spec.negExp ? -Math.exp(out[i]) : out[i] + spec.add!;
  }
  return { type, ne: dims.reverse(), data: new Uint8Array(out.buffer) };
}

/**
 * The one file the derived tensors are written into as they are made (so no more than one is held in
 * memory), and the path the engine maps it by. On Linux the file is unlinked at once and named by its
 * open descriptor (/proc/self/fd/N), so nothing is left on disk however the process ends; elsewhere it
 * is removed when the process exits.
 */
export class DerivedWriter {
  private fd: number | undefined;
  private path = "";
  private at = 0;

  /** Appends one tensor's bytes (64-aligned); returns its offset. */
  append(data: Uint8Array): number {
    if (this.fd === undefined) {
      this.path = join(tmpdir(), `bloomery-hf-${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}.bin`);
      this.fd = openSync(this.path, "wx+", 0o600);
      const byFd = `/proc/self/fd/${this.fd}`;
      if (existsSync(byFd)) {
        rmSync(this.path, { force: true });
        this.path = byFd;
      } else {
        const p = this.path;
        process.once("exit", () => rmSync(p, { force: true }));
      }
    }
    try {
      const gap = (ALIGN - (this.at % ALIGN)) % ALIGN;
      if (gap) writeSync(this.fd, new Uint8Array(gap), 0, gap, this.at);
      this.at += gap;
      const off = this.at;
      let done = 0;
      while (done < data.length) done += writeSync(this.fd, data, done, data.length - done, off + done);
      this.at += data.length;
      return off;
    } catch (e) {
      this.fail();
      throw e;
    }
  }

  /** The file's path and size (undefined when nothing was written). */
  finish(): { path: string; size: number } | undefined {
    return this.fd === undefined ? undefined : { path: this.path, size: this.at };
  }

  /** Closes and removes the file (a load that failed part way). */
  fail(): void {
    if (this.fd === undefined) return;
    closeSync(this.fd);
    if (!this.path.startsWith("/proc/")) rmSync(this.path, { force: true });
    this.fd = undefined;
  }
}
