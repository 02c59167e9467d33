// Test helper: the real HTTP app (buildApp) on a ServerContext whose engine is scripted: each
// generation streams a text the test chooses, in pseudo-random token-sized pieces (or, with
// `tokens`, as the engine would: encoded, decoded token by token with special tokens skipped but
// the request's preserved ones, stopped at the first end-of-generation token), and records the
// request for the test to check.
// The tokenizer is a real GGUF's, optionally with extra control tokens (a family's specials).
import { defaultServerOptions, type ServerOptions } from "../src/cli/flags.ts";
import type { EngineClient } from "../src/engine/client.ts";
import type { DoneEvent, GenerateRequest, ModelInfo, StopType, TokenEvent } from "../src/engine/protocol.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { buildApp } from "../src/server/app.ts";
import { ServerContext } from "../src/server/state.ts";
import { StreamDecoder, Tokenizer, TokenType, vocabFromMetadata } from "../src/tokenizer/index.ts";

export type EngineRequest = Omit<GenerateRequest, "id">;

/** What one generation writes: its text, and how it ends (default "eos"). */
export type Script = (req: EngineRequest, call: number) => string | { text: string; stop?: StopType };

/** Splits text into pieces of 1 to 6 code points (a fixed pseudo-random sequence per seed). */
export function pieces(text: string, seed: number): string[] {
  const cps = Array.from(text);
  const out: string[] = [];
  let x = (seed * 2654435761) >>> 0;
  for (let i = 0; i < cps.length; ) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    const n = 1 + (x % 6);
    out.push(cps.slice(i, i + n).join(""));
    i += n;
  }
  return out;
}

function done(stopType: StopType, n: number, prompt: number): DoneEvent {
  const ms = Math.max(1, n);
  return {
    id: 0, stopType, stoppingWord: "", text: "", tokensPredicted: n, tokensEvaluated: prompt, tokensCached: 0, truncated: false, idSlot: 0,
    timings: { prompt_n: prompt, prompt_ms: 1, prompt_per_token_ms: 1 / Math.max(1, prompt), prompt_per_second: prompt * 1000, predicted_n: n, predicted_ms: ms, predicted_per_token_ms: 1, predicted_per_second: 1000, cache_n: 0 },
  };
}

/** A scripted engine: `generate` as EngineClient has it, nothing else. */
export class FakeEngine {
  readonly requests: EngineRequest[] = [];
  seed = 1;
  /** Set: scripts are tokenized and streamed token by token as the engine's task does. */
  tokenizer: Tokenizer | null = null;

  constructor(public script: Script) {}

  /** The script as the engine would stream it: one event per token, up to the first EOG token. */
  private tokenEvents(text: string, ignoreEos: boolean, preserved?: number[]): { events: TokenEvent[]; eog: boolean } {
    const tok = this.tokenizer!;
    const dec = new StreamDecoder(tok, { skipSpecial: true, keep: preserved ? new Set(preserved) : undefined });
    const events: TokenEvent[] = [];
    for (const id of tok.encode(text, { addSpecial: false, parseSpecial: true })) {
      if (tok.isEog(id) && !ignoreEos) return { events, eog: true };
      events.push({ id: 0, token: id, text: dec.push(id) });
    }
    const rest = dec.flush();
    if (rest !== "") events.push({ id: 0, token: 0, text: rest });
    return { events, eog: false };
  }

  async generate(req: EngineRequest, handlers: { onTokens?: (e: TokenEvent[]) => void; signal?: AbortSignal } = {}): Promise<DoneEvent> {
    const call = this.requests.length;
    this.requests.push(req);
    const s = this.script(req, call);
    const { text, stop } = typeof s === "string" ? { text: s, stop: undefined } : s;
    let n = 0;
    const tokens = this.tokenizer ? this.tokenEvents(text, req.ignoreEos, req.preservedTokens) : null;
    const events = tokens ? tokens.events : pieces(text, this.seed + call).map((p, i): TokenEvent => ({ id: 0, token: 100 + (i % 50), text: p }));
    for (const e of events) {
      await Promise.resolve();
      if (handlers.signal?.aborted) return done("cancel", n, req.prompt.length);
      handlers.onTokens?.([e]);
      n++;
    }
    return done(stop ?? (tokens && !tokens.eog ? "limit" : "eos"), n, req.prompt.length);
  }
}

export interface FakeServer {
  ctx: ServerContext;
  engine: FakeEngine;
  /** POST a JSON body to a route of the app; the raw Response. */
  post(path: string, body: unknown): Promise<Response>;
}

export interface FakeVocab {
  /** Control tokens appended to the GGUF's vocabulary (as a family's GGUF marks its specials). */
  specials?: string[];
  /** Stream scripts token by token through this vocabulary (FakeEngine.tokenizer). */
  tokens?: boolean;
}

/** The app with `template` as the model's chat template, the tokenizer of `ggufPath`, and a scripted engine. */
export function fakeServer(template: string, ggufPath: string, script: Script, opts: Partial<ServerOptions> = {}, vocab: FakeVocab = {}): FakeServer {
  const o: ServerOptions = { ...defaultServerOptions(), ...opts };
  const ctx = new ServerContext(o, [], () => {});
  const g = GgufFile.open(ggufPath);
  const extra = vocab.specials ?? [];
  const vocabData = vocabFromMetadata((k) => {
    const v = g.raw(k);
    if (extra.length === 0) return v;
    if (k === "tokenizer.ggml.tokens") return [...(v as string[]), ...extra];
    if (k === "tokenizer.ggml.token_type") return [...Array.from(v as ArrayLike<number>), ...extra.map(() => TokenType.CONTROL)];
    return v;
  });
  ctx.tokenizer = Tokenizer.fromVocab(vocabData);
  ctx.body.setTokenizer(ctx.tokenizer, vocabData);
  const engine = new FakeEngine(script);
  if (vocab.tokens) engine.tokenizer = ctx.tokenizer;
  ctx.client = engine as unknown as EngineClient;
  const info: ModelInfo = {
    path: ggufPath, arch: "gpt-oss", name: "fake", nVocab: ctx.tokenizer.nVocab, nCtxTrain: 4096, nEmbd: 64, nParams: 1, sizeBytes: 1,
    nCtx: 8192, nCtxSlot: 8192, nSlots: 1, backend: "cpu", chatTemplate: template, bosToken: "", eosToken: "", fileType: "F16",
  };
  ctx.info = info;
  ctx.modelPath = ggufPath;
  ctx.setTemplate(undefined, template);
  ctx.status = "ready";
  const app = buildApp(ctx, 1 << 20);
  return {
    ctx,
    engine,
    post: (path, body) => app.handle(new Request(`http://127.0.0.1${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })),
  };
}
