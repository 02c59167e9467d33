// Vocabulary from GGUF tokenizer metadata (SPEC.md "Tokenizer metadata"): validation, token
// types, special ids and the end-of-generation set as llama.cpp's llama-vocab.cpp derives it.
import { TokenizerError } from "./errors.ts";

/** The tokenizer fields of a GGUF file, as plain data. */
export interface VocabData {
  /** tokenizer.ggml.model: "gpt2" (byte-level BPE) | "llama" (SPM). */
  model: string;
  /** tokenizer.ggml.pre: "qwen2", "qwen35", "llama3", "default", ... (BPE only). */
  pre?: string;
  tokens: string[];
  /** 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte. */
  tokenTypes?: ArrayLike<number>;
  /** "left right", rank = index (BPE). */
  merges?: string[];
  /** Piece scores (SPM). */
  scores?: ArrayLike<number>;
  bosId?: number;
  eosId?: number;
  eotId?: number;
  padId?: number;
  unkId?: number;
  addBos?: boolean;
  addEos?: boolean;
  addSpacePrefix?: boolean;
}

/** Token types as GGUF stores them (0 = undefined / anything unknown). */
export const TokenType = {
  UNDEFINED: 0,
  NORMAL: 1,
  UNKNOWN: 2,
  CONTROL: 3,
  USER_DEFINED: 4,
  UNUSED: 5,
  BYTE: 6,
} as const;

// Token texts llama.cpp takes as end-of-turn when no eot id is given.
const EOT_TEXTS = new Set([
  "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
  "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
]);

// Token texts llama.cpp treats as end of generation (forced to control type).
const EOG_TEXTS = new Set([
  "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
  "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
  "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
  "<｜end▁of▁sentence｜>", "[e~[",
]);

// gpt-oss: tokens llama.cpp always renders (user-defined whatever the file says).
const ALWAYS_RENDERED = new Set(["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"]);

export type ModelKind = "bpe" | "spm";

/** A validated vocabulary: token texts, types, scores, lookups and special ids (-1 = none). */
export class Vocab {
  readonly kind: ModelKind;
  readonly pre: string;
  readonly tokens: string[];
  readonly types: Uint8Array;
  readonly scores: Float32Array | null;
  readonly idOf = new Map<string, number>();
  readonly bos: number;
  readonly eos: number;
  readonly eot: number;
  readonly pad: number;
  readonly unk: number;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly addSpacePrefix: boolean;
  readonly eog = new Set<number>();

  constructor(v: VocabData) {
    if (v === null || typeof v !== "object") throw new TokenizerError("vocabulary data must be an object");
    if (v.model === "gpt2") this.kind = "bpe";
    else if (v.model === "llama") this.kind = "spm";
    else throw new TokenizerError(`unknown tokenizer model '${String(v.model)}' (tokenizer.ggml.model); supported: gpt2 (byte-level BPE), llama (SPM)`);
    if (v.pre !== undefined && typeof v.pre !== "string") throw new TokenizerError("tokenizer.ggml.pre must be a string");
    this.pre = v.pre ?? "default";

    if (!Array.isArray(v.tokens) || v.tokens.length === 0) throw new TokenizerError("tokenizer.ggml.tokens is missing or empty");
    const n = v.tokens.length;
    if (n > 0x7fffffff) throw new TokenizerError(`tokenizer.ggml.tokens has ${n} entries, too many`);
    this.tokens = new Array<string>(n);
    for (let i = 0; i < n; i++) {
      const t = v.tokens[i];
      if (typeof t !== "string") throw new TokenizerError(`tokenizer.ggml.tokens[${i}] is not a string`);
      // llama.cpp names empty pieces so that they stay unique and never match text.
      const text = t.length === 0 ? `[EMPTY_${i}]` : t;
      this.tokens[i] = text;
      this.idOf.set(text, i);
    }

    this.types = new Uint8Array(n).fill(TokenType.NORMAL);
    if (v.tokenTypes !== undefined) {
      if (v.tokenTypes.length < n) throw new TokenizerError(`tokenizer.ggml.token_type has ${v.tokenTypes.length} entries, fewer than the ${n} tokens`);
      for (let i = 0; i < n; i++) {
        const t = v.tokenTypes[i];
        this.types[i] = Number.isInteger(t) && t >= 1 && t <= 6 ? t : TokenType.UNDEFINED;
      }
    }

    this.scores = null;
    if (v.scores !== undefined) {
      if (v.scores.length < n) throw new TokenizerError(`tokenizer.ggml.scores has ${v.scores.length} entries, fewer than the ${n} tokens`);
      this.scores = new Float32Array(n);
      for (let i = 0; i < n; i++) {
        const s = Number(v.scores[i]);
        if (Number.isNaN(s)) throw new TokenizerError(`tokenizer.ggml.scores[${i}] is not a number`);
        this.scores[i] = s;
      }
    }

    const spm = this.kind === "spm";
    // SPM defaults follow llama.cpp (bos 1, eos 2, unk 0, when in range); BPE has none.
    this.bos = this.specialId("bos_token_id", v.bosId, spm ? 1 : -1);
    this.eos = this.specialId("eos_token_id", v.eosId, spm ? 2 : -1);
    // Default unk 0 only where token 0 is (or may be) the unknown piece.
    const unkDefault = spm && (v.tokenTypes === undefined || this.types[0] === TokenType.UNKNOWN) ? 0 : -1;
    this.unk = this.specialId("unknown_token_id", v.unkId, unkDefault);
    this.pad = this.specialId("padding_token_id", v.padId, -1);
    let eot = this.specialId("eot_token_id", v.eotId, -1);

    const llama3 = !spm && ["llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"].includes(this.pre);
    this.addBos = v.addBos ?? (spm || llama3);
    this.addEos = v.addEos ?? false;
    this.addSpacePrefix = v.addSpacePrefix ?? spm;
    if (this.addBos && this.bos < 0) throw new TokenizerError("add_bos_token is set but the vocabulary has no bos_token_id");
    if (this.addEos && this.eos < 0) throw new TokenizerError("add_eos_token is set but the vocabulary has no eos_token_id");

    // End of generation, as llama.cpp derives it from token texts.
    for (let i = 0; i < n; i++) {
      const text = this.tokens[i];
      if (eot < 0 && EOT_TEXTS.has(text)) {
        eot = i;
        this.types[i] = TokenType.CONTROL;
      }
      if (EOG_TEXTS.has(text)) {
        this.eog.add(i);
        this.types[i] = TokenType.CONTROL;
      }
    }
    for (let i = 0; i < n; i++) if (ALWAYS_RENDERED.has(this.tokens[i])) this.types[i] = TokenType.USER_DEFINED;
    if (this.eos >= 0) this.eog.add(this.eos);
    if (eot >= 0) this.eog.add(eot);
    this.eot = eot;
    // gpt-oss / solar-open: "<|end|>" ends a message, not the generation.
    const has = (t: string) => {
      const id = this.idOf.get(t);
      return id !== undefined && this.eog.has(id);
    };
    const end = this.idOf.get("<|end|>");
    if (end !== undefined && this.eog.has(end) && ((has("<|return|>") && (has("<|call|>") || has("<|calls|>"))) || (has("<|calls|>") && has("<|flush|>")))) {
      this.eog.delete(end);
      this.types[end] = TokenType.USER_DEFINED;
    }
    // gemma4 / paddleocr: "</s>" is text when "<|tool_response>" is present.
    const s = this.idOf.get("</s>");
    if (s !== undefined && this.eog.has(s) && has("<|tool_response>")) {
      this.eog.delete(s);
      this.types[s] = TokenType.NORMAL;
    }
  }

  get size(): number {
    return this.tokens.length;
  }

  private specialId(key: string, given: number | undefined, fallback: number): number {
    const n = this.tokens.length;
    if (given === undefined || given === null) return fallback >= 0 && fallback < n ? fallback : -1;
    if (!Number.isInteger(given) || given < 0 || given >= n) {
      throw new TokenizerError(`tokenizer.ggml.${key} = ${String(given)} is not a token id (vocabulary has ${n} tokens)`);
    }
    return given;
  }

  checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.tokens.length) {
      throw new TokenizerError(`token id ${String(id)} is out of range (vocabulary has ${this.tokens.length} tokens)`);
    }
  }
}
