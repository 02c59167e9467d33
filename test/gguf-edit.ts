// Test helper: copies a real GGUF (the demo model) with edits, to make the broken files a user may
// meet: metadata changed or removed, a tensor's bytes or type replaced, tensors dropped or added.
import { readSync, openSync, closeSync } from "node:fs";
import { GgufFile, GgufValueType, GgufWriter, GgmlType, type GgufValue } from "../src/gguf/index.ts";

export interface TensorCopy {
  name: string;
  type: number;
  ne: number[];
  data: Uint8Array;
}

export interface GgufEdit {
  /** metadata: set (value with its type) or delete (undefined) */
  kv?: Record<string, { type: GgufValueType; value: GgufValue; elemType?: GgufValueType } | undefined>;
  /** change or drop (return null) each tensor */
  tensor?: (t: TensorCopy) => TensorCopy | null;
  /** tensors appended after the file's own */
  extra?: TensorCopy[];
}

/** Reads `src`, applies `edit`, writes `dst`; returns dst. */
export function editGguf(src: string, dst: string, edit: GgufEdit): string {
  const f = GgufFile.open(src);
  const w = new GgufWriter();
  const kv = new Map(f.kv);
  for (const [k, v] of Object.entries(edit.kv ?? {})) {
    if (v === undefined) kv.delete(k);
    else kv.set(k, v);
  }
  for (const [k, v] of kv) {
    if (v.type === GgufValueType.ARRAY) w.setArray(k, v.elemType!, v.value as ArrayLike<number | bigint | boolean | string>);
    else w.set(k, v.type, v.value as number | bigint | boolean | string);
  }
  const fd = openSync(src, "r");
  try {
    for (const t of f.tensors.values()) {
      const data = new Uint8Array(t.nbytes);
      readSync(fd, data, 0, t.nbytes, t.fileOffset);
      const out = edit.tensor ? edit.tensor({ name: t.name, type: t.type, ne: [...t.ne], data }) : { name: t.name, type: t.type, ne: t.ne, data };
      if (out) w.addTensor(out.name, out.type, out.ne, out.data);
    }
  } finally {
    closeSync(fd);
  }
  for (const t of edit.extra ?? []) w.addTensor(t.name, t.type, t.ne, t.data);
  w.write(dst);
  return dst;
}

/** An F32 tensor's bytes with every value `v`. */
export function f32Fill(n: number, v: number): Uint8Array {
  return new Uint8Array(new Float32Array(n).fill(v).buffer);
}

/** Q8_0 blocks (34 bytes: f16 scale, 32 int8) dequantized to F32 bytes. */
export function q8ToF32(data: Uint8Array): Uint8Array {
  const nb = data.length / 34;
  const out = new Float32Array(nb * 32);
  const dv = new DataView(data.buffer, data.byteOffset, data.byteLength);
  for (let b = 0; b < nb; b++) {
    const d = f16(dv.getUint16(b * 34, true));
    for (let i = 0; i < 32; i++) out[b * 32 + i] = d * dv.getInt8(b * 34 + 2 + i);
  }
  return new Uint8Array(out.buffer);
}

function f16(h: number): number {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

export { GgmlType, GgufValueType };
