// bloomery safetensors: a checkpoint folder as downloaded (one model.safetensors, or the shards a
// model.safetensors.index.json names), its tensors indexed across files and its JSON side files
// (config.json, generation_config.json, tokenizer.json, tokenizer_config.json) read strictly.
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { safeText } from "../gguf/errors.ts";
import { dtypeRefusal, readSafetensorsHeader, SafetensorsError, type SafetensorsHeader, type SafetensorsTensor } from "./reader.ts";

export const INDEX_FILE = "model.safetensors.index.json";

function readJson(path: string, what: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new SafetensorsError(path, `cannot read ${what}: ${(e as Error).message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new SafetensorsError(path, `${what} does not parse as JSON: ${safeText((e as Error).message, 200)}`);
  }
}

/** The .safetensors files a folder holds (sorted), for messages and detection. */
export function safetensorsIn(dir: string): string[] {
  try {
    return readdirSync(dir).filter((n) => n.endsWith(".safetensors")).sort();
  } catch {
    return [];
  }
}

/** Whether a directory looks like a safetensors checkpoint (an index or a .safetensors file inside). */
export function isSafetensorsFolder(dir: string): boolean {
  return existsSync(join(dir, INDEX_FILE)) || safetensorsIn(dir).length > 0;
}

export class SafetensorsFolder {
  readonly tensors = new Map<string, SafetensorsTensor>();

  private constructor(
    readonly dir: string,
    readonly headers: SafetensorsHeader[],
  ) {
    for (const h of headers) {
      for (const t of h.tensors) {
        const prev = this.tensors.get(t.name);
        if (prev) throw new SafetensorsError(h.path, `tensor '${safeText(t.name)}' is also in '${safeText(basename(prev.file))}'`);
        this.tensors.set(t.name, t);
      }
    }
  }

  /** Open a checkpoint folder (sharded through its index, or its one .safetensors file). */
  static open(dir: string): SafetensorsFolder {
    const index = join(dir, INDEX_FILE);
    if (existsSync(index)) return SafetensorsFolder.openIndexed(dir, index);
    const files = safetensorsIn(dir);
    if (files.length === 0) {
      throw new SafetensorsError(dir, `is a directory with no .safetensors file and no ${INDEX_FILE}: -m takes a GGUF file or a Hugging Face checkpoint folder`, "not-a-file");
    }
    if (files.length > 1) {
      throw new SafetensorsError(dir, `holds ${files.length} .safetensors files (${files.slice(0, 3).map((f) => `'${safeText(f)}'`).join(", ")}${files.length > 3 ? ", ..." : ""}) but no ${INDEX_FILE} saying which tensor is where`);
    }
    return new SafetensorsFolder(dir, [readSafetensorsHeader(join(dir, files[0]))]);
  }

  private static openIndexed(dir: string, index: string): SafetensorsFolder {
    const j = readJson(index, "the shard index");
    if (typeof j !== "object" || j === null || Array.isArray(j)) throw new SafetensorsError(index, "the shard index is not a JSON object");
    const map = (j as Record<string, unknown>).weight_map;
    if (typeof map !== "object" || map === null || Array.isArray(map)) throw new SafetensorsError(index, "the shard index has no 'weight_map' object");
    const where = new Map<string, string>();
    for (const [name, f] of Object.entries(map)) {
      if (typeof f !== "string" || f.length === 0) throw new SafetensorsError(index, `weight_map: tensor '${safeText(name)}' names no file`);
      if (f.includes("/") || f.includes("\\") || f === "." || f === ".." || !f.endsWith(".safetensors")) {
        throw new SafetensorsError(index, `weight_map: tensor '${safeText(name)}' names '${safeText(f)}', not a .safetensors file of this folder`);
      }
      where.set(name, f);
    }
    if (where.size === 0) throw new SafetensorsError(index, "weight_map is empty");
    const shards = [...new Set(where.values())].sort();
    const headers: SafetensorsHeader[] = [];
    for (const s of shards) {
      const p = join(dir, s);
      if (!existsSync(p)) throw new SafetensorsError(p, `missing shard named by ${INDEX_FILE}`, "missing");
      if (!statSync(p).isFile()) throw new SafetensorsError(p, "shard named by the index is not a regular file", "not-a-file");
      headers.push(readSafetensorsHeader(p));
    }
    const f = new SafetensorsFolder(dir, headers);
    for (const [name, s] of where) {
      const t = f.tensors.get(name);
      if (!t) throw new SafetensorsError(join(dir, s), `tensor '${safeText(name)}' named by ${INDEX_FILE} is not in this shard`);
      if (basename(t.file) !== s) throw new SafetensorsError(index, `weight_map puts '${safeText(name)}' in '${safeText(s)}' but it is in '${safeText(basename(t.file))}'`);
    }
    for (const t of f.tensors.values()) {
      if (!where.has(t.name)) throw new SafetensorsError(t.file, `tensor '${safeText(t.name)}' is not in ${INDEX_FILE}'s weight_map`);
    }
    return f;
  }

  get paths(): string[] {
    return this.headers.map((h) => h.path);
  }

  /** A JSON side file of the folder (config.json, ...), or undefined when absent. */
  json(name: string): Record<string, unknown> | undefined {
    const p = join(this.dir, name);
    if (!existsSync(p)) return undefined;
    const j = readJson(p, name);
    if (typeof j !== "object" || j === null || Array.isArray(j)) throw new SafetensorsError(p, `${name} is not a JSON object`);
    return j as Record<string, unknown>;
  }

  /** A tensor that must be there, of a dtype served as stored, with the shape (outermost first) given. */
  require(name: string, shape?: number[]): SafetensorsTensor {
    const t = this.tensors.get(name);
    if (!t) throw new SafetensorsError(this.dir, `required tensor '${safeText(name)}' is missing`);
    const no = dtypeRefusal(t.dtype);
    if (no) throw new SafetensorsError(t.file, `tensor '${safeText(name)}' is ${t.dtype}: ${no}`);
    if (shape && (shape.length !== t.shape.length || shape.some((d, i) => d !== t.shape[i]))) {
      throw new SafetensorsError(t.file, `tensor '${safeText(name)}' has shape [${t.shape.join(", ")}], expected [${shape.join(", ")}]`);
    }
    return t;
  }
}
