// bloomery chat: parsing one DeepSeek V3.1 tool call
// (`<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`)
// from streamed text; the arguments JSON streams out as the model writes it.
import { type CallMachine, type CallSink, type CallStep, isWs, partialMarker, skipWs } from "./tool-call-machine.ts";

export const DS_CALLS_BEGIN = "<｜tool▁calls▁begin｜>";
export const DS_CALL_BEGIN = "<｜tool▁call▁begin｜>";
export const DS_SEP = "<｜tool▁sep｜>";
export const DS_CALL_END = "<｜tool▁call▁end｜>";
export const DS_CALLS_END = "<｜tool▁calls▁end｜>";

const MAX_NAME = 256;

type St = "pre" | "name" | "args" | "end";

/**
 * One call, fed the text after its opening marker: `<｜tool▁calls▁begin｜>` (then the call's own
 * `<｜tool▁call▁begin｜>` is expected) or `<｜tool▁call▁begin｜>` (a later call of the block). After
 * the call's end marker the block's `<｜tool▁calls▁end｜>` is consumed when it follows.
 */
export class DeepSeekCall implements CallMachine {
  private text = "";
  private pos = 0;
  private st: St;
  private opened = false;
  private sentAny = false;
  private heldWs = "";

  constructor(
    private readonly sink: CallSink,
    private readonly isKnown: (name: string) => boolean,
    /** The call began with the block's `<｜tool▁calls▁begin｜>`. */
    wrapped: boolean,
  ) {
    this.st = wrapped ? "pre" : "name";
  }

  feed(chunk: string, final: boolean): CallStep {
    this.text = this.text.slice(this.pos) + chunk;
    this.pos = 0;
    for (;;) {
      const r = this.step(final);
      if (r === "again") continue;
      if (r === "more") {
        if (!final) return { status: "more" };
        return this.endAt(this.text.length);
      }
      if (r === "fail") return this.opened ? this.endAt(this.pos) : { status: "fail" };
      return r;
    }
  }

  private endAt(at: number): CallStep {
    if (!this.opened) return { status: "fail" };
    if (this.st === "args") {
      this.sendArgs(this.text.slice(this.pos), true);
      at = this.text.length;
    }
    this.closeArgs();
    return { status: "done", rest: this.text.slice(at) };
  }

  private closeArgs(): void {
    if (!this.sentAny) {
      this.sentAny = true;
      this.sink.args("{}");
    }
  }

  /** Streams argument text; leading whitespace is dropped, trailing whitespace waits for more. */
  private sendArgs(text: string, last: boolean): void {
    let t = text;
    if (!this.sentAny) {
      let i = 0;
      while (i < t.length && isWs(t[i])) i++;
      t = t.slice(i);
    }
    let end = t.length;
    while (end > 0 && isWs(t[end - 1])) end--;
    const body = t.slice(0, end);
    if (body !== "") {
      this.sink.args(this.heldWs + body);
      this.heldWs = "";
      this.sentAny = true;
    }
    this.heldWs = last ? "" : this.heldWs + t.slice(end);
  }

  private expect(marker: string): "ok" | "more" | "fail" {
    const tail = this.text.slice(this.pos, this.pos + marker.length);
    if (tail === marker) {
      this.pos += marker.length;
      return "ok";
    }
    return marker.startsWith(tail) ? "more" : "fail";
  }

  private step(final: boolean): "again" | "more" | "fail" | CallStep {
    switch (this.st) {
      case "pre": {
        this.pos = skipWs(this.text, this.pos);
        if (this.pos >= this.text.length) return "more";
        const r = this.expect(DS_CALL_BEGIN);
        if (r !== "ok") return r;
        this.st = "name";
        return "again";
      }
      case "name": {
        const sep = this.text.indexOf(DS_SEP, this.pos);
        const raw = this.text.slice(this.pos, sep < 0 ? this.text.length - partialMarker(this.text, DS_SEP) : sep);
        const name = raw.trim();
        if (raw.length > MAX_NAME || /[\s<]/.test(name)) return "fail";
        if (sep < 0) return final ? "fail" : "more";
        if (!this.isKnown(name)) return "fail";
        this.pos = sep + DS_SEP.length;
        this.opened = true;
        this.sink.open(name);
        this.st = "args";
        return "again";
      }
      case "args": {
        const end = this.text.indexOf(DS_CALL_END, this.pos);
        if (end >= 0) {
          this.sendArgs(this.text.slice(this.pos, end), true);
          this.closeArgs();
          this.pos = end + DS_CALL_END.length;
          this.st = "end";
          return "again";
        }
        if (!final) {
          const safe = this.text.length - partialMarker(this.text, DS_CALL_END);
          if (safe > this.pos) {
            this.sendArgs(this.text.slice(this.pos, safe), false);
            this.pos = safe;
          }
        }
        return "more";
      }
      case "end": {
        const at = skipWs(this.text, this.pos);
        const tail = this.text.slice(at, at + DS_CALLS_END.length);
        if (tail === DS_CALLS_END) return { status: "done", rest: this.text.slice(at + DS_CALLS_END.length) };
        if (!final && DS_CALLS_END.startsWith(tail)) return "more";
        // another call of the block (or text): read again by the stream
        return { status: "done", rest: this.text.slice(this.pos) };
      }
    }
  }
}
