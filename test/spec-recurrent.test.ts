// Speculative decoding on the recurrent fixtures (qwen35moe, qwen3next: gated delta-net layers, a recurrent state
// a slot) on the CPU: the native snapshot of a slot's state; greedy output with drafts (ngram-simple, the fixture
// drafting for itself, a noisy copy of it that agrees only in part) token for token the output without them, four
// slots at once, and after the run every slot's state the one its tokens give (requests ending mid-draft too); a recurrent draft model's drafts
// the ones a fresh one makes; a request cancelled mid-run leaves its slot's state right; `generate` and the real
// server (two slots at once, a stream cut mid-way) give the tokens they give without speculation.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import { RecurrentStates } from "../src/engine/recurrent-state.ts";
import { DraftModel } from "../src/engine/spec-draft.ts";
import type { SpecConfig } from "../src/engine/spec-ngram.ts";
import type { Backend, Batch } from "../src/engine/backend.ts";
import type { DoneEvent, TokenEvent } from "../src/engine/protocol.ts";
import { editGguf } from "./gguf-edit.ts";
import { maxAbsDiff } from "./model-fixtures.ts";
import { runCli } from "./exe.ts";
import { DEMO_MODEL, ensureBuilt, post, startServer, type RunningServer } from "./server-helpers.ts";
import { FIXTURES } from "./paths.ts";

setDefaultTimeout(300000);
const FAM = join(FIXTURES, "families");
const FIXTURE_DIRS = ["qwen3_5_moe", "qwen3_next"].filter((d) => existsSync(join(FAM, d, `${d}.gguf`)));
const gguf = (d: string) => join(FAM, d, `${d}.gguf`);
const tmp = mkdtempSync(join(tmpdir(), "bloomery-spec-rs-"));

/** A copy of a fixture with noise on its output head: a draft model that agrees with it only in part. */
function noisyCopy(dir: string, amount = 0.3): string {
  let seed = 12345;
  const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed / 0x7fffffff - 0.5; };
  return editGguf(gguf(dir), join(tmp, `${dir}-noisy.gguf`), {
    tensor: (t) => {
      if (t.name !== "output.weight") return t;
      if (t.type !== 1) throw new Error(`output.weight of type ${t.type}: the noisy copy takes F16`);
      const v = new Float16Array(t.data.slice().buffer);
      let ss = 0;
      for (const x of v) ss += x * x;
      const std = Math.sqrt(ss / v.length);
      for (let i = 0; i < v.length; i++) v[i] = v[i] + amount * std * 3.46 * rnd();
      return { ...t, data: new Uint8Array(v.buffer) };
    },
  });
}

const models: Model[] = [];
afterAll(() => models.forEach((m) => m.close()));
function load(path: string, nSlots = 4): Model {
  const m = Model.load(path, { nCtx: 512, nSlots, nThreads: 2, maxTokens: 64, log: () => {} });
  models.push(m);
  return m;
}

interface Run { tokens: number[]; text: string[]; done?: DoneEvent }
function scheduler(model: Model, runs: Run[], spec?: SpecConfig, drafter?: DraftModel): Scheduler {
  return new Scheduler(model, {
    tokens: (evs: TokenEvent[]) => { for (const e of evs) { runs[e.id].tokens.push(e.token); runs[e.id].text.push(e.text); } },
    done: (d: DoneEvent) => { runs[d.id].done = d; },
  }, makeSampler, 64, 0, spec, drafter);
}
function run(model: Model, prompts: number[][], nPredict: number, spec?: SpecConfig, drafter?: DraftModel, stop: string[] = []): { runs: Run[]; sched: Scheduler } {
  const runs: Run[] = prompts.map(() => ({ tokens: [], text: [] }));
  const sched = scheduler(model, runs, spec, drafter);
  prompts.forEach((prompt, id) => sched.submit({ id, prompt, nPredict, stop, ignoreEos: true, nProbs: 0, idSlot: -1, cachePrompt: false, params: { temperature: 0 } }));
  while (sched.step()) { /* run */ }
  return { runs, sched };
}

function forward(m: Model, tokens: number[], pos0: number, slot: number): void {
  const b: Batch = { tokens: Int32Array.from(tokens), pos: Int32Array.from(tokens, (_, i) => pos0 + i), seq: new Int32Array(tokens.length).fill(slot), outRows: new Int32Array(0), logits: new Float32Array(0) };
  m.backend.forward(b);
}
function stateOf(m: Model, slot: number): Float32Array {
  const b = new Uint8Array(m.backend.rsBytes!());
  m.backend.rsSave!(slot, b);
  return new Float32Array(b.buffer);
}
/** The state after `tokens` in slot 0 of ref: the first promptLen - 1 as prompt chunks, then one token a pass (as without drafts). */
function refState(ref: Model, tokens: number[], promptLen: number): Float32Array {
  const head = tokens.slice(0, promptLen - 1);
  for (let i = 0; i < head.length; i += 64) forward(ref, head.slice(i, i + 64), i, 0);
  for (let p = head.length; p < tokens.length; p++) forward(ref, [tokens[p]], p, 0);
  return stateOf(ref, 0);
}
/** Every slot's state against the state its tokens give (prompt, then the generated tokens it fed). */
function expectStatesRight(m: Model, ref: Model, sched: Scheduler, prompts: number[][], runs: Run[]): void {
  for (const [id, r] of runs.entries()) {
    const slot = r.done!.idSlot, n = sched.slotInfo()[slot].n_cached;
    const seq = [...prompts[id], ...r.tokens];
    expect(n).toBeLessThan(seq.length);
    const want = refState(ref, seq.slice(0, n), prompts[id].length), got = stateOf(m, slot);
    let scale = 0;
    for (const x of want) scale = Math.max(scale, Math.abs(x));
    // bit for bit today (the rule runs a token at a time in every pass); a rounding's worth allowed for a chunked prompt form
    expect(maxAbsDiff(got, want)).toBeLessThanOrEqual(1e-5 * scale);
  }
}

describe("the native snapshot of a slot's recurrent state (bl_cpu_rs_snap_*)", () => {
  test.skipIf(FIXTURE_DIRS.length === 0)("taken, the slot moved on, put back: the state is the one taken; another slot's untouched; misuse refused by name", () => {
    const m = load(gguf(FIXTURE_DIRS[0]), 2);
    const be = m.backend;
    expect(() => be.rsSnapTake!(0)).toThrow(/no room reserved/);
    be.rsSnapReserve!();
    be.rsSnapReserve!(); // a second reserve keeps the room
    expect(() => be.rsSnapBack!(1)).toThrow(/took no snapshot/);
    forward(m, [5, 6, 7, 8], 0, 0);
    forward(m, [9, 10], 0, 1);
    const a = stateOf(m, 0), other = stateOf(m, 1);
    be.rsSnapTake!(0);
    forward(m, [11, 12, 13], 4, 0);
    expect(maxAbsDiff(stateOf(m, 0), a)).toBeGreaterThan(0);
    be.rsSnapBack!(0);
    expect(stateOf(m, 0)).toEqual(a);
    expect(stateOf(m, 1)).toEqual(other);
    expect(() => be.rsSnapTake!(2)).toThrow(/out of range/);
  });

  test("a model without recurrent layers: reserving is a no-op, a snapshot is refused", () => {
    const m = load(DEMO_MODEL, 1);
    m.backend.rsSnapReserve!();
    expect(() => m.backend.rsSnapTake!(0)).toThrow(/keeps no recurrent state/);
  });

  test("a backend that cannot keep one: speculation on a recurrent model refused by name", () => {
    const be = { name: "CUDA", rsBytes: () => 64 } as unknown as Backend;
    expect(() => new RecurrentStates(be, 64).reserveSnapshots()).toThrow(/speculative decoding with recurrent layers .* the CUDA backend does not do yet/);
  });
});

for (const dir of FIXTURE_DIRS) {
  describe(`speculative decoding on ${dir} (CPU, four slots)`, () => {
    let m: Model, ref: Model, prompts: number[][];
    let plain: { runs: Run[]; sched: Scheduler };
    const N = 48;
    beforeAll(async () => {
      m = load(gguf(dir));
      ref = load(gguf(dir), 1);
      prompts = (await Bun.file(join(FAM, dir, "ref.json")).json()).refs.map((r: { prompt: number[] }) => r.prompt);
      plain = run(m, prompts, N);
    });

    test("ngram-simple: the tokens without drafts; drafts rejected roll the states back; every slot's state right after", () => {
      // a prompt that repeats itself: its keys recur, so drafts are found (a random model rejects them)
      const rep = prompts.map((p) => [...p.slice(0, 20), ...p.slice(0, 20), ...p.slice(0, 20)]);
      const want = run(m, rep, N);
      const got = run(m, rep, N, { type: "ngram-simple", sizeN: 1, sizeM: 6 });
      for (const [i, r] of got.runs.entries()) expect(r.tokens).toEqual(want.runs[i].tokens);
      const st = got.sched.stats();
      console.log(`${dir} ngram-simple: ${st.specAccepted} of ${st.specDrafted} draft tokens accepted in ${st.specSteps} verifications, ${st.specRollbacks} rollbacks, ${st.specRetaken} tokens taken again`);
      expect(st.specDrafted).toBeGreaterThan(0);
      expect(st.specRollbacks).toBeGreaterThan(0);
      expectStatesRight(m, ref, got.sched, rep, got.runs);
    });

    test("the fixture drafting for itself: the tokens without drafts, nearly every draft accepted", () => {
      const got = run(m, prompts, N, { type: "draft-simple", sizeN: 12, sizeM: 48, nMax: 4 }, new DraftModel(load(gguf(dir)), 4, 0, 0));
      for (const [i, r] of got.runs.entries()) expect(r.tokens).toEqual(plain.runs[i].tokens);
      const st = got.sched.stats();
      console.log(`${dir} drafting for itself: ${st.specAccepted} of ${st.specDrafted} accepted, ${st.nDecode} passes (${plain.sched.stats().nDecode} without)`);
      expect(st.specAccepted).toBeGreaterThan(0.9 * st.specDrafted);
      expect(st.nDecode).toBeLessThan(plain.sched.stats().nDecode / 2);
      expectStatesRight(m, ref, got.sched, prompts, got.runs);
    });

    test("a noisy copy drafting (accepted in part): the tokens without drafts; rollbacks and retaken tokens; every slot's state right", () => {
      const got = run(m, prompts, N, { type: "draft-simple", sizeN: 12, sizeM: 48, nMax: 4 }, new DraftModel(load(noisyCopy(dir)), 4, 0, 0));
      for (const [i, r] of got.runs.entries()) expect(r.tokens).toEqual(plain.runs[i].tokens);
      const st = got.sched.stats();
      console.log(`${dir} a noisy copy drafting: ${st.specAccepted} of ${st.specDrafted} accepted in ${st.specSteps} verifications, ${st.specRollbacks} rollbacks, ${st.specRetaken} tokens taken again`);
      expect(st.specAccepted).toBeGreaterThan(0);
      expect(st.specAccepted).toBeLessThan(st.specDrafted);
      expect(st.specRollbacks).toBeGreaterThan(0);
      expect(st.specRetaken!).toBeGreaterThan(st.specRollbacks!); // some rollbacks kept accepted tokens
      expectStatesRight(m, ref, got.sched, prompts, got.runs);
    });

    test("requests ending mid-draft (a stop word): the tokens without drafts, the slots cut to the states they kept", () => {
      // a piece of text the first request generates late that it did not generate before
      const r0 = plain.runs[0], before = (i: number) => r0.text.slice(0, i).join("");
      const at = r0.text.findIndex((p, i) => i >= 16 && p.trim().length >= 2 && !before(i).includes(p.trim()));
      expect(at).toBeGreaterThan(0);
      const stop = [r0.text[at].trim()];
      const want = run(m, prompts, N, undefined, undefined, stop);
      const got = run(m, prompts, N, { type: "draft-simple", sizeN: 12, sizeM: 48, nMax: 4 }, new DraftModel(load(noisyCopy(dir)), 4, 0, 0), stop);
      expect(want.runs[0].done!.stopType).toBe("word");
      for (const [i, r] of got.runs.entries()) {
        expect(r.tokens).toEqual(want.runs[i].tokens);
        expect(r.done!.stopType).toBe(want.runs[i].done!.stopType);
      }
      expect(got.sched.stats().specRollbacks).toBeGreaterThan(0);
      expectStatesRight(m, ref, got.sched, prompts, got.runs);
    });

    test("a recurrent draft model's drafts, step after step with the target taking part of each, are a fresh one's", () => {
      const noisy = noisyCopy(dir);
      const d = new DraftModel(load(noisy, 1), 4, 0, 0);
      const fresh = load(noisy, 16);
      const prompt = prompts[2], target = plain.runs[2].tokens;
      let n = 0, partial = 0;
      for (let call = 0; call < 16 && n + 6 < target.length; call++) {
        const ask = { slot: 0, tokens: [...prompt, ...target.slice(0, n)], last: target[n], limit: 4 };
        const got = d.draft([ask]).get(0)!;
        // a fresh draft model (a slot never used) for the same ask
        const want = new DraftModel(fresh, 4, 0, 0).draft([{ ...ask, slot: call }]).get(call)!;
        expect(got).toEqual(want);
        let acc = 0;
        while (acc < got.length && got[acc] === target[n + 1 + acc]) acc++;
        if (acc > 0 && acc < got.length) partial++;
        n += acc + 1;
      }
      expect(partial).toBeGreaterThan(0);
    });

    test("a request cancelled mid-run: its slot's state is its tokens'; the other finishes as without drafts; the next request on the slot reuses it and answers as fresh", () => {
      const runs: Run[] = [0, 1, 2].map(() => ({ tokens: [], text: [] }));
      const sched = scheduler(m, runs, { type: "draft-simple", sizeN: 12, sizeM: 48, nMax: 4 }, new DraftModel(load(noisyCopy(dir)), 4, 0, 0));
      const submit = (id: number, prompt: number[], idSlot = -1, cachePrompt = false) =>
        sched.submit({ id, prompt, nPredict: N, stop: [], ignoreEos: true, nProbs: 0, idSlot, cachePrompt, params: { temperature: 0 } });
      submit(0, prompts[2]);
      submit(1, prompts[3]);
      while (runs[0].tokens.length < 9) expect(sched.step()).toBe(true);
      const before = sched.stats().specRollbacks!;
      sched.cancel(0);
      while (sched.step()) { /* the other goes on */ }
      expect(runs[0].done!.stopType).toBe("cancel");
      expect(runs[1].tokens).toEqual(plain.runs[3].tokens);
      expect(before).toBeGreaterThan(0);
      expectStatesRight(m, ref, sched, [prompts[2], prompts[3]], runs.slice(0, 2));
      // the conversation goes on in the cancelled request's slot: its state is reused, the answer a fresh run's
      const slot = runs[0].done!.idSlot, held = sched.slotInfo()[slot].n_cached;
      const next = [...prompts[2], ...runs[0].tokens, 7, 8];
      submit(2, next, slot, true);
      while (sched.step()) { /* run */ }
      expect(runs[2].done!.tokensCached).toBe(held);
      expect(runs[2].tokens).toEqual(run(m, [next], N).runs[0].tokens);
    });
  });
}

describe.skipIf(FIXTURE_DIRS.length === 0)("generate with speculation on a recurrent model", () => {
  test("ngram-simple, the fixture as its own draft, a noisy draft: the tokens generate gives without", async () => {
    ensureBuilt();
    for (const dir of FIXTURE_DIRS) {
      const prompt = (await Bun.file(join(FAM, dir, "ref.json")).json()).refs[3].prompt as number[];
      const gen = (extra: string[]) => {
        const r = runCli(["generate", "-m", gguf(dir), "--tokens", prompt.join(","), "-n", "40", "--temp", "0", "--ignore-eos", "--json", ...extra]);
        if (r.code !== 0) throw new Error(`generate ${extra.join(" ")}: exit ${r.code}: ${r.stderr}`);
        return JSON.parse(r.stdout.trim().split("\n").pop()!) as { tokens: number[]; timings: { draft_n?: number; draft_n_accepted?: number } };
      };
      const want = gen([]).tokens;
      expect(want.length).toBe(40);
      const ng = gen(["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "4"]);
      const self = gen(["-md", gguf(dir), "--spec-draft-n-max", "4"]);
      const noisy = gen(["-md", noisyCopy(dir), "--spec-draft-n-max", "4"]);
      for (const g of [ng, self, noisy]) expect(g.tokens).toEqual(want);
      expect(ng.timings.draft_n).toBeGreaterThan(0);
      expect(self.timings.draft_n_accepted).toBe(self.timings.draft_n!);
      expect(noisy.timings.draft_n_accepted!).toBeGreaterThan(0);
      expect(noisy.timings.draft_n_accepted!).toBeLessThan(noisy.timings.draft_n!);
    }
  });
});

describe.skipIf(!FIXTURE_DIRS.includes("qwen3_5_moe"))("the server with speculation on qwen35moe (two slots)", () => {
  const dir = "qwen3_5_moe";
  let plainSrv: RunningServer, ngram: RunningServer, draft: RunningServer, self: RunningServer;
  let prompts: number[][] = [];
  beforeAll(async () => {
    prompts = (await Bun.file(join(FAM, dir, "ref.json")).json()).refs.map((r: { prompt: number[] }) => r.prompt);
    const args = ["-m", gguf(dir), "-np", "2", "-c", "1024", "-t", "2", "--metrics"];
    [plainSrv, ngram, draft, self] = await Promise.all([
      startServer(args),
      startServer([...args, "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "4"]),
      startServer([...args, "-md", noisyCopy(dir), "--spec-draft-n-max", "4"]),
      startServer([...args, "-md", gguf(dir), "--spec-draft-n-max", "4"]),
    ]);
  }, 300000);
  afterAll(async () => { await Promise.all([plainSrv, ngram, draft, self].map((s) => s?.stop())); });

  async function complete(srv: RunningServer, prompt: number[], extra: Record<string, unknown> = {}) {
    const r = await post(`${srv.url}/completion`, { prompt, n_predict: 32, temperature: 0, return_tokens: true, cache_prompt: false, ...extra });
    expect(r.status).toBe(200);
    return r.json as { tokens: number[]; tokens_cached: number; timings: { draft_n?: number; draft_n_accepted?: number } };
  }

  test("two requests at once on each: the tokens of the server without speculation; drafts counted in timings and /metrics", async () => {
    const ps = [prompts[2], [...prompts[1], ...prompts[1]]];
    const want = await Promise.all(ps.map((p, i) => complete(plainSrv, p, { id_slot: i })));
    for (const srv of [ngram, draft, self]) {
      const got = await Promise.all(ps.map((p, i) => complete(srv, p, { id_slot: i })));
      for (let i = 0; i < 2; i++) expect(got[i].tokens).toEqual(want[i].tokens);
      const drafted = got.reduce((a, g) => a + (g.timings.draft_n ?? 0), 0), accepted = got.reduce((a, g) => a + (g.timings.draft_n_accepted ?? 0), 0);
      expect(drafted).toBeGreaterThan(0);
      if (srv === self) expect(accepted).toBe(drafted);
      if (srv === draft) expect(accepted).toBeGreaterThan(0);
      const m = await (await fetch(`${srv.url}/metrics`)).text();
      expect(Number(/^llamacpp:spec_decode_num_draft_tokens_total (\S+)$/m.exec(m)?.[1])).toBe(drafted);
    }
  });

  test("a stream cut mid-way: the slot's next request, sharing its prefix, answers as the server without speculation", async () => {
    const p = prompts[3].slice(0, 60);
    const ctl = new AbortController();
    const res = await fetch(`${draft.url}/completion`, {
      method: "POST", headers: { "content-type": "application/json" }, signal: ctl.signal,
      body: JSON.stringify({ prompt: p, n_predict: 400, temperature: 0, stream: true, id_slot: 0, cache_prompt: true }),
    });
    const reader = res.body!.getReader();
    for (let i = 0; i < 6; i++) await reader.read();
    ctl.abort();
    await Bun.sleep(300);
    const slots = (await (await fetch(`${draft.url}/slots`)).json()) as { id: number; is_processing: boolean; n_cached?: number }[];
    expect(slots[0].is_processing).toBe(false);
    // the prompt and something after it: the slot holds the prompt's state at least (its checkpoint, or its live state)
    const next = [...p, 3, 4, 5];
    const got = await complete(draft, next, { id_slot: 0, cache_prompt: true });
    expect(got.tokens_cached).toBeGreaterThan(0);
    expect(got.tokens).toEqual((await complete(plainSrv, next, { id_slot: 0 })).tokens);
  });
});
