// The Tokenizer: encode / decode for GGUF vocabularies (byte-level BPE and SPM), special
// tokens, end-of-generation ids. Built from VocabData (SPEC.md "Tokenizer metadata").
import { ByteLevelBpe, byteLevelDecode } from "./bpe.ts";
import { parseBytePiece, utf8 } from "./bytes.ts";
import { TokenizerError } from "./errors.ts";
import { splitRuleFor } from "./pretokenize.ts";
import { SpecialSplitter } from "./specials.ts";
import { SpmEncoder } from "./spm.ts";
import { TokenType, Vocab, type VocabData } from "./vocab.ts";

export interface EncodeOptions {
  /** Add BOS / EOS as the vocabulary asks (add_bos_token / add_eos_token). Default false. */
  addSpecial?: boolean;
  /** Match control tokens written in the text (user-defined ones always match). Default false. */
  parseSpecial?: boolean;
}

export interface DecodeOptions {
  /** Leave out control and unknown tokens. Default false (they render as their text). */
  skipSpecial?: boolean;
}

const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

export class Tokenizer {
  private readonly bpe: ByteLevelBpe | null;
  private readonly spm: SpmEncoder | null;
  private readonly specials: SpecialSplitter;
  private readonly bytesCache: (Uint8Array | undefined)[];

  private constructor(private readonly v: Vocab, merges: string[] | undefined) {
    if (v.kind === "bpe") {
      this.bpe = new ByteLevelBpe(v, merges, splitRuleFor(v.pre));
      this.spm = null;
    } else {
      this.bpe = null;
      this.spm = new SpmEncoder(v);
    }
    this.specials = new SpecialSplitter(v);
    this.bytesCache = new Array(v.size);
  }

  /** Builds a tokenizer from GGUF tokenizer metadata; bad data throws TokenizerError. */
  static fromVocab(data: VocabData): Tokenizer {
    const v = new Vocab(data);
    return new Tokenizer(v, data.merges);
  }

  /** "gpt2" (byte-level BPE) or "llama" (SPM). */
  get model(): "gpt2" | "llama" {
    return this.v.kind === "bpe" ? "gpt2" : "llama";
  }
  get nVocab(): number {
    return this.v.size;
  }
  get bos(): number | undefined {
    return this.v.bos >= 0 ? this.v.bos : undefined;
  }
  get eos(): number | undefined {
    return this.v.eos >= 0 ? this.v.eos : undefined;
  }
  get eot(): number | undefined {
    return this.v.eot >= 0 ? this.v.eot : undefined;
  }
  get pad(): number | undefined {
    return this.v.pad >= 0 ? this.v.pad : undefined;
  }
  get unk(): number | undefined {
    return this.v.unk >= 0 ? this.v.unk : undefined;
  }
  get addBos(): boolean {
    return this.v.addBos;
  }
  get addEos(): boolean {
    return this.v.addEos;
  }
  /** All end-of-generation ids (eos, eot, and control tokens such as <|im_end|>). */
  get eogIds(): number[] {
    return [...this.v.eog].sort((a, b) => a - b);
  }

  /** Token ids of `text`. */
  encode(text: string, opts: EncodeOptions = {}): number[] {
    if (typeof text !== "string") throw new TokenizerError(`encode expects a string, got ${typeof text}`);
    const s = text.toWellFormed();
    const out: number[] = [];
    const v = this.v;
    if (opts.addSpecial && v.addBos) out.push(v.bos);
    const parse = opts.parseSpecial ?? false;
    if (this.bpe) {
      const bpe = this.bpe;
      this.specials.split(s, parse, (frag) => bpe.encode(frag, out), (id) => out.push(id));
    } else {
      const spm = this.spm!;
      let afterSpecial = true; // llama.cpp: the space prefix goes at the start and after specials
      this.specials.split(
        s,
        parse,
        (frag) => {
          spm.encode(frag, v.addSpacePrefix && afterSpecial, out);
          afterSpecial = false;
        },
        (id) => {
          out.push(id);
          afterSpecial = true;
        },
      );
    }
    if (opts.addSpecial && v.addEos) out.push(v.eos);
    return out;
  }

  /** Text of token ids (invalid UTF-8 becomes U+FFFD). */
  decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): string {
    const skip = opts.skipSpecial ?? false;
    const v = this.v;
    const spmStrip = v.kind === "spm" && v.addSpacePrefix;
    const parts: Uint8Array[] = [];
    let total = 0;
    let afterSpecial = true;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      v.checkId(id);
      const t = v.types[id];
      if (skip && (t === TokenType.CONTROL || t === TokenType.UNKNOWN)) {
        afterSpecial = true;
        continue;
      }
      let b = this.tokenBytes(id);
      // Undo the SPM space prefix that encode puts at the start and after special tokens.
      if (spmStrip && afterSpecial && t === TokenType.NORMAL && b.length > 0 && b[0] === 0x20) b = b.subarray(1);
      afterSpecial = t === TokenType.CONTROL || t === TokenType.USER_DEFINED || t === TokenType.UNKNOWN;
      parts.push(b);
      total += b.length;
    }
    const all = new Uint8Array(total);
    let o = 0;
    for (const p of parts) {
      all.set(p, o);
      o += p.length;
    }
    return decoder.decode(all);
  }

  /** The raw bytes a token stands for (specials: their text). Do not modify the result. */
  tokenBytes(id: number): Uint8Array {
    this.v.checkId(id);
    let b = this.bytesCache[id];
    if (b === undefined) {
      b = this.computeBytes(id);
      this.bytesCache[id] = b;
    }
    return b;
  }

  private computeBytes(id: number): Uint8Array {
    const v = this.v;
    const text = v.tokens[id];
    const t = v.types[id];
    if (t === TokenType.CONTROL || t === TokenType.UNKNOWN || t === TokenType.USER_DEFINED) return utf8(text);
    if (t === TokenType.BYTE) {
      const b = parseBytePiece(text);
      if (b >= 0) return Uint8Array.of(b);
    }
    if (v.kind === "spm") return utf8(text.replaceAll("\u2581", " "));
    return byteLevelDecode(text);
  }

  /** The piece as the vocabulary stores it. */
  tokenText(id: number): string {
    this.v.checkId(id);
    return this.v.tokens[id];
  }

  /** The id of a stored piece, or undefined. */
  tokenId(text: string): number | undefined {
    return this.v.idOf.get(text);
  }

  /** GGUF token type (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte; 0 other). */
  tokenType(id: number): number {
    this.v.checkId(id);
    return this.v.types[id];
  }

  isControl(id: number): boolean {
    this.v.checkId(id);
    return this.v.types[id] === TokenType.CONTROL;
  }

  /** Control or unknown: what skipSpecial leaves out. */
  isSpecial(id: number): boolean {
    this.v.checkId(id);
    const t = this.v.types[id];
    return t === TokenType.CONTROL || t === TokenType.UNKNOWN;
  }

  /** End of generation: eos, eot and the control tokens llama.cpp treats so. */
  isEog(id: number): boolean {
    return this.v.eog.has(id);
  }
}
