// bloomery synth: a byte-level BPE vocabulary of any size (the 256 GPT-2 byte symbols, merges
// of existing tokens, Qwen's special tokens) that llama.cpp and our tokenizer both load.

export interface SynthVocab {
  tokens: string[];
  types: Int32Array;
  merges: string[];
  eos: number;
  bos: number;
  pad: number;
}

/** GPT-2's byte-to-unicode alphabet, in byte order. */
export function byteSymbols(): string[] {
  const keep: number[] = [];
  for (let b = 33; b <= 126; b++) keep.push(b);
  for (let b = 161; b <= 172; b++) keep.push(b);
  for (let b = 174; b <= 255; b++) keep.push(b);
  const out: string[] = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) out[b] = String.fromCodePoint(keep.includes(b) ? b : 256 + extra++);
  return out;
}

const SPECIALS = [
  "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
  "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
  "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
  "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
  "<think>", "</think>",
];
const USER_DEFINED = new Set(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]);

/** A vocabulary of exactly nVocab tokens; deterministic in seed. */
export function synthVocab(nVocab: number, seed = 1): SynthVocab {
  const nSpecial = Math.min(SPECIALS.length, Math.max(3, Math.floor(nVocab / 64)));
  const nRegular = nVocab - nSpecial;
  if (nRegular < 256) throw new Error(`synth: a vocabulary of ${nVocab} leaves no room for the 256 byte tokens`);
  const syms = byteSymbols();
  const tokens: string[] = [...syms];
  const seen = new Set(tokens);
  const merges: string[] = [];
  // favour letters, digits and space so the merges look like text
  const common = syms.filter((_, b) => (b >= 97 && b <= 122) || (b >= 65 && b <= 90) || (b >= 48 && b <= 57) || b === 32 || b === 10 || b === 95);
  let s = seed >>> 0 || 1;
  const rnd = () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
  while (tokens.length < nRegular) {
    const a = rnd() < 0.5 ? common[Math.floor(rnd() * common.length)] : tokens[256 + Math.floor(rnd() * Math.max(1, tokens.length - 256))] ?? common[0];
    const b = rnd() < 0.7 ? common[Math.floor(rnd() * common.length)] : tokens[Math.floor(rnd() * tokens.length)];
    const t = a + b;
    if (seen.has(t) || t.length > 16) continue;
    seen.add(t);
    tokens.push(t);
    merges.push(`${a} ${b}`);
  }
  const types = new Int32Array(nVocab).fill(1);
  for (let i = 0; i < nSpecial; i++) {
    tokens.push(SPECIALS[i]);
    types[nRegular + i] = USER_DEFINED.has(SPECIALS[i]) ? 4 : 3;
  }
  const eos = nRegular + 1 < nVocab && nSpecial > 2 ? nRegular + 2 : nRegular; // <|im_end|>
  return { tokens, types, merges, eos, bos: nRegular, pad: nRegular };
}
