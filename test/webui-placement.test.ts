// The placement picture behind GET /placement/state, in the engine (src/engine/placement-view.ts,
// step-log.ts) with the demo model on the CPU: layers and tiers, the steps a scheduler records,
// prompt cache entries, the heat's decay, and picks as a backend that counts them would report.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import { ExpertHeat, HEAT_HALF_LIFE_MS, placementState } from "../src/engine/placement-view.ts";
import { StepLog } from "../src/engine/step-log.ts";
import type { Backend } from "../src/engine/backend.ts";
import { FIXTURES } from "./paths.ts";

const demo = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");
let model: Model;
beforeAll(() => {
  model = Model.load(demo, { nCtx: 512, nSlots: 1, nThreads: 2, maxTokens: 64 });
});
afterAll(() => model?.close());

function scheduler(m: Model) {
  return new Scheduler(m, { tokens: () => {}, done: () => {} }, makeSampler, 64, 64 << 20);
}

function run(s: Scheduler, prompt: number[], nPredict: number, id: number): void {
  s.submit({ id, prompt, nPredict, stop: [], ignoreEos: true, nProbs: 0, idSlot: -1, cachePrompt: true, params: { temperature: 0 } });
  while (s.step()) { /* run */ }
}

/** The model with a backend that also reports picks (as a backend with a native counter will). */
function withPicks(m: Model, picks: () => Float64Array | undefined): Model {
  const be: Backend = Object.create(m.backend) as Backend;
  be.expertPicks = picks;
  const out = Object.create(m) as Model;
  Object.defineProperty(out, "backend", { value: be });
  return out;
}

describe("the placement picture", () => {
  test("the demo model: 4 MoE layers of 8 experts in host RAM; the CPU backend reports its routers' picks (none before a forward pass)", () => {
    const s = scheduler(model);
    const st = placementState({ model, cache: s.cache, steps: s.steps, stats: s.stats(), heat: new ExpertHeat() }, true);
    expect(st.backend).toBe("CPU");
    expect(st.layers.map((l) => [l.layer, l.tier, l.n_expert])).toEqual([[0, "host", 8], [1, "host", 8], [2, "host", 8], [3, "host", 8]]);
    expect(st.picks).toEqual({ available: true, heat_half_life_ms: HEAT_HALF_LIFE_MS, total: 0 });
    expect(st.plan).toBeNull(); // loaded without a plan: the tier comes from the backend
    expect(st.steps).toEqual({ total: 0, recent: [] });
  });

  test("every forward pass is recorded; a slot's replaced prompt shows in the cache with its text (or without)", () => {
    const s = scheduler(model);
    const tok = model.tokenizer;
    const a = tok.encode("def first_function(alpha, beta, gamma, delta):\n    return alpha", { addSpecial: false });
    const b = tok.encode("class SecondThing(object):\n    def __init__(self):\n        pass", { addSpecial: false });
    expect(a.length).toBeGreaterThanOrEqual(16);
    run(s, a, 3, 1);
    const steps = s.steps.list();
    expect(steps.length).toBe(3); // the prompt, then two one-token steps (the third token is sampled from the last)
    expect(steps[0].tokens).toBe(a.length);
    expect(steps[0].promptTokens).toBe(a.length);
    expect(steps[1]).toMatchObject({ tokens: 1, promptTokens: 0, seqs: 1 });
    for (const r of steps) {
      expect(r.cpuMs).toBe(r.ms);
      expect(r.cardMs + r.copyMs + r.copyBytes + r.promoted).toBe(0);
    }
    run(s, b, 2, 2); // one slot: a's state goes to the prompt cache
    const st = placementState({ model, cache: s.cache, steps: s.steps, stats: s.stats(), heat: new ExpertHeat() }, true);
    expect(st.steps.total).toBe(5);
    expect(st.prompt_cache.entries.length).toBe(1);
    const e = st.prompt_cache.entries[0];
    expect(e.n_tokens).toBe(a.length + 2);
    expect(e.where).toBe("host");
    expect(e.bytes).toBe((a.length + 2) * model.backend.kvPosBytes());
    expect(e.preview).toStartWith("def first_function(alpha");
    const hidden = placementState({ model, cache: s.cache, steps: s.steps, stats: s.stats(), heat: new ExpertHeat() }, false);
    expect(hidden.prompt_cache.entries[0].preview).toBeUndefined();
  });

  test("picks a backend reports: per layer, in total, and their heat; counts of the wrong length are refused by name", () => {
    let cum = new Float64Array(32);
    cum[3] = 10; // layer 0, expert 3
    cum[8 + 5] = 4; // layer 1, expert 5
    const m = withPicks(model, () => cum);
    const s = scheduler(m);
    const heat = new ExpertHeat();
    const t0 = 1_000_000;
    const st = placementState({ model: m, cache: s.cache, steps: s.steps, stats: s.stats(), heat }, true, t0);
    expect(st.picks.available).toBe(true);
    expect(st.picks.total).toBe(14);
    expect(st.layers[0].picks![3]).toBe(10);
    expect(st.layers[1].picks![5]).toBe(4);
    expect(st.layers[0].heat![3]).toBe(10);
    cum = Float64Array.from(cum);
    cum[3] += 6;
    const later = placementState({ model: m, cache: s.cache, steps: s.steps, stats: s.stats(), heat }, true, t0 + HEAT_HALF_LIFE_MS);
    expect(later.layers[0].heat![3]).toBe(11); // 10 halved, plus the 6 new
    expect(later.layers[1].heat![5]).toBe(2);
    expect(later.layers[0].picks![3]).toBe(16);
    const wrong = withPicks(model, () => new Float64Array(3));
    const bad = placementState({ model: wrong, cache: s.cache, steps: s.steps, stats: s.stats(), heat: new ExpertHeat() }, true);
    expect(bad.picks.available).toBe(false);
    expect(bad.picks.reason).toBe("the backend reported 3 counts for 4 layers of 8 experts; ignored");
    expect(bad.layers.every((l) => l.picks === null)).toBe(true);
  });

  test("the heat decays with its half-life and starts over when the layout changes", () => {
    const h = new ExpertHeat(1000);
    expect([...h.update(Float64Array.of(4, 0), 0)]).toEqual([4, 0]);
    expect([...h.update(Float64Array.of(4, 2), 2000)]).toEqual([1, 2]);
    expect([...h.update(Float64Array.of(4, 2, 1), 2500)]).toEqual([4, 2, 1]);
  });

  test("a step beside a card: the CPU's part from the hook's time, the copies at the measured rate, the card the rest", () => {
    let c = { hookUs: 0, uploadBytes: 0, pcieBytesPerSec: 50e9, promoted: 0, diskBytes: 0 };
    const log = new StepLog(true, () => c, 4);
    c = { hookUs: 4000, uploadBytes: 100e6, pcieBytesPerSec: 50e9, promoted: 3, diskBytes: 0 };
    log.record(8, 0, 8, 10);
    const [r] = log.list();
    expect(r.cpuMs).toBe(4);
    expect(r.copyMs).toBe(2);
    expect(r.cardMs).toBe(4);
    expect(r.promoted).toBe(3);
    for (let i = 0; i < 5; i++) log.record(i + 1, 0, 1, 1);
    expect(log.list().map((x) => x.tokens)).toEqual([2, 3, 4, 5]); // a ring of the last 4, oldest first
    expect(log.count).toBe(6);
  });
});
