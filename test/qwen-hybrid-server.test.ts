// A recurrent model (qwen35moe's fixture: gated delta-net layers, a recurrent state per slot) through the real
// executable and HTTP: a request that shares only part of the slot's prefix gets the tokens a fresh server gives
// (one reading prompts in chunks of 7: the delta rule a token at a time, where the first server's whole prompts
// take its chunked form, so the two agree up to a step whose best two tokens are within 0.02 in log probability)
// (it starts over: no recurrent state was kept there), the prompt cache restores a prompt's checkpoint after
// another request used the slot, a conversation goes on from the slot's live state, a slot file carries the
// recurrent state, two slots batched together each answer as alone, and a cancelled stream leaves nothing wrong.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FIXTURES } from "./paths.ts";
import { ensureBuilt, post, startServer, type RunningServer } from "./server-helpers.ts";

setDefaultTimeout(120000);
const GGUF = join(FIXTURES, "families", "qwen3_5_moe", "qwen3_5_moe.gguf");
const REF = join(FIXTURES, "families", "qwen3_5_moe", "ref.json");
const have = existsSync(GGUF);

let a: RunningServer, fresh: RunningServer;
let prompts: number[][] = [];
const slotDir = mkdtempSync(join(tmpdir(), "bloomery-q35-slots-"));

beforeAll(async () => {
  if (!have) return;
  ensureBuilt();
  prompts = (await Bun.file(REF).json()).refs.map((r: { prompt: number[] }) => r.prompt);
  const args = ["-m", GGUF, "-ngl", "0", "-c", "1024", "-t", "2", "--slot-save-path", slotDir];
  a = await startServer([...args, "-np", "1"]);
  // the reference server reads prompts in chunks of 7 (a batch of at most 7 tokens): its answers are the
  // chunked ones, the first server's the whole prompt's in one batch
  fresh = await startServer([...args, "-np", "2", "--cache-ram", "0", "-ub", "7", "-b", "7"]);
}, 600000);

afterAll(async () => {
  await a?.stop();
  await fresh?.stop();
});

interface Done { tokens: number[]; cached: number; promptN: number }
/** The reference's answer: its tokens, and at each step the log-probability margin of its best token over the next. */
interface Ref { tokens: number[]; margins: number[] }

/** Below this margin (log probability) the two forms of the delta rule may pick either of the best two tokens. */
const CLEAR = 0.02;
async function complete(srv: RunningServer, prompt: number[], extra: Record<string, unknown> = {}): Promise<Done> {
  const r = await post(`${srv.url}/completion`, { prompt, n_predict: 12, temperature: 0, return_tokens: true, cache_prompt: true, ...extra });
  expect(r.status).toBe(200);
  return { tokens: r.json.tokens, cached: r.json.tokens_cached, promptN: r.json.timings.prompt_n };
}

/** What a server that never saw another request answers (its slot erased first), with its margins. */
async function alone(prompt: number[]): Promise<Ref> {
  await post(`${fresh.url}/slots/0?action=erase`, {});
  const r = await post(`${fresh.url}/completion`, { prompt, n_predict: 12, temperature: 0, return_tokens: true, cache_prompt: true, id_slot: 0, n_probs: 2 });
  expect(r.status).toBe(200);
  const probs = r.json.completion_probabilities as { top_logprobs: { logprob: number }[] }[];
  expect(probs.length).toBe(r.json.tokens.length);
  return { tokens: r.json.tokens, margins: probs.map((p) => p.top_logprobs[0].logprob - p.top_logprobs[1].logprob) };
}

/** The reference's tokens up to the first step where it was a near tie (after that either answer is right). */
function expectAsAlone(got: number[], ref: Ref): void {
  expect(got.length).toBe(ref.tokens.length);
  let same = 0;
  while (same < got.length && got[same] === ref.tokens[same]) same++;
  if (same < got.length) expect(ref.margins[same]).toBeLessThan(CLEAR);
}

describe.skipIf(!have)("qwen35moe through the server: recurrent state per slot", () => {
  test("a second request sharing only part of the first's prefix: the fresh server's tokens, its prompt evaluated from the start", async () => {
    const p1 = prompts[2], p2 = [...p1.slice(0, 20), ...prompts[1]];
    const r1 = await complete(a, p1);
    expect(r1.tokens.length).toBe(12);
    const r2 = await complete(a, p2);
    expectAsAlone(r2.tokens, await alone(p2));
    // no recurrent state was kept at 20 tokens: nothing reused, the whole prompt evaluated
    expect(r2.cached).toBe(0);
    expect(r2.promptN).toBe(p2.length);
    // the first prompt again: the prompt cache's entry (saved when the second request took the slot) restores
    // its checkpoint before the last prompt token, and the answer is the first one's
    const r3 = await complete(a, p1);
    expect(r3.cached).toBe(p1.length - 1);
    expect(r3.promptN).toBe(1);
    expect(r3.tokens).toEqual(r1.tokens);
    // a conversation going on from the answer: the slot's live state (the prompt and 11 fed tokens) is reused
    const p4 = [...p1, ...r3.tokens, 5, 6, 7];
    const r4 = await complete(a, p4);
    expect(r4.cached).toBe(p1.length + 11);
    expectAsAlone(r4.tokens, await alone(p4));
  });

  test("a slot file carries the recurrent state: saved, the slot used by another prompt, restored, the conversation goes on", async () => {
    const p = [...prompts[3].slice(0, 30), 11, 12];
    const r1 = await complete(a, p);
    const save = await post(`${a.url}/slots/0?action=save`, { filename: "q35.bin" });
    expect(save.status).toBe(200);
    expect(save.json.n_saved).toBe(p.length + 11);
    await complete(a, prompts[0]);
    const restore = await post(`${a.url}/slots/0?action=restore`, { filename: "q35.bin" });
    expect(restore.status).toBe(200);
    expect(restore.json.n_restored).toBe(p.length + 11);
    const next = [...p, ...r1.tokens, 42];
    const r2 = await complete(a, next, { cache_prompt: true });
    expect(r2.cached).toBe(p.length + 11);
    expectAsAlone(r2.tokens, await alone(next));
  });

  test("two slots batched together each answer as alone; a cancelled stream leaves the slot's next answer right", async () => {
    const p1 = prompts[2], p2 = prompts[3].slice(0, 50);
    // both on the reference server, whose batches of 7 leave every sequence's runs under 8 tokens: the same
    // form of the rule, so the same tokens exactly
    const want1 = (await alone(p1)).tokens, want2 = (await alone(p2)).tokens;
    await post(`${fresh.url}/slots/1?action=erase`, {});
    const [r1, r2] = await Promise.all([complete(fresh, p1, { id_slot: 0, cache_prompt: false }), complete(fresh, p2, { id_slot: 1, cache_prompt: false })]);
    expect(r1.tokens).toEqual(want1);
    expect(r2.tokens).toEqual(want2);
    // a stream cut after its first event: the slot holds what it fed, and the next request still gets the fresh answer
    const ctl = new AbortController();
    const res = await fetch(`${fresh.url}/completion`, {
      method: "POST", headers: { "content-type": "application/json" }, signal: ctl.signal,
      body: JSON.stringify({ prompt: p2, n_predict: 200, temperature: 0, stream: true, id_slot: 0 }),
    });
    const reader = res.body!.getReader();
    await reader.read();
    ctl.abort();
    await Bun.sleep(200);
    const p3 = [...p2.slice(0, 10), 3, 4, 5];
    const after = await complete(fresh, p3, { id_slot: 0 });
    expect(after.tokens).toEqual((await alone(p3)).tokens);
  });
});
