// bloomery safetensors: parses and strictly validates one .safetensors file's header (the 8-byte
// length, the JSON tensor index and __metadata__), with bounds and overlap checks. Weight bytes are
// not read here; native code maps them in place, as it does a GGUF's.
import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";
import { GgufError, safeText } from "../gguf/errors.ts";

/** A malformed or unservable safetensors file or folder (a GgufError: same exit codes, file named first). */
export class SafetensorsError extends GgufError {
  constructor(file: string, detail: string, fault: "missing" | "not-a-file" | "content" = "content") {
    super(file, detail, fault);
    this.name = "SafetensorsError";
  }
}

/** Every dtype the format names, with its element size in bits. */
export const DTYPE_BITS: Readonly<Record<string, number>> = {
  BOOL: 8, U8: 8, I8: 8, F8_E4M3: 8, F8_E5M2: 8, F8_E8M0: 8, F4: 4, F6_E2M3: 6, F6_E3M2: 6,
  I16: 16, U16: 16, F16: 16, BF16: 16, I32: 32, U32: 32, F32: 32, I64: 64, U64: 64, F64: 64,
  C64: 64,
};

/** The dtypes a model's weights may use as stored today. */
export const SERVED_DTYPES: readonly string[] = ["F32", "F16", "BF16"];

const DTYPE_WORDS: Readonly<Record<string, string>> = {
  F8_E4M3: "FP8 E4M3", F8_E5M2: "FP8 E5M2", F8_E8M0: "FP8 E8M0 (scales)", F4: "FP4 E2M1",
  F6_E2M3: "FP6 E2M3", F6_E3M2: "FP6 E3M2", U8: "U8 (packed, such as MXFP4 blocks)",
};

/** Why a tensor of this dtype cannot be served yet, or undefined when it can. */
export function dtypeRefusal(dtype: string): string | undefined {
  if (SERVED_DTYPES.includes(dtype)) return undefined;
  return `${DTYPE_WORDS[dtype] ?? dtype} weights are not implemented yet (served as stored today: ${SERVED_DTYPES.join(", ")}, and the quantized forms ` +
    "MXFP4 as *_blocks + *_scales, FP8 E4M3 with its weight_scale_inv blocks, NVFP4 with weight_scale + weight_scale_2, MLX affine 4- and 8-bit with scales + biases, mlx's mxfp4 with scales)";
}

export interface SafetensorsTensor {
  name: string;
  dtype: string;
  /** dimensions as stored, outermost first (row-major: the last one is contiguous) */
  shape: number[];
  /** bytes the tensor occupies */
  nbytes: number;
  /** absolute offset of its first byte in its file */
  fileOffset: number;
  file: string;
}

export interface SafetensorsHeader {
  path: string;
  fileSize: number;
  /** where the data section starts: 8 + the header's length */
  dataOffset: number;
  metadata: Map<string, string>;
  tensors: SafetensorsTensor[];
}

/** The largest header accepted (the reference implementation's limit). */
export const MAX_HEADER = 100_000_000;
const MAX_DIMS = 8;

function readExactly(fd: number, path: string, n: number, at: number, what: string): Uint8Array {
  const b = new Uint8Array(n);
  let got = 0;
  while (got < n) {
    const r = readSync(fd, b, got, n - got, at + got);
    if (r <= 0) throw new SafetensorsError(path, `read failed: ${what} at offset ${at + got}`);
    got += r;
  }
  return b;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Parse and check one .safetensors file's header. */
export function readSafetensorsHeader(path: string): SafetensorsHeader {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (e) {
    const code = (e as { code?: string }).code;
    throw new SafetensorsError(path, code === "ENOENT" ? "no such file" : `cannot open: ${(e as Error).message}`, code === "ENOENT" ? "missing" : "not-a-file");
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new SafetensorsError(path, st.isDirectory() ? "is a directory, not a .safetensors file" : "is not a regular file (a FIFO, socket or device)", "not-a-file");
    const size = st.size;
    if (size < 8) throw new SafetensorsError(path, `truncated: the 8-byte header length at offset 0 needs 8 bytes, file has ${size}`);
    const lenBytes = readExactly(fd, path, 8, 0, "the header length");
    const len = new DataView(lenBytes.buffer).getBigUint64(0, true);
    if (len === 0n) throw new SafetensorsError(path, "header length at offset 0 is 0: no JSON header");
    if (len > BigInt(MAX_HEADER)) throw new SafetensorsError(path, `header length at offset 0 is ${len} bytes, over the ${MAX_HEADER}-byte limit (not a safetensors file?)`);
    const n = Number(len);
    if (n > size - 8) throw new SafetensorsError(path, `truncated: header length at offset 0 says ${n} bytes, file has ${size - 8} after it`);
    const raw = readExactly(fd, path, n, 8, "the JSON header");
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(raw);
    } catch {
      throw new SafetensorsError(path, `the JSON header at offset 8 (${n} bytes) is not valid UTF-8`);
    }
    if (!text.startsWith("{")) throw new SafetensorsError(path, `the JSON header at offset 8 does not start with '{' (starts with '${safeText(text.slice(0, 16))}')`);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (e) {
      throw new SafetensorsError(path, `the JSON header at offset 8 (${n} bytes) does not parse: ${safeText((e as Error).message, 200)}`);
    }
    if (!isRecord(json)) throw new SafetensorsError(path, "the JSON header at offset 8 is not an object");
    return checkHeader(path, size, 8 + n, json);
  } finally {
    closeSync(fd);
  }
}

function checkHeader(path: string, size: number, dataOffset: number, json: Record<string, unknown>): SafetensorsHeader {
  const metadata = new Map<string, string>();
  const tensors: SafetensorsTensor[] = [];
  const dataSize = size - dataOffset;
  for (const [name, v] of Object.entries(json)) {
    const q = `'${safeText(name)}'`;
    if (name === "__metadata__") {
      if (!isRecord(v)) throw new SafetensorsError(path, "header: __metadata__ is not an object of strings");
      for (const [k, s] of Object.entries(v)) {
        if (typeof s !== "string") throw new SafetensorsError(path, `header: __metadata__ key '${safeText(k)}' is not a string`);
        metadata.set(k, s);
      }
      continue;
    }
    if (name.length === 0) throw new SafetensorsError(path, "header: a tensor has an empty name");
    if (!isRecord(v)) throw new SafetensorsError(path, `header: tensor ${q} is not an object`);
    for (const k of Object.keys(v)) {
      if (k !== "dtype" && k !== "shape" && k !== "data_offsets") throw new SafetensorsError(path, `header: tensor ${q} has unknown field '${safeText(k)}'`);
    }
    const { dtype, shape, data_offsets: offs } = v;
    if (typeof dtype !== "string") throw new SafetensorsError(path, `header: tensor ${q} has no dtype string`);
    const bits = DTYPE_BITS[dtype];
    if (bits === undefined) throw new SafetensorsError(path, `header: tensor ${q} has unknown dtype '${safeText(dtype)}'`);
    if (!Array.isArray(shape)) throw new SafetensorsError(path, `header: tensor ${q} has no shape array`);
    if (shape.length > MAX_DIMS) throw new SafetensorsError(path, `header: tensor ${q} has ${shape.length} dimensions (at most ${MAX_DIMS})`);
    let elems = 1;
    for (const d of shape) {
      if (typeof d !== "number" || !Number.isSafeInteger(d) || d < 0) throw new SafetensorsError(path, `header: tensor ${q} has shape [${safeText(JSON.stringify(shape), 100)}]: dimensions must be non-negative integers`);
      elems *= d;
      if (!Number.isSafeInteger(elems)) throw new SafetensorsError(path, `header: tensor ${q} has shape [${shape.join(", ")}]: too many elements`);
    }
    if (!Array.isArray(offs) || offs.length !== 2 || offs.some((o) => typeof o !== "number" || !Number.isSafeInteger(o) || o < 0)) {
      throw new SafetensorsError(path, `header: tensor ${q} data_offsets must be two non-negative integers`);
    }
    const [begin, end] = offs as [number, number];
    if (end < begin) throw new SafetensorsError(path, `header: tensor ${q} data_offsets [${begin}, ${end}] end before they begin`);
    const want = (elems * bits) / 8;
    if (!Number.isInteger(want)) throw new SafetensorsError(path, `header: tensor ${q} of ${elems} ${dtype} elements is not a whole number of bytes`);
    if (end - begin !== want) throw new SafetensorsError(path, `header: tensor ${q} (${dtype} [${shape.join(", ")}]) needs ${want} bytes, data_offsets [${begin}, ${end}] give ${end - begin}`);
    if (end > dataSize) {
      throw new SafetensorsError(path, `truncated: tensor ${q} data_offsets [${begin}, ${end}] reach offset ${dataOffset + end}, file has ${size} bytes`);
    }
    tensors.push({ name, dtype, shape: shape as number[], nbytes: want, fileOffset: dataOffset + begin, file: path });
  }
  const sorted = tensors.filter((t) => t.nbytes > 0).sort((a, b) => a.fileOffset - b.fileOffset || a.nbytes - b.nbytes);
  for (let i = 1; i < sorted.length; i++) {
    const a = sorted[i - 1], b = sorted[i];
    if (a.fileOffset + a.nbytes > b.fileOffset) {
      throw new SafetensorsError(path, `header: tensors '${safeText(a.name)}' and '${safeText(b.name)}' overlap at offset ${b.fileOffset}`);
    }
  }
  return { path, fileSize: size, dataOffset, metadata, tensors };
}
