// The placement plan at load (src/engine/plan.ts): llama's flags place tensors as llama does,
// host budgets spill routed experts to the NVMe tier (on the CPU, and the host experts beside a
// card), and a plan that cannot run is refused naming every term of its sum.
import { describe, expect, test } from "bun:test";
import type { HParams } from "../src/models/types.ts";
import { CARD_MARGIN, HOST_RESERVE, PlanError, cardContextBytes, compileOverrides, cpuContextBytes, planLoad, type PlanTensor } from "../src/engine/plan.ts";

const MiB = 1024 ** 2, GiB = 1024 ** 3;
const hp: HParams = {
  arch: "qwen3moe", nVocab: 1000, nEmbd: 256, nLayer: 4, nCtxTrain: 4096, nHead: 4, nHeadKv: 2, headDim: 64,
  nFf: 128, nExpert: 8, nExpertUsed: 2, eps: 1e-6, kvLayers: 4,
};
const EXP = 30 * MiB; // one expert tensor of a layer (all 8 experts)
function tensors(): PlanTensor[] {
  const t: PlanTensor[] = [{ name: "token_embd.weight", bytes: 2 * MiB }, { name: "output_norm.weight", bytes: 1024 }, { name: "output.weight", bytes: 2 * MiB }];
  for (let l = 0; l < hp.nLayer; l++) {
    for (const n of ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_inp"]) t.push({ name: `blk.${l}.${n}.weight`, bytes: MiB });
    for (const n of ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]) t.push({ name: `blk.${l}.${n}.weight`, bytes: EXP });
  }
  return t;
}
const ctx = { nSlots: 1, nCtxSlot: 512, maxTokens: 64 };
const dense = 4 * MiB + 1024 + hp.nLayer * 5 * MiB;
const experts = hp.nLayer * 3 * EXP;
const bigHost = { card: null, hostAvailableBytes: 64 * GiB };
const card = { card: { name: "Test GPU", freeBytes: 80 * GiB }, hostAvailableBytes: 64 * GiB };

describe("plan on the CPU", () => {
  test("everything fits: all in host RAM, one line with the sums", () => {
    const p = planLoad(hp, tensors(), "cpu", {}, bigHost, ctx);
    expect(p.expertRamBytes).toBeUndefined();
    expect(p.host.dense).toBe(dense);
    expect(p.host.experts).toBe(experts);
    expect(p.host.nExperts).toBe(hp.nLayer * hp.nExpert);
    expect([...p.where.values()].every((t) => t === "host")).toBe(true);
    expect(p.line).toMatch(/^placement: host: dense 0\.\d\d GiB \+ 32 experts 0\.35 GiB \+ KV and buffers /);
    expect(p.host.budget).toBe(64 * GiB - HOST_RESERVE);
  });

  test("a host budget below the experts puts them on disk with the rest of the budget as their cache", () => {
    const budget = dense + cpuContextBytes(hp, ctx) + 100 * MiB;
    const p = planLoad(hp, tensors(), "cpu", { hostBudgetBytes: budget }, bigHost, ctx);
    expect(p.expertRamBytes).toBe(100 * MiB);
    expect(p.disk.experts).toBe(experts);
    expect(p.where.get("blk.0.ffn_up_exps.weight")).toBe("disk");
    expect(p.where.get("blk.0.attn_q.weight")).toBe("host");
    expect(p.line).toContain("disk: 32 experts 0.35 GiB read on demand into a 0.10 GiB RAM cache");
  });

  test("the machine's own RAM limits the plan as a budget does (less what is kept free); the first layers that fit beside the smallest cache stay in memory", () => {
    const avail = HOST_RESERVE + dense + cpuContextBytes(hp, ctx) + 200 * MiB;
    const p = planLoad(hp, tensors(), "cpu", {}, { card: null, hostAvailableBytes: avail }, ctx);
    // a layer's experts are 90 MiB, the smallest cache 45 MiB: layer 0 stays, the others take the 110 MiB left
    const layer = experts / 4;
    expect([0, 1, 2, 3].map((l) => p.where.get(`blk.${l}.ffn_gate_exps.weight`))).toEqual(["host", "disk", "disk", "disk"]);
    expect(p.host.experts).toBe(layer);
    expect(p.disk).toEqual({ dense: 0, experts: 3 * layer, nExperts: 24 });
    expect(p.expertRamBytes).toBe(200 * MiB - layer);
    expect(p.line).toContain("disk: 24 experts 0.26 GiB read on demand into a 0.11 GiB RAM cache");
  });

  test("dense weights and KV past the budget are refused naming every term", () => {
    const e = (() => { try { planLoad(hp, tensors(), "cpu", { hostBudgetBytes: 10 * MiB }, bigHost, ctx); } catch (x) { return x as Error; } })();
    expect(e).toBeInstanceOf(PlanError);
    expect(e!.message).toMatch(/dense weights .* \+ KV cache and buffers .* \(1 slot\(s\) of 512 positions\) = .* > the host budget .* \(--host-budget 10 MiB\)/);
  });

  test("a budget below the smallest expert cache is refused with its size", () => {
    const budget = dense + cpuContextBytes(hp, ctx) + MiB;
    expect(() => planLoad(hp, tensors(), "cpu", { hostBudgetBytes: budget }, bigHost, ctx)).toThrow(/smallest expert cache .* \(2 experts of 11\.3 MiB x 2 layers\)/);
  });
});

describe("plan with a card (llama's flags)", () => {
  test("no flags: everything on the card", () => {
    const p = planLoad(hp, tensors(), "cuda", { nGpuLayers: "auto" }, card, ctx);
    expect(p.card.experts).toBe(experts);
    expect(p.line).toContain("card Test GPU: dense");
    expect([...p.where.values()].every((t) => t === "card")).toBe(true);
  });

  const refusal = (f: Parameters<typeof planLoad>[3]) => {
    try {
      planLoad(hp, tensors(), "cuda", f, card, ctx);
    } catch (e) {
      return (e as Error).message;
    }
    return "";
  };

  test("--cpu-moe, --n-cpu-moe and -ot =CPU keep routed experts in host memory beside the card; the line says so", () => {
    const all = planLoad(hp, tensors(), "cuda", { cpuMoe: true }, card, ctx);
    expect(all.host.experts).toBe(experts);
    expect(all.card.experts).toBe(0);
    expect(all.where.get("blk.0.ffn_up_exps.weight")).toBe("host");
    expect(all.where.get("blk.0.ffn_gate_inp.weight")).toBe("card");
    expect(all.line).toMatch(/^placement: card Test GPU: dense .* \+ 0 experts 0\.00 GiB; host: dense 0\.00 GiB \+ 32 experts 0\.35 GiB = 0\.35 GiB of /);
    const half = planLoad(hp, tensors(), "cuda", { nCpuMoe: 2 }, card, ctx);
    expect([0, 1, 2, 3].map((l) => half.where.get(`blk.${l}.ffn_down_exps.weight`))).toEqual(["host", "host", "card", "card"]);
    expect(half.card.nExperts).toBe(16);
    const ot = planLoad(hp, tensors(), "cuda", { overrides: [{ pattern: "blk\\.3\\.ffn_.*_exps", buffer: "CPU" }] }, card, ctx);
    expect(ot.host.nExperts).toBe(8);
  });

  test("dense tensors on the host, a layer's experts split across tiers: refused with the plan", () => {
    // -ngl 2 of 4 layers: llama's first layer on the card is 4 + 1 - 2 = 3; token_embd stays where the card path puts it
    expect(refusal({ nGpuLayers: 2 })).toMatch(/keep 15 dense tensors .*not implemented yet/);
    expect(refusal({ overrides: [{ pattern: "blk\\.0\\.attn_q", buffer: "CPU" }] })).toMatch(/keep 1 dense tensors/);
    expect(refusal({ nGpuLayers: 5 })).toBe("");
    expect(refusal({ overrides: [{ pattern: "blk\\.1\\.ffn_down_exps", buffer: "CPU" }] })).toMatch(/layer 1 has some of its routed-expert tensors on the host/);
  });

  test("host experts past the host budget go to the disk tier with the whole budget as their cache; the line says so", () => {
    const p = planLoad(hp, tensors(), "cuda", { cpuMoe: true, hostBudgetBytes: 100 * MiB }, card, ctx);
    expect(p.expertRamBytes).toBe(100 * MiB);
    expect(p.disk).toEqual({ dense: 0, experts, nExperts: 32 });
    expect(p.host.experts).toBe(0);
    expect(p.host.nExperts).toBe(0);
    expect(p.card.experts).toBe(0);
    expect(p.where.get("blk.0.ffn_up_exps.weight")).toBe("disk");
    expect(p.where.get("blk.3.ffn_down_exps.weight")).toBe("disk");
    expect(p.where.get("blk.0.ffn_gate_inp.weight")).toBe("card");
    expect(p.line).toMatch(/^placement: card Test GPU: dense .* \+ 0 experts 0\.00 GiB; disk: 32 experts 0\.35 GiB read on demand into a 0\.10 GiB RAM cache$/);
    // --n-cpu-moe 2: those two layers on disk, the rest on the card; one layer fits the budget and stays in host memory
    const half = planLoad(hp, tensors(), "cuda", { nCpuMoe: 2, hostBudgetBytes: 100 * MiB }, card, ctx);
    expect([0, 1, 2, 3].map((l) => half.where.get(`blk.${l}.ffn_gate_exps.weight`))).toEqual(["disk", "disk", "card", "card"]);
    expect(half.disk.nExperts).toBe(16);
    expect(half.card.nExperts).toBe(16);
    const one = planLoad(hp, tensors(), "cuda", { nCpuMoe: 1, hostBudgetBytes: 100 * MiB }, card, ctx);
    expect(one.expertRamBytes).toBeUndefined();
    expect(one.where.get("blk.0.ffn_gate_exps.weight")).toBe("host");
    // the machine's own RAM, less what is kept free, is the budget without --host-budget
    const small = { card: card.card, hostAvailableBytes: HOST_RESERVE + 200 * MiB };
    const own = planLoad(hp, tensors(), "cuda", { cpuMoe: true }, small, ctx);
    expect(own.expertRamBytes).toBe(200 * MiB - experts / 4);
    expect(own.disk.nExperts).toBe(24);
  });

  test("a host budget that holds some host layers and the smallest cache of the rest: those layers stay in host memory, the rest go to disk", () => {
    const layer = experts / 4; // 90 MiB: 8 experts of 11.25 MiB; the smallest cache 45 MiB (2 picks x 2 layers)
    const p = planLoad(hp, tensors(), "cuda", { cpuMoe: true, hostBudgetBytes: 2 * layer + 50 * MiB }, card, ctx);
    expect([0, 1, 2, 3].map((l) => p.where.get(`blk.${l}.ffn_down_exps.weight`))).toEqual(["host", "host", "disk", "disk"]);
    expect(p.host.experts).toBe(2 * layer);
    expect(p.host.nExperts).toBe(16);
    expect(p.disk).toEqual({ dense: 0, experts: 2 * layer, nExperts: 16 });
    expect(p.expertRamBytes).toBe(50 * MiB);
    expect(p.line).toMatch(/; host: dense 0\.00 GiB \+ 16 experts 0\.18 GiB = 0\.18 GiB of 0\.22 GiB; disk: 16 experts 0\.18 GiB read on demand into a 0\.05 GiB RAM cache$/);
    // one byte less and the second layer's room goes to the cache
    const q = planLoad(hp, tensors(), "cuda", { cpuMoe: true, hostBudgetBytes: 2 * layer + 45 * MiB - 1 }, card, ctx);
    expect(q.host.nExperts).toBe(8);
    expect(q.expertRamBytes).toBe(layer + 45 * MiB - 1);
    // --n-cpu-moe 3: of its three host layers the first stays, the others go to disk; the card keeps its own
    const n3 = planLoad(hp, tensors(), "cuda", { nCpuMoe: 3, hostBudgetBytes: layer + 50 * MiB }, card, ctx);
    expect([0, 1, 2, 3].map((l) => n3.where.get(`blk.${l}.ffn_up_exps.weight`))).toEqual(["host", "disk", "disk", "card"]);
  });

  test("a card budget and a host budget both too small: the first layers' experts go to host memory, then to disk; the line says both", () => {
    const budget = dense + 4 * 3 * EXP + cardContextBytes(hp, ctx) + CARD_MARGIN - 1;
    const p = planLoad(hp, tensors(), "cuda", { cardBudgetBytes: budget, hostBudgetBytes: 100 * MiB }, card, ctx);
    expect(p.autoHostLayers).toBe(3);
    expect([0, 1, 2, 3].map((l) => p.where.get(`blk.${l}.ffn_up_exps.weight`))).toEqual(["disk", "disk", "disk", "card"]);
    expect(p.expertRamBytes).toBe(100 * MiB);
    expect(p.line).toMatch(/; disk: 24 experts 0\.26 GiB read on demand into a 0\.10 GiB RAM cache \(the card's .* the first 3 layers' experts stay in host memory\)$/);
  });

  test("a host budget below the smallest expert cache is refused naming every term", () => {
    const msg = refusal({ cpuMoe: true, hostBudgetBytes: 30 * MiB });
    expect(msg).toMatch(/^placement: card Test GPU: .*; host: dense 0\.00 GiB \+ 32 experts 0\.35 GiB = 0\.35 GiB of 0\.03 GiB\n/);
    expect(msg).toMatch(/the host experts 0\.35 GiB \(4 layers\) > the host budget 0\.03 GiB \(--host-budget 30 MiB\), and read from disk they need at least the smallest expert cache 0\.04 GiB \(2 experts of 11\.3 MiB x 2 layers\) > the host budget 0\.03 GiB: keep fewer experts on the host \(--n-cpu-moe N\) or give a larger --host-budget/);
    // the smallest cache itself plans
    expect(planLoad(hp, tensors(), "cuda", { cpuMoe: true, hostBudgetBytes: 45 * MiB }, card, ctx).expertRamBytes).toBe(45 * MiB);
    expect(refusal({ nCpuMoe: 2, hostBudgetBytes: 45 * MiB - 1 })).toMatch(/host experts 0\.18 GiB \(2 layers\) .* smallest expert cache 0\.04 GiB/);
  });

  test("a card budget below the model: the fewest first layers' experts move to host memory, the line says why; too small is refused", () => {
    const layer = 3 * EXP;
    // a byte short of everything: two layers' experts off the card free no room (the staging of
    // uploaded experts takes two layers), three do
    const budget = dense + 4 * layer + cardContextBytes(hp, ctx) + CARD_MARGIN - 1;
    const p = planLoad(hp, tensors(), "cuda", { cardBudgetBytes: budget }, card, ctx);
    expect(p.autoHostLayers).toBe(3);
    expect([0, 1, 2, 3].map((l) => p.where.get(`blk.${l}.ffn_gate_exps.weight`))).toEqual(["host", "host", "host", "card"]);
    expect(p.line).toContain("the first 3 layers' experts stay in host memory");
    // the machine's own free memory counts the same way
    const small = { card: { name: "Small GPU", freeBytes: budget }, hostAvailableBytes: 64 * GiB };
    expect(planLoad(hp, tensors(), "cuda", {}, small, ctx).autoHostLayers).toBe(3);
    // flags that place experts are kept as they are
    expect(planLoad(hp, tensors(), "cuda", { cardBudgetBytes: budget, nCpuMoe: 1 }, card, ctx).autoHostLayers).toBeUndefined();
    expect(planLoad(hp, tensors(), "cuda", {}, card, ctx).autoHostLayers).toBeUndefined();
    expect(refusal({ cardBudgetBytes: 10 * MiB })).toMatch(/dense weights do not fit the card even with every routed expert in host memory: dense .* \+ KV cache and buffers .* > the --card-budget of 0\.01 GiB/);
  });

  test("-ot: the first matching override wins; CUDA0 keeps a tensor on the card; bad patterns and buffers are refused", () => {
    expect(refusal({ cpuMoe: true, overrides: [{ pattern: "exps", buffer: "CUDA0" }] })).toBe("");
    expect(() => compileOverrides([{ pattern: "(", buffer: "CPU" }])).toThrow(/-ot \(=CPU: the pattern is not a valid regular expression/);
    expect(() => compileOverrides([{ pattern: "x", buffer: "Vulkan0" }])).toThrow(/unknown buffer type 'Vulkan0'/);
  });
});

describe("plan at load (a real model)", () => {
  test("a host budget below the experts: the plan's line says disk, the store holds the rest, the logits are the same bits", async () => {
    const { Model } = await import("../src/engine/model.ts");
    const { join } = await import("node:path");
    const { FIXTURES } = await import("./paths.ts");
    const file = join(FIXTURES, "demo-model", "bloomery-demo-q4_k_m.gguf");
    const lines: string[] = [];
    const opts = { nCtx: 128, nSlots: 1, nThreads: 2, maxTokens: 64, log: (l: string) => lines.push(l) };
    const m0 = Model.load(file, { ...opts, placement: {} });
    const p0 = m0.plan!;
    expect(p0.expertRamBytes).toBeUndefined();
    expect(m0.experts).toBeUndefined();
    const budget = p0.host.dense + p0.host.context + Math.floor(p0.host.experts / 3);
    const m1 = Model.load(file, { ...opts, placement: { hostBudgetBytes: budget } });
    try {
      expect(m1.plan!.disk.nExperts).toBeGreaterThan(0);
      expect(m1.plan!.expertRamBytes).toBe(budget - p0.host.dense - p0.host.context);
      expect(m1.experts).toBeDefined();
      expect(lines.at(-1)).toMatch(/^placement: host: .*; disk: \d+ experts .* read on demand into a .* RAM cache$/);
      const prompt = m0.tokenizer.encode("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n");
      const a = m0.evalSequence(prompt, 0, 0, true), b = m1.evalSequence(prompt, 0, 0, true);
      let d = 0;
      for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
      expect(d).toBe(0);
      expect(m1.expertStats()!.misses).toBeGreaterThan(0);
    } finally {
      m1.close();
      m0.close();
    }
  });
});
