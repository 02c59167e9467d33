// Splits special tokens out of text before the model's tokenizer runs: user-defined tokens
// always, control (and unknown) tokens only when parsing specials. Leftmost match wins, the
// longest at that position (Hugging Face's added-token matching).
import { TokenType, type Vocab } from "./vocab.ts";

interface Node {
  children: Map<number, Node>;
  /** Token ending here that is always matched (user-defined), or -1. */
  always: number;
  /** Token ending here that is matched when parsing specials (any special type), or -1. */
  any: number;
}

function node(): Node {
  return { children: new Map(), always: -1, any: -1 };
}

export class SpecialSplitter {
  private readonly root = node();
  /** First UTF-16 unit of any special token (a quick reject for most positions). */
  private readonly first = new Uint8Array(65536);
  readonly count: number;

  constructor(vocab: Vocab) {
    let count = 0;
    for (let id = 0; id < vocab.size; id++) {
      const t = vocab.types[id];
      const user = t === TokenType.USER_DEFINED;
      if (!user && t !== TokenType.CONTROL && t !== TokenType.UNKNOWN) continue;
      const text = vocab.tokens[id];
      if (text.length === 0) continue;
      let n = this.root;
      for (let i = 0; i < text.length; i++) {
        const c = text.charCodeAt(i);
        let m = n.children.get(c);
        if (!m) {
          m = node();
          n.children.set(c, m);
        }
        n = m;
      }
      // The lowest id wins when two special tokens share a text.
      if (n.any < 0) n.any = id;
      if (user && n.always < 0) n.always = id;
      this.first[text.charCodeAt(0)] = 1;
      count++;
    }
    this.count = count;
  }

  /** Calls onText for text between matches and onToken for each matched special token. */
  split(text: string, parseSpecial: boolean, onText: (s: string) => void, onToken: (id: number) => void): void {
    if (this.count === 0) {
      if (text.length > 0) onText(text);
      return;
    }
    let from = 0;
    const n = text.length;
    for (let i = 0; i < n; ) {
      if (this.first[text.charCodeAt(i)] === 0) {
        i++;
        continue;
      }
      let nd: Node | undefined = this.root;
      let bestId = -1;
      let bestEnd = -1;
      for (let j = i; j < n; j++) {
        nd = nd.children.get(text.charCodeAt(j));
        if (!nd) break;
        const id: number = parseSpecial ? nd.any : nd.always;
        if (id >= 0) {
          bestId = id;
          bestEnd = j + 1;
        }
      }
      if (bestId < 0) {
        i++;
        continue;
      }
      if (i > from) onText(text.slice(from, i));
      onToken(bestId);
      from = i = bestEnd;
    }
    if (from < n) onText(text.slice(from));
  }
}
