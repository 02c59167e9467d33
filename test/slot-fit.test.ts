// -np auto and --slot-ctx: the slot-fit arithmetic (src/engine/slot-fit.ts) on a card and on the
// host, the cap of 8 and the refusal naming every term; --slot-ctx's parsing and its agreement with
// -c; the slot layout planEngine makes; and the start plan (agent-plan.ts) counting slots against the
// memory described (CPU-only, so the machine described and chooseBackend agree on any machine; the
// card case through planStart runs where CUDA is usable).
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { FlagError, parseArgs, type ServerOptions } from "../src/cli/flags.ts";
import type { Machine } from "../src/cli/agent-machine.ts";
import { planStart } from "../src/cli/agent-plan.ts";
import { autoSlotFit, cardNeed, fitContext, geometryFromGguf, hostNeed, needAt, CARD_MARGIN, HOST_MARGIN, type Geometry } from "../src/cli/agent-sizes.ts";
import { cardSplit } from "../src/cli/agent-card-share.ts";
import { cardContextBytes, CARD_MARGIN as PLAN_CARD_MARGIN } from "../src/engine/plan.ts";
import { fitSharedContext, fitSlots, kvBytesPerToken, MAX_AUTO_SLOTS, MIN_SHARED_SLOT_CTX, SlotFitError, type SharedFit, type SharedFitInput, type SlotFitInput } from "../src/engine/slot-fit.ts";
import { EngineOptionError, planEngine, slotLayout, type AutoAsk, type AutoSlots } from "../src/server/engine-options.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { cudaStatus } from "../ffi/cuda.ts";
import { FIXTURES } from "./paths.ts";

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const DEMO = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");

// Qwen3-30B-A3B: 48 attention layers, 4 KV heads of 128
const QWEN30B = { kvLayers: 48, nHeadKv: 4, headDim: 128 };

function input(over: Partial<SlotFitInput>): SlotFitInput {
  return {
    nCtxSlot: 262144, kvBytesPerToken: kvBytesPerToken(QWEN30B), weightBytes: 17 * GiB, workBytes: 0.5 * GiB,
    availableBytes: 139 * GiB, marginBytes: 0.5 * GiB, where: "NVIDIA H200", availableText: "free", ...over,
  };
}

describe("slot fit (pure)", () => {
  test("KV bytes per position: K and V, f16, every attention layer", () => {
    expect(kvBytesPerToken(QWEN30B)).toBe(48 * 4 * 128 * 2 * 2); // 96 KiB
    expect(kvBytesPerToken({ kvLayers: 4, nHeadKv: 2, headDim: 64 })).toBe(2048);
  });

  test("a card: as many 256k slots as its free memory holds beside the weights, buffers and margin", () => {
    const f = fitSlots(input({}));
    // 24 GiB a slot; 139 - 17 - 0.5 - 0.5 = 121 GiB of room: 5 slots (120 GiB), a 6th needs 23 GiB more
    expect(f.kvSlotBytes).toBe(24 * GiB);
    expect(f.nSlots).toBe(5);
    expect(f.kvBytes).toBe(120 * GiB);
    expect(f.roomBytes).toBe(121 * GiB);
    expect(f.refusal).toBeUndefined();
    expect(f.line).toBe("-np auto: 5 slots of 262144 tokens (KV 120.00 GiB of 121.00 GiB left on NVIDIA H200 after weights 17.00 GiB, " +
      "buffers 512.0 MiB and 512.0 MiB kept free, of 139.00 GiB free; a 6th would need 23.00 GiB more)");
  });

  test("the host: its usable RAM less the weights; at a smaller context the cap of 8 binds", () => {
    const host = { availableBytes: 64 * GiB, marginBytes: HOST_MARGIN, where: "host RAM", availableText: "usable" };
    // 64 - 17 - 0.5 - 1 = 45.5 GiB; 24 GiB a slot: 1
    expect(fitSlots(input({ ...host })).nSlots).toBe(1);
    expect(fitSlots(input({ ...host })).line).toContain("a 2nd would need 2.50 GiB more");
    // 32768 tokens: 3 GiB a slot: 15 would fit, 8 is the most
    const f = fitSlots(input({ ...host, nCtxSlot: 32768 }));
    expect(f.nSlots).toBe(MAX_AUTO_SLOTS);
    expect(f.kvBytes).toBe(24 * GiB);
    expect(f.line).toContain("-np auto: 8 slots of 32768 tokens (KV 24.00 GiB of 45.50 GiB left on host RAM");
    expect(f.line).toContain("8 is the most -np auto gives");
    expect(fitSlots(input({ ...host, nCtxSlot: 32768, maxSlots: 3 })).nSlots).toBe(3);
  });

  test("the boundary: room of exactly n slots gives n; a byte less gives n - 1", () => {
    const kv = 2048, ctx = 512, slot = kv * ctx;
    const base = { nCtxSlot: ctx, kvBytesPerToken: kv, weightBytes: 10 * MiB, workBytes: 3 * MiB, marginBytes: 0 };
    const exact = fitSlots(input({ ...base, availableBytes: 13 * MiB + 3 * slot }));
    expect(exact.nSlots).toBe(3);
    expect(fitSlots(input({ ...base, availableBytes: 13 * MiB + 3 * slot - 1 })).nSlots).toBe(2);
    expect(fitSlots(input({ ...base, availableBytes: 13 * MiB + 3 * slot - 1 })).line).toContain("a 3rd would need 0.0 MiB more");
    expect(fitSlots(input({ ...base, availableBytes: 13 * MiB + slot })).nSlots).toBe(1);
  });

  test("not even one slot: nSlots 0 and a refusal naming every term of the sum", () => {
    const f = fitSlots(input({ availableBytes: 40 * GiB }));
    expect(f.nSlots).toBe(0);
    expect(f.kvBytes).toBe(0);
    expect(f.refusal).toBe("-np auto: the model does not fit NVIDIA H200 with even 1 slot of 262144 tokens: weights 17.00 GiB + KV cache 24.00 GiB " +
      "(262144 positions of 98304 bytes) + buffers 512.0 MiB + 512.0 MiB kept free = 42.00 GiB > 40.00 GiB free; give a smaller context (--slot-ctx or -c)");
    // weights alone past the memory
    expect(fitSlots(input({ availableBytes: 10 * GiB })).nSlots).toBe(0);
  });

  test("bad numbers are a SlotFitError naming the field", () => {
    expect(() => fitSlots(input({ nCtxSlot: 0 }))).toThrow(SlotFitError);
    expect(() => fitSlots(input({ nCtxSlot: 1.5 }))).toThrow(/per-slot context/);
    expect(() => fitSlots(input({ availableBytes: Number.NaN }))).toThrow(/availableBytes/);
    expect(() => fitSlots(input({ weightBytes: -1 }))).toThrow(/weightBytes/);
    expect(() => fitSlots(input({ maxSlots: 0 }))).toThrow(/most slots/);
  });

  test("the host prompt cache (--cache-ram) is counted beside the weights; it yields only when not even 1 slot fits beside it", () => {
    const host = { marginBytes: HOST_MARGIN, where: "host RAM", availableText: "usable", nCtxSlot: 32768 };
    // 32 - 17 - 0.5 - 1 = 13.5 GiB: 4 slots of 3 GiB; with an 8 GiB prompt cache 5.5 GiB: 1
    expect(fitSlots(input({ ...host, availableBytes: 32 * GiB })).nSlots).toBe(4);
    const f = fitSlots(input({ ...host, availableBytes: 32 * GiB, cacheBytes: 8 * GiB }));
    expect(f.nSlots).toBe(1);
    expect(f.roomBytes).toBe(5.5 * GiB);
    expect(f.cacheSqueezed).toBe(false);
    expect(f.line).toBe("-np auto: 1 slot of 32768 tokens (KV 3.00 GiB of 5.50 GiB left on host RAM after weights 17.00 GiB, buffers 512.0 MiB, " +
      "prompt cache 8.00 GiB (--cache-ram) and 1.00 GiB kept free, of 32.00 GiB usable; a 2nd would need 512.0 MiB more)");
    // 24 GiB: 5.5 GiB before the cache: one slot, the cache gets what is left
    const q = fitSlots(input({ ...host, availableBytes: 24 * GiB, cacheBytes: 8 * GiB }));
    expect(q).toMatchObject({ nSlots: 1, cacheSqueezed: true, kvBytes: 3 * GiB });
    expect(q.line).toBe("-np auto: 1 slot of 32768 tokens (KV 3.00 GiB of 5.50 GiB left on host RAM after weights 17.00 GiB, buffers 512.0 MiB and " +
      "1.00 GiB kept free, of 24.00 GiB usable; the prompt cache's 8.00 GiB (--cache-ram) does not fit beside even 1 slot and gets what is left; lower --cache-ram)");
    // 20 GiB: not even one slot without the cache: refused, the cache not among the terms
    const no = fitSlots(input({ ...host, availableBytes: 20 * GiB, cacheBytes: 8 * GiB }));
    expect(no.nSlots).toBe(0);
    expect(no.refusal).toContain("weights 17.00 GiB + KV cache 3.00 GiB (32768 positions of 98304 bytes) + buffers 512.0 MiB + 1.00 GiB kept free = 21.50 GiB > 20.00 GiB usable");
    expect(() => fitSlots(input({ cacheBytes: -1 }))).toThrow(/cacheBytes/);
  });

  test("-c 0: the slots share the training context, each at least 32768 (a coding agent's turn), up to 8 (Qwen3-30B-A3B on an H200: 8 x 32768, not 5 x 262144)", () => {
    const shared = (over: Partial<SharedFitInput>) => fitSharedContext({ ...input({}), nCtxTotal: 262144, minSlotCtx: MIN_SHARED_SLOT_CTX, shrink: true, ...over });
    const f = shared({});
    expect(f).toMatchObject({ nSlots: 8, nCtxSlot: 32768, nCtxTotal: 262144, shrunk: false, kvBytes: 24 * GiB, roomBytes: 121 * GiB });
    expect(f.line).toBe("-np auto: 8 slots of 32768 tokens share the training context of 262144 (KV 24.00 GiB of 121.00 GiB left on NVIDIA H200 after weights 17.00 GiB, " +
      "buffers 512.0 MiB and 512.0 MiB kept free, of 139.00 GiB free; each slot holds at least 32768; 8 is the most -np auto gives)");
    // a 40 GiB card: 22 GiB of room, 240298 positions: 7 slots of at least 32768 share 7 x 34304 (multiples of 256)
    const c = shared({ availableBytes: 40 * GiB });
    expect(c).toMatchObject({ nSlots: 7, nCtxSlot: 34304, nCtxTotal: 7 * 34304, shrunk: true });
    expect(c.kvBytes).toBeLessThanOrEqual(c.roomBytes);
    expect(c.line).toContain("-np auto: 7 slots of 34304 tokens share 240128 (the training context of 262144 does not fit) (KV 21.98 GiB of 22.00 GiB");
    expect(c.line).toContain("an 8th would leave a slot under 32768 tokens");
    // room for 10000 positions: one slot of all of it (9984, a multiple of 256), so one long request fits
    const small = shared({ availableBytes: 18 * GiB + 10000 * kvBytesPerToken(QWEN30B) });
    expect(small).toMatchObject({ nSlots: 1, nCtxSlot: 9984, nCtxTotal: 9984, shrunk: true });
    expect(small.line).toContain("-np auto: 1 slot of 9984 tokens holding 9984 (the training context of 262144 does not fit)");
    expect(small.line).toContain("a 2nd would need");
    // a training context of one long slot or less: up to 4 slots that each hold all of it (llama-server's -np auto, 4 slots on one cache)
    expect(shared({ nCtxTotal: 16384 })).toMatchObject({ nSlots: 4, nCtxSlot: 16384, nCtxTotal: 4 * 16384, shrunk: false });
    expect(shared({ nCtxTotal: 32768 }).line).toBe("-np auto: 4 slots of 32768 tokens each holding the whole training context (KV 12.00 GiB of 121.00 GiB left on NVIDIA H200 " +
      "after weights 17.00 GiB, buffers 512.0 MiB and 512.0 MiB kept free, of 139.00 GiB free; 4 is the most -np auto gives a context this short)");
    // where memory holds only 2 of them, 2
    const two = shared({ nCtxTotal: 20000, availableBytes: 18 * GiB + 50000 * kvBytesPerToken(QWEN30B) });
    expect(two).toMatchObject({ nSlots: 2, nCtxSlot: 20000, nCtxTotal: 40000, shrunk: false });
    expect(two.line).toContain("a 3rd would need");
    // under two long slots: slots of all of it; two: they share it
    expect(shared({ nCtxTotal: 50000 })).toMatchObject({ nSlots: 4, nCtxSlot: 50000 });
    expect(shared({ nCtxTotal: 65536 })).toMatchObject({ nSlots: 2, nCtxSlot: 32768 });
    // a million tokens: 8 slots of 131072 (the eighth part, more than 32768)
    expect(shared({ nCtxTotal: 1048576, availableBytes: 1000 * GiB })).toMatchObject({ nSlots: 8, nCtxSlot: 131072 });
    // a training context under 4096: slots of all of it
    expect(shared({ nCtxTotal: 2048, minSlotCtx: 2048 })).toMatchObject({ nSlots: 4, nCtxSlot: 2048 });
    // not one slot of 4096: refused naming every term
    const no = shared({ availableBytes: 18 * GiB + 4095 * kvBytesPerToken(QWEN30B) });
    expect(no.nSlots).toBe(0);
    expect(no.refusal).toBe("-np auto: the model does not fit NVIDIA H200 with even 1 slot of 4096 tokens: weights 17.00 GiB + KV cache 384.0 MiB " +
      "(4096 positions of 98304 bytes) + buffers 512.0 MiB + 512.0 MiB kept free = 18.38 GiB > 18.37 GiB free; give a smaller context (-c or --slot-ctx)");
    // --fit off: the training context is not shrunk
    const off = shared({ availableBytes: 40 * GiB, shrink: false });
    expect(off.nSlots).toBe(0);
    expect(off.refusal).toContain("with even 1 slot of 262144 tokens");
    expect(off.refusal).toContain("give a smaller context (-c), or leave -fit on");
    expect(shared({ shrink: false }).nSlots).toBe(8);
    // a cap below what the memory holds, and why
    const cap = shared({ capTokens: 50000, capText: "the plan says so" });
    expect(cap).toMatchObject({ nSlots: 1, nCtxSlot: 49920, shrunk: true });
    expect(cap.line).toContain("holding 49920 (the training context of 262144 is capped: the plan says so)");
    expect(cap.line).toContain("a 2nd would pass that cap");
    const cap2 = shared({ capTokens: 70000, capText: "the plan says so" });
    expect(cap2).toMatchObject({ nSlots: 2, nCtxSlot: 34816, shrunk: true });
    expect(cap2.line).toContain("share 69632 (the training context of 262144 is capped: the plan says so)");
  });

  test("-c 0 on the host: the prompt cache first, then the shared context; the cache yields only to one slot of 4096", () => {
    const host = { marginBytes: HOST_MARGIN, where: "host RAM", availableText: "usable", nCtxTotal: 262144, minSlotCtx: MIN_SHARED_SLOT_CTX, shrink: true };
    const kv = kvBytesPerToken(QWEN30B);
    // 18.5 GiB fixed + 8 GiB cache + 20000 positions: one slot of 19968 (a multiple of 256)
    const f = fitSharedContext({ ...input({}), ...host, availableBytes: 26.5 * GiB + 20000 * kv, cacheBytes: 8 * GiB });
    expect(f).toMatchObject({ nSlots: 1, nCtxSlot: 19968, cacheSqueezed: false, shrunk: true });
    expect(f.line).toContain("prompt cache 8.00 GiB (--cache-ram)");
    // room for 3000 positions beside the cache, 90000 without: one slot of 4096, the cache gets the rest
    const q = fitSharedContext({ ...input({}), ...host, availableBytes: 18.5 * GiB + 90000 * kv, cacheBytes: 90000 * kv - 1000 * kv });
    expect(q).toMatchObject({ nSlots: 1, nCtxSlot: 4096, cacheSqueezed: true });
    expect(q.line).toContain("does not fit beside even 1 slot and gets what is left; lower --cache-ram");
  });

  test("shared-context input that cannot be is a SlotFitError", () => {
    const base = { ...input({}), nCtxTotal: 8192, minSlotCtx: 4096, shrink: true };
    expect(() => fitSharedContext({ ...base, nCtxTotal: 0 })).toThrow(/shared context/);
    expect(() => fitSharedContext({ ...base, minSlotCtx: 16384 })).toThrow(SlotFitError);
    expect(() => fitSharedContext({ ...base, capTokens: 0.5 })).toThrow(/cap/);
  });
});

function opts(argv: string[], env: Record<string, string> = {}): ServerOptions {
  const r = parseArgs(argv, env);
  if (r.action !== "serve") throw new Error(`expected serve, got ${r.action}`);
  return r.options;
}

function flagError(fn: () => unknown): FlagError {
  try {
    fn();
  } catch (e) {
    if (e instanceof FlagError) return e;
    throw e;
  }
  throw new Error("expected a FlagError");
}

describe("--slot-ctx flag", () => {
  test("parses, with its environment twin; 0 (the default) leaves the context to -c", () => {
    expect(opts([]).slotCtx).toBe(0);
    expect(opts(["--slot-ctx", "4096"]).slotCtx).toBe(4096);
    expect(opts(["--slot-ctx=2048"]).slotCtx).toBe(2048);
    expect(opts([], { BLOOMERY_SLOT_CTX: "1024" }).slotCtx).toBe(1024);
    expect(opts(["--slot-ctx", "512"], { BLOOMERY_SLOT_CTX: "1024" }).slotCtx).toBe(512);
    expect(flagError(() => parseArgs(["--slot-ctx", "-5"], {})).flag).toBe("--slot-ctx");
    expect(flagError(() => parseArgs(["--slot-ctx", "lots"], {})).flag).toBe("--slot-ctx");
  });

  test("-c must agree: N x slots with -np N, the same number with -np auto; the refusal names both flags", () => {
    expect(opts(["-np", "4", "--slot-ctx", "2048", "-c", "8192"]).ctxSize).toBe(8192);
    const e = flagError(() => parseArgs(["-np", "4", "--slot-ctx", "2048", "-c", "4096"], {}));
    expect(e.flag).toBe("--slot-ctx");
    expect(e.message).toBe("-c 4096 and --slot-ctx 2048 disagree: -np 4 slots of 2048 tokens make a context of 8192; give -c 8192, or only one of -c and --slot-ctx");
    expect(opts(["--slot-ctx", "2048", "-c", "2048"]).slotCtx).toBe(2048);
    const a = flagError(() => parseArgs(["-np", "auto", "--slot-ctx", "2048", "-c", "8192"], {}));
    expect(a.message).toContain("-c 8192 and --slot-ctx 2048 disagree: with -np auto both give each slot's context");
    // from the environment too
    expect(flagError(() => parseArgs(["-np", "2", "-c", "100"], { BLOOMERY_SLOT_CTX: "64" })).message).toContain("-c 100 and --slot-ctx 64 disagree");
    // -c 0 is "from the model": no conflict
    expect(opts(["-c", "0", "--slot-ctx", "512"]).slotCtx).toBe(512);
  });
});

describe("slot layout (planEngine)", () => {
  const layout = (argv: string[], auto: AutoSlots = () => ({ nSlots: 5, line: "five" }), train = 32768) => slotLayout(opts(argv), train, auto);

  test("-np N splits -c (or the training context) as llama-server does", () => {
    expect(layout(["-np", "3", "-c", "3072"])).toEqual({ nSlots: 3, nCtxSlot: 1024, nCtxAsked: 3072, note: undefined });
    expect(layout(["-np", "4"])).toMatchObject({ nSlots: 4, nCtxSlot: 8192, nCtxAsked: 32768 });
  });

  test("--slot-ctx: each slot gets it; with -np N the whole context is N x it", () => {
    expect(layout(["-np", "3", "--slot-ctx", "512"])).toMatchObject({ nSlots: 3, nCtxSlot: 512, nCtxAsked: 1536 });
    const asked: number[] = [];
    expect(layout(["--slot-ctx", "512"], (a) => (asked.push(a.nCtxSlot ?? -1), { nSlots: 7, line: "seven" }))).toEqual({ nSlots: 7, nCtxSlot: 512, nCtxAsked: 512, note: "srv  load_model: seven" });
    expect(asked).toEqual([512]);
  });

  test("-np auto with -c N: each slot gets the whole -c; the count is the memory's", () => {
    const asked: AutoAsk[] = [];
    const auto: AutoSlots = (a) => (asked.push(a), { nSlots: 2, line: "two" });
    expect(layout(["-c", "8192"], auto)).toMatchObject({ nSlots: 2, nCtxSlot: 8192, nCtxAsked: 8192 });
    expect(asked).toEqual([{ nCtxSlot: 8192 }]);
    const p = planEngine(opts(["-c", "8192"]), new Set(), 32768, auto);
    expect(p.engine).toMatchObject({ nSlots: 2, nCtx: 8192 });
    expect(p.nCtxTotal).toBe(16384);
    expect(p.notes).toContain("srv  load_model: two");
  });

  test("-np auto with -c 0 (or no -c): the slots share the training context, or each hold all of a short one (llama-server's -c 0 with -np auto)", () => {
    const asked: AutoAsk[] = [];
    const auto: AutoSlots = (a) => (asked.push(a), { nSlots: 2, line: "two" });
    // the count's own per-slot context, or the shared context split evenly
    expect(layout([], auto)).toEqual({ nSlots: 2, nCtxSlot: 16384, nCtxAsked: 32768, note: "srv  load_model: two" });
    expect(layout(["-c", "0"], () => ({ nSlots: 8, nCtxSlot: 3072, line: "eight" }))).toMatchObject({ nSlots: 8, nCtxSlot: 3072, nCtxAsked: 24576 });
    expect(asked).toEqual([{ nCtxTotal: 32768, minSlotCtx: 4096 }]);
    // a training context under 4096: a slot holds at least all of it
    expect(slotLayout(opts([]), 2048, (a) => (asked.push(a), { nSlots: 1, line: "one" }))).toMatchObject({ nSlots: 1, nCtxSlot: 2048 });
    expect(asked[1]).toEqual({ nCtxTotal: 2048, minSlotCtx: 2048 });
    // --slot-ctx overrides the sharing
    expect(layout(["--slot-ctx", "1024"], auto)).toMatchObject({ nSlots: 2, nCtxSlot: 1024 });
    expect(asked[2]).toEqual({ nCtxSlot: 1024 });
    // up to 4 slots may each hold all of it; a layout that overfills it otherwise is refused
    expect(layout([], () => ({ nSlots: 4, nCtxSlot: 32768, line: "four" }))).toMatchObject({ nSlots: 4, nCtxSlot: 32768, nCtxAsked: 32768 });
    expect(() => layout([], () => ({ nSlots: 4, nCtxSlot: 16384, line: "" }))).toThrow(/4 slots of 16384 tokens; the training context is 32768/);
    expect(() => layout([], () => ({ nSlots: 5, nCtxSlot: 32768, line: "" }))).toThrow(/5 slots of 32768 tokens/);
  });

  test("a slot under 16 tokens, or an auto count under 1, is an EngineOptionError naming the flag", () => {
    const e = (() => {
      try {
        layout(["--slot-ctx", "8"]);
      } catch (x) {
        return x;
      }
    })();
    expect(e).toBeInstanceOf(EngineOptionError);
    expect((e as EngineOptionError).flag).toBe("--slot-ctx");
    expect(() => layout(["-np", "8", "-c", "64"])).toThrow(/leaves 8 tokens per slot/);
    expect(() => layout(["-c", "1024"], () => ({ nSlots: 0, line: "" }))).toThrow(/at least 1/);
  });
});

function machine(ram: number, cards: { name: string; free: number }[] = []): Machine {
  return {
    os: "linux", arch: "x64",
    cuda: { usable: cards.length > 0, reason: cards.length ? "" : "no NVIDIA driver", devices: cards.length, driver_version: 0 },
    cards: cards.map((c, i) => ({ index: i, name: c.name, compute_capability: "9.0", sm_count: 132, total_bytes: c.free, free_bytes: c.free, supported: true })),
    ram: { total_bytes: ram, available_bytes: ram, cgroup_limit_bytes: null, cgroup_available_bytes: null, usable_bytes: ram },
    cpu: { model: "test", cores: 2, logical_cpus: 2, avx2: true, avx512: false, kernel_path: "avx2" },
  };
}

describe("the start plan counts the slots where the model runs", () => {
  const demo = (): Geometry => geometryFromGguf(GgufFile.open(DEMO));
  const FIT = { nParallel: -1, maxTokens: 64, nThreads: 2, exact: false };
  const plan = (args: string[], ram: number, m = machine(ram)) => {
    const argv = ["-m", DEMO, "-t", "2", "-ub", "64", "-b", "64", ...args];
    const p = parseArgs(argv, {});
    if (p.action !== "serve") throw new Error("not a start");
    return planStart({ o: p.options, explicit: p.explicit, argv, source: { kind: "file", path: DEMO, byName: false }, machine: m, dryRun: true, geometry: demo(), path: DEMO });
  };

  test("the host: the slots of --slot-ctx that fit its usable RAM, at most 8; the line says why", () => {
    const g = demo();
    const slot = 4096 * kvBytesPerToken(g.hp);
    // weights + buffers + margin, then room for 3 slots and a half
    const a = autoSlotFit(g, "host", 4096, { available: 1e15 }, FIT);
    const fixed = 1e15 - a.roomBytes;
    expect(fixed).toBeGreaterThanOrEqual(hostNeed(g, { nSlots: 1, nCtxSlot: 4096, maxTokens: 64, nThreads: 2 }).weights + HOST_MARGIN);
    const r = plan(["-ngl", "0", "--slot-ctx", "4096", "--cache-ram", "0"], fixed + 3.5 * slot);
    expect(r.refusal).toBeUndefined();
    expect(r.event.context).toMatchObject({ n_ctx: 3 * 4096, n_slots: 3, n_ctx_slot: 4096, fitted: false });
    expect(r.engine!.engine).toMatchObject({ nSlots: 3, nCtx: 4096 });
    expect(r.event.notes.find((n) => n.startsWith("-np auto:"))).toMatch(/^-np auto: 3 slots of 4096 tokens \(KV 24\.0 MiB of 28\.0 MiB left on host RAM .*; a 4th would need 4\.0 MiB more\)$/);
    // plenty of memory: the cap
    expect(plan(["-ngl", "0", "--slot-ctx", "4096"], 64 * GiB).event.context).toMatchObject({ n_slots: 8, n_ctx_slot: 4096, n_ctx: 8 * 4096 });
    // -c with auto: each slot gets all of it
    expect(plan(["-ngl", "0", "-c", "4096"], 64 * GiB).event.context).toMatchObject({ n_slots: 8, n_ctx_slot: 4096 });
    // a fixed -np is not counted
    expect(plan(["-ngl", "0", "-np", "2", "--slot-ctx", "4096", "--cache-ram", "0"], fixed + 3.5 * slot).event.context).toMatchObject({ n_slots: 2, n_ctx_slot: 4096, n_ctx: 8192 });
  });

  test("--host-budget stands for the host's memory in the count (no margin, as the plan at load)", () => {
    const g = demo();
    const a = autoSlotFit(g, "host", 512, { available: 1e15, margin: 0, loadPlanBuffers: true }, FIT);
    const fixed = 1e15 - a.roomBytes; // weights and the plan at load's buffers (64 MiB and more: the larger estimate here)
    expect(fixed).toBeGreaterThan(hostNeed(g, { nSlots: 1, nCtxSlot: 512, maxTokens: 64, nThreads: 2 }).weights + 64 * MiB);
    const budgetMiB = Math.ceil(fixed / MiB) + 3; // room for 3 slots of 1 MiB and less than a 4th
    const r = plan(["-ngl", "0", "--slot-ctx", "512", "--host-budget", String(budgetMiB), "--cache-ram", "0"], 64 * GiB);
    expect(r.event.context).toMatchObject({ n_slots: 3, n_ctx_slot: 512 });
    expect(r.event.notes.join("\n")).toContain(`of ${budgetMiB.toFixed(1)} MiB --host-budget`);
    // a budget that holds no slot: one slot, the plan at load decides (the disk tier), the line says so
    const tight = plan(["-ngl", "0", "--slot-ctx", "512", "--host-budget", "1"], 64 * GiB);
    expect(tight.refusal).toBeUndefined();
    expect(tight.event.context.n_slots).toBe(1);
    expect(tight.event.notes.join("\n")).toContain("-np auto: the model does not fit host RAM with even 1 slot of 512 tokens: weights");
  });

  test("not even one slot of the context asked: refused (E_DOES_NOT_FIT) with every term, and a --slot-ctx that fits", () => {
    const g = demo();
    const r = plan(["-ngl", "0", "--slot-ctx", "32768"], 2 * GiB);
    expect(r.refusal).toBeUndefined(); // 64 MiB a slot: 8 fit in 2 GiB less the margin
    // a byte short of one slot of 32768 tokens
    const small = needAt(g, "host", 32768, FIT).need.total + HOST_MARGIN - 1;
    expect(small).toBe(1e15 - autoSlotFit(g, "host", 32768, { available: 1e15 }, FIT).roomBytes + 32768 * kvBytesPerToken(g.hp) - 1);
    const no = plan(["-ngl", "0", "--slot-ctx", "32768"], small);
    expect(no.refusal?.code).toBe("E_DOES_NOT_FIT");
    expect(no.refusal?.message).toMatch(/^-np auto: the model does not fit host RAM with even 1 slot of 32768 tokens: weights \S+ MiB \+ KV cache 64\.0 MiB \(32768 positions of 2048 bytes\) \+ buffers \S+ MiB \+ 1\.00 GiB kept free = \S+ GiB > \S+ GiB usable/);
    const fits = fitContext(g, "host", small, FIT)!;
    expect(no.refusal?.next).toBe(`bloomery-serve -m ${DEMO} -t 2 -ub 64 -b 64 -ngl 0 --slot-ctx ${fits.nCtxSlot}`);
    expect(fits.nCtxSlot).toBeLessThan(32768);
    // -c left to the model: what fits of the training context (a byte short of all of it: 32512
    // tokens, a multiple of 256), in one slot so that one long request fits
    const fitted = plan(["-ngl", "0", "--cache-ram", "0"], small);
    expect(fitted.refusal).toBeUndefined();
    expect(fitted.event.context).toMatchObject({ fitted: true, n_slots: 1, n_ctx_slot: 32512, n_ctx: 32512 });
    expect(fitted.event.notes).toContain("fit: the training context of 32768 tokens does not fit; the slot holds 32512");
    expect(fitted.event.notes.find((n) => n.startsWith("-np auto:"))).toMatch(
      /^-np auto: 1 slot of 32512 tokens holding 32512 \(the training context of 32768 does not fit\) \(KV 63\.5 MiB of 64\.0 MiB left on host RAM .*; a 2nd would need \S+ MiB more\)$/);
  });

  test("the host: the prompt cache's --cache-ram is counted beside the weights (-1, no limit, is not); it yields to one slot", () => {
    const g = demo();
    const slot = 4096 * kvBytesPerToken(g.hp);
    const fixed = 1e15 - autoSlotFit(g, "host", 4096, { available: 1e15 }, FIT).roomBytes;
    const ram = fixed + 64 * MiB + 3.5 * slot;
    const r = plan(["-ngl", "0", "--slot-ctx", "4096", "--cache-ram", "64"], ram);
    expect(r.refusal).toBeUndefined();
    expect(r.event.context).toMatchObject({ n_slots: 3, n_ctx_slot: 4096 });
    expect(r.event.notes.find((n) => n.startsWith("-np auto:"))).toMatch(/^-np auto: 3 slots of 4096 tokens \(KV 24\.0 MiB of 28\.0 MiB left on host RAM after weights \S+ MiB, buffers \S+ MiB, prompt cache 64\.0 MiB \(--cache-ram\) and 1\.00 GiB kept free, of \S+ GiB usable; a 4th would need 4\.0 MiB more\)$/);
    // without the cache, or with no limit (not counted): 11 slots' room, 8 the most
    expect(plan(["-ngl", "0", "--slot-ctx", "4096", "--cache-ram", "0"], ram).event.context.n_slots).toBe(8);
    expect(plan(["-ngl", "0", "--slot-ctx", "4096", "--cache-ram", "-1"], ram).event.context.n_slots).toBe(8);
    // the default 8192 MiB beside 1.5 slots: one slot; the cache gets what is left and the line says so
    const q = plan(["-ngl", "0", "--slot-ctx", "4096"], fixed + 1.5 * slot);
    expect(q.refusal).toBeUndefined();
    expect(q.event.context.n_slots).toBe(1);
    expect(q.event.notes.join("\n")).toContain("the prompt cache's 8.00 GiB (--cache-ram) does not fit beside even 1 slot and gets what is left; lower --cache-ram");
    // -c 0: the cache first, then the shared context (its buffers counted at the widest slot)
    const sharedFixed = 1e15 - autoSlotFit(g, "host", { nCtxTotal: 32768, minSlotCtx: 4096, shrink: true }, { available: 1e15 }, FIT).roomBytes;
    const c0 = plan(["-ngl", "0", "--cache-ram", "64"], sharedFixed + 64 * MiB + 20000 * kvBytesPerToken(g.hp));
    expect(c0.event.context).toMatchObject({ fitted: true, n_slots: 1, n_ctx_slot: 19968 });
    expect(c0.event.notes.join("\n")).toContain("prompt cache 64.0 MiB (--cache-ram)");
  });

  test("a card with routed experts in host memory: the plan's card share is counted, with two staging layers", () => {
    const g = demo();
    const m = { card: { name: "Test card", freeBytes: 64 * GiB }, hostAvailableBytes: 64 * GiB };
    const ctx = { nSlots: 1, nCtxSlot: 4096, maxTokens: 64 };
    const a256 = (n: number) => Math.ceil(n / 256) * 256;
    // from the file: every expert tensor off the card; the largest layer's experts staged twice
    let experts = 0;
    const layer = new Map<string, number>();
    for (const t of g.gguf!.tensors.values()) {
      const e = /^blk\.(\d+)\.ffn_(gate|up|down)_exps\./.exec(t.name);
      if (!e) continue;
      experts += a256(t.nbytes);
      layer.set(e[1], (layer.get(e[1]) ?? 0) + a256(t.nbytes));
    }
    const stage = Math.max(...layer.values());
    const split = cardSplit(g, { cpuMoe: true }, m);
    const share = split(ctx)!;
    expect(share).toMatchObject({ hostLayers: 4, autoHostLayers: 0, cardWeightBytes: g.cardWeightBytes - experts, stageBytes: stage });
    expect(share.host.size).toBe(12);
    const plain = autoSlotFit(g, "card", 4096, { available: 1e15 }, FIT);
    const hybrid = autoSlotFit(g, "card", 4096, { available: 1e15 }, { ...FIT, split });
    expect(hybrid.roomBytes - plain.roomBytes).toBe(experts - 2 * stage);
    expect(needAt(g, "card", 4096, { ...FIT, split }).need).toMatchObject({ weights: g.cardWeightBytes - experts });
    // --n-cpu-moe 1 and -ot of one layer's experts: one host layer each; nothing placed: no share
    expect(cardSplit(g, { nCpuMoe: 1 }, m)(ctx)!.hostLayers).toBe(1);
    expect(cardSplit(g, { overrides: [{ pattern: "blk\\.2\\.ffn_.*_exps", buffer: "CPU" }] }, m)(ctx)!.host.has("blk.2.ffn_up_exps.weight")).toBe(true);
    expect(cardSplit(g, {}, m)(ctx)).toBeUndefined();
    // a plan the load would refuse (the dense weights past a --card-budget): no slot, the plan's words
    const refused = autoSlotFit(g, "card", 4096, { available: 1e15, where: "Test card" }, { ...FIT, split: cardSplit(g, { cardBudgetBytes: 1024 }, m) });
    expect(refused.nSlots).toBe(0);
    expect(refused.refusal).toContain("-np auto: the model cannot run on Test card with even 1 slot of 4096 tokens: the model's dense weights do not fit the card");
  });

  test("the plan's own host layers (a card too small): the slots never take the room of experts the plan keeps on the card", () => {
    const g = demo();
    const E = g.expertBytes / g.hp.nLayer; // one layer's experts (every layer alike in the demo)
    const dense = g.weightBytes - g.expertBytes;
    // the plan at one slot of 4096 keeps 1 layer's experts on the card (2 more staged), with half a layer to spare
    // (the plan's sum: dense + experts on the card + context + two staged layers + its margin)
    const budget = dense + E + cardContextBytes(g.hp, { nSlots: 1, nCtxSlot: 4096, maxTokens: 64 }) + 2 * E + PLAN_CARD_MARGIN + E / 2;
    const m = { card: { name: "Test card", freeBytes: 64 * GiB }, hostAvailableBytes: 64 * GiB };
    const split = cardSplit(g, { cardBudgetBytes: budget }, m);
    const layersAt = (nSlots: number, nCtxSlot: number) => {
      try {
        return split({ nSlots, nCtxSlot, maxTokens: 64 })?.hostLayers ?? 0;
      } catch {
        return Infinity; // the plan refuses it
      }
    };
    expect(split({ nSlots: 1, nCtxSlot: 4096, maxTokens: 64 })).toMatchObject({ hostLayers: 3, autoHostLayers: 3 });
    expect(layersAt(2, 4096)).toBeGreaterThan(3);
    const room = { available: budget, where: "Test card", availableText: "--card-budget" };
    // the card's buffers as estimated leave room for 8 slots, but a 2nd slot of 4096 would move another layer to the host
    const f = autoSlotFit(g, "card", 4096, room, { ...FIT, split });
    expect(f.nSlots).toBe(1);
    expect(f.line).toContain("more would move another layer's experts to host memory (the plan at load)");
    // -c 0: the shared context stops where the plan would move another layer
    const s = autoSlotFit(g, "card", { nCtxTotal: 32768, minSlotCtx: 4096, shrink: true }, room, { ...FIT, split }) as SharedFit;
    expect(s.nSlots).toBe(1);
    expect(s.nCtxSlot).toBeGreaterThanOrEqual(4096);
    expect(layersAt(1, s.nCtxSlot)).toBe(3);
    expect(layersAt(1, s.nCtxSlot + 256)).toBeGreaterThan(3);
    expect(s.line).toContain(`holding ${s.nCtxSlot} (the training context of 32768 is capped: more would move another layer's experts to host memory`);
  });

  test("a card with --cpu-moe: the CUDA library's sizes of the plan's card share, and the start plan's count beside them", () => {
    const st = cudaStatus();
    if (!st.ok) {
      console.log(`skip: no usable CUDA device (${st.reason}); the card's share through the CUDA library runs on the GPU machine`);
      return;
    }
    const g = demo();
    const ex = { ...FIT, exact: true };
    const m = { card: { name: "Test card", freeBytes: 64 * GiB }, hostAvailableBytes: 64 * GiB };
    const s = { nSlots: 1, nCtxSlot: 4096, maxTokens: 64, nThreads: 2 };
    const share = cardSplit(g, { cpuMoe: true }, m)({ nSlots: 1, nCtxSlot: 4096, maxTokens: 64 })!;
    const whole = cardNeed(g, s, true), part = cardNeed(g, s, true, share);
    expect(part.exact).toBe(true);
    // the estimate's share is the library's: the experts leave the arena, two staging layers join the buffers
    expect(whole.weights - part.weights).toBe(g.cardWeightBytes - share.cardWeightBytes);
    expect(part.work - whole.work).toBe(2 * share.stageBytes);
    const split = cardSplit(g, { cpuMoe: true }, m);
    const fixed = 1e15 - autoSlotFit(g, "card", 4096, { available: 1e15 }, { ...ex, split }).roomBytes;
    const slot = 4096 * kvBytesPerToken(g.hp);
    const card = machine(64 * GiB, [{ name: "Test card", free: fixed + 2.5 * slot }]);
    const r = plan(["-ngl", "all", "--cpu-moe", "--slot-ctx", "4096"], 64 * GiB, card);
    expect(r.refusal).toBeUndefined();
    expect(r.event.backend.kind).toBe("cuda");
    expect(r.event.context).toMatchObject({ n_slots: 2, n_ctx_slot: 4096 });
    expect(r.event.memory.weights_bytes).toBe(part.weights);
  });

  test("a card: the slots that fit its free memory beside the weights (the CUDA library's sizes)", () => {
    const st = cudaStatus();
    if (!st.ok) {
      console.log(`skip: no usable CUDA device (${st.reason}); the card's count through the start plan runs on the GPU machine`);
      return;
    }
    const g = demo();
    const ex = { ...FIT, exact: true };
    const a = autoSlotFit(g, "card", 4096, { available: 1e15 }, ex);
    const fixed = 1e15 - a.roomBytes; // weights + buffers + margin
    const slot = 4096 * kvBytesPerToken(g.hp);
    // the plan at load estimates the card's buffers more generously (src/engine/plan.ts) and moves
    // experts to the host when they do not fit by its sum: the card holds 2.5 slots by both
    const planFixed = g.weightBytes + cardContextBytes(g.hp, { nSlots: 0, nCtxSlot: 4096, maxTokens: 64 }) + PLAN_CARD_MARGIN;
    const free = Math.max(fixed, planFixed) + 2.5 * slot;
    const r = plan(["-ngl", "all", "--slot-ctx", "4096"], 64 * GiB, machine(64 * GiB, [{ name: "Test card", free }]));
    expect(r.event.backend.kind).toBe("cuda");
    expect(r.event.context).toMatchObject({ n_slots: 2, n_ctx_slot: 4096 });
    expect(r.event.memory.weights_bytes).toBe(cardNeed(g, { nSlots: 1, nCtxSlot: 4096, maxTokens: 64, nThreads: 2 }, true).weights); // every expert on the card
    expect(r.event.memory.total_bytes! + CARD_MARGIN).toBeLessThanOrEqual(free);
    expect(r.event.notes.join("\n")).toContain("-np auto: 2 slots of 4096 tokens");
    expect(r.event.notes.join("\n")).toContain("left on Test card");
    // a card that holds 2.5 slots by the library's sizes: the plan at load, by its own sum, keeps
    // every expert on the card with fewer slots (or moves experts to the host even for one)
    const tightFree = fixed + 2.5 * slot;
    const byPlan = Math.floor((tightFree - planFixed) / slot);
    const tight = plan(["-ngl", "all", "--slot-ctx", "4096"], 64 * GiB, machine(64 * GiB, [{ name: "Test card", free: tightFree }]));
    console.log(`card: the library's fixed ${fixed} bytes, the plan's ${planFixed}; ${tight.refusal?.message ?? tight.event.notes.find((n) => n.startsWith("-np auto:"))}`);
    if (byPlan >= 1) {
      expect(tight.event.context.n_slots).toBe(Math.min(2, byPlan));
      expect(tight.event.memory.weights_bytes).toBe(r.event.memory.weights_bytes);
    } else if (tight.refusal) {
      // not even with every expert in host memory by the plan's sum: the load would refuse it, so the start does
      expect(tight.refusal.code).toBe("E_DOES_NOT_FIT");
      expect(tight.refusal.message).toContain("the model's dense weights do not fit the card even with every routed expert in host memory");
    } else expect(tight.event.memory.weights_bytes).toBeLessThan(r.event.memory.weights_bytes);
  });
});
