// The engine's scheduler on the CPU path: batch independence, the prompt cache surviving other
// requests, cancellation freeing the slot, slot save/restore files.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import type { DoneEvent, GenerateRequest, TokenEvent } from "../src/engine/protocol.ts";
import type { Batch } from "../src/engine/backend.ts";
import { FIXTURES } from "./paths.ts";

const demo = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");

interface Run { tokens: number[]; text: string; done?: DoneEvent }

function harness(model: Model, cacheBytes = 64 << 20, ubatch = 64) {
  const runs = new Map<number, Run>();
  const sched = new Scheduler(model, {
    tokens: (evs: TokenEvent[]) => { for (const e of evs) { const r = runs.get(e.id)!; r.tokens.push(e.token); r.text += e.text; } },
    done: (d: DoneEvent) => { const r = runs.get(d.id)!; r.done = d; r.text += d.text; },
  }, makeSampler, ubatch, cacheBytes);
  let next = 1;
  const submit = (prompt: number[], nPredict: number, extra: Partial<GenerateRequest> = {}) => {
    const id = next++;
    runs.set(id, { tokens: [], text: "" });
    sched.submit({ id, prompt, nPredict, stop: [], ignoreEos: true, nProbs: 0, idSlot: -1, cachePrompt: true, params: { temperature: 0 }, ...extra });
    return id;
  };
  const drain = () => { while (sched.step()) { /* run */ } };
  return { sched, runs, submit, drain };
}

let model: Model;
let tok: Model["tokenizer"];
beforeAll(() => {
  model = Model.load(demo, { nCtx: 512, nSlots: 3, nThreads: 2, maxTokens: 64 });
  tok = model.tokenizer;
});
afterAll(() => model.close());

const P1 = "import os\nimport sys\n\n\ndef main(argv):\n    parser = argparse.ArgumentParser(description=\"tool\")\n    parser.add_argument(\"--verbose\", action=\"store_true\")\n";
const P2 = "class Config:\n    def __init__(self, path):\n        self.path = path\n";
const P3 = "for i in range(10):\n    print(i * i)\n";

describe("scheduler (CPU path)", () => {
  test("a request's greedy tokens are the same alone and batched with others", () => {
    const h = harness(model);
    const a = h.submit(tok.encode(P1), 24);
    h.drain();
    const alone = h.runs.get(a)!.tokens;
    const b = h.submit(tok.encode(P2), 30);
    const a2 = h.submit(tok.encode(P1), 24, { cachePrompt: false });
    const c = h.submit(tok.encode(P3), 10);
    h.drain();
    expect(h.runs.get(a2)!.tokens).toEqual(alone);
    expect(h.runs.get(b)!.tokens.length).toBe(30);
    expect(h.runs.get(c)!.tokens.length).toBe(10);
  });

  test("the prompt cache restores a prefix after another request used the slot", () => {
    const one = Model.load(demo, { nCtx: 512, nSlots: 1, nThreads: 2, maxTokens: 64 });
    try {
      const h = harness(one);
      const p1 = tok.encode(P1);
      const first = h.submit(p1, 8);
      h.drain();
      const other = h.submit(tok.encode(P2 + P3), 8); // uses (and overwrites) the only slot
      h.drain();
      expect(h.runs.get(other)!.done!.tokensCached).toBe(0);
      const again = h.submit([...p1, ...tok.encode("    args = parser.parse_args(argv)\n")], 8);
      h.drain();
      const d = h.runs.get(again)!.done!;
      expect(d.tokensCached).toBeGreaterThanOrEqual(p1.length); // the saved state also holds generated tokens
      expect(h.sched.stats().cacheHits).toBe(1);
      // same output as computing the whole prompt afresh
      const fresh = harness(one, 0);
      const f = fresh.submit([...p1, ...tok.encode("    args = parser.parse_args(argv)\n")], 8, { cachePrompt: false });
      fresh.drain();
      expect(h.runs.get(again)!.tokens).toEqual(fresh.runs.get(f)!.tokens);
      expect(h.runs.get(first)!.done!.stopType).toBe("limit");
    } finally {
      one.close();
    }
  });

  test("a prompt already held by a slot is reused without the cache", () => {
    const h = harness(model, 0);
    const p = tok.encode(P2);
    h.submit(p, 4);
    h.drain();
    const id = h.submit([...p, ...tok.encode("    def load(self):\n")], 4);
    h.drain();
    expect(h.runs.get(id)!.done!.tokensCached).toBe(p.length);
  });

  test("cancelling frees the slot at once; queued requests then run", () => {
    const one = Model.load(demo, { nCtx: 256, nSlots: 1, nThreads: 2, maxTokens: 64 });
    try {
      const h = harness(one);
      const long = h.submit(tok.encode(P1), 200);
      const queued = h.submit(tok.encode(P3), 4);
      for (let i = 0; i < 5; i++) h.sched.step();
      expect(h.sched.slotInfo()[0].is_processing).toBe(true);
      expect(h.sched.stats().queued).toBe(1);
      h.sched.cancel(long);
      expect(h.runs.get(long)!.done!.stopType).toBe("cancel");
      // the queued request took the slot immediately
      expect(h.sched.slotInfo()[0].id_task).toBe(queued);
      h.drain();
      expect(h.runs.get(queued)!.tokens.length).toBe(4);
      expect(h.sched.slotInfo()[0].is_processing).toBe(false);
    } finally {
      one.close();
    }
  });

  test("slot save, erase and restore through a file", () => {
    const dir = mkdtempSync(join(tmpdir(), "bloomery-slot-"));
    const h = harness(model, 0);
    const p = tok.encode(P1);
    const a = h.submit(p, 6, { idSlot: 2 });
    h.drain();
    const saved = h.sched.saveSlotFile(2, join(dir, "s.bin"));
    expect(saved.n_saved).toBe(p.length + 5); // the last generated token is sampled, not evaluated
    expect(h.sched.eraseSlot(2).n_erased).toBe(saved.n_saved);
    expect(h.sched.restoreSlotFile(2, join(dir, "s.bin")).n_restored).toBe(saved.n_saved);
    const b = h.submit(p, 6, { idSlot: 2 });
    h.drain();
    expect(h.runs.get(b)!.done!.tokensCached).toBe(p.length - 1);
    expect(h.runs.get(b)!.tokens).toEqual(h.runs.get(a)!.tokens);
    expect(() => h.sched.restoreSlotFile(1, join(dir, "missing.bin"))).toThrow(/cannot open slot file/);
    expect(() => h.sched.saveSlotFile(9, join(dir, "x.bin"))).toThrow(/slot 9 does not exist/);
  });

  test("bad requests are refused with llama's error types", () => {
    const h = harness(model);
    expect(() => h.submit([], 4)).toThrow(/empty/);
    expect(() => h.submit(new Array(600).fill(5), 4)).toThrow(/exceeds the available context size/);
    expect(() => h.submit([1, 2, 999999], 4)).toThrow(/outside the vocabulary/);
    expect(() => h.submit([1, 2], 4, { idSlot: 7 })).toThrow(/id_slot 7 does not exist/);
  });

  test("with a backend that hands over its best candidates, sampled requests pick the same tokens", () => {
    // a top-k forward made from the CPU path's rows (the card's forwardTopK: value desc, id asc)
    const be = model.backend;
    const V = model.hp.nVocab;
    const topK = (b: Batch, k: number, ids: Int32Array, vals: Float32Array) => {
      const rows = new Float32Array(b.outRows.length * V);
      be.forward({ ...b, logits: rows });
      for (let r = 0; r < b.outRows.length; r++) {
        const row = rows.subarray(r * V, (r + 1) * V);
        const best = Array.from({ length: V }, (_, i) => i).sort((x, y) => row[y] - row[x] || x - y).slice(0, k);
        best.forEach((id, j) => { ids[r * k + j] = id; vals[r * k + j] = row[id]; });
      }
    };
    const run = (withTop: boolean) => {
      if (withTop) be.forwardTopK = topK;
      try {
        const h = harness(model);
        const params = { temperature: 0.9, topK: 40, topP: 0.95, minP: 0.05, seed: 7 };
        const ids = [h.submit(tok.encode(P1), 16, { params }), h.submit(tok.encode(P2), 12, { params: { ...params, seed: 8 } }),
          h.submit(tok.encode(P3), 8, { params: { temperature: 0 } })];
        h.drain();
        return { tokens: ids.map((id) => h.runs.get(id)!.tokens), topSteps: h.sched.stats().topKSteps };
      } finally {
        delete be.forwardTopK;
      }
    };
    const rows = run(false), top = run(true);
    expect(rows.topSteps).toBe(0);
    expect(top.topSteps).toBeGreaterThan(10);
    expect(top.tokens).toEqual(rows.tokens);
    expect(top.tokens.map((t) => t.length)).toEqual([16, 12, 8]);
  });

  test("a request whose samplers read the whole row takes the rows for the whole step", () => {
    const be = model.backend;
    let calls = 0;
    be.forwardTopK = () => { calls++; throw new Error("not expected"); };
    try {
      const h = harness(model);
      h.submit(tok.encode(P3), 4, { params: { temperature: 0.9, topK: 40, seed: 1 } });
      h.submit(tok.encode(P2), 4, { params: { temperature: 0.9, topK: 40, repeatPenalty: 1.2, seed: 1 } });
      h.drain();
      expect(calls).toBe(0);
      expect(h.sched.stats().topKSteps).toBe(0);
    } finally {
      delete be.forwardTopK;
    }
  });
});
