// --promote-slots auto: the arithmetic (src/engine/promote-fit.ts) - the card's room after the
// plan's weights, the context and 1 GiB, divided among the host layers' experts, capped at a layer's
// experts, off under a token's picks; the host layers' expert bytes read from an encoded program;
// the flag's value and environment twin; the server's default (auto unless the flags keep experts
// in host RAM themselves, so a --cpu-moe start stays comparable with llama-server's).
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { parseArgs, type ServerOptionKey, type ServerOptions } from "../src/cli/flags.ts";
import { fitPromoteSlots, hostExpertBytes, PromoteFitError, PROMOTE_AUTO, PROMOTE_MARGIN, type PromoteFitInput } from "../src/engine/promote-fit.ts";
import { planEngine, type AutoSlots } from "../src/server/engine-options.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { familyFor } from "../src/models/registry.ts";
import { encodeProgram, markHostExperts } from "../src/engine/program.ts";
import { MappedWeights } from "../src/engine/weights.ts";
import { BackendFactory } from "../src/engine/placement.ts";
import { CudaBackend, cudaPlanBytes } from "../src/engine/cuda-backend.ts";
import { cudaLib, cudaStatus } from "../ffi/cuda.ts";
import { FIXTURES } from "./paths.ts";

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const DEMO = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");
const SLACK = 3 * 255; // a layer's gate, up and down slots each rounded up to 256 bytes

// a Qwen3-30B-A3B-like card: 32 host layers of 128 experts, 8 a token, 3 MiB an expert
function input(over: Partial<PromoteFitInput>): PromoteFitInput {
  return {
    availableBytes: 30 * GiB, weightBytes: 20 * GiB, contextBytes: 4 * GiB, hostLayers: 32, expertBytes: 3 * MiB,
    nExpert: 128, nExpertUsed: 8, where: "NVIDIA H200", availableText: "--card-budget", ...over,
  };
}

describe("promote fit (pure)", () => {
  test("the room after the weights, the context and 1 GiB, divided among the host layers' experts", () => {
    const f = fitPromoteSlots(input({}));
    // 30 - 20 - 4 - 1 = 5 GiB: 160 MiB a layer, 53 experts of 3 MiB (and the alignment)
    expect(f.roomBytes).toBe(5 * GiB);
    expect(f.slots).toBe(53);
    expect(f.poolBytes).toBe(32 * (53 * 3 * MiB + SLACK));
    expect(f.poolBytes).toBeLessThanOrEqual(f.roomBytes);
    expect(32 * (54 * 3 * MiB + SLACK)).toBeGreaterThan(f.roomBytes);
    expect(f.line).toBe("--promote-slots auto: 53 card slots a layer for the most used experts (4.97 GiB for 32 host layers of 3.0 MiB experts) of 5.00 GiB left " +
      "(30.00 GiB --card-budget on NVIDIA H200 less weights 20.00 GiB, KV cache and buffers 4.00 GiB (two staging layers among them) and 1.00 GiB kept free); " +
      "one more a layer would need 64.0 MiB more");
  });

  test("capped at a layer's experts", () => {
    const f = fitPromoteSlots(input({ availableBytes: 40 * GiB }));
    expect(f.slots).toBe(128);
    expect(f.poolBytes).toBe(32 * (128 * 3 * MiB + SLACK));
    expect(f.line).toContain("every one of a layer's 128 experts");
  });

  test("off (0) with a line when the room holds fewer than the experts a token uses, none, or no layer is on the host", () => {
    // 500 MiB: 15.6 MiB a layer, 5 experts < 8
    const f = fitPromoteSlots(input({ availableBytes: 25 * GiB + 500 * MiB }));
    expect(f).toMatchObject({ slots: 0, poolBytes: 0, roomBytes: 500 * MiB });
    expect(f.line).toBe("--promote-slots auto: off: 500.0 MiB left (25.49 GiB --card-budget on NVIDIA H200 less weights 20.00 GiB, KV cache and buffers 4.00 GiB " +
      "(two staging layers among them) and 1.00 GiB kept free) holds 5 experts for each of 32 host layers of 3.0 MiB experts, fewer than the 8 a token uses");
    // exactly a token's picks: on
    expect(fitPromoteSlots(input({ availableBytes: 25 * GiB + 32 * (8 * 3 * MiB + SLACK) })).slots).toBe(8);
    expect(fitPromoteSlots(input({ availableBytes: 25 * GiB + 32 * (8 * 3 * MiB + SLACK) - 1 })).slots).toBe(0);
    // the weights and context past the memory: off
    const neg = fitPromoteSlots(input({ availableBytes: 20 * GiB }));
    expect(neg.slots).toBe(0);
    expect(neg.roomBytes).toBe(-5 * GiB);
    expect(neg.line).toContain("off: 0.0 MiB left");
    expect(neg.line).toContain("holds 0 experts");
    const none = fitPromoteSlots(input({ hostLayers: 0 }));
    expect(none).toMatchObject({ slots: 0, poolBytes: 0 });
    expect(none.line).toBe("--promote-slots auto: off: every routed expert is on the card");
  });

  test("the card's free memory now binds when it is less than the plan's room (another context holds some)", () => {
    const f = fitPromoteSlots(input({ freeNowBytes: 3 * GiB }));
    // min(30 - 20 - 4, 3) - 1 = 2 GiB: 64 MiB a layer, 21 experts
    expect(f.roomBytes).toBe(2 * GiB);
    expect(f.slots).toBe(21);
    expect(f.line).toContain("of 2.00 GiB left (the 3.00 GiB free on NVIDIA H200 now, less 1.00 GiB kept free)");
    // more free than the budget leaves: the budget
    expect(fitPromoteSlots(input({ freeNowBytes: 100 * GiB })).slots).toBe(53);
    // a margin of its own
    expect(fitPromoteSlots(input({ marginBytes: 0 })).roomBytes).toBe(6 * GiB);
    expect(PROMOTE_MARGIN).toBe(GiB);
  });

  test("bad numbers are a PromoteFitError naming the field", () => {
    expect(() => fitPromoteSlots(input({ availableBytes: Number.NaN }))).toThrow(/availableBytes/);
    expect(() => fitPromoteSlots(input({ weightBytes: -1 }))).toThrow(PromoteFitError);
    expect(() => fitPromoteSlots(input({ hostLayers: 1.5 }))).toThrow(/hostLayers/);
    expect(() => fitPromoteSlots(input({ expertBytes: 0 }))).toThrow(/expertBytes/);
    expect(() => fitPromoteSlots(input({ nExpertUsed: 200 }))).toThrow(/uses 200 experts of 128/);
  });
});

describe("the host layers' expert bytes from an encoded program", () => {
  test("the marked EXPERTS ops, and one expert's gate + up + down (a slab of each 3-D tensor)", () => {
    const f = GgufFile.open(DEMO);
    const fam = familyFor(f);
    const hp = fam.hparams(f);
    const w = new MappedWeights(f, false);
    try {
      const specs = fam.program(f, hp);
      const prog = encodeProgram(specs, (n) => w.tensor(n), hp.nEmbd, hp.nVocab);
      expect(hostExpertBytes(prog)).toEqual({ hostLayers: 0, expertBytes: 0 });
      expect(markHostExperts(prog, (n) => /^blk\.[01]\.ffn_.*_exps/.test(n))).toBe(2);
      const one = ["gate", "up", "down"].reduce((s, r) => s + f.tensor(`blk.0.ffn_${r}_exps.weight`)!.nbytes / hp.nExpert, 0);
      expect(hostExpertBytes(prog)).toEqual({ hostLayers: 2, expertBytes: one });
      expect(one).toBeGreaterThan(0);
    } finally {
      w.close();
    }
  });
});

function opts(argv: string[], env: Record<string, string> = {}) {
  const r = parseArgs(["-m", "x.gguf", "-np", "1", ...argv], env);
  if (r.action !== "serve") throw new Error(`expected serve, got ${r.action}`);
  return r;
}

function promoteOf(argv: string[], env: Record<string, string> = {}): number | undefined {
  const r = opts(argv, env);
  const auto: AutoSlots = () => ({ nSlots: 1, line: "one" });
  return planEngine(r.options as ServerOptions, r.explicit as ReadonlySet<ServerOptionKey>, 32768, auto).engine.promoteSlots;
}

describe("--promote-slots auto", () => {
  test("the flag takes auto (and its environment twin); a negative count is still refused", () => {
    expect(opts(["--promote-slots", "auto"]).options.promoteSlots).toBe(PROMOTE_AUTO);
    expect(opts(["--promote-slots=AUTO"]).options.promoteSlots).toBe(PROMOTE_AUTO);
    expect(opts([], { BLOOMERY_PROMOTE_SLOTS: "auto" }).options.promoteSlots).toBe(PROMOTE_AUTO);
    expect(opts(["--promote-slots", "12"]).options.promoteSlots).toBe(12);
    expect(() => opts(["--promote-slots", "-1"])).toThrow(/--promote-slots/);
    expect(() => opts(["--promote-slots", "many"])).toThrow(/auto/);
  });

  test("the server's default: auto on a card (the plan's own host layers get slots), 0 when the flags keep experts in host RAM", () => {
    expect(promoteOf([])).toBe(PROMOTE_AUTO);
    expect(promoteOf(["-ngl", "99"])).toBe(PROMOTE_AUTO);
    expect(promoteOf(["--card-budget", "4096"])).toBe(PROMOTE_AUTO);
    for (const f of [["--cpu-moe"], ["--n-cpu-moe", "8"], ["-ot", "exps=CPU"]]) expect(promoteOf(["-ngl", "99", ...f])).toBe(0);
    // an -ot that keeps experts on the card is not a host placement
    expect(promoteOf(["-ot", "exps=CUDA0"])).toBe(PROMOTE_AUTO);
    // the CPU: nothing to promote
    expect(promoteOf(["-ngl", "0"])).toBe(0);
    // given (or from the environment): as given, with any placement
    expect(promoteOf(["--cpu-moe", "--promote-slots", "auto"])).toBe(PROMOTE_AUTO);
    expect(promoteOf(["--cpu-moe", "--promote-slots", "43"])).toBe(43);
    expect(promoteOf(["--promote-slots", "0"])).toBe(0);
    expect(promoteOf(["--cpu-moe"], { BLOOMERY_PROMOTE_SLOTS: "auto" })).toBe(PROMOTE_AUTO);
    expect(promoteOf([], { BLOOMERY_PROMOTE_SLOTS: "0" })).toBe(0);
  });
});

describe("--promote-slots auto on a card (the backend factory)", () => {
  test("every expert of a layer with room to spare; a --card-budget for 3 slots gives 3; for 1 (under a token's 2) it is off", () => {
    const st = cudaStatus();
    if (!st.ok) {
      console.log(`skip: no usable CUDA device (${st.reason}); --promote-slots auto on the card runs on the GPU machine`);
      return;
    }
    const f = GgufFile.open(DEMO);
    const fam = familyFor(f);
    const hp = fam.hparams(f);
    const w = new MappedWeights(f, false);
    const specs = fam.program(f, hp);
    const prog = encodeProgram(specs, (n) => w.tensor(n), hp.nEmbd, hp.nVocab);
    expect(markHostExperts(prog, (n) => /_exps\./.test(n))).toBe(hp.nLayer);
    const fac = new BackendFactory(hp, prog);
    const cpu = { nSlots: 1, nCtxSlot: 512, maxTokens: 64, nThreads: 2 };
    const lines: string[] = [];
    const log = (l: string) => lines.push(l);
    const slotsWith = (cardBudgetBytes?: number): number => {
      const be = fac.create(cpu, { nGpuLayers: "all", promoteSlots: PROMOTE_AUTO, cardBudgetBytes, log });
      try {
        expect(be).toBeInstanceOf(CudaBackend);
        return (be as CudaBackend).hostStats()!.promoteSlots;
      } finally {
        be.close();
      }
    };
    try {
      expect(slotsWith()).toBe(hp.nExpert);
      expect(lines.find((l) => l.startsWith("placement: --promote-slots auto:"))).toContain(`every one of a layer's ${hp.nExpert} experts`);
      const need = cudaPlanBytes(hp, prog, cpu);
      const { expertBytes, hostLayers } = hostExpertBytes(prog);
      expect(hostLayers).toBe(hp.nLayer);
      const budget = (n: number) => need.weights + need.context + PROMOTE_MARGIN + hostLayers * (n * expertBytes + SLACK);
      expect(slotsWith(budget(3))).toBe(3);
      expect(lines.join("\n")).toContain("--promote-slots auto: 3 card slots a layer for the most used experts");
      expect(slotsWith(budget(1))).toBe(0);
      expect(lines.join("\n")).toContain(`holds 1 expert for each of ${hostLayers} host layers`);
      expect(lines.join("\n")).toContain(`fewer than the ${hp.nExpertUsed} a token uses`);
      console.log(lines.filter((l) => l.includes("--promote-slots")).join("\n"));
    } finally {
      fac.close();
      w.close();
    }
  });
});

describe("the host experts' staging on the card (cudaPlanBytes: the CUDA library, no device)", () => {
  test.skipIf(cudaLib() === null)("lead staging slots follow the options, a layer's host experts each, at most the host layers but one", () => {
    const f = GgufFile.open(DEMO);
    const fam = familyFor(f);
    const hp = fam.hparams(f);
    const w = new MappedWeights(f, false);
    try {
      const prog = encodeProgram(fam.program(f, hp), (n) => w.tensor(n), hp.nEmbd, hp.nVocab);
      expect(markHostExperts(prog, (n) => /_exps\./.test(n))).toBe(hp.nLayer);
      const ctx = { nSlots: 1, nCtxSlot: 256, maxTokens: 64 };
      const at = (lead: number) => cudaPlanBytes(hp, prog, ctx, { hybrid_lead: lead });
      const n0 = at(0), n1 = at(1), n2 = at(2), n5 = at(5);
      const { expertBytes, hostLayers } = hostExpertBytes(prog);
      const layer = n1.context - n0.context;
      expect(layer).toBeGreaterThanOrEqual(hp.nExpert * expertBytes);
      expect(layer).toBeLessThanOrEqual(hp.nExpert * expertBytes + SLACK);
      expect(n2.context - n1.context).toBe(layer);
      expect(n5.context - n0.context).toBe(Math.min(5, hostLayers - 1) * layer);
      expect(n5.weights).toBe(n0.weights);
    } finally {
      w.close();
    }
  });
});
