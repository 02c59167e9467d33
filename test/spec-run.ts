// Test helper: prompts run greedily through the scheduler at once (one slot each), with or without a
// speculative draft; each run's tokens and done event, and the scheduler (its stats).
import type { Model } from "../src/engine/model.ts";
import type { DoneEvent, TokenEvent } from "../src/engine/protocol.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import type { MtpDraft } from "../src/engine/spec-mtp.ts";
import type { SpecConfig } from "../src/engine/spec-ngram.ts";

export interface Run { tokens: number[]; done?: DoneEvent }

export function runGreedy(model: Model, prompts: number[][], nPredict: number, spec?: SpecConfig, drafter?: MtpDraft): { runs: Run[]; sched: Scheduler } {
  const runs: Run[] = prompts.map(() => ({ tokens: [] }));
  const sched = new Scheduler(model, {
    tokens: (evs: TokenEvent[]) => { for (const e of evs) runs[e.id].tokens.push(e.token); },
    done: (dn: DoneEvent) => { runs[dn.id].done = dn; },
  }, makeSampler, 64, 0, spec, drafter);
  prompts.forEach((prompt, id) => sched.submit({ id, prompt, nPredict, stop: [], ignoreEos: true, nProbs: 0, idSlot: -1, cachePrompt: false, params: { temperature: 0 } }));
  while (sched.step()) { /* run */ }
  return { runs, sched };
}
