// bloomery server: text completion routes: native POST /completion (/completions) and OpenAI
// POST /v1/completions, plain and streamed, in llama-server's shapes.
import type { DoneEvent, TokenEvent } from "../engine/protocol.ts";
import { GrammarMatcher, requestGrammar } from "../grammar/index.ts";
import {
  BUILD_INFO,
  LiveTimings,
  chatCompletionId,
  finishReason,
  nowSeconds,
  pickFields,
  probEntries,
  stopTypeName,
  sumTimings,
  timingsJson,
  usageJson,
} from "./common.ts";
import { badField, badRequest, engineError, errorResponse } from "./errors.ts";
import { type GenSettings, readGenSettings, settingsJson } from "./params.ts";
import { checkContext, readPrompts } from "./prompt.ts";
import { type ChoiceSpec, GenerationSet } from "./runner.ts";
import { SSE_DONE, sseData, sseResponse } from "./sse.ts";
import type { ServerContext } from "./state.ts";

type Body = Record<string, unknown>;

/** A request's grammar (grammar / json_schema / response_format), checked here so a bad one is a 400. */
export function grammarOf(body: Body): string | undefined {
  const g = requestGrammar(body).gbnf;
  if (g === null) return undefined;
  GrammarMatcher.compile(g); // throws GrammarError (-> 400 naming "grammar")
  return g;
}

interface Job {
  settings: GenSettings;
  grammar?: string;
  prompts: number[][];
  specs: ChoiceSpec[];
  /** prompt index of each spec */
  promptOf: number[];
}

async function prepare(ctx: ServerContext, body: Body): Promise<Job> {
  const settings = readGenSettings(body, ctx.paramContext());
  const grammar = grammarOf(body);
  const prompts = await readPrompts(ctx, body.prompt, { nCtx: ctx.nCtxSlot });
  const specs: ChoiceSpec[] = [];
  const promptOf: number[] = [];
  prompts.forEach((p, pi) => {
    if (p.length === 0) throw badField("prompt", "the prompt is empty");
    checkContext(p.length, ctx.nCtxSlot);
    for (let c = 0; c < settings.nCmpl; c++) {
      promptOf.push(pi);
      specs.push({
        req: {
          prompt: p,
          params: settings.params,
          nPredict: settings.nPredict,
          stop: settings.stop,
          ignoreEos: settings.ignoreEos,
          grammar,
          nProbs: settings.nProbs,
          idSlot: settings.idSlot,
          cachePrompt: settings.cachePrompt,
          draft: settings.draft,
        },
      });
    }
  });
  return { settings, grammar, prompts, specs, promptOf };
}

function textOf(events: TokenEvent[], done: DoneEvent): string {
  let s = "";
  for (const e of events) s += e.text;
  return s + done.text;
}

/** POST /completion and /completions: llama's native completion. */
export async function nativeCompletion(ctx: ServerContext, body: Body, request: Request): Promise<Response> {
  const job = await prepare(ctx, body);
  const s = job.settings;
  const set = GenerationSet.start(ctx, job.specs, request.signal);
  const genSettings = settingsJson(s, { grammar: job.grammar, eogIds: ctx.tokenizer.eogIds });
  const finalObj = (i: number, content: string, tokens: number[], d: DoneEvent, probs?: Record<string, unknown>[]) => {
    const prompt = job.prompts[job.promptOf[i]];
    const res: Record<string, unknown> = {
      index: i,
      content,
      tokens,
      id_slot: d.idSlot,
      stop: true,
      model: ctx.modelName,
      tokens_predicted: d.tokensPredicted,
      tokens_evaluated: d.tokensEvaluated,
      generation_settings: genSettings,
      prompt: ctx.tokenizer.decode(prompt),
      has_new_line: content.includes("\n"),
      truncated: d.truncated,
      stop_type: stopTypeName(d),
      stopping_word: d.stoppingWord,
      tokens_cached: d.tokensCached,
      timings: timingsJson(d),
    };
    if (probs && probs.length) res.completion_probabilities = probs;
    return s.responseFields.length ? pickFields(s.responseFields, res) : res;
  };

  if (!s.stream) {
    const results = await set.all();
    const failed = results.find((r) => r.done.error);
    if (failed) return errorResponse(engineError(failed.done.error!, failed.done.tokensEvaluated, ctx.nCtxSlot));
    const out = results.map((r, i) => {
      const tokens = s.returnTokens ? r.events.map((e) => e.token) : [];
      return finalObj(i, textOf(r.events, r.done), tokens, r.done, s.nProbs > 0 ? probEntries(r.events, s.postSamplingProbs) : undefined);
    });
    return Response.json(out.length === 1 ? out[0] : out);
  }

  const err = await set.firstError();
  if (err) return errorResponse(engineError(err, job.specs[0].req.prompt.length, ctx.nCtxSlot));
  const counts = job.specs.map(() => 0);
  const live = new LiveTimings();
  async function* frames(): AsyncGenerator<string, void> {
    for (let e = await set.next(); e; e = await set.next()) {
      const i = e.index;
      const nPrompt = job.specs[i].req.prompt.length;
      if (e.kind === "tokens") {
        for (const t of e.events) {
          counts[i]++;
          const chunk: Record<string, unknown> = {
            index: i,
            content: t.text,
            tokens: [t.token],
            stop: false,
            id_slot: -1,
            tokens_predicted: counts[i],
            tokens_evaluated: nPrompt,
          };
          if (s.nProbs > 0) chunk.completion_probabilities = probEntries([t], s.postSamplingProbs);
          if (s.timingsPerToken) chunk.timings = live.tokens(nPrompt, counts[i]);
          yield sseData(chunk);
        }
      } else {
        const d = e.done;
        if (d.error) {
          yield sseData({ error: engineError(d.error, nPrompt, ctx.nCtxSlot).body().error });
          set.abort();
          return;
        }
        if (d.text) yield sseData({ index: i, content: d.text, tokens: [], stop: false, id_slot: d.idSlot, tokens_predicted: counts[i], tokens_evaluated: nPrompt });
        yield sseData(finalObj(i, "", [], d));
      }
    }
  }
  return sseResponse(frames(), () => set.abort(), request.signal);
}

/** POST /v1/completions: OpenAI text completion. */
export async function oaiCompletion(ctx: ServerContext, body: Body, request: Request): Promise<Response> {
  if (body.echo === true) throw badRequest("Only no echo is supported");
  for (const p of ["best_of", "suffix"]) if (body[p] !== undefined && body[p] !== null) throw badRequest(`Unsupported param: ${p}`);
  if (body.prompt === undefined) throw badField("prompt", "\"prompt\" is required");
  const job = await prepare(ctx, body);
  const s = job.settings;
  const set = GenerationSet.start(ctx, job.specs, request.signal);
  const id = chatCompletionId();
  const base = () => ({ created: nowSeconds(), model: ctx.modelName, system_fingerprint: BUILD_INFO, object: "text_completion", id });

  if (!s.stream) {
    const results = await set.all();
    const failed = results.find((r) => r.done.error);
    if (failed) return errorResponse(engineError(failed.done.error!, failed.done.tokensEvaluated, ctx.nCtxSlot));
    const dones = results.map((r) => r.done);
    return Response.json({
      choices: results.map((r, i) => ({
        text: textOf(r.events, r.done),
        index: i,
        logprobs: s.nProbs > 0 ? { content: probEntries(r.events, s.postSamplingProbs) } : null,
        finish_reason: finishReason(r.done),
      })),
      ...base(),
      usage: usageJson(dones),
      timings: timingsJson(sumTimings(dones)),
    });
  }

  const err = await set.firstError();
  if (err) return errorResponse(engineError(err, job.specs[0].req.prompt.length, ctx.nCtxSlot));
  async function* frames(): AsyncGenerator<string, void> {
    const dones: DoneEvent[] = [];
    for (let e = await set.next(); e; e = await set.next()) {
      const i = e.index;
      if (e.kind === "tokens") {
        for (const t of e.events) {
          const lp = s.nProbs > 0 ? { content: probEntries([t], s.postSamplingProbs) } : null;
          yield sseData({ choices: [{ text: t.text, index: i, logprobs: lp, finish_reason: null }], ...base() });
        }
      } else {
        const d = e.done;
        if (d.error) {
          yield sseData({ error: engineError(d.error, job.specs[i].req.prompt.length, ctx.nCtxSlot).body().error });
          set.abort();
          return;
        }
        dones.push(d);
        yield sseData({
          choices: [{ text: d.text, index: i, logprobs: null, finish_reason: finishReason(d) }],
          ...base(),
          usage: usageJson([d]),
          timings: timingsJson(d),
        });
      }
    }
    if (s.includeUsage) yield sseData({ choices: [], ...base(), usage: usageJson(dones) });
    yield SSE_DONE;
  }
  return sseResponse(frames(), () => set.abort(), request.signal);
}
