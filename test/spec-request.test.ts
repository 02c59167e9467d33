// llama-server's per-request speculative decoding fields (speculative.n_max, n_min, p_min) for every spec type:
// read and clamped as server-schema.cpp does, and applied by the scheduler to draft-mtp's drafts (a draft never
// longer than n_max, none shorter than n_min, p_min stopping it) and to ngram-simple's, greedy output unchanged;
// the real server with --spec-type draft-mtp takes them, and /metrics' drafted / accepted counters are the sums
// of the requests' timings.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs, type ServerOptions } from "../src/cli/flags.ts";
import { readGenSettings } from "../src/server/params.ts";
import { Model } from "../src/engine/model.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import { loadMtpDraft, type MtpDraft } from "../src/engine/spec-mtp.ts";
import type { SpecConfig } from "../src/engine/spec-ngram.ts";
import type { DoneEvent, DraftOverrides, TokenEvent } from "../src/engine/protocol.ts";
import { synthNearMtp } from "./mtp-edit.ts";
import { post, startServer, type RunningServer } from "./server-helpers.ts";

setDefaultTimeout(300000);
const tmp = mkdtempSync(join(tmpdir(), "bloomery-spec-request-"));
const MTP_SPEC: SpecConfig = { type: "draft-mtp", sizeN: 12, sizeM: 48, nMax: 3 };
const NGRAM: SpecConfig = { type: "ngram-simple", sizeN: 2, sizeM: 8 };
const opened: { close(): void }[] = [];
afterAll(() => opened.forEach((m) => m.close()));
let model: Model;
let NEAR = "";

beforeAll(async () => {
  NEAR = (await synthNearMtp(tmp)).near;
  model = Model.load(NEAR, { nCtx: 512, nSlots: 2, nThreads: 2, maxTokens: 64, log: () => {} });
  opened.push(model);
});

describe("the request's fields", () => {
  const opts = (() => {
    const r = parseArgs(["-m", "x.gguf"], {});
    if (r.action !== "serve") throw new Error("not a serve");
    return r.options as ServerOptions;
  })();
  const ctx = { opts, nVocab: 1024, nSlots: 2, encode: () => [] };
  test("n_max at least 0, n_min within 0 .. n_max, p_min within 0 .. 1; absent: the server's flags", () => {
    expect(readGenSettings({}, ctx).draft).toEqual({});
    expect(readGenSettings({ "speculative.n_max": 2, "speculative.n_min": 5, "speculative.p_min": 1.5 }, ctx).draft).toEqual({ nMax: 2, nMin: 2, pMin: 1 });
    expect(readGenSettings({ "speculative.n_max": -4 }, ctx).draft).toEqual({ nMax: 0, nMin: 0 });
    expect(readGenSettings({ "speculative.n_min": 1 }, ctx).draft).toEqual({ nMin: Math.min(1, opts.specDraftNMax) });
    expect(() => readGenSettings({ "speculative.n_max": 1.5 }, ctx)).toThrow(/speculative\.n_max/);
    expect(() => readGenSettings({ "speculative.p_min": "x" }, ctx)).toThrow(/speculative\.p_min/);
  });
});

interface Out { tokens: number[]; done?: DoneEvent }
function run(prompts: number[][], spec?: SpecConfig, d?: MtpDraft, draft?: DraftOverrides) {
  const outs: Out[] = prompts.map(() => ({ tokens: [] }));
  const sched = new Scheduler(model, {
    tokens: (evs: TokenEvent[]) => { for (const e of evs) outs[e.id].tokens.push(e.token); },
    done: (dn: DoneEvent) => { outs[dn.id].done = dn; },
  }, makeSampler, 64, 0, spec, d);
  prompts.forEach((prompt, id) => sched.submit({ id, prompt, nPredict: 30, stop: [], ignoreEos: true, nProbs: 0, idSlot: -1, cachePrompt: false, params: { temperature: 0 }, draft }));
  while (sched.step()) { /* run */ }
  return { outs, st: sched.stats() };
}
const prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2], [50, 60, 70, 80, 50, 60, 70, 80, 50, 60]];

describe("the scheduler applies them", () => {
  test("draft-mtp: n_max 1 drafts one token a step, n_max 0 none, n_min = n_max 3 only whole drafts, p_min fewer; tokens unchanged", () => {
    const d = loadMtpDraft(model, model.gguf, { nThreads: 2, log: () => {} }, 3, 0, 0);
    opened.push(d);
    const plain = run(prompts);
    const base = run(prompts, MTP_SPEC, d);
    const one = run(prompts, MTP_SPEC, d, { nMax: 1 });
    const none = run(prompts, MTP_SPEC, d, { nMax: 0 });
    const whole = run(prompts, MTP_SPEC, d, { nMax: 3, nMin: 3 });
    const sure = run(prompts, MTP_SPEC, d, { pMin: 0.9999 });
    for (const r of [base, one, none, whole, sure]) for (let i = 0; i < prompts.length; i++) expect(r.outs[i].tokens).toEqual(plain.outs[i].tokens);
    console.log(`draft-mtp drafted / accepted / steps: default ${base.st.specDrafted}/${base.st.specAccepted}/${base.st.specSteps}, n_max 1 ${one.st.specDrafted}/${one.st.specAccepted}/${one.st.specSteps}, n_min 3 ${whole.st.specDrafted}/${whole.st.specSteps}, p_min ${sure.st.specDrafted}`);
    expect(base.st.specDrafted).toBeGreaterThan(base.st.specSteps); // drafts of more than one token
    expect(one.st.specSteps).toBeGreaterThan(0);
    expect(one.st.specDrafted).toBe(one.st.specSteps);
    expect(none.st.specDrafted).toBe(0);
    expect(none.outs.every((o) => o.done!.timings.draft_n === undefined || o.done!.timings.draft_n === 0)).toBe(true);
    expect(whole.st.specSteps).toBeGreaterThan(0);
    expect(whole.st.specDrafted).toBe(3 * whole.st.specSteps);
    expect(sure.st.specDrafted).toBeLessThan(base.st.specDrafted);
    for (const r of [base, one, whole]) {
      const t = r.outs.map((o) => o.done!.timings);
      expect(t.reduce((a, x) => a + (x.draft_n ?? 0), 0)).toBe(r.st.specDrafted);
      expect(t.reduce((a, x) => a + (x.draft_n_accepted ?? 0), 0)).toBe(r.st.specAccepted);
    }
  });

  test("ngram-simple: n_max caps its drafts, n_min above what it finds leaves none; tokens unchanged", () => {
    const plain = run(prompts);
    const base = run(prompts, NGRAM), one = run(prompts, NGRAM, undefined, { nMax: 1 }), none = run(prompts, NGRAM, undefined, { nMax: 12, nMin: 9 });
    for (const r of [base, one, none]) for (let i = 0; i < prompts.length; i++) expect(r.outs[i].tokens).toEqual(plain.outs[i].tokens);
    expect(base.st.specDrafted).toBeGreaterThan(base.st.specSteps);
    expect(one.st.specSteps).toBeGreaterThan(0);
    expect(one.st.specDrafted).toBe(one.st.specSteps);
    // its drafts are at most size_m (8) long: none reaches an n_min of 9
    expect(none.st.specDrafted).toBe(0);
  });
});

describe("the server with --spec-type draft-mtp", () => {
  let srv: RunningServer;
  beforeAll(async () => {
    srv = await startServer(["-m", NEAR, "-np", "1", "-c", "512", "--spec-type", "draft-mtp", "--metrics", "-t", "2"]);
  });
  afterAll(async () => { await srv?.stop(); });

  test("speculative.n_max per request; /metrics counts every request's drafts and accepted tokens", async () => {
    const body = (extra: Record<string, unknown>) => ({ prompt: [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4], n_predict: 24, temperature: 0, ignore_eos: true, return_tokens: true, ...extra });
    const base = await post(`${srv.url}/completion`, body({}));
    const one = await post(`${srv.url}/completion`, body({ "speculative.n_max": 1 }));
    const none = await post(`${srv.url}/completion`, body({ "speculative.n_max": 0 }));
    for (const r of [base, one, none]) expect(r.status).toBe(200);
    expect(one.json.tokens).toEqual(base.json.tokens);
    expect(none.json.tokens).toEqual(base.json.tokens);
    expect(base.json.timings.draft_n).toBeGreaterThan(0);
    expect(one.json.timings.draft_n).toBeGreaterThan(0);
    // one token a step: at most one drafted a generated token, fewer than the default's three a step
    expect(one.json.timings.draft_n).toBeLessThanOrEqual(24);
    expect(one.json.timings.draft_n).toBeLessThan(base.json.timings.draft_n);
    expect(none.json.timings.draft_n ?? 0).toBe(0);
    expect(one.json.generation_settings["speculative.n_max"]).toBe(1);
    const m = await (await fetch(`${srv.url}/metrics`)).text();
    const val = (name: string) => Number(new RegExp(`^llamacpp:${name} (\\S+)$`, "m").exec(m)?.[1]);
    const sum = (k: "draft_n" | "draft_n_accepted") => [base, one, none].reduce((a, r) => a + (r.json.timings[k] ?? 0), 0);
    expect(val("spec_decode_num_draft_tokens_total")).toBe(sum("draft_n"));
    expect(val("spec_decode_num_accepted_tokens_total")).toBe(sum("draft_n_accepted"));
  });
});
