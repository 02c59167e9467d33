// bloomery engine: one generation request inside the worker: prompt progress, sampling (with
// the grammar's constraint), detokenization, stop conditions and timings.
import { StreamDecoder } from "../tokenizer/index.ts";
import { GrammarMatcher } from "../grammar/index.ts";
import type { Model } from "./model.ts";
import type { DoneEvent, GenerateRequest, StopType, TokenEvent } from "./protocol.ts";
import { StopMatcher } from "./stop.ts";

/** What the engine needs from a sampler. */
export interface TokenSampler {
  /** choose a token; `allowed` restricts candidates (grammar); probs when nProbs > 0 */
  sample(logits: Float32Array, history: readonly number[], allowed?: (id: number) => boolean): { id: number; probs?: TokenEvent["probs"] };
  accept(id: number): void;
  /** how many of a row's best tokens decide the pick (sampleTop), or 0: the whole row is needed */
  candidates(): number;
  /** choose a token from a row's best candidates (logit desc, id asc; at least candidates() of them) */
  sampleTop(ids: Int32Array, logits: Float32Array, history: readonly number[]): { id: number };
}
export type SamplerFactory = (req: GenerateRequest, model: Model) => TokenSampler;

export class Task {
  slot = -1;
  nPast = 0;
  cached = 0;
  prompting = true;
  lastToken = -1;
  generated: number[] = [];
  promptMs = 0;
  genMs = 0;
  /** speculative decoding: tokens drafted for this request, and how many the model accepted */
  draftN = 0;
  draftAccepted = 0;
  private decoder: StreamDecoder;
  private stops: StopMatcher;
  private grammar?: GrammarMatcher;
  private history: number[];

  constructor(readonly req: GenerateRequest, private readonly model: Model, private readonly sampler: TokenSampler) {
    this.decoder = new StreamDecoder(model.tokenizer, { skipSpecial: true, keep: req.preservedTokens ? new Set(req.preservedTokens) : undefined });
    this.stops = new StopMatcher(req.stop);
    if (req.grammar) this.grammar = GrammarMatcher.compile(req.grammar);
    this.history = [...req.prompt];
  }

  start(slot: number, cached: number): void {
    this.slot = slot;
    this.cached = cached;
    this.nPast = cached;
  }

  private allowed = (id: number): boolean => {
    const g = this.grammar!;
    if (this.model.tokenizer.isEog(id)) return g.canEnd();
    const bytes = this.model.tokenizer.tokenBytes(id);
    return bytes.length > 0 && g.accepts(bytes);
  };

  /** Tokens this request may still generate (n_predict), or Infinity. */
  remaining(): number {
    return this.req.nPredict >= 0 ? Math.max(0, this.req.nPredict - this.generated.length) : Infinity;
  }

  /** How many of a row's best tokens this request's next pick needs (nextTop), or 0: the whole row. */
  candidatesNeeded(): number {
    return this.grammar ? 0 : this.sampler.candidates();
  }

  /** Sample the next token from this row of logits; decide whether to stop. */
  next(logits: Float32Array, nPast: number, nCtx: number): { event?: TokenEvent; stop?: StopType; word?: string } {
    this.nPast = nPast;
    this.prompting = false;
    if (this.grammar?.isDone()) return { stop: "eos" };
    const { id, probs } = this.sampler.sample(logits, this.history, this.grammar ? this.allowed : undefined);
    return this.took(id, probs, nPast, nCtx);
  }

  /** next() from the row's best candidates (at least candidatesNeeded(), logit desc, id asc). */
  nextTop(ids: Int32Array, logits: Float32Array, nPast: number, nCtx: number): { event?: TokenEvent; stop?: StopType; word?: string } {
    this.nPast = nPast;
    this.prompting = false;
    const { id } = this.sampler.sampleTop(ids, logits, this.history);
    return this.took(id, undefined, nPast, nCtx);
  }

  private took(id: number, probs: TokenEvent["probs"], nPast: number, nCtx: number): { event?: TokenEvent; stop?: StopType; word?: string } {
    const tok = this.model.tokenizer;
    this.sampler.accept(id);
    this.lastToken = id;
    if (tok.isEog(id) && !this.req.ignoreEos) return { stop: "eos" };
    this.generated.push(id);
    this.history.push(id);
    if (this.grammar) this.grammar.advance(tok.tokenBytes(id));
    const { out, stop } = this.stops.push(this.decoder.push(id));
    const event: TokenEvent = { id: this.req.id, token: id, text: out, probs };
    if (stop !== undefined) return { event, stop: "word", word: stop };
    if (this.req.nPredict >= 0 && this.generated.length >= this.req.nPredict) return { event, stop: "limit" };
    if (nPast >= nCtx) return { event, stop: "limit" };
    if (this.grammar?.isDone()) return { event, stop: "eos" };
    return { event };
  }

  finish(stopType: StopType, slot: number, word = "", error?: DoneEvent["error"]): DoneEvent {
    const rest = stopType === "word" ? "" : this.stops.push(this.decoder.flush()).out + this.stops.flush();
    const promptN = this.req.prompt.length - this.cached;
    const genN = this.generated.length;
    return {
      id: this.req.id,
      stopType,
      stoppingWord: word,
      text: rest,
      tokensPredicted: genN,
      tokensEvaluated: this.req.prompt.length,
      tokensCached: this.cached,
      truncated: false,
      idSlot: slot,
      error,
      timings: {
        prompt_n: promptN,
        prompt_ms: this.promptMs,
        prompt_per_token_ms: promptN ? this.promptMs / promptN : 0,
        prompt_per_second: this.promptMs ? (promptN * 1000) / this.promptMs : 0,
        predicted_n: genN,
        predicted_ms: this.genMs,
        // as llama-server: the first token comes with the prompt's last batch, so the rates count
        // the generation steps after it (n - 1)
        predicted_per_token_ms: genN > 1 ? this.genMs / (genN - 1) : 0,
        predicted_per_second: this.genMs > 0 && genN > 1 ? ((genN - 1) * 1000) / this.genMs : 0,
        cache_n: this.cached,
        ...(this.draftN > 0 ? { draft_n: this.draftN, draft_n_accepted: this.draftAccepted } : {}),
      },
    };
  }
}
