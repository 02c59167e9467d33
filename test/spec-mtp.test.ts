// Speculative decoding from the file's MTP layer (--spec-type draft-mtp) on a synthetic qwen35moe with one
// (synth test-qwen35moe-mtp) on the CPU: the MTP layer's logits and next states against a plain reference of its
// math (qwen35-mtp-ref.ts), the target's hidden rows (the head's input), the drafter's drafts against that
// reference fed the target's states, greedy output with draft-mtp token for token the output without it (four
// slots, several prompts; drafts accepted and rejected on a copy whose MTP layer nearly copies the target),
// refusals by name (no MTP layer, a family without one, a backend without hidden rows), the flags and the
// default, and the real server.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { synth } from "../src/cli/synth.ts";
import { parseArgs } from "../src/cli/flags.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { Model } from "../src/engine/model.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import { hasMtpLayer, loadMtpDraft, MtpDraft, specFor } from "../src/engine/spec-mtp.ts";
import type { SpecConfig } from "../src/engine/spec-ngram.ts";
import type { Backend, Batch } from "../src/engine/backend.ts";
import type { DoneEvent, TokenEvent } from "../src/engine/protocol.ts";
import { nearCopyMtp, withMtp } from "./mtp-edit.ts";
import { FIXTURES } from "./paths.ts";
import { Qwen35MtpRef } from "./qwen35-mtp-ref.ts";
import { type Run, runGreedy } from "./spec-run.ts";
import { DEMO_MODEL, post, startServer, type RunningServer } from "./server-helpers.ts";

setDefaultTimeout(300000);
const tmp = mkdtempSync(join(tmpdir(), "bloomery-spec-mtp-"));
const MTP = join(tmp, "mtp.gguf"), PLAIN = join(tmp, "plain.gguf"), NEAR = join(tmp, "near.gguf");
const E = 256, V = 1024;
const SPEC: SpecConfig = { type: "draft-mtp", sizeN: 12, sizeM: 48, nMax: 3 };

const opened: { close(): void }[] = [];
afterAll(() => opened.forEach((m) => m.close()));
function load(path: string, nSlots = 4, exact = false): Model {
  const m = Model.load(path, { nCtx: 512, nSlots, nThreads: 2, maxTokens: 64, exact, log: () => {} });
  opened.push(m);
  return m;
}
function mtpOf(m: Model, o: { exact?: boolean; nMax?: number; pMin?: number } = {}): MtpDraft {
  const d = loadMtpDraft(m, m.gguf, { nThreads: 2, exact: o.exact, log: () => {} }, o.nMax ?? 3, 0, o.pMin ?? 0);
  opened.push(d);
  return d;
}

/** Deterministic pseudo-random numbers in [-1, 1). */
function rnd(seed: number): () => number {
  let s = seed;
  return () => { s = (s * 1103515245 + 12345) & 0x7fffffff; return (s / 0x40000000) - 1; };
}

beforeAll(async () => {
  await synth({ model: "test-qwen35moe-mtp", quant: "Q8_0", out: MTP, centered: true, seed: 7 });
  await synth({ model: "test-qwen35moe", quant: "Q8_0", out: PLAIN, centered: true, seed: 7 });
  // a copy whose MTP layer passes the token's embedding through: its drafts agree with the target often, not always
  nearCopyMtp(MTP, NEAR, E);
});

function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]));
  return m;
}
function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}
function argmax(a: ArrayLike<number>): number {
  let id = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[id]) id = i;
  return id;
}

describe("synth writes the MTP layer in llama.cpp's names and layout", () => {
  test("nextn_predict_layers 1, block_count counts it, blk.4.nextn.* and a full-attention block", () => {
    const f = GgufFile.open(MTP);
    expect(f.u32("qwen35moe.nextn_predict_layers")).toBe(1);
    expect(f.u32("qwen35moe.block_count")).toBe(5);
    expect(f.tensor("blk.4.nextn.eh_proj.weight")!.ne).toEqual([2 * E, E]);
    for (const n of ["enorm", "hnorm", "shared_head_norm"]) expect(f.tensor(`blk.4.nextn.${n}.weight`)!.ne).toEqual([E]);
    for (const n of ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_inp", "ffn_gate_exps", "ffn_gate_shexp", "post_attention_norm"]) expect(f.tensor(`blk.4.${n}.weight`)).toBeDefined();
    expect(f.tensor("blk.4.ssm_conv1d.weight")).toBeUndefined();
    expect(hasMtpLayer(f)).toBe(true);
    expect(hasMtpLayer(GgufFile.open(PLAIN))).toBe(false);
  });
});

describe("the MTP layer against a plain reference of its math", () => {
  test("logits and next states of six positions (exact path tight, the default path close), hidden rows given per row", () => {
    const ref = new Qwen35MtpRef(MTP);
    const toks = [3, 77, 500, 12, 900, 41], n = toks.length, r = rnd(5);
    const hin = Float32Array.from({ length: n * E }, () => r());
    for (const exact of [true, false]) {
      const m = load(MTP, 1, exact);
      const d = mtpOf(m, { exact });
      const logits = new Float32Array(n * V), hout = new Float32Array(n * E);
      d.forward({ tokens: Int32Array.from(toks), pos: Int32Array.from(toks, (_, i) => i), seq: new Int32Array(n), outRows: Int32Array.from(toks, (_, i) => i), logits, hiddenIn: hin, hiddenOut: hout });
      const rr = exact ? ref : new Qwen35MtpRef(MTP);
      for (let i = 0; i < n; i++) {
        const want = rr.step(toks[i], hin.subarray(i * E, (i + 1) * E));
        const got = logits.subarray(i * V, (i + 1) * V);
        const tol = (exact ? 2e-3 : 3e-2) * maxAbs(want.logits);
        expect(maxDiff(got, want.logits)).toBeLessThanOrEqual(tol);
        expect(maxDiff(hout.subarray(i * E, (i + 1) * E), want.hidden)).toBeLessThanOrEqual((exact ? 2e-3 : 3e-2) * maxAbs(want.hidden));
        if (exact) expect(argmax(got)).toBe(argmax(want.logits));
      }
      if (rr !== ref) rr.close();
    }
    ref.close();
  });

  test("a wrong MTP input fails the comparison (the check can fail): the hidden half swapped for zeros", () => {
    const ref = new Qwen35MtpRef(MTP);
    const m = load(MTP, 1, true), d = mtpOf(m, { exact: true });
    const r = rnd(6), h = Float32Array.from({ length: E }, () => r());
    const logits = new Float32Array(V);
    d.forward({ tokens: Int32Array.of(10), pos: Int32Array.of(0), seq: Int32Array.of(0), outRows: Int32Array.of(0), logits, hiddenIn: new Float32Array(E), hiddenOut: new Float32Array(E) });
    const want = ref.step(10, h);
    expect(maxDiff(logits, want.logits)).toBeGreaterThan(2e-3 * maxAbs(want.logits));
    ref.close();
  });

  test("the target's hidden rows are its head's input (output_norm applied); asking for them leaves the logits as they are", () => {
    const m = load(MTP, 1, true), ref = new Qwen35MtpRef(MTP);
    const toks = [5, 6, 7, 300, 301], n = toks.length;
    const run = (hidden?: Float32Array) => {
      const logits = new Float32Array(n * V);
      const b: Batch = { tokens: Int32Array.from(toks), pos: Int32Array.from(toks, (_, i) => i), seq: new Int32Array(n), outRows: Int32Array.from(toks, (_, i) => i), logits, hiddenOut: hidden };
      m.backend.forward(b);
      return logits;
    };
    const plain = run(), hid = new Float32Array(n * E), withHid = run(hid);
    expect(withHid).toEqual(plain);
    for (let i = 0; i < n; i++) {
      const want = ref.targetLogits(hid.subarray(i * E, (i + 1) * E));
      expect(maxDiff(plain.subarray(i * V, (i + 1) * V), want)).toBeLessThanOrEqual(1e-3 * maxAbs(want));
    }
    ref.close();
  });

  test("the drafter: after a prompt's pass, its drafts are the reference's greedy steps fed the target's states (zeros before position 0)", () => {
    const m = load(MTP, 1, true), d = mtpOf(m, { exact: true, nMax: 4 }), ref = new Qwen35MtpRef(MTP);
    const prompt = [9, 80, 81, 400, 7, 66, 120], n = prompt.length;
    const hid = new Float32Array(n * E), logits = new Float32Array(V);
    const b: Batch = { tokens: Int32Array.from(prompt), pos: Int32Array.from(prompt, (_, i) => i), seq: new Int32Array(n), outRows: Int32Array.of(n - 1), logits, hiddenOut: hid };
    m.backend.forward(b);
    d.observe(b);
    const last = argmax(logits);
    const got = d.draft([{ slot: 0, tokens: prompt, last, limit: 4 }]).get(0)!;
    // the reference: position q takes token q and the target's state at q - 1
    for (let q = 0; q < n; q++) ref.step(prompt[q], q === 0 ? new Float64Array(E) : hid.subarray((q - 1) * E, q * E));
    const want: number[] = [];
    let st = ref.step(last, hid.subarray((n - 1) * E, n * E));
    for (;;) {
      want.push(argmax(st.logits));
      if (want.length === 4) break;
      st = ref.step(want.at(-1)!, st.hidden);
    }
    expect(got).toEqual(want);
    ref.close();
  });
});

const run = runGreedy;

describe("greedy output with draft-mtp is the output without speculation (CPU, four slots at once)", () => {
  const prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [50, 60, 70, 80, 90, 100, 200, 300], [700, 701, 702], [11, 500, 11, 500, 11, 500, 11, 42, 43, 44, 45, 46], [999, 3, 777, 20, 21]];
  for (const [name, path] of [["the synthetic MTP layer", MTP], ["an MTP layer that nearly copies the target", NEAR]] as const) {
    test(`${name}: token for token, drafted and accepted counted`, () => {
      const m = load(path, 4), d = mtpOf(m);
      const plain = run(m, prompts, 40);
      const got = run(m, prompts, 40, SPEC, d);
      for (let i = 0; i < prompts.length; i++) expect(got.runs[i].tokens).toEqual(plain.runs[i].tokens);
      const st = got.sched.stats();
      console.log(`draft-mtp (${name}): ${st.specAccepted} of ${st.specDrafted} draft tokens accepted in ${st.specSteps} steps; forward passes ${st.nDecode} (without drafts ${plain.sched.stats().nDecode}); rollbacks ${st.specRollbacks}`);
      expect(st.specDrafted).toBeGreaterThan(0);
      const t = got.runs.map((r) => r.done!.timings as unknown as { draft_n?: number; draft_n_accepted?: number });
      expect(t.reduce((a, x) => a + (x.draft_n ?? 0), 0)).toBe(st.specDrafted);
      expect(t.reduce((a, x) => a + (x.draft_n_accepted ?? 0), 0)).toBe(st.specAccepted);
      if (path === NEAR) {
        // drafts taken in part: whole ones, and rejections that roll the recurrent states back
        expect(st.specAccepted).toBeGreaterThan(0.2 * st.specDrafted);
        expect(st.specAccepted).toBeLessThan(st.specDrafted);
        expect(st.nDecode).toBeLessThan(plain.sched.stats().nDecode);
      }
    });
  }

  test("a second turn on the slot's kept prefix (cache_prompt) and a request cancelled mid-run: the tokens without speculation", () => {
    const m = load(NEAR, 2);
    const turns = (spec?: SpecConfig, d?: MtpDraft) => {
      const out: number[][] = [];
      const runs: Run[] = [{ tokens: [] }, { tokens: [] }, { tokens: [] }];
      const sched = new Scheduler(m, {
        tokens: (evs: TokenEvent[]) => { for (const e of evs) runs[e.id].tokens.push(e.token); },
        done: (dn: DoneEvent) => { runs[dn.id].done = dn; },
      }, makeSampler, 64, 0, spec, d);
      const req = (id: number, prompt: number[], nPredict: number) => ({ id, prompt, nPredict, stop: [], ignoreEos: true, nProbs: 0, idSlot: 0, cachePrompt: true, params: { temperature: 0 } });
      const p0 = [4, 8, 15, 16, 23, 42, 4, 8];
      sched.submit(req(0, p0, 20));
      while (sched.step()) { /* run */ }
      out.push(runs[0].tokens);
      // cancelled after a few steps
      sched.submit(req(1, [...p0, ...runs[0].tokens, 77, 78], 30));
      for (let i = 0; i < 4; i++) sched.step();
      sched.cancel(1);
      while (sched.step()) { /* run */ }
      sched.submit(req(2, [...p0, ...runs[0].tokens, 77, 78, 79], 20));
      while (sched.step()) { /* run */ }
      out.push(runs[2].tokens);
      expect(runs[2].done!.timings.cache_n).toBeGreaterThan(p0.length);
      return out;
    };
    expect(turns(SPEC, mtpOf(m))).toEqual(turns());
  });

  test("p_min stops a draft at an unlikely token (fewer drafted), output unchanged", () => {
    const m = load(NEAR, 4);
    const loose = run(m, prompts, 24, SPEC, mtpOf(m)), tight = run(m, prompts, 24, { ...SPEC, pMin: 0.999 }, mtpOf(m, { pMin: 0.999 }));
    for (let i = 0; i < prompts.length; i++) expect(tight.runs[i].tokens).toEqual(loose.runs[i].tokens);
    expect(tight.sched.stats().specDrafted).toBeLessThan(loose.sched.stats().specDrafted);
  });
});

// the family fixtures (transformers-made Qwen3.5 MoE and Qwen3-Next) with an MTP layer appended (mtp-edit.ts)
const FAM = join(FIXTURES, "families");
for (const [dir, arch] of [["qwen3_5_moe", "qwen35moe"], ["qwen3_next", "qwen3next"]] as const) {
  const src = join(FAM, dir, `${dir}.gguf`);
  test.skipIf(!existsSync(src))(`${dir} with an MTP layer appended: greedy output with draft-mtp is the output without it (four slots)`, async () => {
    const out = withMtp(src, arch, join(tmp, `${dir}-mtp.gguf`));
    const prompts = ((await Bun.file(join(FAM, dir, "ref.json")).json()).refs as { prompt: number[] }[]).map((r) => r.prompt).slice(0, 4);
    const m = load(out, 4), d = mtpOf(m);
    const plain = run(m, prompts, 24), got = run(m, prompts, 24, SPEC, d);
    for (let i = 0; i < prompts.length; i++) expect(got.runs[i].tokens).toEqual(plain.runs[i].tokens);
    expect(got.sched.stats().specDrafted).toBeGreaterThan(0);
  });
}

describe("refusals by name", () => {
  test("a file without an MTP layer; a family without one; a backend that gives no hidden rows", () => {
    const plain = load(PLAIN, 1);
    expect(() => mtpOf(plain)).toThrow(/draft-mtp .*has no MTP layer/);
    const demo = load(DEMO_MODEL, 1);
    expect(() => mtpOf(demo)).toThrow(/draft-mtp .*qwen3moe family's is not implemented/);
    const m = load(MTP, 1);
    const noHidden = { ...m, backend: { name: "CUDA", nSlots: 1, nCtxSlot: 512, maxTokens: 64 } as unknown as Backend } as unknown as Model;
    expect(() => loadMtpDraft(noHidden, m.gguf, {}, 3, 0, 0)).toThrow(/draft-mtp: the CUDA backend does not give the target's hidden states/);
  });
});

describe("the flags and the default", () => {
  test("--spec-type draft-mtp is taken (with or without -md); the EAGLE kind is refused by name", () => {
    const r = parseArgs(["-m", "x.gguf", "--spec-type", "draft-mtp", "--spec-draft-n-max", "2", "--spec-draft-p-min", "0.5"], {});
    expect(r.action === "serve" && r.options.specType).toBe("draft-mtp");
    expect(r.action === "serve" && r.options.specDraftNMax).toBe(2);
    expect(r.action === "serve" && r.options.specDraftPMin).toBe(0.5);
    const md = parseArgs(["-m", "x.gguf", "-md", "d.gguf", "--spec-type", "draft-mtp"], {});
    expect(md.action === "serve" && md.options.specType).toBe("draft-mtp");
    expect(() => parseArgs(["-m", "x.gguf", "--spec-type", "draft-eagle3"], {})).toThrow(/draft-eagle3/);
  });

  test("the default: the flags say none without -md; the load takes the target's MTP layer on by default (guarded), -md alone with an MTP layer is draft-mtp, else draft-simple", () => {
    const r = parseArgs(["-m", MTP], {});
    expect(r.action === "serve" && r.options.specType).toBe("none");
    const lines: string[] = [];
    const none: SpecConfig = { type: "none", inferred: true, sizeN: 12, sizeM: 48 };
    const on = specFor(none, MTP, (l) => lines.push(l));
    expect(on.type).toBe("draft-mtp");
    expect(on.auto).toBe(true);
    expect(lines.join("\n")).toMatch(/MTP layer: draft-mtp on by default/);
    expect(specFor(none, PLAIN, () => {}).type).toBe("none");
    // --spec-type none asked for: off
    expect(specFor({ ...none, inferred: false }, MTP, () => {}).type).toBe("none");
    const base: SpecConfig = { type: "draft-simple", inferred: true, sizeN: 12, sizeM: 48 };
    const md = specFor({ ...base, draftModel: MTP }, PLAIN, (l) => lines.push(l));
    expect(md.type).toBe("draft-mtp");
    expect(md.auto).toBeUndefined(); // -md names a draft: asked for, not guarded
    expect(lines.join("\n")).toMatch(/has an MTP layer: --spec-type draft-mtp/);
    expect(specFor({ ...base, draftModel: PLAIN }, MTP, () => {}).type).toBe("draft-simple");
    // asked for by name: kept
    expect(specFor({ ...base, inferred: false, draftModel: MTP }, PLAIN, () => {}).type).toBe("draft-simple");
  });
});

describe("the server with --spec-type draft-mtp", () => {
  let srv: RunningServer, plainSrv: RunningServer;
  beforeAll(async () => {
    srv = await startServer(["-m", MTP, "-np", "2", "-c", "1024", "--spec-type", "draft-mtp", "--metrics", "-t", "2"]);
    plainSrv = await startServer(["-m", MTP, "-np", "1", "-c", "512", "-t", "2", "--spec-type", "none"]);
  });
  afterAll(async () => { await srv?.stop(); await plainSrv?.stop(); });

  test("two completions at once: the tokens without speculation; timings and /metrics count the drafts", async () => {
    const prompts = ["hello world, this is", "one two three four"];
    const body = (prompt: string) => ({ prompt, n_predict: 24, temperature: 0, ignore_eos: true, return_tokens: true });
    const [a, b] = await Promise.all(prompts.map((p) => post(`${srv.url}/completion`, body(p))));
    for (const [i, r] of [a, b].entries()) {
      expect(r.status).toBe(200);
      const want = await post(`${plainSrv.url}/completion`, body(prompts[i]));
      expect(r.json.tokens).toHaveLength(24);
      expect(r.json.tokens).toEqual(want.json.tokens);
      expect(r.json.timings.draft_n).toBeGreaterThan(0);
    }
    const m = await (await fetch(`${srv.url}/metrics`)).text();
    const val = (name: string) => Number(new RegExp(`^llamacpp:${name} (\\S+)$`, "m").exec(m)?.[1]);
    expect(val("spec_decode_num_draft_tokens_total")).toBe(a.json.timings.draft_n + b.json.timings.draft_n);
    expect(val("spec_decode_num_accepted_tokens_total")).toBe(a.json.timings.draft_n_accepted + b.json.timings.draft_n_accepted);
  });
});
