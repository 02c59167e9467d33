// The layer split across several cards (src/engine/plan-split.ts), planned on the CPU with faked
// cards: llama's split points and layer owners (-ts, else free memory), each card's sums against its
// free memory, the host's experts, -ot CUDAn, -sm none / row, and refusals naming every card short.
import { describe, expect, test } from "bun:test";
import type { HParams } from "../src/models/types.ts";
import { kvBytesPerPos } from "../src/models/types.ts";
import { CARD_MARGIN, cardContextBytes, type PlanTensor } from "../src/engine/plan.ts";
import { layerCards, planLayerSplit, splitPoints, type SplitCard } from "../src/engine/plan-split.ts";

const MiB = 1024 ** 2, GiB = 1024 ** 3;
const hp: HParams = {
  arch: "qwen3moe", nVocab: 1000, nEmbd: 256, nLayer: 8, nCtxTrain: 4096, nHead: 4, nHeadKv: 2, headDim: 64,
  nFf: 128, nExpert: 8, nExpertUsed: 2, eps: 1e-6, kvLayers: 8,
};
const EXP = 30 * MiB;
function tensors(): PlanTensor[] {
  const t: PlanTensor[] = [{ name: "token_embd.weight", bytes: 2 * MiB }, { name: "output_norm.weight", bytes: 1024 }, { name: "output.weight", bytes: 3 * MiB }];
  for (let l = 0; l < hp.nLayer; l++) {
    for (const n of ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_inp"]) t.push({ name: `blk.${l}.${n}.weight`, bytes: MiB });
    for (const n of ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]) t.push({ name: `blk.${l}.${n}.weight`, bytes: EXP });
  }
  return t;
}
const ctx = { nSlots: 2, nCtxSlot: 1024, maxTokens: 64 };
const cards = (...free: number[]): SplitCard[] => free.map((f, i) => ({ index: i, name: `GPU ${i}`, freeBytes: f }));

describe("the layer split across cards", () => {
  test("llama's split points and owners: -ts proportions, free memory when none, the output layer last", () => {
    expect(splitPoints(cards(10, 30))).toEqual([0.25, 1]);
    expect(splitPoints(cards(10, 30), [1, 1])).toEqual([0.5, 1]);
    expect(splitPoints(cards(10, 30), [0, 0])).toEqual([0.25, 1]);
    expect(splitPoints(cards(1, 1, 1), [3])).toEqual([1, 1, 1]);
    expect(() => splitPoints(cards(1, 1), [1, 1, 1])).toThrow(/3 proportions for 2 card/);
    expect(() => splitPoints(cards(1, 1), [-1, 2])).toThrow(/zero or more/);
    // 8 layers and the output (9): -ts 1,1 gives layers 0-4 to the first (il/9 < 0.5), 5-7 and the output to the second
    expect(layerCards(8, [0.5, 1])).toEqual([0, 0, 0, 0, 0, 1, 1, 1, 1]);
    expect(layerCards(8, [1 / 3, 2 / 3, 1])).toEqual([0, 0, 0, 1, 1, 1, 2, 2, 2]);
    expect(layerCards(8, [1, 1])).toEqual(new Array(9).fill(0));
  });

  test("-ts 1,1: each card's dense weights, experts, its layers' share of the KV cache and its own buffers; one line a card", () => {
    const p = planLayerSplit(hp, tensors(), cards(80 * GiB, 80 * GiB), { tensorSplit: [1, 1] }, ctx);
    const [a, b] = p.cards;
    expect(a.layers).toEqual([0, 1, 2, 3, 4]);
    expect(b.layers).toEqual([5, 6, 7]);
    expect(a.dense).toBe(2 * MiB + 5 * 5 * MiB);
    expect(b.dense).toBe(3 * MiB + 1024 + 3 * 5 * MiB);
    expect(a.experts).toBe(5 * 3 * EXP);
    expect(a.nExperts).toBe(5 * hp.nExpert);
    expect(b.nExperts).toBe(3 * hp.nExpert);
    const kv = ctx.nSlots * ctx.nCtxSlot * kvBytesPerPos(hp), buffers = cardContextBytes(hp, ctx) - kv;
    expect(a.context).toBe(Math.round((kv * 5) / 8) + buffers);
    expect(b.context).toBe(Math.round((kv * 3) / 8) + buffers);
    expect(p.refusal).toBeUndefined();
    expect(p.lines).toHaveLength(2);
    expect(p.lines[0]).toMatch(/^placement: CUDA0 GPU 0: layers 0-4: dense 0\.03 GiB \+ 40 experts 0\.44 GiB \+ KV and buffers .* = .* of 80\.00 GiB free$/);
    expect(p.lines[1]).toMatch(/^placement: CUDA1 GPU 1: layers 5-7 and the output: /);
  });

  test("host experts, -ot CUDAn and CPU, -sm none and -mg, -sm row refused", () => {
    const h = planLayerSplit(hp, tensors(), cards(80 * GiB, 80 * GiB), { tensorSplit: [1, 1], nCpuMoe: 2 }, ctx);
    expect(h.host).toEqual({ experts: 2 * 3 * EXP, nExperts: 16 });
    expect(h.cards[0].nExperts).toBe(24);
    expect(h.lines.at(-1)).toBe("placement: host: 16 experts 0.18 GiB");
    const ot = planLayerSplit(hp, tensors(), cards(80 * GiB, 80 * GiB), { tensorSplit: [1, 1], overrides: [{ pattern: "blk\\.0\\.ffn_.*_exps", buffer: "CUDA1" }, { pattern: "blk\\.1\\.ffn_.*_exps", buffer: "CPU" }] }, ctx);
    expect(ot.cards[1].nExperts).toBe(4 * hp.nExpert);
    expect(ot.cards[0].nExperts).toBe(3 * hp.nExpert);
    expect(ot.host.nExperts).toBe(8);
    expect(() => planLayerSplit(hp, tensors(), cards(1, 1), { overrides: [{ pattern: "x", buffer: "CUDA2" }] }, ctx)).toThrow(/unknown buffer type 'CUDA2'; the listed devices are CPU, CUDA0, CUDA1/);
    expect(() => planLayerSplit(hp, tensors(), cards(1, 1), { overrides: [{ pattern: "blk\\.0\\.attn_q", buffer: "CPU" }] }, ctx)).toThrow(/dense tensor blk\.0\.attn_q\.weight in host memory/);
    const none = planLayerSplit(hp, tensors(), cards(80 * GiB, 80 * GiB), { splitMode: "none", mainGpu: 1 }, ctx);
    expect(none.cards).toHaveLength(1);
    expect(none.cards[0].card.index).toBe(1);
    expect(none.cards[0].layers).toHaveLength(8);
    expect(() => planLayerSplit(hp, tensors(), cards(1, 1), { splitMode: "none", mainGpu: 2 }, ctx)).toThrow(/-mg 2: 2 card\(s\) are listed/);
    expect(() => planLayerSplit(hp, tensors(), cards(1, 1), { splitMode: "row" }, ctx)).toThrow(/-sm row: .* not built/);
  });

  test("a card that does not fit is refused naming its every term; the other card is not named", () => {
    const one = planLayerSplit(hp, tensors(), cards(80 * GiB, 80 * GiB), { tensorSplit: [1, 1] }, ctx).cards[0];
    const free = one.total + CARD_MARGIN - 1;
    const p = planLayerSplit(hp, tensors(), cards(free, 80 * GiB), { tensorSplit: [1, 1] }, ctx);
    expect(p.cards[0].fits).toBe(false);
    expect(p.cards[1].fits).toBe(true);
    expect(p.refusal).toMatch(/^the split does not fit CUDA0 \(GPU 0\): dense weights 0\.03 GiB \+ routed experts 0\.44 GiB \+ KV cache and buffers .* \(2 slot\(s\) of 1024 positions\) = .* > the .* free less 0\.50 GiB kept free: move layers off it with -ts/);
    expect(p.refusal).not.toMatch(/CUDA1/);
    // the same free memory fits with one layer fewer there
    expect(planLayerSplit(hp, tensors(), cards(free, 80 * GiB), { tensorSplit: [4, 5] }, ctx).refusal).toBeUndefined();
  });
});

describe("the start plan with -dev listing several cards (faked through the machine description)", () => {
  const { planStart } = require("../src/cli/agent-plan.ts") as typeof import("../src/cli/agent-plan.ts");
  const { parseArgs } = require("../src/cli/flags.ts") as typeof import("../src/cli/flags.ts");
  const { geometryFromGguf } = require("../src/cli/agent-sizes.ts") as typeof import("../src/cli/agent-sizes.ts");
  const { GgufFile } = require("../src/gguf/index.ts") as typeof import("../src/gguf/index.ts");
  const { join } = require("node:path") as typeof import("node:path");
  const DEMO = join(import.meta.dir, "..", "assets", "demo", "bloomery-demo-q8_0.gguf");
  const machine = (free: number[]) => ({
    os: "linux", arch: "x64", cuda: { usable: true, reason: "", devices: free.length, driver_version: 13000 },
    cards: free.map((f, i) => ({ index: i, name: `GPU ${i}`, compute_capability: "9.0", sm_count: 132, total_bytes: f, free_bytes: f, supported: true })),
    ram: { total_bytes: 64 * GiB, available_bytes: 64 * GiB, cgroup_limit_bytes: null, cgroup_available_bytes: null, usable_bytes: 64 * GiB },
    cpu: { model: "test", cores: 4, logical_cpus: 4, avx2: true, avx512: false, kernel_path: "avx2" },
  });
  const plan = (args: string[], free: number[]) => {
    const argv = ["-m", DEMO, "-c", "1024", "-np", "1", ...args];
    const p = parseArgs(argv, {});
    if (p.action !== "serve") throw new Error("not a start");
    return planStart({ o: p.options, explicit: p.explicit, argv, source: { kind: "file", path: DEMO, byName: false }, machine: machine(free), dryRun: true, geometry: geometryFromGguf(GgufFile.open(DEMO)), path: DEMO });
  };

  test("-dev CUDA0,CUDA1 -ts 1,3: the split per card in the event and its notes, planned not built; one card listed: none", () => {
    const r = plan(["-dev", "CUDA0,CUDA1", "-ts", "1,3"], [80 * GiB, 80 * GiB]);
    const sp = r.event.split!;
    expect(sp.built).toBe(false);
    expect(sp.fits).toBe(true);
    expect(sp.cards.map((c) => c.device)).toEqual([0, 1]);
    const n = r.event.model.n_layer!;
    expect(sp.cards[0].layers.length + sp.cards[1].layers.length).toBe(n);
    expect(sp.cards[0].layers.length).toBe(Math.ceil((n + 1) / 4)); // il / (n + 1) < 0.25
    expect(r.event.notes.filter((l) => /^placement: CUDA[01] GPU [01]: layers /.test(l))).toHaveLength(2);
    expect(r.event.notes.some((l) => /the layer split across CUDA0, CUDA1 is planned, not built yet: this start runs on /.test(l))).toBe(true);
    expect(plan(["-dev", "CUDA1"], [80 * GiB, 80 * GiB]).event.split).toBeUndefined();
    expect(plan([], [80 * GiB, 80 * GiB]).event.split).toBeUndefined();
  });

  test("a card too small for its share is said as the split's refusal; -sm row refused by the flags; -sm none the main card", () => {
    const r = plan(["-dev", "CUDA0,CUDA1"], [80 * GiB, 1024 ** 2]);
    expect(r.event.split!.fits).toBe(false);
    expect(r.event.split!.refusal).toMatch(/the split does not fit CUDA1 \(GPU 1\)/);
    // -sm row is refused by the flags already (recognised, not available)
    expect(() => plan(["-dev", "CUDA0,CUDA1", "-sm", "row"], [80 * GiB, 80 * GiB])).toThrow(/-sm row is recognised but not available/);
    // -sm none: the main card alone (-mg among the listed), no split across them
    const none = plan(["-dev", "CUDA0,CUDA1", "-sm", "none", "-mg", "1"], [80 * GiB, 80 * GiB]);
    expect(none.event.split!.cards.map((c) => c.device)).toEqual([1]);
  });
});
