// bloomery server: the serving thread's handle on the body worker (body-worker.ts): JSON bodies
// and prompt texts past a few KiB are parsed and tokenized there, smaller ones here at once (the
// depth check first either way); the worker starts with the server, the tokenizer once loaded.
import type { EncodeOptions, Tokenizer, VocabData } from "../tokenizer/index.ts";
import { checkJsonDepth, JsonDepthError, MAX_JSON_DEPTH } from "./body-depth.ts";
import type { BodyReply, BodyRequest } from "./body-protocol.ts";

/** Bodies and texts of at most this many characters are handled on the serving thread. */
export const INLINE_CHARS = 16 * 1024;

/** A body that is not JSON, or nests too deep: the route answers 400 with the message. */
export class BodyError extends Error {
  override readonly name = "BodyError";
  constructor(readonly kind: "depth" | "syntax", message: string) {
    super(message);
  }
}

/**
 * The worker's module: beside this file in a checkout; inside the executable (built with this
 * file's worker as an entry of `bun build --compile`) at server/body-worker.js under the bundle root.
 */
function workerUrl(): string {
  if (import.meta.url.includes("/$bunfs/")) return "/$bunfs/root/server/body-worker.js";
  return new URL("./body-worker.ts", import.meta.url).href;
}

type Waiter = { resolve: (r: BodyReply) => void; reject: (e: Error) => void };

export class BodyWorker {
  private worker?: Worker;
  private nextId = 1;
  private readonly waiting = new Map<number, Waiter>();
  private tokenizer?: Tokenizer;

  constructor(readonly maxDepth = MAX_JSON_DEPTH) {}

  private get w(): Worker {
    if (!this.worker) {
      const w = new Worker(workerUrl());
      w.onmessage = (ev: MessageEvent<BodyReply>) => {
        const p = this.waiting.get(ev.data.id);
        this.waiting.delete(ev.data.id);
        p?.resolve(ev.data);
      };
      w.onerror = (e) => {
        const err = new Error(`the body worker failed: ${e.message}`);
        for (const p of this.waiting.values()) p.reject(err);
        this.waiting.clear();
      };
      w.unref();
      this.worker = w;
    }
    return this.worker;
  }

  private ask(m: BodyRequest & { id: number }): Promise<BodyReply> {
    return new Promise((resolve, reject) => {
      this.waiting.set(m.id, { resolve, reject });
      this.w.postMessage(m);
    });
  }

  /** Starts the worker now (so the first large request does not pay for it). */
  start(): void {
    void this.w;
  }

  /** The model's tokenizer: here for short texts, and its vocabulary to the worker for long ones. */
  setTokenizer(tok: Tokenizer, vocab: VocabData): void {
    this.tokenizer = tok;
    this.w.postMessage({ type: "vocab", vocab } satisfies BodyRequest);
  }

  /**
   * A request body as JSON; BodyError when it is empty, not JSON, or nests deeper than maxDepth.
   * Past INLINE_CHARS bytes the bytes move to the worker (no copy), which decodes and parses them.
   */
  async parse(bytes: Uint8Array): Promise<unknown> {
    if (bytes.length <= INLINE_CHARS) {
      const text = new TextDecoder().decode(bytes);
      if (text.trim() === "") throw new BodyError("syntax", "the request body is empty; expected a JSON object");
      try {
        checkJsonDepth(text, this.maxDepth);
        return JSON.parse(text) as unknown;
      } catch (e) {
        throw new BodyError(e instanceof JsonDepthError ? "depth" : "syntax", e instanceof Error ? e.message : String(e));
      }
    }
    const own = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : bytes.slice();
    const id = this.nextId++;
    const r = await new Promise<BodyReply>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.w.postMessage({ type: "parse", id, bytes: own, maxDepth: this.maxDepth } satisfies BodyRequest, [own.buffer as ArrayBuffer]);
    });
    if (!r.ok) throw new BodyError(r.kind === "depth" ? "depth" : "syntax", r.message);
    return (r as { value: unknown }).value;
  }

  /** Token ids of a text (a prompt): here when short, else in the worker. */
  async encode(text: string, opts: EncodeOptions = {}): Promise<number[]> {
    const tok = this.tokenizer;
    if (!tok) throw new Error("the tokenizer is not loaded");
    if (text.length <= INLINE_CHARS) return tok.encode(text, opts);
    const r = await this.ask({ type: "encode", id: this.nextId++, text, addSpecial: opts.addSpecial ?? false, parseSpecial: opts.parseSpecial ?? false });
    if (!r.ok) throw new Error(r.message);
    return Array.from((r as { ids: Int32Array }).ids);
  }

  close(): void {
    this.worker?.terminate();
    this.worker = undefined;
  }
}
