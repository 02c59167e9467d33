// bloomery server: the worker that reads request bodies and tokenizes prompts off the serving
// thread, so a large or hostile request costs its own time, never the streams of others: JSON
// bodies checked for depth before they are parsed (body-depth.ts), and prompt texts encoded with
// the model's tokenizer (built here from the same vocabulary as the main thread's).
declare const self: Worker;
import { Tokenizer, type VocabData } from "../tokenizer/index.ts";
import { checkJsonDepth, JsonDepthError } from "./body-depth.ts";
import type { BodyRequest, BodyReply } from "./body-protocol.ts";

let tokenizer: Tokenizer | undefined;
let tokenizerError: string | undefined;

function reply(m: BodyReply, transfer: ArrayBuffer[] = []): void {
  self.postMessage(m, transfer);
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function handle(m: BodyRequest): void {
  if (m.type === "vocab") {
    try {
      tokenizer = Tokenizer.fromVocab(m.vocab as VocabData);
    } catch (e) {
      tokenizerError = message(e);
    }
    return;
  }
  if (m.type === "parse") {
    try {
      const text = new TextDecoder().decode(m.bytes);
      if (text.trim() === "") throw new SyntaxError("the request body is empty; expected a JSON object");
      checkJsonDepth(text, m.maxDepth);
      reply({ id: m.id, ok: true, value: JSON.parse(text) as unknown });
    } catch (e) {
      reply({ id: m.id, ok: false, kind: e instanceof JsonDepthError ? "depth" : "syntax", message: message(e) });
    }
    return;
  }
  // encode
  if (!tokenizer) {
    reply({ id: m.id, ok: false, kind: "tokenizer", message: tokenizerError ?? "the tokenizer is not loaded" });
    return;
  }
  try {
    const ids = Int32Array.from(tokenizer.encode(m.text, { addSpecial: m.addSpecial, parseSpecial: m.parseSpecial }));
    reply({ id: m.id, ok: true, ids }, [ids.buffer]);
  } catch (e) {
    reply({ id: m.id, ok: false, kind: "tokenizer", message: message(e) });
  }
}

self.onmessage = (ev: MessageEvent<BodyRequest>) => handle(ev.data);
