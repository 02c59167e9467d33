// bloomery GGUF: parses and strictly validates one GGUF file's header, metadata and tensor
// index (../shared/SPEC.md). Weight bytes are not read here; native code maps them.
import { FileCursor } from "./cursor.ts";
import { GgufError, safeText } from "./errors.ts";
import { FOLDER_ONLY_TYPES, GgufValueType, TYPE_INFO, VALUE_TYPE_NAMES, VALUE_TYPE_SIZE, typeName } from "./types.ts";

export type GgufArrayValue =
  | Uint8Array | Int8Array | Uint16Array | Int16Array | Uint32Array | Int32Array
  | Float32Array | Float64Array | BigUint64Array | BigInt64Array | boolean[] | string[];

export type GgufValue = number | bigint | boolean | string | GgufArrayValue;

export interface GgufKV {
  type: GgufValueType;
  /** element type when type is ARRAY */
  elemType?: GgufValueType;
  value: GgufValue;
}

export interface GgufTensorInfo {
  name: string;
  type: number;
  /** dimensions, ne[0] contiguous */
  ne: number[];
  /** offset from the data section start */
  offset: number;
  /** bytes the tensor occupies */
  nbytes: number;
  /** absolute offset in its file */
  fileOffset: number;
  /** file that holds it (a split set spans several) */
  file: string;
}

export interface GgufHeader {
  path: string;
  version: number;
  fileSize: number;
  alignment: number;
  dataOffset: number;
  kv: Map<string, GgufKV>;
  tensors: GgufTensorInfo[];
}

const MAX_NAME = 63; // ggml's GGML_MAX_NAME is 64 with the terminating NUL
const MAX_DIMS = 4;

function readScalar(c: FileCursor, t: GgufValueType, what: string): number | bigint | boolean | string {
  switch (t) {
    case GgufValueType.U8: return c.u8(what);
    case GgufValueType.I8: return c.i8(what);
    case GgufValueType.U16: return c.u16(what);
    case GgufValueType.I16: return c.i16(what);
    case GgufValueType.U32: return c.u32(what);
    case GgufValueType.I32: return c.i32(what);
    case GgufValueType.F32: return c.f32(what);
    case GgufValueType.F64: return c.f64(what);
    case GgufValueType.BOOL: {
      const b = c.u8(what);
      if (b > 1) throw new GgufError(c.path, `${what}: bool value is ${b}, not 0 or 1`);
      return b === 1;
    }
    case GgufValueType.STRING: return c.string(what);
    case GgufValueType.U64: { const v = c.u64(what); return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v; }
    case GgufValueType.I64: {
      const v = c.i64(what);
      return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v;
    }
    default: throw new GgufError(c.path, `${what}: unknown value type ${t}`);
  }
}

function readArray(c: FileCursor, key: string): { elemType: GgufValueType; value: GgufArrayValue } {
  const elemType = c.i32(`key '${key}' array type`) as GgufValueType;
  if (elemType === GgufValueType.ARRAY) throw new GgufError(c.path, `key '${key}': nested arrays are not supported`);
  if (VALUE_TYPE_NAMES[elemType] === undefined) throw new GgufError(c.path, `key '${key}': unknown array element type ${elemType}`);
  const size = VALUE_TYPE_SIZE[elemType] ?? 8; // a string needs at least its 8-byte length
  const n = c.count(`key '${key}' array count`, Math.floor(c.remaining / size));
  const what = `key '${key}' array data`;
  switch (elemType) {
    case GgufValueType.U8: return { elemType, value: new Uint8Array(c.block(n, 1, what)) };
    case GgufValueType.I8: return { elemType, value: new Int8Array(c.block(n, 1, what)) };
    case GgufValueType.U16: return { elemType, value: new Uint16Array(c.block(n, 2, what)) };
    case GgufValueType.I16: return { elemType, value: new Int16Array(c.block(n, 2, what)) };
    case GgufValueType.U32: return { elemType, value: new Uint32Array(c.block(n, 4, what)) };
    case GgufValueType.I32: return { elemType, value: new Int32Array(c.block(n, 4, what)) };
    case GgufValueType.F32: return { elemType, value: new Float32Array(c.block(n, 4, what)) };
    case GgufValueType.F64: return { elemType, value: new Float64Array(c.block(n, 8, what)) };
    case GgufValueType.U64: return { elemType, value: new BigUint64Array(c.block(n, 8, what)) };
    case GgufValueType.I64: return { elemType, value: new BigInt64Array(c.block(n, 8, what)) };
    case GgufValueType.BOOL: {
      const raw = new Uint8Array(c.block(n, 1, what));
      const out: boolean[] = new Array(n);
      for (let i = 0; i < n; i++) {
        if (raw[i] > 1) throw new GgufError(c.path, `key '${key}'[${i}]: bool value is ${raw[i]}`);
        out[i] = raw[i] === 1;
      }
      return { elemType, value: out };
    }
    case GgufValueType.STRING: {
      const out: string[] = new Array(n);
      for (let i = 0; i < n; i++) out[i] = c.string(`key '${key}'[${i}]`);
      return { elemType, value: out };
    }
    default: throw new GgufError(c.path, `key '${key}': unknown array element type ${elemType}`);
  }
}

/** Bytes of a tensor of type t and dims ne, or an error naming the tensor. */
export function tensorBytes(path: string, name: string, type: number, ne: number[]): number {
  const info = TYPE_INFO[type];
  if (!info) throw new GgufError(path, `tensor '${name}': unknown ggml type ${type}`);
  if (ne[0] % info.blockElems !== 0) {
    throw new GgufError(path, `tensor '${name}': row length ${ne[0]} is not a multiple of ${info.name}'s block of ${info.blockElems}`);
  }
  let rows = 1;
  for (let i = 1; i < ne.length; i++) rows *= ne[i];
  const bytes = (ne[0] / info.blockElems) * info.blockBytes * rows;
  if (!Number.isSafeInteger(bytes)) throw new GgufError(path, `tensor '${name}': size overflows (${ne.join("x")})`);
  return bytes;
}

/** Parse and validate a GGUF file's header; throws GgufError naming the file and the fault. */
export function readGgufHeader(path: string): GgufHeader {
  const c = new FileCursor(path);
  try {
    if (c.size < 24) throw new GgufError(path, `truncated: ${c.size} bytes is smaller than a GGUF header`);
    const magic = c.bytes(4, "magic");
    if (String.fromCharCode(...magic) !== "GGUF") {
      throw new GgufError(path, `bad magic ${JSON.stringify(String.fromCharCode(...magic))}: not a GGUF file`);
    }
    const version = c.u32("version");
    if (version !== 2 && version !== 3) throw new GgufError(path, `unsupported GGUF version ${version} (2 and 3 are read)`);
    // the smallest tensor info is 8 (name len) + 1 + 4 + 8 + 4 + 8 bytes; the smallest kv 8 + 4 + 1
    const nTensors = c.count("tensor count", Math.floor((c.size - 24) / 33));
    const nKv = c.count("metadata count", Math.floor((c.size - 24) / 13));

    const kv = new Map<string, GgufKV>();
    for (let i = 0; i < nKv; i++) {
      const key = c.string(`metadata key #${i}`);
      if (key.length === 0) throw new GgufError(path, `metadata key #${i} is empty`);
      const kq = safeText(key); // the name as messages quote it (escaped, cut)
      if (kv.has(key)) throw new GgufError(path, `duplicate metadata key '${kq}'`);
      const type = c.i32(`key '${kq}' type`) as GgufValueType;
      if (VALUE_TYPE_NAMES[type] === undefined) throw new GgufError(path, `key '${kq}': unknown value type ${type}`);
      if (type === GgufValueType.ARRAY) {
        const a = readArray(c, kq);
        kv.set(key, { type, elemType: a.elemType, value: a.value });
      } else {
        kv.set(key, { type, value: readScalar(c, type, `key '${kq}'`) });
      }
    }

    let alignment = 32;
    const al = kv.get("general.alignment");
    if (al) {
      if (al.type !== GgufValueType.U32) {
        throw new GgufError(path, `key 'general.alignment' has type ${VALUE_TYPE_NAMES[al.type]}, expected u32`);
      }
      alignment = al.value as number;
      if (alignment === 0 || (alignment & (alignment - 1)) !== 0) {
        throw new GgufError(path, `key 'general.alignment' is ${alignment}, not a power of two`);
      }
    }

    const tensors: GgufTensorInfo[] = [];
    const names = new Set<string>();
    for (let i = 0; i < nTensors; i++) {
      const name = c.string(`tensor #${i} name`);
      if (name.length === 0) throw new GgufError(path, `tensor #${i} has an empty name`);
      const nq = safeText(name); // the name as messages quote it (escaped, cut)
      if (Buffer.byteLength(name) > MAX_NAME) throw new GgufError(path, `tensor #${i} name '${nq}' is longer than ${MAX_NAME} bytes`);
      if (names.has(name)) throw new GgufError(path, `duplicate tensor '${nq}'`);
      names.add(name);
      const nDims = c.u32(`tensor '${nq}' n_dims`);
      if (nDims < 1 || nDims > MAX_DIMS) throw new GgufError(path, `tensor '${nq}': n_dims ${nDims} is outside 1..${MAX_DIMS}`);
      const ne: number[] = [];
      for (let d = 0; d < nDims; d++) {
        const v = c.i64(`tensor '${nq}' ne[${d}]`);
        if (v < 0n || v > BigInt(Number.MAX_SAFE_INTEGER)) throw new GgufError(path, `tensor '${nq}': ne[${d}] = ${v} is out of range`);
        ne.push(Number(v));
      }
      const type = c.i32(`tensor '${nq}' type`);
      if (!TYPE_INFO[type] || FOLDER_ONLY_TYPES.has(type)) throw new GgufError(path, `tensor '${nq}': unknown ggml type ${type}`);
      const off = c.u64(`tensor '${nq}' offset`);
      if (off > BigInt(c.size)) throw new GgufError(path, `tensor '${nq}': offset ${off} is past the end of the file (${c.size} bytes)`);
      const offset = Number(off);
      if (offset % alignment !== 0) throw new GgufError(path, `tensor '${nq}': offset ${offset} is not aligned to ${alignment}`);
      const nbytes = tensorBytes(path, nq, type, ne);
      tensors.push({ name, type, ne, offset, nbytes, fileOffset: 0, file: path });
    }

    const dataOffset = Math.ceil(c.pos / alignment) * alignment;
    const dataSize = c.size - dataOffset;
    if (nTensors > 0 && dataSize < 0) throw new GgufError(path, `truncated: no data section after the tensor index`);
    const byOffset = [...tensors].sort((a, b) => a.offset - b.offset);
    for (let i = 0; i < byOffset.length; i++) {
      const t = byOffset[i];
      t.fileOffset = dataOffset + t.offset;
      if (t.offset + t.nbytes > dataSize) {
        throw new GgufError(path, `tensor '${safeText(t.name)}' (${typeName(t.type)} ${t.ne.join("x")}, ${t.nbytes} bytes at data offset ${t.offset}) runs past the end of the file: truncated or wrong size`);
      }
      const next = byOffset[i + 1];
      if (next && t.offset + t.nbytes > next.offset) {
        throw new GgufError(path, `tensor '${safeText(t.name)}' overlaps tensor '${safeText(next.name)}'`);
      }
    }
    return { path, version, fileSize: c.size, alignment, dataOffset, kv, tensors };
  } finally {
    c.close();
  }
}
