// bloomery server: what every route reads: the options, the loading state, the engine client,
// the main-thread tokenizer, the chat template and format, metrics and admission.
import { basename } from "node:path";
import type { ServerOptions } from "../cli/flags.ts";
import { type ChatFormat, detectChatFormat, getChatTemplate } from "../chat/index.ts";
import type { EngineClient } from "../engine/client.ts";
import type { ModelInfo } from "../engine/protocol.ts";
import type { Tokenizer } from "../tokenizer/index.ts";
import { BodyWorker } from "./body-client.ts";
import type { CorsPolicy, ParsedBody } from "./http.ts";
import type { RequestTrace } from "./request-log.ts";
import { Admission, Metrics } from "./metrics.ts";
import type { ParamContext } from "./params.ts";

/** The template llama-server falls back to when a model has none (ChatML). */
export const CHATML_TEMPLATE =
  "{%- for message in messages -%}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}{%- endfor -%}" +
  "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

/** Built-in template names `--chat-template` accepts besides Jinja source. */
export const BUILTIN_TEMPLATES: Record<string, string> = { chatml: CHATML_TEMPLATE };

export type Log = (line: string) => void;

export class ServerContext {
  status: "loading" | "ready" = "loading";
  client?: EngineClient;
  info?: ModelInfo;
  tokenizer!: Tokenizer;
  /** chat template source in use */
  template = CHATML_TEMPLATE;
  chatFormat!: ChatFormat;
  readonly metrics = new Metrics();
  admission = new Admission(1, 0);
  /** the GGUF file loaded (for -hf, known once the download is done) */
  modelPath = "";
  /** request bodies the middleware parsed, by the signal of the request the routes see */
  readonly parsedBodies = new WeakMap<AbortSignal, ParsedBody>();
  /** what each request did (its generations), by the signal of the request the routes see */
  readonly traces = new WeakMap<AbortSignal, RequestTrace>();
  /** llama-server's CORS settings */
  readonly cors: CorsPolicy;
  /** request bodies and prompt texts are parsed and tokenized here, large ones off the serving thread */
  readonly body = new BodyWorker();

  /** the model's own sampling defaults (general.sampling.*) of the options no flag set: src/sampling/model-defaults.ts */
  modelDefaults: Partial<ServerOptions> = {};

  constructor(
    readonly opts: ServerOptions,
    readonly apiKeys: readonly string[],
    readonly log: Log,
  ) {
    this.cors = { origins: opts.corsOrigins, methods: opts.corsMethods, headers: opts.corsHeaders, credentials: opts.corsCredentials };
  }

  /** model name answered in responses and /v1/models: the first alias in byte order (llama-server keeps them in a std::set), else the -hf spec, else the file name */
  get modelName(): string {
    return [...this.opts.alias].sort()[0] ?? this.opts.hfRepo ?? basename(this.modelPath);
  }

  get ready(): boolean {
    return this.status === "ready" && this.client !== undefined && this.info !== undefined;
  }

  get engine(): EngineClient {
    if (!this.client) throw new Error("the engine is not loaded");
    return this.client;
  }

  get nCtxSlot(): number {
    return this.info?.nCtxSlot ?? 0;
  }

  get nSlots(): number {
    return this.info?.nSlots ?? 1;
  }

  /** Chooses the template: the flag's, else the model's, else ChatML; falls back (with a log line) when it does not parse. */
  setTemplate(flagTemplate: string | undefined, modelTemplate: string): void {
    const candidates: [string, string][] = [];
    if (flagTemplate !== undefined) candidates.push(["--chat-template", flagTemplate]);
    if (modelTemplate !== "") candidates.push(["the model's chat template", modelTemplate]);
    for (const [what, src] of candidates) {
      try {
        getChatTemplate(src);
        this.template = src;
        this.chatFormat = detectChatFormat(src);
        return;
      } catch (e) {
        if (what === "--chat-template") throw e;
        this.log(`srv  load_model: ${what} does not parse (${e instanceof Error ? e.message : String(e)}); using ChatML instead`);
      }
    }
    if (modelTemplate === "" && flagTemplate === undefined) this.log("srv  load_model: the model has no chat template; using ChatML");
    this.template = CHATML_TEMPLATE;
    this.chatFormat = detectChatFormat(CHATML_TEMPLATE);
  }

  private longestPiece = 0;

  /** The vocabulary's longest token in bytes (a text of N bytes is at least N / this many tokens). */
  get maxTokenBytes(): number {
    if (this.longestPiece === 0) {
      let m = 1;
      for (let i = 0; i < this.tokenizer.nVocab; i++) m = Math.max(m, this.tokenizer.tokenBytes(i).length);
      this.longestPiece = m;
    }
    return this.longestPiece;
  }

  /** Token ids of a prompt text, off the serving thread when it is long. */
  encodePrompt(text: string, opts: { addSpecial: boolean; parseSpecial: boolean }): Promise<number[]> {
    return this.body.encode(text, opts);
  }

  paramContext(): ParamContext {
    const tok = this.tokenizer;
    return {
      opts: { ...this.opts, ...this.modelDefaults },
      nVocab: tok.nVocab,
      nSlots: this.nSlots,
      encode: (t) => tok.encode(t, { addSpecial: false, parseSpecial: false }),
    };
  }
}
