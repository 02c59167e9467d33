// The memory draft-mtp's MTP layer takes beside its target (src/engine/mtp-memory.ts) against what it allocates:
// its CPU context's KV cache (exact) and workspace after a whole-batch pass (bl_cpu_work_bytes, within the
// estimate), its own tensors (the file's MTP block), the rows the drafter keeps in JavaScript; and the plans
// count it when draft-mtp is on and nothing when it is off (plan.ts cpuContextBytes / planLoad, Model.load's
// planMtp, agent-sizes.ts hostNeed and -np auto's per-slot bytes).
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { synth } from "../src/cli/synth.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { Model } from "../src/engine/model.ts";
import type { CpuBackend } from "../src/engine/cpu-backend.ts";
import { loadMtpDraft } from "../src/engine/spec-mtp.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import { mtpBytes, mtpFixedBytes, mtpKvBytesPerPos, mtpMemoryOf, mtpSlotStateBytes } from "../src/engine/mtp-memory.ts";
import { cpuContextBytes, planLoad, PlanError } from "../src/engine/plan.ts";
import { autoSlotFit, geometryFromGguf, hostNeed, withMtp } from "../src/cli/agent-sizes.ts";
import { planStart } from "../src/cli/agent-plan.ts";
import { parseArgs } from "../src/cli/flags.ts";
import type { Machine } from "../src/cli/agent-machine.ts";

setDefaultTimeout(300000);
const tmp = mkdtempSync(join(tmpdir(), "bloomery-mtp-memory-"));
const MTP = join(tmp, "mtp.gguf"), PLAIN = join(tmp, "plain.gguf");
const S = { nSlots: 2, nCtxSlot: 256, maxTokens: 64, nThreads: 2 };

const opened: { close(): void }[] = [];
afterAll(() => opened.forEach((m) => m.close()));
beforeAll(async () => {
  await synth({ model: "test-qwen35moe-mtp", quant: "Q8_0", out: MTP, centered: true, seed: 7 });
  await synth({ model: "test-qwen35moe", quant: "Q8_0", out: PLAIN, centered: true, seed: 7 });
});

describe("the MTP layer's memory estimate against what draft-mtp allocates", () => {
  test("KV cache exact, workspace after a whole-batch pass within the estimate, its tensors the file's MTP block, the drafter's rows", () => {
    const m = Model.load(MTP, { nCtx: S.nCtxSlot, nSlots: S.nSlots, maxTokens: S.maxTokens, nThreads: S.nThreads, log: () => {} });
    opened.push(m);
    const d = loadMtpDraft(m, m.gguf, { nThreads: S.nThreads, log: () => {} }, 3, 0, 0);
    opened.push(d);
    const be = d.model.backend as CpuBackend;
    expect(be.nSlots).toBe(S.nSlots);
    expect(be.nCtxSlot).toBe(S.nCtxSlot);
    const est = mtpMemoryOf(m.gguf);
    // two prompts longer than a batch: the first pass is a whole batch of one slot through the MTP layer
    const V = m.hp.nVocab, E = m.hp.nEmbd;
    const sched = new Scheduler(m, { tokens: () => {}, done: () => {} }, makeSampler, S.maxTokens, 0, { type: "draft-mtp", sizeN: 12, sizeM: 48, nMax: 3 }, d);
    for (let id = 0; id < 2; id++) {
      const prompt = Array.from({ length: S.maxTokens + 9 }, (_, i) => (i * 37 + 11 + id * 101) % V);
      sched.submit({ id, prompt, nPredict: 12, stop: [], ignoreEos: true, nProbs: 0, idSlot: -1, cachePrompt: false, params: { temperature: 0 } });
    }
    let held = 0;
    while (sched.step()) held = Math.max(held, d.heldBytes());
    expect(sched.stats().specDrafted).toBeGreaterThan(0);

    // the KV cache: one layer, a slot a target slot, the target's context (what the library holds)
    const kvGot = be.kvPosBytes() * be.nSlots * be.nCtxSlot;
    expect(S.nSlots * S.nCtxSlot * mtpKvBytesPerPos(est)).toBe(kvGot);
    // the workspace after a whole batch, within the estimate (less the JavaScript rows it counts beside it)
    const work = be.workBytes();
    const workEst = mtpFixedBytes(est, S, false) - 2 * S.maxTokens * E * 4;
    console.log(`MTP layer: KV ${kvGot} bytes, workspace ${work} (estimate ${workEst}), its tensors ${est.weightBytes}, the drafter's rows at most ${held}`);
    expect(workEst).toBeGreaterThanOrEqual(work);
    expect(workEst).toBeLessThan(work * 1.1);
    // its own tensors: the file's MTP block (blk.<last>.*), the embedding and head being the target's
    const f = GgufFile.open(MTP), il = f.u32("qwen35moe.block_count") - 1;
    const block = [...f.tensors.values()].filter((t) => t.name.startsWith(`blk.${il}.`)).reduce((a, t) => a + t.nbytes, 0);
    expect(est.weightBytes).toBe(block);
    expect(mtpMemoryOf(f, false).weightBytes).toBe(block + f.tensor("token_embd.weight")!.nbytes + (f.tensor("output.weight")?.nbytes ?? 0));
    // the drafter's rows in JavaScript: each slot's kept rows and the draft steps' (within the per-slot count)
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThanOrEqual(S.nSlots * mtpSlotStateBytes(est, S.maxTokens));
  });

  test("a file without an MTP layer is refused by name", () => {
    expect(() => mtpMemoryOf(GgufFile.open(PLAIN))).toThrow(/has no MTP layer/);
    expect(() => Model.load(PLAIN, { nCtx: 256, nSlots: 1, maxTokens: 16, nThreads: 1, placement: {}, planMtp: {}, log: () => {} })).toThrow(/--spec-type draft-mtp .*has no MTP layer/);
  });
});

describe("the plans count the MTP layer when draft-mtp is on, nothing when off", () => {
  test("the load's plan (plan.ts): the context and the dense weights grow by the MTP layer's; a budget between the two refuses or spills", () => {
    const f = GgufFile.open(MTP);
    const m = Model.load(f, { nCtx: S.nCtxSlot, nSlots: S.nSlots, maxTokens: S.maxTokens, nThreads: S.nThreads, log: () => {} });
    opened.push(m);
    const est = mtpMemoryOf(f);
    const c = { nSlots: S.nSlots, nCtxSlot: S.nCtxSlot, maxTokens: S.maxTokens, nThreads: S.nThreads };
    expect(cpuContextBytes(m.hp, { ...c, mtp: est }) - cpuContextBytes(m.hp, c)).toBe(mtpBytes(est, S, false));
    const tensors = [...f.tensors.values()].filter((t) => !t.name.startsWith(`blk.${f.u32("qwen35moe.block_count") - 1}.`)).map((t) => ({ name: t.name, bytes: t.nbytes }));
    const machine = { card: null, hostAvailableBytes: 1024 ** 4 };
    const off = planLoad(m.hp, tensors, "cpu", {}, machine, c), on = planLoad(m.hp, tensors, "cpu", {}, machine, { ...c, mtp: est });
    expect(on.host.dense - off.host.dense).toBe(est.weightBytes);
    expect(on.host.context - off.host.context).toBe(mtpBytes(est, S, false));
    // a host budget that holds everything without the MTP layer, not with it
    const total = (p: typeof off) => p.host.dense + p.host.experts + p.host.context;
    const budget = Math.floor((total(off) + total(on)) / 2);
    expect(planLoad(m.hp, tensors, "cpu", { hostBudgetBytes: budget }, machine, c).expertRamBytes).toBeUndefined();
    let refused = "";
    try {
      const p = planLoad(m.hp, tensors, "cpu", { hostBudgetBytes: budget }, machine, { ...c, mtp: est });
      expect(p.expertRamBytes).toBeDefined(); // the experts spill to the disk tier to make room
    } catch (e) {
      if (!(e instanceof PlanError)) throw e;
      refused = e.message;
    }
    if (refused) expect(refused).toMatch(/draft-mtp's MTP layer/);
  });

  test("Model.load's plan with planMtp names the MTP layer where it does not fit, loads without it", () => {
    const o = { nCtx: S.nCtxSlot, nSlots: S.nSlots, maxTokens: S.maxTokens, nThreads: S.nThreads };
    const lines: string[] = [];
    const plain = Model.load(MTP, { ...o, placement: { hostBudgetBytes: 1024 ** 4 }, log: (l) => lines.push(l) });
    opened.push(plain);
    const withMtpPlan = Model.load(MTP, { ...o, placement: { hostBudgetBytes: 1024 ** 4 }, planMtp: {}, log: (l) => lines.push(l) });
    opened.push(withMtpPlan);
    const est = mtpMemoryOf(plain.gguf);
    expect(withMtpPlan.plan!.host.context - plain.plan!.host.context).toBe(mtpBytes(est, S, false));
    expect(withMtpPlan.plan!.host.dense - plain.plan!.host.dense).toBe(est.weightBytes);
    // a budget below the dense weights and context with the MTP layer, above them without it: refused, naming it
    const fixed = (p: Model) => p.plan!.host.dense + p.plan!.host.context;
    const budget = fixed(plain) + Math.floor((fixed(withMtpPlan) - fixed(plain)) / 2);
    const small = Model.load(MTP, { ...o, placement: { hostBudgetBytes: budget }, log: () => {} });
    opened.push(small);
    expect(() => Model.load(MTP, { ...o, placement: { hostBudgetBytes: budget }, planMtp: {}, log: () => {} })).toThrow(/draft-mtp's MTP layer .*--spec-type none/);
  });

  test("the start plan (agent-sizes.ts): hostNeed and -np auto count the MTP layer with draft-mtp, the same numbers without", () => {
    const g = geometryFromGguf(GgufFile.open(MTP));
    expect(withMtp(g, false)).toBe(g);
    const gm = withMtp(g, true), est = gm.mtp!;
    const a = hostNeed(g, S), b = hostNeed(gm, S);
    expect(b.weights).toBe(a.weights); // the file's bytes hold the MTP block already
    expect(b.total - a.total).toBe(mtpBytes(est, S, false));
    expect(b.kv - a.kv).toBe(S.nSlots * S.nCtxSlot * mtpKvBytesPerPos(est));
    // -np auto: the room that fits exactly N slots without the MTP layer fits fewer with it
    const room = { available: 0, margin: 0, where: "host RAM" };
    const fitO = { nParallel: -1, maxTokens: S.maxTokens, nThreads: S.nThreads, exact: false };
    const one = hostNeed(g, { ...S, nSlots: 1 }), perSlot = one.kv + one.state;
    room.available = one.weights + one.work + 4 * perSlot;
    expect(autoSlotFit(g, "host", S.nCtxSlot, room, fitO).nSlots).toBe(4);
    expect(autoSlotFit(gm, "host", S.nCtxSlot, room, fitO).nSlots).toBeLessThan(4);
    const oneM = hostNeed(gm, { ...S, nSlots: 1 });
    const roomM = { ...room, available: oneM.weights + oneM.work + 3 * (oneM.kv + oneM.state) };
    expect(autoSlotFit(gm, "host", S.nCtxSlot, roomM, fitO).nSlots).toBe(3);
  });

  test("the start plan with neither --spec-type nor -md counts the model's own MTP layer (on by default), and plans it off with a note where it would not fit or shrink the context", () => {
    const ram = (bytes: number): Machine => ({
      os: "linux", arch: "x64", cuda: { usable: false, reason: "no NVIDIA driver", devices: 0, driver_version: 0 }, cards: [],
      ram: { total_bytes: bytes, available_bytes: bytes, cgroup_limit_bytes: null, cgroup_available_bytes: null, usable_bytes: bytes },
      cpu: { model: "test", cores: 2, logical_cpus: 2, avx2: true, avx512: false, kernel_path: "avx2" },
    });
    const plan = (file: string, args: string[], bytes: number) => {
      const argv = ["-m", file, "-ngl", "0", "-np", "2", "-c", "512", ...args];
      const p = parseArgs(argv, {});
      if (p.action !== "serve") throw new Error("not a start");
      return planStart({ o: p.options, explicit: p.explicit, argv, source: { kind: "file", path: file, byName: false }, machine: ram(bytes), dryRun: true, geometry: geometryFromGguf(GgufFile.open(file)), path: file });
    };
    const big = 64 * 2 ** 30;
    const dflt = plan(MTP, [], big), asked = plan(MTP, ["--spec-type", "draft-mtp"], big), none = plan(MTP, ["--spec-type", "none"], big);
    expect(dflt.refusal).toBeUndefined();
    expect(dflt.event.memory.total_bytes).toBe(asked.event.memory.total_bytes);
    expect(dflt.event.memory.total_bytes!).toBeGreaterThan(none.event.memory.total_bytes!);
    expect(dflt.event.notes.some((n) => /draft-mtp on by default/.test(n))).toBe(true);
    expect(none.event.notes.some((n) => /draft-mtp/.test(n))).toBe(false);
    // a file without an MTP layer: nothing counted, nothing said
    const plain = plan(PLAIN, [], big);
    expect(plain.event.notes.some((n) => /draft-mtp/.test(n))).toBe(false);
    // RAM that holds the model without its MTP layer (with the kept-free margin) but not with it: off, with a note, and it fits
    const between = Math.floor(none.event.memory.total_bytes! + (dflt.event.memory.total_bytes! - none.event.memory.total_bytes!) / 2) + (none.event.memory.margin_bytes ?? 0);
    const tight = plan(MTP, [], between);
    expect(tight.refusal).toBeUndefined();
    expect(tight.event.memory.total_bytes).toBe(none.event.memory.total_bytes);
    expect(tight.event.notes.some((n) => /draft-mtp off: with its MTP layer .*does not fit/.test(n))).toBe(true);
    // asked for: refused there
    expect(plan(MTP, ["--spec-type", "draft-mtp"], between).refusal?.code).toBe("E_DOES_NOT_FIT");
  });
});
