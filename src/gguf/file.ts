// bloomery GGUF: a model's GGUF, one file or a split set (-00001-of-0000N), with typed,
// strictly checked metadata access and a tensor index across shards.
import { existsSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { GgufError, safeText } from "./errors.ts";
import { checkModelPath } from "./path.ts";
import { readGgufHeader, type GgufHeader, type GgufKV, type GgufTensorInfo, type GgufValue } from "./reader.ts";
import { GgufValueType, VALUE_TYPE_NAMES } from "./types.ts";

const SPLIT_RE = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/;

/** The shard paths of the set a path belongs to (a single file is a set of one). */
export function splitPaths(path: string): string[] {
  const m = SPLIT_RE.exec(basename(path));
  if (!m) return [path];
  const n = Number(m[3]);
  if (n < 1) throw new GgufError(path, `split set count ${m[3]} is invalid`);
  const out: string[] = [];
  for (let i = 1; i <= n; i++) out.push(join(dirname(path), `${m[1]}-${String(i).padStart(5, "0")}-of-${m[3]}.gguf`));
  return out;
}

export class GgufFile {
  readonly headers: GgufHeader[];
  readonly kv: Map<string, GgufKV>;
  readonly tensors = new Map<string, GgufTensorInfo>();
  readonly path: string;

  private constructor(headers: GgufHeader[]) {
    this.headers = headers;
    this.kv = headers[0].kv;
    this.path = headers[0].path;
    for (const h of headers) {
      for (const t of h.tensors) {
        if (this.tensors.has(t.name)) throw new GgufError(h.path, `tensor '${safeText(t.name)}' appears in two shards of the split set`);
        this.tensors.set(t.name, t);
      }
    }
  }

  /**
   * A model assembled from other files (a safetensors checkpoint folder): its metadata and its tensors
   * in GGUF's terms, each tensor naming the file and offset that hold its bytes.
   */
  static fromParts(headers: GgufHeader[]): GgufFile {
    return new GgufFile(headers);
  }

  /** Open one GGUF or a whole split set (any shard's path names the set). */
  static open(path: string): GgufFile {
    checkModelPath(path); // a directory, a FIFO, a link loop: said clearly, before any open
    const paths = splitPaths(path);
    if (paths.length === 1) {
      const h = readGgufHeader(path);
      const count = h.kv.get("split.count");
      if (count && Number(count.value) > 1) {
        throw new GgufError(path, `is shard of a ${count.value}-part split set but its name lacks the -0000N-of-0000M suffix`);
      }
      return new GgufFile([h]);
    }
    const headers: GgufHeader[] = [];
    for (const [i, p] of paths.entries()) {
      if (!existsSync(p)) throw new GgufError(p, `missing shard ${i + 1} of ${paths.length} of the split set`, "missing");
      checkModelPath(p);
      const h = readGgufHeader(p);
      const no = h.kv.get("split.no");
      const count = h.kv.get("split.count");
      if (!no || no.type !== GgufValueType.U16) throw new GgufError(p, "key 'split.no' is missing or not u16");
      if (!count || count.type !== GgufValueType.U16) throw new GgufError(p, "key 'split.count' is missing or not u16");
      if (no.value !== i) throw new GgufError(p, `key 'split.no' is ${no.value}, expected ${i}`);
      if (count.value !== paths.length) throw new GgufError(p, `key 'split.count' is ${count.value}, expected ${paths.length}`);
      headers.push(h);
    }
    const f = new GgufFile(headers);
    const total = f.kv.get("split.tensors.count");
    if (total) {
      if (total.type !== GgufValueType.I32) throw new GgufError(path, "key 'split.tensors.count' is not i32");
      if (total.value !== f.tensors.size) {
        throw new GgufError(path, `split set holds ${f.tensors.size} tensors, 'split.tensors.count' says ${total.value}`);
      }
    }
    return f;
  }

  get paths(): string[] {
    return this.headers.map((h) => h.path);
  }

  get totalBytes(): number {
    return this.headers.reduce((a, h) => a + h.fileSize, 0);
  }

  has(key: string): boolean {
    return this.kv.has(key);
  }

  raw(key: string): GgufValue | undefined {
    return this.kv.get(key)?.value;
  }

  private typed(key: string, types: GgufValueType[]): GgufKV | undefined {
    const e = this.kv.get(key);
    if (!e) return undefined;
    if (!types.includes(e.type)) {
      throw new GgufError(this.path, `key '${key}' has type ${VALUE_TYPE_NAMES[e.type]}, expected ${types.map((t) => VALUE_TYPE_NAMES[t]).join(" or ")}`);
    }
    return e;
  }

  private missing(key: string): never {
    throw new GgufError(this.path, `required key '${key}' is missing`);
  }

  u32(key: string, def?: number): number {
    const e = this.typed(key, [GgufValueType.U32]);
    if (e) return e.value as number;
    return def ?? this.missing(key);
  }

  /** Any integer type that fits (for keys llama reads loosely, like token ids). */
  int(key: string, def?: number): number {
    const e = this.typed(key, [GgufValueType.U8, GgufValueType.I8, GgufValueType.U16, GgufValueType.I16,
      GgufValueType.U32, GgufValueType.I32, GgufValueType.U64, GgufValueType.I64]);
    if (e) {
      if (typeof e.value === "bigint") throw new GgufError(this.path, `key '${key}' value ${e.value} is out of range`);
      return e.value as number;
    }
    return def ?? this.missing(key);
  }

  f32(key: string, def?: number): number {
    const e = this.typed(key, [GgufValueType.F32]);
    if (e) return e.value as number;
    return def ?? this.missing(key);
  }

  bool(key: string, def?: boolean): boolean {
    const e = this.typed(key, [GgufValueType.BOOL]);
    if (e) return e.value as boolean;
    return def ?? this.missing(key);
  }

  str(key: string, def?: string): string {
    const e = this.typed(key, [GgufValueType.STRING]);
    if (e) return e.value as string;
    return def ?? this.missing(key);
  }

  /** An array key of the given element type. */
  array<T extends GgufValue>(key: string, elem: GgufValueType): T | undefined {
    const e = this.typed(key, [GgufValueType.ARRAY]);
    if (!e) return undefined;
    if (e.elemType !== elem) {
      throw new GgufError(this.path, `key '${key}' is an array of ${VALUE_TYPE_NAMES[e.elemType!]}, expected ${VALUE_TYPE_NAMES[elem]}`);
    }
    return e.value as T;
  }

  /** A u32 key that may instead be a per-layer array of u32/i32 (llama's get_key_or_arr). */
  u32PerLayer(key: string, nLayers: number, def?: number): number[] {
    const e = this.kv.get(key);
    if (e && e.type === GgufValueType.ARRAY) {
      if (e.elemType !== GgufValueType.U32 && e.elemType !== GgufValueType.I32) {
        throw new GgufError(this.path, `key '${key}' is an array of ${VALUE_TYPE_NAMES[e.elemType!]}, expected u32`);
      }
      const a = e.value as Uint32Array | Int32Array;
      if (a.length !== nLayers) throw new GgufError(this.path, `key '${key}' has ${a.length} entries for ${nLayers} layers`);
      return Array.from(a);
    }
    return new Array(nLayers).fill(this.u32(key, def));
  }

  tensor(name: string): GgufTensorInfo | undefined {
    return this.tensors.get(name);
  }

  requireTensor(name: string, ne?: number[]): GgufTensorInfo {
    const t = this.tensors.get(name);
    if (!t) throw new GgufError(this.path, `required tensor '${name}' is missing`);
    if (ne) {
      const got = t.ne.concat(Array(4).fill(1)).slice(0, 4);
      const want = ne.concat(Array(4).fill(1)).slice(0, 4);
      if (got.some((v, i) => v !== want[i])) {
        throw new GgufError(t.file, `tensor '${name}' has shape [${t.ne.join(", ")}], expected [${ne.join(", ")}]`);
      }
    }
    return t;
  }
}
