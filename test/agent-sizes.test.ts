// What a model needs and where it fits: host memory from /proc and the cgroup (v2 and v1, read
// from stand-in trees), KV bytes against the CPU backend's own, context fitting, the recommendation
// for machines with and without cards (cards here are machine descriptions fed to the pure
// functions; the card probe itself runs on the GPU machine), and the start plan's fit and refusal.
import { describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { parseArgs, type ServerOptions } from "../src/cli/flags.ts";
import { parseMeminfo, readCgroupMemory, readRam, type Machine } from "../src/cli/agent-machine.ts";
import {
  cardNeed, contextLadder, cudaWorkBytes, fitContext, geometryFromGguf, geometryFromKnown, hostNeed, kvBytes, needAt,
  CARD_MARGIN, HOST_MARGIN, type Geometry,
} from "../src/cli/agent-sizes.ts";
import { placementLabel, placementsOf, recommend, type ModelQuants } from "../src/cli/agent-recommend.ts";
import { cardSplit } from "../src/cli/agent-card-share.ts";
import { machineFor } from "../src/cli/agent-resolve.ts";
import { planStart } from "../src/cli/agent-plan.ts";
import { findKnownModel, KNOWN_MODELS, DEMO_NAME } from "../src/cli/known-models.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { Model } from "../src/engine/model.ts";
import type { CpuBackend } from "../src/engine/cpu-backend.ts";
import { cudaStatus } from "../ffi/cuda.ts";
import { synth } from "../src/cli/synth.ts";
import { FIXTURES } from "./paths.ts";

const GiB = 1024 ** 3;
const DEMO = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");

function tree(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), "bloomery-root-"));
  for (const [p, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, p)), { recursive: true });
    writeFileSync(join(root, p), text);
  }
  return root;
}

const MEMINFO = "MemTotal:       32000000 kB\nMemFree:        10000000 kB\nMemAvailable:   20000000 kB\nBuffers:          100 kB\n";

function machine(cards: { name: string; free: number; total?: number; supported?: boolean }[], ram: number, cores = 16): Machine {
  return {
    os: "linux", arch: "x64",
    cuda: { usable: cards.length > 0, reason: cards.length ? "" : "no NVIDIA driver", devices: cards.length, driver_version: cards.length ? 12080 : 0 },
    cards: cards.map((c, i) => ({ index: i, name: c.name, compute_capability: "9.0", sm_count: 132, total_bytes: c.total ?? c.free, free_bytes: c.free, supported: c.supported ?? true })),
    ram: { total_bytes: ram, available_bytes: ram, cgroup_limit_bytes: null, cgroup_available_bytes: null, usable_bytes: ram },
    cpu: { model: "test", cores, logical_cpus: cores, avx2: true, avx512: true, kernel_path: "avx512" },
  };
}

function knownQuants(name: string): ModelQuants {
  const model = findKnownModel(name)!.model;
  return { model, quants: model.quants.map((quant) => ({ quant, geometry: geometryFromKnown(model, quant)! })) };
}

const FIT = { nParallel: -1, maxTokens: 512, nThreads: 16 };

describe("host memory", () => {
  test("/proc/meminfo in bytes", () => {
    const m = parseMeminfo(MEMINFO);
    expect(m.get("MemTotal")).toBe(32000000 * 1024);
    expect(m.get("MemAvailable")).toBe(20000000 * 1024);
  });

  test("cgroup v2: the process's own cgroup limit less what it uses (inactive file pages not counted)", () => {
    const root = tree({
      "proc/meminfo": MEMINFO,
      "proc/self/cgroup": "0::/user.slice/agent\n",
      "sys/fs/cgroup/user.slice/agent/memory.max": `${8 * GiB}\n`,
      "sys/fs/cgroup/user.slice/agent/memory.current": `${3 * GiB}\n`,
      "sys/fs/cgroup/user.slice/agent/memory.stat": `anon 100\ninactive_file ${GiB}\nactive_file 5\n`,
    });
    expect(readCgroupMemory(root)).toEqual({ limit: 8 * GiB, used: 2 * GiB });
    const r = readRam(root);
    expect(r.cgroup_limit_bytes).toBe(8 * GiB);
    expect(r.cgroup_available_bytes).toBe(6 * GiB);
    expect(r.usable_bytes).toBe(6 * GiB); // below MemAvailable
    expect(r.total_bytes).toBe(32000000 * 1024);
  });

  test("cgroup v2 'max' and v1's huge number mean no limit; a v1 limit counts", () => {
    const v2max = tree({ "proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "max\n" });
    expect(readCgroupMemory(v2max)).toBeNull();
    expect(readRam(v2max).usable_bytes).toBe(20000000 * 1024);
    const v1none = tree({ "proc/meminfo": MEMINFO, "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n" });
    expect(readCgroupMemory(v1none)).toBeNull();
    const v1 = tree({
      "proc/meminfo": MEMINFO,
      "sys/fs/cgroup/memory/memory.limit_in_bytes": `${40 * GiB}\n`,
      "sys/fs/cgroup/memory/memory.usage_in_bytes": `${5 * GiB}\n`,
      "sys/fs/cgroup/memory/memory.stat": `cache 1\ntotal_inactive_file ${GiB}\n`,
    });
    expect(readCgroupMemory(v1)).toEqual({ limit: 40 * GiB, used: 4 * GiB });
    expect(readRam(v1).usable_bytes).toBe(20000000 * 1024); // MemAvailable is the smaller
  });

  test("this machine: positive totals, usable no more than available", () => {
    const r = readRam();
    expect(r.total_bytes).toBeGreaterThan(0);
    expect(r.usable_bytes).toBeGreaterThan(0);
    expect(r.usable_bytes).toBeLessThanOrEqual(r.available_bytes);
  });
});

describe("sizes", () => {
  test("the KV cache is the CPU backend's bytes per position times positions and slots", () => {
    const m = Model.load(DEMO, { nSlots: 3, nCtx: 256, nThreads: 1, nGpuLayers: 0 });
    const posBytes = (m.backend as CpuBackend).kvPosBytes();
    expect(kvBytes(m.hp, 3, 256)).toBe(posBytes * 3 * 256);
    const g = geometryFromGguf(GgufFile.open(DEMO));
    expect(hostNeed(g, { nSlots: 3, nCtxSlot: 256, maxTokens: 512, nThreads: 1 }).kv).toBe(posBytes * 3 * 256);
  });

  test("a file's geometry: every tensor's bytes; the card's arena rounds each to 256", () => {
    const f = GgufFile.open(DEMO);
    const g = geometryFromGguf(f);
    const sum = [...f.tensors.values()].reduce((s, t) => s + t.nbytes, 0);
    expect(g.weightBytes).toBe(sum);
    expect(g.cardWeightBytes).toBeGreaterThanOrEqual(sum);
    expect(g.cardWeightBytes % 256).toBe(0);
    expect(g.expertBytes).toBe([...f.tensors.values()].filter((t) => t.name.includes("_exps")).reduce((s, t) => s + t.nbytes, 0));
  });

  test("on a card the estimate matches the CUDA library's own sizes", async () => {
    if (!cudaStatus().ok) {
      console.log(`skip: no usable CUDA device (${cudaStatus().reason}); the estimate is checked against cudaPlanBytes on the GPU machine`);
      return;
    }
    const wide = join(mkdtempSync(join(tmpdir(), "bloomery-wide-")), "wide-q4_k_m.gguf");
    await synth({ model: "test-moe-wide", quant: "Q4_K_M", out: wide });
    for (const path of [DEMO, wide]) {
      const g = geometryFromGguf(GgufFile.open(path));
      const s = { nSlots: 2, nCtxSlot: 1024, maxTokens: 512, nThreads: 4 };
      const exact = cardNeed(g, s, true);
      const est = cardNeed(g, s, false);
      expect(exact.exact).toBe(true);
      expect(est.weights).toBe(exact.weights);
      expect(est.kv).toBe(exact.kv);
      expect(Math.abs(est.work - exact.work)).toBeLessThan(exact.work * 0.05 + 1024 * 1024);
    }
  });

  test("the context ladder never passes the training context", () => {
    expect(contextLadder(262144)).toEqual([262144, 131072, 65536, 32768, 16384, 8192, 4096]);
    expect(contextLadder(40960)).toEqual([40960, 32768, 16384, 8192, 4096]);
    expect(contextLadder(2048)).toEqual([2048]);
  });

  test("fitContext: the largest context that fits, the next one up does not; none when even the smallest does not", () => {
    const g = knownQuants("Qwen3-30B-A3B-Instruct-2507").quants.find((q) => q.quant.name === "Q4_K_M")!.geometry;
    for (const avail of [22 * GiB, 40 * GiB, 300 * GiB]) {
      const f = fitContext(g, "host", avail, { ...FIT, exact: false })!;
      expect(f.need.total + HOST_MARGIN).toBeLessThanOrEqual(avail);
      const up = contextLadder(262144).filter((c) => c > f.nCtx).pop();
      if (up) expect(needAt(g, "host", up, { ...FIT, exact: false }).need.total + HOST_MARGIN).toBeGreaterThan(avail);
    }
    expect(fitContext(g, "host", 300 * GiB, { ...FIT, exact: false })!.nCtx).toBe(262144);
    expect(fitContext(g, "host", 17 * GiB, { ...FIT, exact: false })).toBeUndefined();
    // a card keeps less free than the host, and its estimate has the work buffers of cuda/runtime/ctx.cu
    const card = needAt(g, "card", 8192, { ...FIT, exact: false }).need;
    expect(card.work).toBe(cudaWorkBytes(g.hp, 512));
    expect(CARD_MARGIN).toBeLessThan(HOST_MARGIN);
  });
});

describe("recommend", () => {
  const all = () => KNOWN_MODELS.filter((m) => m.name !== DEMO_NAME).map((m) => knownQuants(m.name));
  const byName = (r: ReturnType<typeof recommend>, n: string) => r.models.find((m) => m.name === n)!;

  test("an H200: every model on the card, Q4_K_M; the 235B with the context that fits beside its weights", () => {
    const r = recommend(machine([{ name: "NVIDIA H200", free: 139 * GiB, total: 140 * GiB }], 200 * GiB), all(), FIT);
    const big = byName(r, "Qwen3-235B-A22B-Instruct-2507");
    expect(big.recommended).toMatchObject({ quant: "Q4_K_M", placement: "cuda:0", device_name: "NVIDIA H200" });
    const rec = big.recommended!;
    expect(rec.need_bytes + CARD_MARGIN).toBeLessThanOrEqual(139 * GiB);
    expect(rec.n_ctx).toBeLessThan(262144);
    expect(rec.n_ctx).toBeGreaterThanOrEqual(4096);
    expect(rec.command).toBe(`bloomery-serve -hf unsloth/Qwen3-235B-A22B-Instruct-2507-GGUF:Q4_K_M -ngl all -c ${rec.n_ctx}`);
    const small = byName(r, "Qwen3-30B-A3B-Instruct-2507").recommended!;
    // -np auto: each slot the whole -c, as many slots as fit beside the weights (5 of 24 GiB each)
    expect(small).toMatchObject({ quant: "Q4_K_M", placement: "cuda:0", n_ctx: 262144, n_slots: 5 });
    expect(small.command).toBe("bloomery-serve -hf unsloth/Qwen3-30B-A3B-Instruct-2507-GGUF:Q4_K_M -ngl all -c 262144");
    expect(r.models.every((m) => m.fits)).toBe(true);
    expect(r.not_implemented.dense_tensors_on_host).toContain("routed experts in host RAM beside a card are (--cpu-moe, --n-cpu-moe N");
  });

  test("a 24 GB card and 64 GB of RAM: the 30B on the card; the 235B fits nowhere", () => {
    const r = recommend(machine([{ name: "RTX 4090", free: 23 * GiB, total: 24 * GiB }], 64 * GiB), all(), FIT);
    expect(byName(r, "Qwen3-Coder-30B-A3B-Instruct").recommended).toMatchObject({ quant: "Q4_K_M", placement: "cuda:0" });
    const big = byName(r, "Qwen3-235B-A22B-Instruct-2507");
    expect(big.fits).toBe(false);
    expect(big.recommended).toBeNull();
    expect(big.why).toContain("does not fit");
    expect(big.fits_with_experts_in_ram).toBe(false); // its experts need more than 64 GB
    for (const q of big.quants) for (const p of q.placements) expect(p.fits).toBe(false);
  });

  test("with 256 GB of RAM the 235B runs on the card with its experts in host RAM (it was proposed on the CPU)", () => {
    const r = recommend(machine([{ name: "RTX 4090", free: 23 * GiB }], 256 * GiB), all(), FIT);
    const big = byName(r, "Qwen3-235B-A22B-Instruct-2507");
    const rec = big.recommended!;
    expect(rec).toMatchObject({ quant: "Q4_K_M", placement: "cuda:0+host", device_name: "RTX 4090" });
    expect(rec.host_expert_layers).toBeGreaterThan(0);
    const flag = rec.host_expert_layers >= 94 ? "--cpu-moe" : `--n-cpu-moe ${rec.host_expert_layers}`;
    expect(rec.command).toBe(`bloomery-serve -hf unsloth/Qwen3-235B-A22B-Instruct-2507-GGUF:Q4_K_M -ngl all ${flag} -c ${rec.n_ctx}`);
    expect(rec.need_bytes + CARD_MARGIN).toBeLessThanOrEqual(23 * GiB);
    expect(rec.host_bytes + HOST_MARGIN).toBeLessThanOrEqual(256 * GiB);
    expect(big.why).toContain("in host RAM");
    expect(big.why).toContain("it does not fit all on RTX 4090");
    expect(big.fits_with_experts_in_ram).toBe(true);
  });

  test("a hybrid start takes the fewest host layers that leave a 32k context: one layer fewer does not", () => {
    // the 30B's Q4_K_M (17 GiB) beside a 16 GiB card: some layers' experts in RAM
    const m = machine([{ name: "16 GiB card", free: 15.5 * GiB }], 64 * GiB);
    const mq = knownQuants("Qwen3-30B-A3B-Instruct-2507");
    mq.quants = mq.quants.filter((q) => q.quant.name === "Q4_K_M");
    const r = recommend(m, [mq], FIT).models[0];
    const rec = r.recommended!;
    expect(rec.placement).toBe("cuda:0+host");
    expect(rec.n_ctx).toBeGreaterThanOrEqual(32768);
    const n = rec.host_expert_layers;
    expect(n).toBeGreaterThan(0);
    expect(n).toBeLessThan(48);
    expect(rec.command).toContain(`-ngl all --n-cpu-moe ${n} -c ${rec.n_ctx}`);
    // the start it proposes is the one the plan at load makes: the card's share with --n-cpu-moe n fits, with n - 1 it does not reach 32k
    const g = mq.quants[0].geometry;
    const pm = { card: { name: "16 GiB card", freeBytes: 15.5 * GiB }, hostAvailableBytes: 64 * GiB };
    const fewer = fitContext(g, "card", 15.5 * GiB, { ...FIT, exact: false, split: cardSplit(g, { nCpuMoe: n - 1 }, pm) });
    expect(fewer === undefined || fewer.nCtx < 32768).toBe(true);
    expect(fitContext(g, "card", 15.5 * GiB, { ...FIT, exact: false, split: cardSplit(g, { nCpuMoe: n }, pm) })!.nCtx).toBe(rec.n_ctx);
  });

  test("a card too small for Q4_K_M takes IQ4_XS (the card beats the CPU)", () => {
    const r = recommend(machine([{ name: "16.5 GiB card", free: 16.5 * GiB }], 64 * GiB), [knownQuants("Qwen3-30B-A3B")], FIT);
    const rec = r.models[0].recommended!;
    expect(rec).toMatchObject({ quant: "IQ4_XS", placement: "cuda:0" });
    const q4 = r.models[0].quants.find((q) => q.quant === "Q4_K_M")!;
    expect(q4.placements.map((p) => [p.placement, p.fits])).toEqual([["cuda:0", false], ["cuda:0+host", true], ["cpu", true]]);
    expect(q4.decode_bytes_per_token).toBeGreaterThan(r.models[0].quants.find((q) => q.quant === "IQ4_XS")!.decode_bytes_per_token);
  });

  test("the card with the most free memory first; a card without code in this build is skipped", () => {
    const two = machine([{ name: "A", free: 10 * GiB }, { name: "B", free: 30 * GiB }], 8 * GiB);
    expect(placementsOf(two).map((p) => p.name)).toEqual(["B", "A", "B", "A", "CPU"]);
    expect(placementsOf(two).map(placementLabel)).toEqual(["cuda:1", "cuda:0", "cuda:1+host", "cuda:0+host", "cpu"]);
    const rec = recommend(two, [knownQuants("Qwen3-30B-A3B")], FIT).models[0].recommended!;
    expect(rec.placement).toBe("cuda:1");
    expect(rec.command).toContain("-ngl all -dev CUDA1");
    const old = machine([{ name: "Old", free: 80 * GiB, supported: false }], 8 * GiB);
    expect(placementsOf(old).map((p) => p.kind)).toEqual(["cpu"]);
    expect(recommend(old, [knownQuants("Qwen3-30B-A3B")], FIT).models[0].fits).toBe(false);
  });

  test("-ngl 0 and -dev none leave only the CPU", () => {
    const m = machine([{ name: "H200", free: 139 * GiB }], 64 * GiB);
    const o = (argv: string[]) => (parseArgs(argv, {}) as { options: ServerOptions }).options;
    expect(placementsOf(machineFor(o(["-ngl", "0"]), m)).map((p) => p.kind)).toEqual(["cpu"]);
    expect(placementsOf(machineFor(o(["-dev", "none"]), m)).map((p) => p.kind)).toEqual(["cpu"]);
    expect(placementsOf(machineFor(o([]), m)).map((p) => p.kind)).toEqual(["cuda", "cuda", "cpu"]);
  });
});

describe("the start plan", () => {
  const demo = (): Geometry => geometryFromGguf(GgufFile.open(DEMO));
  // CPU only (-ngl 0), so the machine described and the real chooseBackend agree on a GPU machine too
  const plan = (args: string[], ram: number) => {
    const argv = [...args, "-ngl", "0"];
    const p = parseArgs(argv, {});
    if (p.action !== "serve") throw new Error("not a start");
    return planStart({ o: p.options, explicit: p.explicit, argv, source: { kind: "file", path: DEMO, byName: false }, machine: machine([], ram), dryRun: true, geometry: demo(), path: DEMO });
  };

  test("fits: the context left to the model is its training context", () => {
    const r = plan(["-m", DEMO], 64 * GiB);
    expect(r.refusal).toBeUndefined();
    // -np auto with -c 0: a context this short, 4 slots that each hold all of it (llama-server's -np auto: 4 slots that may each grow to all of -c)
    expect(r.event.context).toMatchObject({ n_ctx: 4 * 32768, n_slots: 4, n_ctx_slot: 32768, fitted: false });
    expect(r.event.memory).toMatchObject({ where: "host", fits: true });
    expect(r.event.memory.total_bytes).toBe(r.event.memory.weights_bytes + r.event.memory.kv_bytes! + r.event.memory.work_bytes!);
    expect(r.event.backend.kind).toBe("cpu");
    expect(r.engine!.engine.nGpuLayers).toBe(0); // the plan decided: the engine does not probe again
  });

  test("a context left to the model that does not fit is shrunk to the largest that does", () => {
    const g = demo();
    const at8k = needAt(g, "host", 8192, { ...FIT, nThreads: 16, exact: false }).need.total;
    const r = plan(["-m", DEMO], at8k + HOST_MARGIN + 1024);
    expect(r.refusal).toBeUndefined();
    expect(r.event.context.fitted).toBe(true);
    expect(r.event.context.n_ctx).toBeLessThanOrEqual(8192);
    expect(r.event.notes.join("\n")).toContain("fit: the training context of 32768 tokens does not fit");
  });

  test("an explicit context that does not fit is refused (E_DOES_NOT_FIT) with a -c that fits as the next command", () => {
    const g = demo();
    const at8k = needAt(g, "host", 8192, { ...FIT, nThreads: 16, exact: false }).need.total;
    const r = plan(["-m", DEMO, "-c", "32768"], at8k + HOST_MARGIN + 1024);
    expect(r.refusal?.code).toBe("E_DOES_NOT_FIT");
    expect(r.refusal?.exitCode).toBe(5);
    expect(r.refusal?.next).toBe(`bloomery-serve -m ${DEMO} -ngl 0 -c 8192`);
    expect(r.event.memory.fits).toBe(false);
    expect(r.event.refusal).toEqual(r.refusal!.toEvent());
    // --fit off: the training context is not shrunk
    expect(plan(["-m", DEMO, "-fit", "off"], at8k + HOST_MARGIN + 1024).refusal?.code).toBe("E_DOES_NOT_FIT");
  });
});
