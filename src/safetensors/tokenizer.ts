// bloomery safetensors: tokenizer.json (model.vocab, merges, added_tokens, the pre-tokenizer) and
// tokenizer_config.json / chat_template.jinja as the tokenizer.ggml.* metadata a GGUF would carry, so
// the one tokenizer the repository builds from GGUF vocab data serves a folder too.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { safeText } from "../gguf/errors.ts";
import type { KvMap } from "./config.ts";
import { SafetensorsError } from "./reader.ts";

type Json = Record<string, unknown>;
const obj = (v: unknown): Json | undefined => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Json) : undefined);

const CONTRACTIONS_HF = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
/** Split regexes as tokenizer.json states them -> the pre-tokenizer name the GGUF side knows. */
const KNOWN_SPLITS: Readonly<Record<string, string>> = {
  [`${CONTRACTIONS_HF}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`]: "qwen2",
  [`${CONTRACTIONS_HF}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`]: "llama3",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "gpt-4o",
};

/** The pre-tokenizer name tokenizer.json's pre_tokenizer implies (a byte-level one), or a clear refusal. */
export function preTokenizerName(file: string, pre: unknown): string {
  const p = obj(pre);
  if (!p) throw new SafetensorsError(file, "pre_tokenizer is missing: only byte-level BPE tokenizers are supported yet");
  if (p.type === "ByteLevel" && p.use_regex !== false) return "gpt2";
  if (p.type === "Sequence" && Array.isArray(p.pretokenizers)) {
    const parts = p.pretokenizers.map(obj);
    const splits = parts.filter((x) => x?.type === "Split");
    const rest = parts.filter((x) => x?.type !== "Split");
    if (splits.length === 1 && rest.length === 1 && rest[0]?.type === "ByteLevel" && rest[0].use_regex === false) {
      const re = obj(splits[0]!.pattern)?.Regex;
      if (typeof re === "string" && KNOWN_SPLITS[re]) return KNOWN_SPLITS[re];
      throw new SafetensorsError(file, `pre_tokenizer's split regex '${safeText(String(re), 120)}' is not one bloomery knows yet`);
    }
  }
  throw new SafetensorsError(file, `pre_tokenizer ${safeText(JSON.stringify(p), 160)} is not supported yet (a byte-level BPE one is)`);
}

function tokenName(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  const o = obj(v);
  return typeof o?.content === "string" ? o.content : undefined;
}

function readJson(path: string): Json {
  let j: unknown;
  try {
    j = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new SafetensorsError(path, `does not parse as JSON: ${safeText((e as Error).message, 200)}`);
  }
  const o = obj(j);
  if (!o) throw new SafetensorsError(path, "is not a JSON object");
  return o;
}

/** Writes tokenizer.ggml.* (and the chat template) from the folder's tokenizer files. */
export function tokenizerKv(dir: string, kv: KvMap, nVocab: number, config: Json): void {
  const file = join(dir, "tokenizer.json");
  if (!existsSync(file)) throw new SafetensorsError(dir, "has no tokenizer.json: the folder's tokenizer is needed to serve it");
  const t = readJson(file);
  const model = obj(t.model);
  if (!model || model.type !== "BPE") throw new SafetensorsError(file, `model type '${safeText(String(model?.type))}' is not supported yet (byte-level BPE is)`);
  const vocab = obj(model.vocab);
  if (!vocab) throw new SafetensorsError(file, "model.vocab is not an object");
  const tokens: (string | undefined)[] = [];
  const types: number[] = [];
  for (const [s, id] of Object.entries(vocab)) {
    if (typeof id !== "number" || !Number.isSafeInteger(id) || id < 0 || id >= 1 << 24) throw new SafetensorsError(file, `model.vocab: token '${safeText(s)}' has id ${safeText(String(id))}`);
    if (tokens[id] !== undefined) throw new SafetensorsError(file, `model.vocab: id ${id} is both '${safeText(tokens[id]!)}' and '${safeText(s)}'`);
    tokens[id] = s;
    types[id] = 1; // NORMAL
  }
  const added = Array.isArray(t.added_tokens) ? t.added_tokens : [];
  for (const a of added) {
    const o = obj(a);
    if (!o || typeof o.content !== "string" || typeof o.id !== "number" || !Number.isSafeInteger(o.id) || o.id < 0 || o.id >= 1 << 24) {
      throw new SafetensorsError(file, `added_tokens: entry ${safeText(JSON.stringify(a), 100)} has no content and id`);
    }
    if (tokens[o.id] !== undefined && tokens[o.id] !== o.content) throw new SafetensorsError(file, `added_tokens: id ${o.id} is '${safeText(o.content)}' but model.vocab has '${safeText(tokens[o.id]!)}'`);
    tokens[o.id] = o.content;
    types[o.id] = o.special === true ? 3 : 4; // CONTROL : USER_DEFINED
  }
  const n = Math.max(tokens.length, nVocab);
  const names: string[] = [];
  for (let i = 0; i < n; i++) {
    if (tokens[i] === undefined) {
      names.push(`[PAD${i}]`);
      types[i] = 5; // UNUSED, as llama.cpp's converter pads a vocabulary to the embedding's rows
    } else names.push(tokens[i]!);
  }
  const merges = Array.isArray(model.merges) ? model.merges.map((m, i) => {
    if (typeof m === "string") return m;
    if (Array.isArray(m) && m.length === 2 && m.every((x) => typeof x === "string")) return `${m[0]} ${m[1]}`;
    throw new SafetensorsError(file, `model.merges[${i}] is neither "a b" nor ["a", "b"]`);
  }) : [];
  kv.str("tokenizer.ggml.model", "gpt2");
  kv.str("tokenizer.ggml.pre", preTokenizerName(file, t.pre_tokenizer));
  kv.strings("tokenizer.ggml.tokens", names);
  kv.i32s("tokenizer.ggml.token_type", types);
  kv.strings("tokenizer.ggml.merges", merges);
  const cfgFile = join(dir, "tokenizer_config.json");
  const tc = existsSync(cfgFile) ? readJson(cfgFile) : {};
  const idOf = (v: unknown): number | undefined => {
    const s = tokenName(v);
    if (s === undefined) return undefined;
    const i = names.indexOf(s);
    if (i < 0) throw new SafetensorsError(cfgFile, `special token '${safeText(s)}' is not in the vocabulary`);
    return i;
  };
  const cfgId = (k: string): number | undefined => (typeof config[k] === "number" ? (config[k] as number) : undefined);
  const put = (key: string, id: number | undefined) => id !== undefined && kv.u32(`tokenizer.ggml.${key}`, id);
  put("bos_token_id", idOf(tc.bos_token) ?? cfgId("bos_token_id"));
  put("eos_token_id", idOf(tc.eos_token) ?? cfgId("eos_token_id"));
  put("padding_token_id", idOf(tc.pad_token) ?? cfgId("pad_token_id"));
  put("unknown_token_id", idOf(tc.unk_token));
  if (typeof tc.add_bos_token === "boolean") kv.bool("tokenizer.ggml.add_bos_token", tc.add_bos_token);
  if (typeof tc.add_eos_token === "boolean") kv.bool("tokenizer.ggml.add_eos_token", tc.add_eos_token);
  const jinja = join(dir, "chat_template.jinja");
  let tpl: string | undefined;
  if (existsSync(jinja)) tpl = readFileSync(jinja, "utf8");
  else if (typeof tc.chat_template === "string") tpl = tc.chat_template;
  else if (Array.isArray(tc.chat_template)) {
    const d = tc.chat_template.map(obj).find((x) => x?.name === "default");
    if (typeof d?.template === "string") tpl = d.template;
  }
  if (tpl !== undefined) kv.str("tokenizer.chat_template", tpl);
}
