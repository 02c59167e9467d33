// Speculative decoding with drafts from the sequence itself (--spec-type ngram-simple): the draft
// lookup, then on the demo model (CPU) the greedy output with drafts equals the output without
// them, token for token, while drafts are accepted; the server reports llama-server's timings and
// /metrics counters; a kind that needs a draft model is refused by name at start.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Model } from "../src/engine/model.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import { ngramDraft, type SpecConfig } from "../src/engine/spec-ngram.ts";
import { checkDraftVocab, DraftModel } from "../src/engine/spec-draft.ts";
import type { DoneEvent, TokenEvent } from "../src/engine/protocol.ts";
import { parseArgs } from "../src/cli/flags.ts";
import { DEMO_MODEL, TINY_MODEL, post, startServer, type RunningServer } from "./server-helpers.ts";

describe("ngram-simple drafts", () => {
  test("the tokens after the key's latest earlier occurrence, at least size_n of them, at most size_m and the limit", () => {
    //              0  1  2  3  4  5  6  7  8  9 10 11
    const seq = [9, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5];
    // key (size 2): [5, last=6]... the sequence holds 5,6 at 5..6: the draft is what followed (1 2 3 4 5)
    expect(ngramDraft(seq, 6, 2, 5)).toEqual([1, 2, 3, 4, 5]);
    expect(ngramDraft(seq, 6, 2, 3)).toEqual([1, 2, 3]);
    expect(ngramDraft(seq, 6, 2, 5, 2)).toEqual([1, 2]);
    // no earlier occurrence of the key
    expect(ngramDraft(seq, 7, 2, 5)).toEqual([]);
    // too short a sequence for a key and a draft
    expect(ngramDraft([1, 2, 1], 2, 2, 5)).toEqual([]);
    // the latest occurrence wins: [1, 2] at 1 and at 7; after 7 come 3 4 5
    expect(ngramDraft([...seq, 6, 1], 2, 2, 3)).toEqual([3, 4, 5]);
  });
});

interface Run { tokens: number[]; done?: DoneEvent }

function run(model: Model, spec: SpecConfig | undefined, prompts: number[][], nPredict: number, temperature = 0): { runs: Run[]; sched: Scheduler } {
  const runs: Run[] = prompts.map(() => ({ tokens: [] }));
  const sched = new Scheduler(model, {
    tokens: (evs: TokenEvent[]) => { for (const e of evs) runs[e.id].tokens.push(e.token); },
    done: (d: DoneEvent) => { runs[d.id].done = d; },
  }, makeSampler, 64, 0, spec);
  prompts.forEach((prompt, id) => sched.submit({ id, prompt, nPredict, stop: [], ignoreEos: true, nProbs: 0, idSlot: -1, cachePrompt: false, params: { temperature, seed: 7 } }));
  while (sched.step()) { /* run */ }
  return { runs, sched };
}

describe("speculative decoding on the CPU (demo model)", () => {
  let model: Model;
  beforeAll(() => { model = Model.load(DEMO_MODEL, { nCtx: 512, nSlots: 2, nThreads: 2, maxTokens: 64 }); });
  afterAll(() => model.close());
  const spec: SpecConfig = { type: "ngram-simple", sizeN: 3, sizeM: 8 };

  test("greedy: the same tokens with drafts as without, drafts accepted, two slots batched", () => {
    const tok = model.tokenizer;
    // repetitive text: the continuation repeats what the prompt holds, so drafts are found
    const a = tok.encode("for i in range(10):\n    print(i)\nfor i in range(10):\n    print(i)\nfor i in range(10):\n    print(i)\n");
    const b = tok.encode("def f(x):\n    return x + 1\n\ndef f(x):\n    return x + 1\n\ndef f(x):\n");
    const plain = run(model, undefined, [a, b], 40);
    const fast = run(model, spec, [a, b], 40);
    for (let i = 0; i < 2; i++) {
      expect(fast.runs[i].tokens).toEqual(plain.runs[i].tokens);
      expect(fast.runs[i].tokens.length).toBe(40);
      expect(plain.runs[i].done!.timings.draft_n).toBeUndefined();
    }
    const st = fast.sched.stats();
    console.log(`ngram-simple on the demo model: ${st.specAccepted} of ${st.specDrafted} draft tokens accepted in ${st.specSteps} verification steps; forward passes ${st.nDecode} (without drafts ${plain.sched.stats().nDecode})`);
    expect(st.specDrafted).toBeGreaterThan(0);
    expect(st.specAccepted).toBeGreaterThan(0);
    expect(st.nDecode).toBeLessThan(plain.sched.stats().nDecode);
    const d = fast.runs[0].done!.timings;
    expect(d.draft_n! + fast.runs[1].done!.timings.draft_n!).toBe(st.specDrafted);
    expect(d.draft_n_accepted!).toBeLessThanOrEqual(d.draft_n!);
  });

  test("sampled (temperature 1, a seed): every token still comes from the model's row; the count is exact", () => {
    const tok = model.tokenizer;
    const a = tok.encode("a b c d a b c d a b c d a b c d a b c d");
    const r = run(model, spec, [a], 24, 1);
    expect(r.runs[0].tokens.length).toBe(24);
    expect(r.runs[0].done!.tokensPredicted).toBe(24);
  });
});

describe("speculative decoding with a draft model (the demo model drafting for itself, CPU)", () => {
  let model: Model, draftM: Model;
  beforeAll(() => {
    model = Model.load(DEMO_MODEL, { nCtx: 512, nSlots: 2, nThreads: 2, maxTokens: 64 });
    draftM = Model.load(DEMO_MODEL, { nCtx: 512, nSlots: 2, nThreads: 2, maxTokens: 64 });
  });
  afterAll(() => { model.close(); draftM.close(); });

  test("greedy: the same tokens as without drafts; a draft of itself is accepted nearly whole", () => {
    const tok = model.tokenizer;
    checkDraftVocab(model, draftM);
    const a = tok.encode("import os\nimport sys\n\n\ndef main(argv):\n"), b = tok.encode("class Config:\n    def __init__(self, path):\n");
    const plain = run(model, undefined, [a, b], 32);
    const drafter = new DraftModel(draftM, 4, 0, 0);
    const spec: SpecConfig = { type: "draft-simple", sizeN: 12, sizeM: 48, nMax: 4 };
    const runs: Run[] = [{ tokens: [] }, { tokens: [] }];
    const sched = new Scheduler(model, {
      tokens: (evs: TokenEvent[]) => { for (const e of evs) runs[e.id].tokens.push(e.token); },
      done: (d: DoneEvent) => { runs[d.id].done = d; },
    }, makeSampler, 64, 0, spec, drafter);
    [a, b].forEach((prompt, id) => sched.submit({ id, prompt, nPredict: 32, stop: [], ignoreEos: true, nProbs: 0, idSlot: -1, cachePrompt: false, params: { temperature: 0 } }));
    while (sched.step()) { /* run */ }
    for (let i = 0; i < 2; i++) expect(runs[i].tokens).toEqual(plain.runs[i].tokens);
    const st = sched.stats();
    console.log(`draft-simple (the demo model drafting for itself): ${st.specAccepted} of ${st.specDrafted} draft tokens accepted in ${st.specSteps} steps; forward passes ${st.nDecode} (without drafts ${plain.sched.stats().nDecode})`);
    expect(st.specAccepted).toBeGreaterThan(0.9 * st.specDrafted);
    expect(st.nDecode).toBeLessThan(plain.sched.stats().nDecode / 2);
  });

  test("a draft model of another vocabulary is refused by name", () => {
    const other = Model.load(TINY_MODEL, { nCtx: 64, nSlots: 1, nThreads: 1, maxTokens: 8 });
    try {
      expect(() => checkDraftVocab(model, other)).toThrow(/vocabulary differs/);
    } finally {
      other.close();
    }
  });
});

describe("the flags", () => {
  test("-md alone means draft-simple; draft-simple without -md is refused", () => {
    const r = parseArgs(["-m", "x.gguf", "-md", "d.gguf", "--spec-draft-n-max", "5"], {});
    expect(r.action === "serve" && r.options.specType).toBe("draft-simple");
    expect(r.action === "serve" && r.options.specDraftNMax).toBe(5);
    expect(() => parseArgs(["-m", "x.gguf", "--spec-type", "draft-simple"], {})).toThrow(/-md/);
  });

  test("--spec-type takes none and ngram-simple (draft-mtp: spec-mtp.test.ts); the EAGLE kind is refused by name", () => {
    expect(parseArgs(["-m", "x.gguf", "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4"], {}).action).toBe("serve");
    expect(() => parseArgs(["-m", "x.gguf", "--spec-type", "draft-eagle3"], {})).toThrow(/draft-eagle3/);
    expect(() => parseArgs(["-m", "x.gguf", "--spec-type", "ngram-fast"], {})).toThrow(/ngram-fast/);
    expect(() => parseArgs(["-m", "x.gguf", "--spec-ngram-simple-min-hits", "2"], {})).toThrow(/min-hits/);
  });
});

describe("the server with a draft model (-md)", () => {
  let srv: RunningServer;
  beforeAll(async () => { srv = await startServer(["-m", DEMO_MODEL, "-md", DEMO_MODEL, "-np", "1", "-c", "1024", "-ngld", "0"]); });
  afterAll(async () => { await srv?.stop(); });

  test("a completion drafts and accepts, as its timings say", async () => {
    const r = await post(`${srv.url}/completion`, { prompt: "def add(a, b):\n", n_predict: 24, temperature: 0 });
    expect(r.status).toBe(200);
    expect(r.json.timings.draft_n).toBeGreaterThan(0);
    expect(r.json.timings.draft_n_accepted).toBeGreaterThan(0);
  });
});

describe("the server with --spec-type ngram-simple", () => {
  let srv: RunningServer;
  beforeAll(async () => { srv = await startServer(["-m", DEMO_MODEL, "-np", "1", "-c", "1024", "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--metrics"]); });
  afterAll(async () => { await srv?.stop(); });

  test("timings carry draft_n and draft_n_accepted; /metrics counts them", async () => {
    const prompt = "x = 1\ny = 2\nx = 1\ny = 2\nx = 1\ny = 2\nx = 1\n";
    const r = await post(`${srv.url}/completion`, { prompt, n_predict: 32, temperature: 0 });
    expect(r.status).toBe(200);
    expect(r.json.timings.draft_n).toBeGreaterThan(0);
    expect(r.json.timings.draft_n_accepted).toBeGreaterThanOrEqual(0);
    const m = await (await fetch(`${srv.url}/metrics`)).text();
    const val = (name: string) => Number(new RegExp(`^llamacpp:${name} (\\S+)$`, "m").exec(m)?.[1]);
    expect(val("spec_decode_num_draft_tokens_total")).toBe(r.json.timings.draft_n);
    expect(val("spec_decode_num_accepted_tokens_total")).toBe(r.json.timings.draft_n_accepted);
    expect(val("spec_decode_num_drafts_total")).toBeGreaterThan(0);
    const slots = (await (await fetch(`${srv.url}/slots`)).json()) as { speculative: boolean }[];
    expect(slots[0].speculative).toBe(true);
  });
});
