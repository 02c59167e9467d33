// bloomery chat: parsing one GLM-4.5 .. 4.7 tool call
// (`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`, with or without
// newlines between the tags as GLM-4.5/4.6 write them) from streamed text into OpenAI arguments
// JSON, each value converted by the tool's JSON schema (strings raw, others parsed as JSON).
import { type CallMachine, type CallSink, type CallStep, partialMarker, skipWs } from "./tool-call-machine.ts";
import { ParamArgs } from "./tool-xml.ts";
import type { ToolDef } from "./types.ts";

const KEY_OPEN = "<arg_key>";
const KEY_CLOSE = "</arg_key>";
const VALUE_OPEN = "<arg_value>";
const VALUE_CLOSE = "</arg_value>";
const CALL_CLOSE = "</tool_call>";

/** Longest function or argument name accepted. */
const MAX_NAME = 256;

type St = "name" | "between" | "key" | "vopen" | "value";

/** One GLM call, fed the text after `<tool_call>`. */
export class GlmCall implements CallMachine {
  private text = "";
  private pos = 0;
  private st: St = "name";
  private opened = false;
  private closed = false;
  private nameOfCall = "";
  private readonly args: ParamArgs;

  constructor(
    private readonly sink: CallSink,
    private readonly tools: Map<string, ToolDef>,
  ) {
    this.args = new ParamArgs(sink, tools);
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

  /** Ends the call early (cut off, or malformed after it opened); `rest` is the text from `at`. */
  private endAt(at: number): CallStep {
    if (!this.opened) return { status: "fail" };
    if (this.st === "value") {
      this.args.close(this.text.slice(this.pos));
      at = this.text.length;
    } else if (this.st === "vopen") {
      this.args.close("");
    }
    this.closeArgs();
    return { status: "done", rest: this.text.slice(at) };
  }

  private closeArgs(): void {
    if (!this.closed) {
      this.closed = true;
      this.sink.args("}");
    }
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
      case "name": {
        const lt = this.text.indexOf("<", this.pos);
        const raw = this.text.slice(this.pos, lt < 0 ? undefined : lt);
        const name = raw.trim();
        if (raw.length > MAX_NAME || /\s/.test(name)) return "fail";
        if (lt < 0) return final ? "fail" : "more";
        if (!this.tools.has(name)) return "fail";
        this.pos = lt;
        this.opened = true;
        this.nameOfCall = name;
        this.sink.open(name);
        this.sink.args("{");
        this.st = "between";
        return "again";
      }
      case "between": {
        this.pos = skipWs(this.text, this.pos);
        if (this.pos >= this.text.length) return "more";
        const k = this.expect(KEY_OPEN);
        if (k === "ok") {
          this.st = "key";
          return "again";
        }
        const c = this.expect(CALL_CLOSE);
        if (c === "ok") {
          this.closeArgs();
          return { status: "done", rest: this.text.slice(this.pos) };
        }
        return k === "more" || c === "more" ? "more" : "fail";
      }
      case "key": {
        const close = this.text.indexOf(KEY_CLOSE, this.pos);
        const body = this.text.slice(this.pos, close < 0 ? undefined : close);
        const settled = close >= 0 ? body : body.slice(0, body.length - partialMarker(body, KEY_CLOSE));
        if (settled.includes("<") || body.length > MAX_NAME) return "fail";
        if (close < 0) return "more";
        this.pos = close + KEY_CLOSE.length;
        this.args.open(this.nameOfCall, body.trim());
        this.st = "vopen";
        return "again";
      }
      case "vopen": {
        this.pos = skipWs(this.text, this.pos);
        if (this.pos >= this.text.length) return "more";
        const v = this.expect(VALUE_OPEN);
        if (v !== "ok") {
          if (v === "fail") this.args.close("");
          return v;
        }
        this.st = "value";
        return "again";
      }
      case "value": {
        const close = this.text.indexOf(VALUE_CLOSE, this.pos);
        if (close >= 0) {
          this.args.close(this.text.slice(this.pos, close));
          this.pos = close + VALUE_CLOSE.length;
          this.st = "between";
          return "again";
        }
        if (!final) {
          const safe = this.text.length - partialMarker(this.text, VALUE_CLOSE);
          if (safe > this.pos) {
            this.args.take(this.text.slice(this.pos, safe));
            this.pos = safe;
          }
        }
        return "more";
      }
    }
  }
}
