// bloomery CLI: `bloomery-serve generate`: text (or token ids) in, tokens out, for a person or a
// script; runs the engine's scheduler in-process (the same sampling, stop and grammar logic
// the server uses).
import { readFileSync } from "node:fs";
import type { FlagTable } from "./flag-types.ts";
import { parseWithTable, type Env } from "./flag-parse.ts";
import { tableHelp } from "./flag-help.ts";
import { Model } from "../engine/model.ts";
import { checkForward } from "../engine/model-check.ts";
import { openModelPath } from "../safetensors/model.ts";
import { Tokenizer, vocabFromMetadata } from "../tokenizer/index.ts";
import { familyFor } from "../models/registry.ts";
import { Scheduler, type Drafter } from "../engine/scheduler.ts";
import type { SpecConfig } from "../engine/spec-ngram.ts";
import { loadDraft } from "../engine/spec-draft.ts";
import { loadMtpDraft } from "../engine/spec-mtp.ts";
import { makeSampler } from "../engine/sampler-bridge.ts";
import type { DoneEvent, TokenEvent } from "../engine/protocol.ts";

const G = "generate";
const f = (names: string[], value: FlagTable["flags"][number]["value"], key: string, help: string, extra: object = {}) =>
  ({ names, value, key, help, group: G, support: "supported" as const, ...extra });

export const GENERATE_TABLE: FlagTable = {
  program: "bloomery-serve generate",
  groups: [{ id: G, title: "generate: continue a prompt and print the tokens" }],
  flags: [
    f(["-m", "--model"], { type: "string", nonEmpty: true }, "model", "GGUF file (first shard of a split set)", { hint: "FNAME" }),
    f(["-p", "--prompt"], { type: "string" }, "prompt", "prompt text", { hint: "TEXT" }),
    f(["-f", "--file"], { type: "string", nonEmpty: true }, "file", "read the prompt from a file", { hint: "FNAME" }),
    f(["--tokens"], { type: "list", of: { type: "int", min: 0 }, split: "," }, "tokens", "the prompt as token ids, comma separated", { hint: "ID,..." }),
    f(["-n", "--n-predict"], { type: "int", min: -1 }, "nPredict", "tokens to generate (-1: until end of generation or the context is full)", { default: 128, hint: "N" }),
    f(["-c", "--ctx-size"], { type: "int", min: 0 }, "ctx", "context size (0: what the prompt and -n need, at least 8192, at most the model's)", { default: 0, hint: "N" }),
    f(["-t", "--threads"], { type: "int", min: 1 }, "threads", "CPU threads (default: all cores)", { hint: "N" }),
    f(["--temp"], { type: "float", min: 0 }, "temp", "temperature; 0 picks the most likely token", { default: 0.8, hint: "T" }),
    f(["--top-k"], { type: "int" }, "topK", "top-k", { default: 40, hint: "N" }),
    f(["--top-p"], { type: "float" }, "topP", "top-p", { default: 0.95, hint: "P" }),
    f(["--min-p"], { type: "float" }, "minP", "min-p", { default: 0.05, hint: "P" }),
    f(["-s", "--seed"], { type: "int", min: -1, max: 4294967295 }, "seed", "random seed (-1: random)", { default: -1, hint: "N" }),
    f(["--stop"], { type: "list", of: { type: "string" } }, "stop", "stop at this text (repeatable)", { hint: "TEXT", repeat: "append" }),
    f(["--grammar-file"], { type: "string", nonEmpty: true }, "grammarFile", "constrain the output with a GBNF grammar", { hint: "FNAME" }),
    f(["--ignore-eos"], { type: "none" }, "ignoreEos", "keep generating past end-of-generation tokens", { default: false }),
    f(["--parse-special"], { type: "none" }, "parseSpecial", "match special tokens such as <|im_start|> in the prompt text", { default: false }),
    f(["--json"], { type: "none" }, "json", "print one JSON object (tokens, text, stop, timings) instead of streaming text", { default: false }),
    f(["--exact"], { type: "none" }, "exact", "slow reference path: f32 activations, dequantized weights", { default: false }),
    f(["--spec-type"], { type: "enum", values: ["none", "ngram-simple", "draft-simple", "draft-mtp"] }, "specType", "speculative decoding: none, ngram-simple (drafts from the sequence), draft-simple (-md), draft-mtp (the file's MTP layer)", { default: "none", hint: "TYPE" }),
    f(["--spec-ngram-simple-size-n"], { type: "int", min: 1, max: 1024 }, "sizeN", "ngram-simple: lookup length", { default: 12, hint: "N" }),
    f(["--spec-ngram-simple-size-m"], { type: "int", min: 1, max: 1024 }, "sizeM", "ngram-simple: longest draft", { default: 48, hint: "N" }),
    f(["-md", "--spec-draft-model"], { type: "string", nonEmpty: true }, "draftModel", "draft model (the target's vocabulary); implies --spec-type draft-simple", { hint: "FNAME" }),
    f(["--spec-draft-n-max"], { type: "int", min: 0, max: 256 }, "nMax", "draft model: most tokens drafted a step", { default: 3, hint: "N" }),
    f(["-h", "--help"], { type: "none" }, "help", "print this help", { action: "help" }),
  ],
};

export async function runGenerate(argv: string[], env: Env): Promise<number> {
  const r = parseWithTable(GENERATE_TABLE, argv, env);
  if (r.action === "help") {
    console.log(tableHelp(GENERATE_TABLE, "bloomery-serve generate -m FILE (-p TEXT | -f FILE | --tokens IDS) [options]"));
    return 0;
  }
  const v = r.values;
  if (!v.model) throw new Error("generate: -m FILE is required");
  const sources = [v.prompt !== undefined, v.file !== undefined, v.tokens !== undefined].filter(Boolean).length;
  if (sources !== 1) throw new Error("generate: give exactly one of -p, -f or --tokens");
  const gguf = openModelPath(String(v.model));
  const tok = Tokenizer.fromVocab(vocabFromMetadata((k) => gguf.raw(k)));
  const text = v.prompt !== undefined ? String(v.prompt) : v.file !== undefined ? readFileSync(String(v.file), "utf8") : undefined;
  const prompt = text !== undefined ? tok.encode(text, { addSpecial: true, parseSpecial: !!v.parseSpecial }) : (v.tokens as number[]);
  // the context: as asked, else what the prompt and -n need (at least 8192, at most the model's)
  const nCtxTrain = familyFor(gguf).hparams(gguf).nCtxTrain;
  const nCtx = Number(v.ctx) || Math.min(nCtxTrain, Math.max(8192, prompt.length + Math.max(0, Number(v.nPredict)) + 1));
  const model = Model.load(gguf, { nCtx, nThreads: v.threads as number | undefined, exact: !!v.exact });
  let drafter: (Drafter & { close(): void }) | undefined;
  try {
    checkForward(model); // a model whose logits are NaN is refused, not run
    const asked = String(v.specType) as SpecConfig["type"];
    const kind = v.draftModel && asked !== "draft-mtp" ? "draft-simple" : asked;
    if (kind === "draft-simple") {
      if (!v.draftModel) throw new Error("generate: --spec-type draft-simple needs a draft model (-md FNAME)");
      drafter = loadDraft(model, String(v.draftModel), { nCtx, nThreads: v.threads as number | undefined }, Number(v.nMax), 0, 0);
    } else if (kind === "draft-mtp") {
      drafter = loadMtpDraft(model, v.draftModel ? String(v.draftModel) : model.gguf, { nThreads: v.threads as number | undefined, exact: !!v.exact }, Number(v.nMax), 0, 0);
    }
    const spec: SpecConfig = { type: kind, sizeN: Number(v.sizeN), sizeM: Number(v.sizeM), nMax: Number(v.nMax) };
    return generateWith(model, prompt, v, spec, drafter);
  } finally {
    drafter?.close();
    model.close();
  }
}

function generateWith(model: Model, prompt: number[], v: Record<string, unknown>, spec: SpecConfig, drafter?: Drafter): number {
  const events: TokenEvent[] = [];
  let done: DoneEvent | undefined;
  const sched = new Scheduler(model, {
    tokens: (evs) => {
      events.push(...evs);
      if (!v.json) for (const e of evs) process.stdout.write(e.text);
    },
    done: (d) => { done = d; },
  }, makeSampler, 512, 0, spec, drafter);
  sched.submit({
    id: 1, prompt, nPredict: Number(v.nPredict), stop: (v.stop as string[] | undefined) ?? [], ignoreEos: !!v.ignoreEos,
    grammar: v.grammarFile ? readFileSync(String(v.grammarFile), "utf8") : undefined, nProbs: 0, idSlot: -1, cachePrompt: false,
    params: { temperature: Number(v.temp), topK: Number(v.topK), topP: Number(v.topP), minP: Number(v.minP), seed: Number(v.seed) },
  });
  while (sched.step()) { /* one batched step at a time */ }
  const d = done!;
  if (d.error) throw new Error(d.error.message);
  const text = events.map((e) => e.text).join("") + d.text;
  if (v.json) {
    console.log(JSON.stringify({
      prompt_tokens: prompt, tokens: events.map((e) => e.token), text, stop_type: d.stopType, stopping_word: d.stoppingWord,
      timings: d.timings,
    }));
  } else {
    process.stdout.write(d.text + "\n");
    const t = d.timings;
    const drafts = t.draft_n ? `, ${t.draft_n_accepted} of ${t.draft_n} draft tokens accepted` : "";
    console.error(`\n[${t.prompt_n} prompt tokens at ${t.prompt_per_second.toFixed(1)} t/s, ${t.predicted_n} generated at ${t.predicted_per_second.toFixed(1)} t/s${drafts}; stop: ${d.stopType}]`);
  }
  return 0;
}
