// The guard of speculation on by default (src/engine/spec-guard.ts): fed decode steps' times a token,
// drafting and not, it keeps the faster mode, looks at the other after a stay that doubles while the
// other loses, and switches where the other is faster by its margin; then the scheduler with draft-mtp
// on by default (auto) gives the tokens of no speculation, and its stats carry the guard.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GUARD_FIRST, GUARD_LOOK, GUARD_MOST, SpecGuard } from "../src/engine/spec-guard.ts";
import { Model } from "../src/engine/model.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import { loadMtpDraft } from "../src/engine/spec-mtp.ts";
import type { SpecConfig } from "../src/engine/spec-ngram.ts";
import type { DoneEvent, EngineStats, GenerateRequest, TokenEvent } from "../src/engine/protocol.ts";
import { synthNearMtp } from "./mtp-edit.ts";

/** Steps of a guard where a token costs onMs drafting and offMs not; the modes it ran, step by step. */
function run(g: SpecGuard, steps: number, onMs: number, offMs: number): boolean[] {
  const modes: boolean[] = [];
  for (let i = 0; i < steps; i++) {
    const on = g.drafting();
    modes.push(on);
    g.record(on, on ? onMs * 2 : offMs, on ? 2 : 1); // two tokens a drafting step, one otherwise
  }
  return modes;
}

describe("the guard", () => {
  test("drafting faster: it stays on, looking at off for a few steps after stays that double", () => {
    const g = new SpecGuard();
    const modes = run(g, 2000, 10, 15);
    expect(modes.slice(0, GUARD_FIRST).every((m) => m)).toBe(true);
    expect(modes.slice(GUARD_FIRST, GUARD_FIRST + GUARD_LOOK).every((m) => !m)).toBe(true);
    expect(modes[GUARD_FIRST + GUARD_LOOK]).toBe(true);
    // the second look comes after twice the first stay
    const second = GUARD_FIRST + GUARD_LOOK + 2 * GUARD_FIRST;
    expect(modes.slice(GUARD_FIRST + GUARD_LOOK, second).every((m) => m)).toBe(true);
    expect(modes[second]).toBe(false);
    expect(g.switches).toBe(0);
    expect(modes.filter((m) => !m).length / modes.length).toBeLessThan(0.05);
    expect(g.last.on).toBeCloseTo(10, 6);
    expect(g.last.off).toBeCloseTo(15, 6);
  });

  test("drafting slower: it turns off after its first stay and looks at drafting again now and then", () => {
    const g = new SpecGuard();
    const modes = run(g, 3000, 20, 12);
    expect(modes[GUARD_FIRST + GUARD_LOOK]).toBe(false);
    expect(g.switches).toBe(1);
    expect(g.drafting()).toBe(false);
    // after the switch: stays of off with looks at on, never switching back
    const on = modes.slice(GUARD_FIRST + GUARD_LOOK).filter((m) => m).length;
    expect(on).toBeGreaterThan(0);
    expect(on / (modes.length - GUARD_FIRST - GUARD_LOOK)).toBeLessThan(0.05);
  });

  test("a change of speed is followed: slower drafting turns it off, faster again turns it back on", () => {
    const g = new SpecGuard();
    run(g, 300, 10, 15);
    expect(g.drafting()).toBe(true);
    run(g, 2 * GUARD_MOST + 200, 30, 15);
    expect(g.drafting()).toBe(false);
    run(g, 2 * GUARD_MOST + 200, 5, 15);
    expect(g.drafting()).toBe(true);
    expect(g.switches).toBe(2);
  });

  test("near ties within the margin do not switch; steps without tokens or with a bad time are not counted", () => {
    const g = new SpecGuard();
    run(g, 1000, 10, 9.8);
    expect(g.switches).toBe(0);
    g.record(true, Number.NaN, 2);
    g.record(true, 5, 0);
    expect(g.drafting()).toBe(true);
  });
});

setDefaultTimeout(300000);
const tmp = mkdtempSync(join(tmpdir(), "bloomery-spec-guard-"));
let model: Model;
afterAll(() => {
  model?.close();
  rmSync(tmp, { recursive: true, force: true });
});
beforeAll(async () => {
  const { near } = await synthNearMtp(tmp);
  model = Model.load(near, { nCtx: 512, nSlots: 1, nThreads: 2, maxTokens: 64, log: () => {} });
});

/** Greedy tokens of prompt through a scheduler with spec (and the MTP drafter where it is draft-mtp); its stats after. */
function generate(spec: SpecConfig | undefined, prompt: number[], n: number): { tokens: number[]; stats: EngineStats } {
  const d = spec?.type === "draft-mtp" ? loadMtpDraft(model, model.gguf, { nThreads: 2, log: () => {} }, 3, 0, 0) : undefined;
  try {
    const tokens: number[] = [];
    const s = new Scheduler(model, { tokens: (evs: TokenEvent[]) => { for (const e of evs) tokens.push(e.token); }, done: (_: DoneEvent) => {} }, makeSampler, 64, 0, spec, d);
    const req: GenerateRequest = { id: 1, prompt, nPredict: n, stop: [], ignoreEos: true, nProbs: 0, idSlot: 0, cachePrompt: false, params: { temperature: 0 } };
    s.submit(req);
    while (s.step()) { /* until done */ }
    return { tokens, stats: s.stats() };
  } finally {
    d?.close();
  }
}

describe("draft-mtp on by default in the scheduler", () => {
  test("the tokens of no speculation; the stats carry the guard's mode and its measured time a token", () => {
    const prompt = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4];
    const plain = generate(undefined, prompt, 200);
    const auto = generate({ type: "draft-mtp", auto: true, sizeN: 12, sizeM: 48, nMax: 3 }, prompt, 200);
    expect(plain.tokens.length).toBe(200);
    expect(auto.tokens).toEqual(plain.tokens);
    const g = auto.stats.specGuard!;
    expect(g).toBeDefined();
    expect(g.msPerTokenOn).toBeGreaterThan(0); // the first stay of drafting steps was measured
    expect(auto.stats.specDrafted).toBeGreaterThan(0);
    expect(plain.stats.specGuard).toBeUndefined();
    // asked for (not auto): no guard
    expect(generate({ type: "draft-mtp", sizeN: 12, sizeM: 48, nMax: 3 }, prompt, 8).stats.specGuard).toBeUndefined();
  });
});
