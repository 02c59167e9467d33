// draft-mtp after a prefix is restored into a slot another request used in between: the prompt cache's entry (at
// its tokens, and at its recurrent checkpoint for a request sharing only the prompt) and a slot file put the MTP
// layer's own KV and the target's state before the prefix back with the target's, so greedy output equals the
// output without speculation and the drafts (drafted and accepted counts) are those of a fresh run of the same
// request (the MTP layer's KV of the sequence byte for byte a fresh run's); a slot file without the MTP state makes
// the slot draft nothing rather than read another request's.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import { loadMtpDraft, type MtpDraft } from "../src/engine/spec-mtp.ts";
import type { SpecConfig } from "../src/engine/spec-ngram.ts";
import type { DoneEvent, GenerateRequest, TokenEvent } from "../src/engine/protocol.ts";
import { synthNearMtp } from "./mtp-edit.ts";

setDefaultTimeout(300000);
const tmp = mkdtempSync(join(tmpdir(), "bloomery-mtp-restore-"));
const SPEC: SpecConfig = { type: "draft-mtp", sizeN: 12, sizeM: 48, nMax: 3 };
const opened: { close(): void }[] = [];
afterAll(() => opened.forEach((m) => m.close()));
let model: Model;

beforeAll(async () => {
  const { near } = await synthNearMtp(tmp);
  model = Model.load(near, { nCtx: 512, nSlots: 1, nThreads: 2, maxTokens: 64, log: () => {} });
  opened.push(model);
});

function drafter(): MtpDraft {
  const d = loadMtpDraft(model, model.gguf, { nThreads: 2, log: () => {} }, 3, 0, 0);
  opened.push(d);
  return d;
}

interface Out { tokens: number[]; done?: DoneEvent }
/** The MTP layer's KV of slot 0's first n positions (what its drafts attend to). */
function mtpKv(d: MtpDraft, n: number): Uint8Array {
  const be = d.model.backend, out = new Uint8Array(n * be.kvPosBytes());
  be.kvSave(0, n, out);
  return out;
}

/** A scheduler of one slot with a prompt cache; run() submits a request and runs it to the end. */
function engine(spec?: SpecConfig, d?: MtpDraft) {
  const outs = new Map<number, Out>();
  const sched = new Scheduler(model, {
    tokens: (evs: TokenEvent[]) => { for (const e of evs) outs.get(e.id)!.tokens.push(e.token); },
    done: (dn: DoneEvent) => { outs.get(dn.id)!.done = dn; },
  }, makeSampler, 64, 64 * 1024 * 1024, spec, d);
  let id = 0;
  const run = (prompt: number[], nPredict = 24): Out => {
    const o: Out = { tokens: [] };
    const req: GenerateRequest = { id: id++, prompt, nPredict, stop: [], ignoreEos: true, nProbs: 0, idSlot: 0, cachePrompt: true, params: { temperature: 0 } };
    outs.set(req.id, o);
    sched.submit(req);
    while (sched.step()) { /* run */ }
    return o;
  };
  return { sched, run };
}
const counts = (o: Out) => ({ drafted: o.done!.timings.draft_n ?? 0, accepted: o.done!.timings.draft_n_accepted ?? 0 });

const pA = Array.from({ length: 40 }, (_, i) => (i * 13 + 5) % 1000);
const pB = Array.from({ length: 36 }, (_, i) => (i * 29 + 400) % 1000);

describe("draft-mtp after a prompt-cache restore into a slot another request used", () => {
  test("at the entry's tokens and at its checkpoint: the tokens without speculation, the drafts of a fresh run", () => {
    const d = drafter(), spec = engine(SPEC, d), plain = engine();
    const a = spec.run(pA), aPlain = plain.run(pA);
    expect(a.tokens).toEqual(aPlain.tokens);
    spec.run(pB); plain.run(pB); // another request in the slot: A's state goes to the prompt cache
    const shared = [...pA, 5, 6, 7]; // shares A's prompt: restored at its checkpoint (the prompt less its last token)
    const next = [...pA, ...a.tokens, 77, 78]; // continues A: restored at A's tokens
    for (const prompt of [shared, next]) {
      const hits = spec.sched.stats().cacheHits;
      const got = spec.run(prompt), want = plain.run(prompt);
      expect(spec.sched.stats().cacheHits).toBe(hits + 1);
      expect(got.done!.timings.cache_n).toBeGreaterThanOrEqual(pA.length - 1);
      expect(got.tokens).toEqual(want.tokens);
      // the same request on a fresh slot (no cache): the MTP layer's KV of the sequence is the same, so are the
      // drafts and their counts
      const held = prompt.length + got.tokens.length - 1, restoredKv = mtpKv(d, held);
      const fd = drafter(), fresh = engine(SPEC, fd).run(prompt);
      expect(fresh.tokens).toEqual(want.tokens);
      expect(Buffer.compare(restoredKv, mtpKv(fd, held))).toBe(0);
      const c = counts(got);
      console.log(`restored at ${got.done!.timings.cache_n} of ${prompt.length}: ${c.accepted} of ${c.drafted} draft tokens accepted (fresh: ${counts(fresh).accepted} of ${counts(fresh).drafted})`);
      expect(c.drafted).toBeGreaterThan(0);
      expect(c.accepted).toBeGreaterThan(0);
      expect(c.accepted).toBeLessThanOrEqual(c.drafted);
      expect(c).toEqual(counts(fresh));
      spec.run(pB); plain.run(pB); // and another request in between again
    }
  });

  test("a slot file: restored with the MTP state, the drafts of a fresh run; saved without it, no drafts and the same tokens", () => {
    const file = join(tmp, "slot0.bin"), bare = join(tmp, "slot0-bare.bin");
    const d = drafter(), spec = engine(SPEC, d), plain = engine();
    const a = spec.run(pA);
    spec.sched.saveSlotFile(0, file);
    plain.run(pA);
    plain.sched.saveSlotFile(0, bare); // a server without draft-mtp: no MTP state in the file
    spec.run(pB);
    const next = [...pA, ...a.tokens, 77, 78];
    expect(spec.sched.restoreSlotFile(0, file).n_restored).toBeGreaterThan(pA.length);
    const got = spec.run(next);
    const held = next.length + got.tokens.length - 1, restoredKv = mtpKv(d, held);
    const fd = drafter(), fresh = engine(SPEC, fd).run(next);
    expect(got.tokens).toEqual(fresh.tokens);
    expect(Buffer.compare(restoredKv, mtpKv(fd, held))).toBe(0);
    expect(got.done!.timings.cache_n).toBeGreaterThan(pA.length);
    expect(counts(got)).toEqual(counts(fresh));
    expect(counts(got).accepted).toBeGreaterThan(0);
    // the file without the MTP state: the slot keeps the prefix, drafts nothing for it, and the output stands
    // (a continuation the prompt cache holds no longer prefix of)
    spec.run(pB);
    spec.sched.restoreSlotFile(0, bare);
    const other = [...pA, ...a.tokens, 91, 92];
    const blind = spec.run(other);
    expect(blind.tokens).toEqual(engine().run(other).tokens);
    expect(blind.done!.timings.cache_n).toBeGreaterThan(pA.length);
    expect(counts(blind).drafted).toBe(0);
    // the next request from position 0 drafts again
    const again = spec.run(pB.map((t) => (t + 1) % 1000));
    expect(counts(again).drafted).toBeGreaterThan(0);
  });
});
