// Pre-tokenizer split rules for byte-level BPE, per tokenizer.ggml.pre (regexes as
// llama.cpp's llama-vocab.cpp and the models' tokenizer.json state them), run with JS RegExp.
import { TokenizerError } from "./errors.ts";

// Unicode White_Space, as Rust/Python/Oniguruma read `\s` (JS `\s` lacks U+0085 and adds U+FEFF).
const WS = "\\t\\n\\v\\f\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000";

/** Rewrites `\s` / `\S` in a regex source to the White_Space class, inside and outside `[...]`. */
export function expandWhitespace(src: string): string {
  let out = "";
  let inClass = false;
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c === "\\" && i + 1 < src.length) {
      const d = src[i + 1];
      i++;
      if (d === "s") out += inClass ? WS : `[${WS}]`;
      else if (d === "S") {
        if (inClass) throw new TokenizerError(`split regex uses \\S inside a class, which is not supported: ${src}`);
        out += `[^${WS}]`;
      } else out += c + d;
      continue;
    }
    if (c === "[" && !inClass) inClass = true;
    else if (c === "]" && inClass) inClass = false;
    out += c;
  }
  return out;
}

const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";

const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const LLAMA3 = `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const QWEN2 = `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const QWEN35 = `${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const UPPER = "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]";
const LOWER = "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]";
const GPT4O = `[^\\r\\n\\p{L}\\p{N}]?${UPPER}*${LOWER}+${CONTRACTIONS}?|[^\\r\\n\\p{L}\\p{N}]?${UPPER}+${LOWER}*${CONTRACTIONS}?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const DEEPSEEK3 = [
  "\\p{N}{1,3}",
  "[一-龥぀-ゟ゠-ヿ]+",
  "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
];
// Kimi K2's (tokenization_kimi.py, tiktoken): GPT-4o's with Han runs split off and kept out of the word
// classes (its `[...&&[^\p{Han}]]` as a lookahead). llama.cpp runs a hand-written stand-in for it that
// keeps a run of letters whole (camelCase is one piece there, two in the model's own tokenizer).
const NOT_HAN = "(?!\\p{Script=Han})";
const KIMI_UP = `(?:${NOT_HAN}[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])`;
const KIMI_LO = `(?:${NOT_HAN}[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])`;
const KIMI_K2 = `\\p{Script=Han}+|[^\\r\\n\\p{L}\\p{N}]?${KIMI_UP}*${KIMI_LO}+${CONTRACTIONS}?|[^\\r\\n\\p{L}\\p{N}]?${KIMI_UP}+${KIMI_LO}*${CONTRACTIONS}?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
// llama.cpp's rule for pre = "default" (and a missing pre).
const DEFAULT = ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"];

/** A pre-tokenizer: regexes applied in turn (matches and the gaps between them become pieces). */
export interface SplitRule {
  readonly name: string;
  readonly regexes: readonly string[];
  /** A whole piece that is a token is taken as is, without merging (llama3's ignore_merges). */
  readonly ignoreMerges: boolean;
}

function rule(name: string, regexes: string[], ignoreMerges = false): SplitRule {
  return { name, regexes, ignoreMerges };
}

const RULES = new Map<string, SplitRule>();
function add(names: string[], r: (name: string) => SplitRule) {
  for (const n of names) RULES.set(n, r(n));
}
add(["default"], (n) => rule(n, DEFAULT));
add(["gpt-2", "gpt2", "phi-2", "mpt", "olmo", "exaone4", "roberta-bpe", "jais", "trillion"], (n) => rule(n, [GPT2]));
add(["llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"], (n) => rule(n, [LLAMA3], true));
add(["dbrx", "smaug-bpe", "glm4", "chatglm-bpe"], (n) => rule(n, [LLAMA3]));
add(["qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan", "grok-2"], (n) => rule(n, [QWEN2]));
add(["qwen35"], (n) => rule(n, [QWEN35]));
add(["gpt-4o", "llama4", "minimax-m2"], (n) => rule(n, [GPT4O]));
add(["deepseek-v3"], (n) => rule(n, DEEPSEEK3));
add(["kimi-k2"], (n) => rule(n, [KIMI_K2]));

/** The split rule for tokenizer.ggml.pre; an unknown name is refused. */
export function splitRuleFor(pre: string): SplitRule {
  const r = RULES.get(pre);
  if (!r) {
    throw new TokenizerError(`unknown pre-tokenizer '${pre}' (tokenizer.ggml.pre); supported: ${[...RULES.keys()].join(", ")}`);
  }
  return r;
}

/** Splits text into pre-tokens with a rule's regexes. */
export class PreTokenizer {
  private readonly res: RegExp[];

  constructor(readonly rule: SplitRule) {
    this.res = rule.regexes.map((src) => {
      try {
        return new RegExp(expandWhitespace(src), "gu");
      } catch (e) {
        throw new TokenizerError(`split regex of pre-tokenizer '${rule.name}' does not compile: ${(e as Error).message}`);
      }
    });
  }

  /** Calls `emit` for each piece of `text`, in order; the pieces concatenate to `text`. */
  split(text: string, emit: (piece: string) => void): void {
    if (text.length === 0) return;
    const res = this.res;
    if (res.length === 1) {
      splitOne(res[0], text, emit);
      return;
    }
    let pieces = [text];
    for (let k = 0; k < res.length; k++) {
      const last = k === res.length - 1;
      const next: string[] = [];
      const sink = last ? emit : (p: string) => next.push(p);
      for (const p of pieces) splitOne(res[k], p, sink);
      pieces = next;
    }
  }
}

function splitOne(re: RegExp, text: string, emit: (piece: string) => void): void {
  re.lastIndex = 0;
  let pos = 0;
  for (;;) {
    const m = re.exec(text);
    if (m === null) break;
    const start = m.index;
    const s = m[0];
    if (s.length === 0) {
      // An empty match splits nothing; step past it (by code point) to avoid looping.
      if (start >= text.length) break;
      re.lastIndex = start + ((text.codePointAt(start) ?? 0) > 0xffff ? 2 : 1);
      continue;
    }
    if (start > pos) emit(text.slice(pos, start));
    emit(s);
    pos = start + s.length;
  }
  if (pos < text.length) emit(text.slice(pos));
}
