// bloomery safetensors: config.json (and its nested objects) read strictly for a family's hparams,
// and the GGUF metadata a family's HF mapping writes from it.
import { GgufValueType, type GgufKV } from "../gguf/index.ts";
import type { HfConfig, HfKvSink } from "../models/types.ts";
import { SafetensorsError } from "./reader.ts";

export class JsonConfig implements HfConfig {
  constructor(
    private readonly file: string,
    private readonly j: Record<string, unknown>,
    private readonly where = "",
  ) {}

  private bad(key: string, what: string): never {
    throw new SafetensorsError(this.file, `key '${this.where}${key}' ${what}`);
  }

  private get(key: string): unknown {
    const v = this.j[key];
    return v === null ? undefined : v;
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  num(key: string, def?: number): number {
    const v = this.get(key);
    if (v === undefined) return def ?? this.bad(key, "is missing");
    if (typeof v !== "number" || !Number.isFinite(v)) this.bad(key, `is ${JSON.stringify(v)?.slice(0, 40)}, not a number`);
    return v;
  }

  int(key: string, def?: number): number {
    const v = this.num(key, def);
    if (!Number.isSafeInteger(v) || v < 0 || v > 0xffffffff) this.bad(key, `is ${v}, not a non-negative 32-bit integer`);
    return v;
  }

  str(key: string, def?: string): string {
    const v = this.get(key);
    if (v === undefined) return def ?? this.bad(key, "is missing");
    if (typeof v !== "string") this.bad(key, "is not a string");
    return v;
  }

  bool(key: string, def?: boolean): boolean {
    const v = this.get(key);
    if (v === undefined) return def ?? this.bad(key, "is missing");
    if (typeof v !== "boolean") this.bad(key, "is not true or false");
    return v;
  }

  obj(key: string): HfConfig | undefined {
    const v = this.get(key);
    if (v === undefined) return undefined;
    if (typeof v !== "object" || Array.isArray(v) || v === null) this.bad(key, "is not an object");
    return new JsonConfig(this.file, v as Record<string, unknown>, `${this.where}${key}.`);
  }

  strs(key: string): string[] | undefined {
    const v = this.get(key);
    if (v === undefined) return undefined;
    if (!Array.isArray(v) || v.some((s) => typeof s !== "string")) this.bad(key, "is not an array of strings");
    return v as string[];
  }
}

/** GGUF metadata built in memory (what a GGUF file's header would hold). */
export class KvMap implements HfKvSink {
  readonly kv = new Map<string, GgufKV>();
  u32(key: string, v: number): void {
    this.kv.set(key, { type: GgufValueType.U32, value: v });
  }
  i32(key: string, v: number): void {
    this.kv.set(key, { type: GgufValueType.I32, value: v });
  }
  f32(key: string, v: number): void {
    this.kv.set(key, { type: GgufValueType.F32, value: Math.fround(v) });
  }
  str(key: string, v: string): void {
    this.kv.set(key, { type: GgufValueType.STRING, value: v });
  }
  bools(key: string, v: boolean[]): void {
    this.kv.set(key, { type: GgufValueType.ARRAY, elemType: GgufValueType.BOOL, value: v });
  }
  strings(key: string, v: string[]): void {
    this.kv.set(key, { type: GgufValueType.ARRAY, elemType: GgufValueType.STRING, value: v });
  }
  i32s(key: string, v: number[]): void {
    this.kv.set(key, { type: GgufValueType.ARRAY, elemType: GgufValueType.I32, value: Int32Array.from(v) });
  }
  bool(key: string, v: boolean): void {
    this.kv.set(key, { type: GgufValueType.BOOL, value: v });
  }
}
