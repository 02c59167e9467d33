// bloomery: speculative decoding's cost and gain on one model (the engine's scheduler, greedy, CPU): decode
// tokens a second without drafts, with ngram-simple or with a draft model, the target's and the draft model's
// forward time a generated token, the drafts accepted, and for a recurrent model its rollbacks (snapshot
// put back, the accepted tokens taken again in a pass without logits) and their milliseconds. One JSON line.
// Prompts: a run of 24 token ids repeated 4 times a slot (ngram keys recur).
// Usage: bun scripts/spec-bench.ts MODEL.gguf none|ngram|draft [SLOTS=1] [TOKENS=32] [DRAFT.gguf]
//        env THREADS (2), SIZE_N / SIZE_M (ngram-simple: 1 / 4), N_MAX (draft model: 4)
import { Model } from "../src/engine/model.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import { DraftModel } from "../src/engine/spec-draft.ts";
import type { Backend, Batch } from "../src/engine/backend.ts";
import type { SpecConfig } from "../src/engine/spec-ngram.ts";
import type { TokenEvent } from "../src/engine/protocol.ts";

const [path, mode = "none", slotsArg = "1", tokensArg = "32", draftPath] = process.argv.slice(2);
if (!path || !["none", "ngram", "draft"].includes(mode) || (mode === "draft" && !draftPath)) {
  console.error("usage: bun scripts/spec-bench.ts MODEL.gguf none|ngram|draft [SLOTS] [TOKENS] [DRAFT.gguf]");
  process.exit(2);
}
const nSlots = Number(slotsArg), nPredict = Number(tokensArg), env = process.env;
const o = { nCtx: 1024, nSlots, nThreads: Number(env.THREADS ?? 2), maxTokens: 64, log: () => {} };
const model = Model.load(path, o);
const nMax = Number(env.N_MAX ?? 4);
let spec: SpecConfig | undefined, drafter: DraftModel | undefined;
if (mode === "ngram") spec = { type: "ngram-simple", sizeN: Number(env.SIZE_N ?? 1), sizeM: Number(env.SIZE_M ?? 4) };
if (mode === "draft") {
  spec = { type: "draft-simple", sizeN: 12, sizeM: 48, nMax };
  drafter = new DraftModel(Model.load(draftPath!, o), nMax, 0, 0);
}

/** The forward time of a backend once decoding started (every slot has its first token). */
let decoding = false;
function timed(be: Backend): { ms: number; passes: number; tokens: number } {
  const f = be.forward.bind(be), acc = { ms: 0, passes: 0, tokens: 0 };
  be.forward = (b: Batch) => {
    const t0 = performance.now();
    f(b);
    if (decoding) { acc.ms += performance.now() - t0; acc.passes++; acc.tokens += b.tokens.length; }
  };
  return acc;
}
const target = timed(model.backend), draft = drafter ? timed(drafter.model.backend) : undefined;

let seed = 1;
const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed; };
const lo = Math.min(1000, model.hp.nVocab >> 2), span = Math.min(50000, model.hp.nVocab - lo);
const prompts = Array.from({ length: nSlots }, () => {
  const run = Array.from({ length: 24 }, () => lo + (rnd() % span));
  return [...run, ...run, ...run, ...run];
});
const got: number[][] = prompts.map(() => []);
const sched = new Scheduler(model, { tokens: (evs: TokenEvent[]) => { for (const e of evs) got[e.id].push(e.token); }, done: () => {} }, makeSampler, 64, 0, spec, drafter);
prompts.forEach((prompt, id) => sched.submit({ id, prompt, nPredict, stop: [], ignoreEos: true, nProbs: 0, idSlot: -1, cachePrompt: false, params: { temperature: 0 } }));
let t0 = 0;
while (sched.step()) {
  if (!decoding && got.every((g) => g.length > 0)) { decoding = true; t0 = performance.now(); }
}
const ms = performance.now() - t0, gen = got.reduce((a, g) => a + g.length - 1, 0), st = sched.stats();
const r1 = (x: number | undefined) => (x === undefined ? undefined : +x.toFixed(1));
console.log(JSON.stringify({
  model: path.split("/").pop(), mode, draft: draftPath?.split("/").pop(), slots: nSlots, threads: o.nThreads, load1: (await Bun.file("/proc/loadavg").text()).split(" ")[0],
  tokens: gen, tps: +(gen / ms * 1000).toFixed(2), targetMsPerToken: r1(target.ms / gen), targetPasses: target.passes, targetPassTokens: target.tokens,
  draftMsPerToken: draft && r1(draft.ms / gen), drafted: st.specDrafted, accepted: st.specAccepted, verifications: st.specSteps,
  rollbacks: st.specRollbacks, retaken: st.specRetaken, retakeMs: r1(st.specRetakeMs), snapshotMs: r1(st.specSnapMs), stateMiB: +((model.backend.rsBytes?.() ?? 0) / 2 ** 20).toFixed(2),
}));
drafter?.close();
model.close();
