// bloomery chat: parsing one Hermes/Qwen3 tool call, `{"name": ..., "arguments": {...}}` then
// `</tool_call>`, from streamed text with a resumable JSON scanner (arguments stream raw).
import { type CallMachine, type CallSink, type CallStep, isWs, skipWs } from "./tool-call-machine.ts";

const CLOSE = "</tool_call>";
const ARG_KEYS = new Set(["arguments", "parameters"]);

type St = "pre" | "key-or-end" | "key" | "colon" | "value-start" | "value" | "after-value" | "close";
type ValueKind = "string" | "container" | "scalar";

export class HermesCall implements CallMachine {
  private text = "";
  private pos = 0;
  private st: St = "pre";
  private objStart = -1;
  // key being read
  private keyStart = -1;
  private key = "";
  private esc = false;
  // value being read
  private valStart = -1;
  private valKind: ValueKind = "scalar";
  private inStr = false;
  private stack: string[] = [];
  // what was found
  private name: string | null = null;
  private argsStart = -1;
  private argsEnd = -1;
  private argsKind: ValueKind = "container";
  private argsSent = -1;
  private opened = false;
  private sentAny = false;
  // The text is kept as one growing string but scanned through the newest chunk only: indexing
  // or slicing the whole string on every feed would copy it each time (quadratic on long calls).
  private chunk = "";
  private base = 0;

  constructor(
    private readonly sink: CallSink,
    private readonly isKnown: (name: string) => boolean,
  ) {}

  /** text[a, b), read from the newest chunk when it lies there. */
  private slice(a: number, b: number = this.base + this.chunk.length): string {
    return a >= this.base ? this.chunk.slice(a - this.base, b - this.base) : this.text.slice(a, b);
  }

  feed(chunk: string, final: boolean): CallStep {
    this.base = this.text.length;
    this.chunk = chunk;
    this.text += chunk;
    const r = this.scan();
    // The call opens as soon as its name is complete, whatever follows in the same text, so
    // that any chunking of the output decides the same way.
    if (this.name !== null && !this.opened) {
      if (!this.isKnown(this.name)) return { status: "fail" };
      this.opened = true;
      this.sink.open(this.name);
    }
    this.sendArgs();
    if (r === "fail") return this.failOrEnd(this.pos);
    if (this.st === "close") {
      const at = skipWs(this.text, this.pos);
      const tail = this.text.slice(at);
      if (tail.startsWith(CLOSE)) return this.finishCall(this.text.slice(at + CLOSE.length));
      if (!final && CLOSE.startsWith(tail)) return { status: "more" };
      // no closing tag: the call still ends with its object
      return this.finishCall(tail);
    }
    if (final) return this.failOrEnd(this.text.length);
    return { status: "more" };
  }

  /** The object is complete: check it, end the call, hand back what follows. */
  private finishCall(rest: string): CallStep {
    if (!this.opened) return { status: "fail" };
    if (!this.sentAny) this.sink.args("{}");
    return { status: "done", rest };
  }

  /** Scanning stopped on bad or missing text at `at`: fail before the call opened, else close it. */
  private failOrEnd(at: number): CallStep {
    if (!this.opened) return { status: "fail" };
    this.closeArgs();
    return { status: "done", rest: this.text.slice(at) };
  }

  /** Emits closers for a cut-off arguments value so that its text stays valid JSON. */
  private closeArgs(): void {
    const inArgs = this.argsStart >= 0 && this.argsEnd < 0;
    if (inArgs && this.argsKind === "container") {
      let tail = this.inStr ? '"' : "";
      for (let i = this.stack.length - 1; i >= 0; i--) tail += this.stack[i] === "{" ? "}" : "]";
      if (tail !== "") this.sink.args(tail);
    }
    if (!this.sentAny) this.sink.args("{}");
    this.sentAny = true;
  }

  private sendArgs(): void {
    if (!this.opened || this.argsStart < 0) return;
    if (this.argsKind !== "container") {
      if (this.argsEnd < 0 || this.argsSent >= 0) return;
      const raw = this.slice(this.argsStart, this.argsEnd);
      let out = raw;
      if (this.argsKind === "string") {
        try {
          out = JSON.parse(raw) as string;
        } catch {
          out = raw;
        }
      }
      this.argsSent = this.argsEnd;
      this.sink.args(out);
      this.sentAny = true;
      return;
    }
    const from = this.argsSent < 0 ? this.argsStart : this.argsSent;
    const inArgs = this.st === "value" && this.valStart === this.argsStart;
    const to = this.argsEnd >= 0 ? this.argsEnd : inArgs ? this.pos : from;
    if (to > from) {
      this.sink.args(this.slice(from, to));
      this.sentAny = true;
      this.argsSent = to;
    }
  }

  private endValue(end: number): void {
    if (this.key === "name") {
      if (this.valKind === "string" && this.name === null) {
        try {
          this.name = JSON.parse(this.slice(this.valStart, end)) as string;
        } catch {
          this.name = null;
        }
      }
    } else if (ARG_KEYS.has(this.key) && this.argsEnd < 0 && this.argsStart === this.valStart) {
      this.argsEnd = end;
    }
    this.st = "after-value";
  }

  /** Advances the scanner over new text; "fail" when the text cannot be the expected JSON. */
  private scan(): "ok" | "fail" {
    const end = this.base + this.chunk.length;
    while (this.pos < end) {
      const c = this.chunk[this.pos - this.base];
      switch (this.st) {
        case "pre":
          if (isWs(c)) break;
          if (c !== "{") return "fail";
          this.objStart = this.pos;
          this.st = "key-or-end";
          break;
        case "key-or-end":
          if (isWs(c) || c === ",") break;
          if (c === "}") {
            this.st = "close";
            this.pos++;
            return this.checkObject();
          }
          if (c !== '"') return "fail";
          this.keyStart = this.pos;
          this.esc = false;
          this.st = "key";
          break;
        case "key":
          if (this.esc) this.esc = false;
          else if (c === "\\") this.esc = true;
          else if (c === '"') {
            try {
              this.key = JSON.parse(this.slice(this.keyStart, this.pos + 1)) as string;
            } catch {
              return "fail";
            }
            this.st = "colon";
          }
          break;
        case "colon":
          if (isWs(c)) break;
          if (c !== ":") return "fail";
          this.st = "value-start";
          break;
        case "value-start":
          if (isWs(c)) break;
          this.valStart = this.pos;
          this.inStr = false;
          this.esc = false;
          this.stack = [];
          if (c === '"') {
            this.valKind = "string";
            this.inStr = true;
          } else if (c === "{" || c === "[") {
            this.valKind = "container";
            this.stack.push(c);
          } else if (/[-0-9tfn]/.test(c)) {
            this.valKind = "scalar";
          } else {
            return "fail";
          }
          if (ARG_KEYS.has(this.key) && this.argsStart < 0) {
            this.argsStart = this.pos;
            this.argsKind = this.valKind;
          }
          this.st = "value";
          break;
        case "value":
          if (this.valKind === "scalar") {
            if (isWs(c) || c === "," || c === "}") {
              this.endValue(this.pos);
              continue; // re-read c as after-value
            }
            break;
          }
          if (this.inStr) {
            if (this.esc) this.esc = false;
            else if (c === "\\") this.esc = true;
            else if (c === '"') {
              this.inStr = false;
              if (this.valKind === "string") {
                this.pos++;
                this.endValue(this.pos);
                continue;
              }
            }
            break;
          }
          if (c === '"') this.inStr = true;
          else if (c === "{" || c === "[") this.stack.push(c);
          else if (c === "}" || c === "]") {
            const open = this.stack.pop();
            if ((open === "{") !== (c === "}")) return "fail";
            if (this.stack.length === 0) {
              this.pos++;
              this.endValue(this.pos);
              continue;
            }
          }
          break;
        case "after-value":
          if (isWs(c)) break;
          if (c === ",") {
            this.st = "key-or-end";
            break;
          }
          if (c === "}") {
            this.st = "close";
            this.pos++;
            return this.checkObject();
          }
          return "fail";
        case "close":
          return "ok";
      }
      this.pos++;
    }
    return "ok";
  }

  /** The object just closed: it must be valid JSON with a string name. */
  private checkObject(): "ok" | "fail" {
    try {
      const obj = JSON.parse(this.text.slice(this.objStart, this.pos)) as Record<string, unknown>;
      if (typeof obj.name !== "string") return "fail";
    } catch {
      return "fail";
    }
    return "ok";
  }
}
