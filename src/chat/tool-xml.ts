// bloomery chat: parsing one Qwen3-Coder / Qwen3.5 / Nemotron-3 XML tool call
// (`<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>`) from streamed
// text into OpenAI arguments JSON, converting each value by the tool's JSON schema.
import { type CallMachine, type CallSink, type CallStep, escapeFragment, partialMarker, skipWs } from "./tool-call-machine.ts";
import type { JsonSchema, ToolDef } from "./types.ts";

const FUNC_OPEN = "<function=";
const FUNC_CLOSE = "</function>";
const PARAM_OPEN = "<parameter=";
const PARAM_CLOSE = "</parameter>";
const CALL_CLOSE = "</tool_call>";

/** The JSON types a schema admits, or "any" when it does not say. */
export function schemaTypes(schema: unknown): Set<string> | "any" {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) return "any";
  const s = schema as JsonSchema;
  if (typeof s.type === "string") return new Set([s.type]);
  if (Array.isArray(s.type) && s.type.every((t) => typeof t === "string")) return new Set(s.type);
  const jsonType = (v: unknown): string =>
    v === null ? "null" : Array.isArray(v) ? "array" : typeof v === "object" ? "object" : typeof v === "boolean" ? "boolean" : typeof v === "number" ? "number" : "string";
  if (Array.isArray(s.enum) && s.enum.length > 0) return new Set(s.enum.map(jsonType));
  if ("const" in s) return new Set([jsonType(s.const)]);
  const union = s.anyOf ?? s.oneOf;
  if (Array.isArray(union) && union.length > 0) {
    const out = new Set<string>();
    for (const member of union) {
      const t = schemaTypes(member);
      if (t === "any") return "any";
      for (const x of t) out.add(x);
    }
    return out;
  }
  return "any";
}

const PY_LITERALS: Record<string, string> = { True: "true", False: "false", None: "null" };

/**
 * The JSON text for a parameter value: strings stay strings; for other admitted types the
 * value is parsed as JSON (Python's True/False/None accepted), falling back to a string.
 */
export function convertParamValue(raw: string, types: Set<string> | "any"): string {
  if (types !== "any" && types.size === 1 && types.has("string")) return JSON.stringify(raw);
  const text = raw.trim();
  const literal = PY_LITERALS[text] ?? text;
  let parsed: unknown;
  let ok = false;
  try {
    parsed = JSON.parse(literal);
    ok = true;
  } catch {
    ok = false;
  }
  if (ok) {
    const kind =
      parsed === null ? "null" : Array.isArray(parsed) ? "array" : typeof parsed === "object" ? "object" : typeof parsed;
    const stringOk = types === "any" || types.has("string");
    if (kind === "string") {
      if (!stringOk) return literal;
    } else {
      const admitted =
        types === "any" ||
        types.has(kind) ||
        (kind === "number" && types.has("integer") && Number.isInteger(parsed));
      if (admitted || !stringOk) return literal;
    }
  }
  return JSON.stringify(raw);
}

/**
 * A call's arguments object written parameter by parameter (the XML and GLM call formats): a
 * parameter whose schema says string is streamed as its value arrives (escaped, a split surrogate
 * held back), any other is kept and converted by its schema at its end.
 */
export class ParamArgs {
  private n = 0;
  private name = "";
  private types: Set<string> | "any" = "any";
  private stream = false;
  private acc = "";
  private heldSurrogate = "";

  constructor(private readonly sink: CallSink, private readonly tools: Map<string, ToolDef>) {}

  /** Starts parameter `name` of tool `call`. */
  open(call: string, name: string): void {
    this.name = name;
    this.types = schemaTypes(this.tools.get(call)?.function.parameters?.properties?.[name]);
    this.stream = this.types !== "any" && this.types.size === 1 && this.types.has("string");
    this.acc = "";
    this.heldSurrogate = "";
    if (this.stream) this.sink.args(`${this.n > 0 ? "," : ""}${JSON.stringify(name)}:"`);
  }

  /** Value text that cannot be part of the closing tag: streamed out, or kept. */
  take(text: string): void {
    if (text === "") return;
    if (!this.stream) {
      this.acc += text;
      return;
    }
    const { escaped, held } = escapeFragment(this.heldSurrogate + text, false);
    if (escaped !== "") this.sink.args(escaped);
    this.heldSurrogate = held;
  }

  /** Ends the parameter with the value's rest `last`. */
  close(last: string): void {
    if (this.stream) {
      const { escaped } = escapeFragment(this.heldSurrogate + last, true);
      this.sink.args(`${escaped}"`);
    } else {
      this.sink.args(`${this.n > 0 ? "," : ""}${JSON.stringify(this.name)}:${convertParamValue(this.acc + last, this.types)}`);
    }
    this.acc = "";
    this.n++;
  }
}

type St = "pre" | "name" | "between" | "pname" | "pstart" | "pvalue" | "end";

/** Longest function or parameter name accepted before its `>`. */
const MAX_NAME = 256;

/**
 * One XML call. `text` holds only what is not consumed yet (a parameter value is streamed out
 * or kept by its ParamArgs as it arrives), so long values cost linear time.
 */
export class XmlCall implements CallMachine {
  private text = "";
  private pos = 0;
  private st: St;
  private opened = false;
  private closed = false;
  private nameOfCall = "";
  private readonly params: ParamArgs;

  constructor(
    private readonly sink: CallSink,
    private readonly tools: Map<string, ToolDef>,
    /** The call began with `<tool_call>` (else straight with `<function=`, already consumed). */
    wrapped: boolean,
  ) {
    this.st = wrapped ? "pre" : "name";
    this.params = new ParamArgs(sink, tools);
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

  /** Ends the call early (cut off or malformed after it opened); rest is text from `at`. */
  private endAt(at: number): CallStep {
    if (!this.opened) return { status: "fail" };
    if (this.st === "pvalue" || this.st === "pstart") {
      this.closeParam(this.text.slice(this.pos), true);
      this.st = "between";
      at = this.text.length;
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

  /** Ends the current parameter; `last` is the value's rest (its trailing "\n" is dropped). */
  private closeParam(last: string, cutOff: boolean): void {
    this.params.close(!cutOff && last.endsWith("\n") ? last.slice(0, -1) : last);
  }

  /** Expects `marker` at pos: "ok" (consumed), "more" (a prefix so far) or "fail". */
  private expect(marker: string): "ok" | "more" | "fail" {
    const tail = this.text.slice(this.pos, this.pos + marker.length);
    if (tail === marker) {
      this.pos += marker.length;
      return "ok";
    }
    return marker.startsWith(tail) ? "more" : "fail";
  }

  /** A name up to `>` at pos: the name, "more", or "fail" (newline, `<`, or too long). */
  private readName(): string | "more" | "fail" {
    const gt = this.text.indexOf(">", this.pos);
    const body = this.text.slice(this.pos, gt < 0 ? undefined : gt);
    if (/[\n<]/.test(body) || body.length > MAX_NAME) return "fail";
    if (gt < 0) return "more";
    this.pos = gt + 1;
    return body.trim();
  }

  private step(final: boolean): "again" | "more" | "fail" | CallStep {
    switch (this.st) {
      case "pre": {
        this.pos = skipWs(this.text, this.pos);
        const r = this.expect(FUNC_OPEN);
        if (r !== "ok") return r;
        this.st = "name";
        return "again";
      }
      case "name": {
        const start = this.pos;
        const name = this.readName();
        if (name === "more" || name === "fail") return name;
        if (!this.tools.has(name)) {
          this.pos = start;
          return "fail";
        }
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
        const p = this.expect(PARAM_OPEN);
        if (p === "ok") {
          this.st = "pname";
          return "again";
        }
        const f = this.expect(FUNC_CLOSE);
        if (f === "ok") {
          this.closeArgs();
          this.st = "end";
          return "again";
        }
        // a call closed without its </function>
        const c = this.expect(CALL_CLOSE);
        if (c === "ok") {
          this.closeArgs();
          return { status: "done", rest: this.text.slice(this.pos) };
        }
        return p === "more" || f === "more" || c === "more" ? "more" : "fail";
      }
      case "pname": {
        const name = this.readName();
        if (name === "more") return "more";
        if (name === "fail") {
          this.pos -= PARAM_OPEN.length;
          return "fail";
        }
        this.params.open(this.nameOfCall, name);
        this.st = "pstart";
        return "again";
      }
      case "pstart": {
        if (this.pos >= this.text.length) return "more";
        if (this.text[this.pos] === "\n") this.pos++;
        this.st = "pvalue";
        return "again";
      }
      case "pvalue": {
        const close = this.text.indexOf(PARAM_CLOSE, this.pos);
        if (close >= 0) {
          this.closeParam(this.text.slice(this.pos, close), false);
          this.pos = close + PARAM_CLOSE.length;
          this.st = "between";
          return "again";
        }
        if (!final) {
          // Take what cannot be part of the closing tag (nor the newline before it).
          let safe = this.text.length - partialMarker(this.text, PARAM_CLOSE);
          if (safe > this.pos && this.text[safe - 1] === "\n") safe--;
          if (safe > this.pos) {
            this.params.take(this.text.slice(this.pos, safe));
            this.pos = safe;
          }
        }
        return "more";
      }
      case "end": {
        const at = skipWs(this.text, this.pos);
        const tail = this.text.slice(at, at + CALL_CLOSE.length);
        if (tail === CALL_CLOSE) return { status: "done", rest: this.text.slice(at + CALL_CLOSE.length) };
        if (!final && CALL_CLOSE.startsWith(tail)) return "more";
        return { status: "done", rest: this.text.slice(at) };
      }
    }
  }
}
