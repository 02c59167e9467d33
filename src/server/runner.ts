// bloomery server: running a request's generations on the engine: one per prompt and choice, all
// at once, their token events merged into one ordered queue; admission (bounded wait queue),
// cancellation when the client goes away, metrics, and the reasoning budget (end the thinking
// after N tokens by stopping the generation and continuing from the forced end tag).
import type { DoneEvent, GenerateRequest, TokenEvent } from "../engine/protocol.ts";
import { type RequestTrace, timingLines } from "./request-log.ts";
import type { ServerContext } from "./state.ts";

export type ChoiceEvent =
  | { index: number; kind: "tokens"; events: TokenEvent[] }
  | { index: number; kind: "done"; done: DoneEvent };

/** Thinking that must end after `tokens` tokens: the end text is forced and generation goes on. */
export interface ReasoningBudget {
  tokens: number;
  /** the output starts inside the think block (the prompt opened it) */
  startsInside: boolean;
  start: string;
  end: string;
  /** text forced when the budget runs out (e.g. "\n</think>\n\n") */
  forcedText: string;
  /** the grammar for what follows the thinking (a forced tool call without its think prefix) */
  grammarAfter?: string;
}

export interface ChoiceSpec {
  req: Omit<GenerateRequest, "id">;
  budget?: ReasoningBudget;
}

/** Generations of one request; read events with next() until it returns null. */
export class GenerationSet {
  private queue: ChoiceEvent[] = [];
  private waiter?: () => void;
  private remaining: number;
  private readonly ctl = new AbortController();

  private readonly trace?: RequestTrace;
  private settled: () => void = () => {};

  private constructor(
    private readonly ctx: ServerContext,
    readonly specs: ChoiceSpec[],
    signal: AbortSignal,
  ) {
    this.trace = ctx.traces.get(signal);
    this.remaining = specs.length;
    this.trace?.running.push(new Promise((r) => (this.settled = r)));
    if (signal.aborted) this.ctl.abort();
    else signal.addEventListener("abort", () => this.ctl.abort(), { once: true });
  }

  /** Admits and starts the generations (throws the 503 when the queue is full). */
  static start(ctx: ServerContext, specs: ChoiceSpec[], signal: AbortSignal): GenerationSet {
    ctx.admission.acquire(specs.length);
    ctx.metrics.requests++;
    const set = new GenerationSet(ctx, specs, signal);
    specs.forEach((s, i) => void set.runChoice(i, s));
    return set;
  }

  get aborted(): boolean {
    return this.ctl.signal.aborted;
  }

  /** Cancel every generation still running. */
  abort(): void {
    this.ctl.abort();
  }

  private push(e: ChoiceEvent): void {
    this.queue.push(e);
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  /** The next event, or null when every generation is done. */
  async next(): Promise<ChoiceEvent | null> {
    for (;;) {
      const e = this.queue.shift();
      if (e) return e;
      if (this.remaining === 0) return null;
      await new Promise<void>((r) => (this.waiter = r));
    }
  }

  /** The next event without taking it (null when everything is done). */
  async peek(): Promise<ChoiceEvent | null> {
    for (;;) {
      if (this.queue.length) return this.queue[0];
      if (this.remaining === 0) return null;
      await new Promise<void>((r) => (this.waiter = r));
    }
  }

  /**
   * For streams: waits for the first event; a generation that failed before producing anything
   * is returned as its error (the route answers it as a plain JSON error), else null.
   */
  async firstError(): Promise<DoneEvent["error"] | null> {
    const e = await this.peek();
    if (e && e.kind === "done" && e.done.error) {
      this.abort();
      return e.done.error;
    }
    return null;
  }

  /** Waits for everything; the tokens and the done event of each choice. */
  async all(): Promise<{ events: TokenEvent[]; done: DoneEvent }[]> {
    const out = this.specs.map(() => ({ events: [] as TokenEvent[], done: undefined as DoneEvent | undefined }));
    for (let e = await this.next(); e; e = await this.next()) {
      if (e.kind === "tokens") out[e.index].events.push(...e.events);
      else out[e.index].done = e.done;
    }
    return out.map((o) => ({ events: o.events, done: o.done! }));
  }

  private finishOne(index: number, done: DoneEvent): void {
    this.ctx.admission.release(1);
    this.ctx.metrics.record(done);
    this.trace?.done.push(done);
    if (!done.error) for (const line of timingLines(done)) this.ctx.log(line);
    this.remaining--;
    if (this.remaining === 0) this.settled();
    this.push({ index, kind: "done", done });
  }

  private async runChoice(index: number, spec: ChoiceSpec): Promise<void> {
    try {
      const done = spec.budget && spec.budget.tokens >= 0 ? await this.runWithBudget(index, spec, spec.budget) : await this.engineRun(index, spec.req, this.ctl.signal);
      this.finishOne(index, done);
    } catch (e) {
      this.finishOne(index, failedDone(e instanceof Error ? e.message : String(e)));
    }
  }

  private engineRun(index: number, req: Omit<GenerateRequest, "id">, signal: AbortSignal, filter?: (evs: TokenEvent[]) => TokenEvent[]): Promise<DoneEvent> {
    return this.ctx.engine.generate(req, {
      signal,
      onTokens: (evs) => {
        const kept = filter ? filter(evs) : evs;
        if (kept.length) this.push({ index, kind: "tokens", events: kept });
      },
    });
  }

  /**
   * Phase one runs until the thinking has used `budget.tokens` tokens; then it is stopped, the end
   * text is forced (as a token event) and phase two continues from prompt + kept tokens + forced.
   */
  private async runWithBudget(index: number, spec: ChoiceSpec, budget: ReasoningBudget): Promise<DoneEvent> {
    const phase1 = new AbortController();
    const onOuter = () => phase1.abort();
    this.ctl.signal.addEventListener("abort", onOuter, { once: true });
    let text = "";
    let inside = budget.startsInside;
    let ended = false;
    let count = 0;
    let cut = false;
    const kept: number[] = [];
    const filter = (evs: TokenEvent[]): TokenEvent[] => {
      const out: TokenEvent[] = [];
      for (const e of evs) {
        if (cut) break;
        out.push(e);
        kept.push(e.token);
        text += e.text;
        if (!inside && !ended && text.trimStart().startsWith(budget.start)) inside = true;
        if (inside && !ended && text.includes(budget.end)) ended = true;
        if (inside && !ended) count++;
        if (!ended && !inside && text.trimStart().length >= budget.start.length) ended = true; // no thinking at all
        if (inside && !ended && count >= budget.tokens) {
          cut = true;
          phase1.abort();
        }
      }
      return out;
    };
    const first = await this.engineRun(index, { ...spec.req, nPredict: spec.req.nPredict }, phase1.signal, filter);
    this.ctl.signal.removeEventListener("abort", onOuter);
    if (!cut || this.ctl.signal.aborted || first.error) return first;
    // force the end of the thinking and go on
    const tok = this.ctx.tokenizer;
    const forced = tok.encode(budget.forcedText, { addSpecial: false, parseSpecial: true });
    this.push({ index, kind: "tokens", events: forced.map((t, i) => ({ id: 0, token: t, text: i === forced.length - 1 ? budget.forcedText : "" })) });
    const used = kept.length + forced.length;
    const nPredict = spec.req.nPredict < 0 ? -1 : Math.max(0, spec.req.nPredict - used);
    if (nPredict === 0) return { ...first, stopType: "limit", tokensPredicted: used };
    const second = await this.engineRun(index, { ...spec.req, prompt: [...spec.req.prompt, ...kept, ...forced], nPredict, grammar: budget.grammarAfter ?? spec.req.grammar }, this.ctl.signal);
    const t1 = first.timings, t2 = second.timings;
    const predN = used + second.tokensPredicted;
    // the second prompt pass re-reads only the forced tokens (the rest is cached): count it as generation time
    const predMs = t1.predicted_ms + t2.predicted_ms + t2.prompt_ms;
    return {
      ...second,
      tokensPredicted: predN,
      tokensEvaluated: spec.req.prompt.length,
      tokensCached: first.tokensCached,
      timings: {
        ...t1,
        predicted_n: predN,
        predicted_ms: predMs,
        predicted_per_token_ms: predN ? predMs / predN : 0,
        predicted_per_second: predMs ? (predN * 1000) / predMs : 0,
      },
    };
  }
}

function failedDone(message: string): DoneEvent {
  return {
    id: 0, stopType: "none", stoppingWord: "", text: "", tokensPredicted: 0, tokensEvaluated: 0, tokensCached: 0, truncated: false, idSlot: -1,
    timings: { prompt_n: 0, prompt_ms: 0, prompt_per_token_ms: 0, prompt_per_second: 0, predicted_n: 0, predicted_ms: 0, predicted_per_token_ms: 0, predicted_per_second: 0, cache_n: 0 },
    error: { message, type: "server_error", code: 500 },
  };
}
