// Test helper: the real HTTP app (buildApp) on a ServerContext whose engine is scripted: each
// generation streams a text the test chooses, in pseudo-random token-sized pieces, and records
// the request (prompt, grammar ...) for the test to check. The tokenizer is a real GGUF's.
import { defaultServerOptions, type ServerOptions } from "../src/cli/flags.ts";
import type { EngineClient } from "../src/engine/client.ts";
import type { DoneEvent, GenerateRequest, ModelInfo, StopType, TokenEvent } from "../src/engine/protocol.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { buildApp } from "../src/server/app.ts";
import { ServerContext } from "../src/server/state.ts";
import { Tokenizer, vocabFromMetadata } from "../src/tokenizer/index.ts";

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

  constructor(public script: Script) {}

  async generate(req: EngineRequest, handlers: { onTokens?: (e: TokenEvent[]) => void; signal?: AbortSignal } = {}): Promise<DoneEvent> {
    const call = this.requests.length;
    this.requests.push(req);
    const s = this.script(req, call);
    const { text, stop } = typeof s === "string" ? { text: s, stop: undefined } : s;
    let n = 0;
    for (const p of pieces(text, this.seed + call)) {
      await Promise.resolve();
      if (handlers.signal?.aborted) return done("cancel", n, req.prompt.length);
      handlers.onTokens?.([{ id: 0, token: 100 + (n % 50), text: p }]);
      n++;
    }
    return done(stop ?? "eos", n, req.prompt.length);
  }
}

export interface FakeServer {
  ctx: ServerContext;
  engine: FakeEngine;
  /** POST a JSON body to a route of the app; the raw Response. */
  post(path: string, body: unknown): Promise<Response>;
}

/** The app with `template` as the model's chat template, the tokenizer of `ggufPath`, and a scripted engine. */
export function fakeServer(template: string, ggufPath: string, script: Script, opts: Partial<ServerOptions> = {}): FakeServer {
  const o: ServerOptions = { ...defaultServerOptions(), ...opts };
  const ctx = new ServerContext(o, [], () => {});
  const g = GgufFile.open(ggufPath);
  ctx.tokenizer = Tokenizer.fromVocab(vocabFromMetadata((k) => g.raw(k)));
  const engine = new FakeEngine(script);
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
