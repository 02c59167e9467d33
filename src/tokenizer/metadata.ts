// GGUF tokenizer metadata (tokenizer.ggml.* keys, SPEC.md "Tokenizer metadata") -> VocabData,
// with each value's type checked. Independent of the GGUF reader: it takes a key lookup.
import { TokenizerError } from "./errors.ts";
import type { VocabData } from "./vocab.ts";

/** Returns the metadata value stored under a key, or undefined when the key is absent. */
export type MetadataLookup = (key: string) => unknown;

const P = "tokenizer.ggml.";

function isNumberArray(x: unknown): x is ArrayLike<number> {
  if (ArrayBuffer.isView(x)) return !(x instanceof DataView) && !(x instanceof BigInt64Array) && !(x instanceof BigUint64Array);
  return Array.isArray(x) && x.every((e) => typeof e === "number");
}

function stringArray(get: MetadataLookup, key: string, required: boolean): string[] | undefined {
  const x = get(key);
  if (x === undefined) {
    if (required) throw new TokenizerError(`GGUF key ${key} is missing`);
    return undefined;
  }
  if (!Array.isArray(x) || !x.every((e) => typeof e === "string")) throw new TokenizerError(`GGUF key ${key} is not an array of strings`);
  return x as string[];
}

function numberArray(get: MetadataLookup, key: string): ArrayLike<number> | undefined {
  const x = get(key);
  if (x === undefined) return undefined;
  if (!isNumberArray(x)) throw new TokenizerError(`GGUF key ${key} is not an array of numbers`);
  return x;
}

function id(get: MetadataLookup, key: string): number | undefined {
  const x = get(key);
  if (x === undefined) return undefined;
  const n = typeof x === "bigint" ? Number(x) : x;
  if (typeof n !== "number" || !Number.isInteger(n)) throw new TokenizerError(`GGUF key ${key} is not an integer token id`);
  return n;
}

function flag(get: MetadataLookup, key: string): boolean | undefined {
  const x = get(key);
  if (x === undefined) return undefined;
  if (typeof x !== "boolean") throw new TokenizerError(`GGUF key ${key} is not a bool`);
  return x;
}

/** Reads the tokenizer.ggml.* keys into VocabData. */
export function vocabFromMetadata(get: MetadataLookup): VocabData {
  const model = get(P + "model");
  if (typeof model !== "string") throw new TokenizerError(`GGUF key ${P}model is ${model === undefined ? "missing" : "not a string"}`);
  const pre = get(P + "pre");
  if (pre !== undefined && typeof pre !== "string") throw new TokenizerError(`GGUF key ${P}pre is not a string`);
  return {
    model,
    pre: pre as string | undefined,
    tokens: stringArray(get, P + "tokens", true)!,
    tokenTypes: numberArray(get, P + "token_type"),
    merges: stringArray(get, P + "merges", false),
    scores: numberArray(get, P + "scores"),
    bosId: id(get, P + "bos_token_id"),
    eosId: id(get, P + "eos_token_id"),
    eotId: id(get, P + "eot_token_id"),
    padId: id(get, P + "padding_token_id"),
    unkId: id(get, P + "unknown_token_id"),
    addBos: flag(get, P + "add_bos_token"),
    addEos: flag(get, P + "add_eos_token"),
    addSpacePrefix: flag(get, P + "add_space_prefix"),
  };
}
