// A recurrent model's slots cost more than their KV cache: each holds its state (the Qwen hybrids' conv inputs and
// delta-rule states of every linear-attention layer) and the checkpoint the scheduler keeps of it for the prompt
// cache. -np auto (src/engine/slot-fit.ts, both counts), the memory need and the start plan (agent-sizes.ts,
// agent-plan.ts) and the plan at load (plan.ts) count them: the state's size against the CPU library's own
// (bl_cpu_rs_bytes), a known shape's against a file of that shape, and the counts never past the memory.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Machine } from "../src/cli/agent-machine.ts";
import { planStart } from "../src/cli/agent-plan.ts";
import { autoSlotFit, geometryFromGguf, hostNeed, HOST_MARGIN } from "../src/cli/agent-sizes.ts";
import { parseArgs } from "../src/cli/flags.ts";
import { shapeHParams } from "../src/cli/known-models.ts";
import { synth } from "../src/cli/synth.ts";
import { SHAPES } from "../src/cli/synth-shapes.ts";
import { Model } from "../src/engine/model.ts";
import { cpuContextBytes } from "../src/engine/plan.ts";
import { MAX_CHECKPOINTS, recurrentSlotBytes, rsStateBytes } from "../src/engine/recurrent-state.ts";
import { fitSharedContext, fitSlots, kvBytesPerToken, type SharedFit, type SharedFitInput, type SlotFitInput } from "../src/engine/slot-fit.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { familyFor } from "../src/models/registry.ts";
import { FIXTURES } from "./paths.ts";

const GiB = 1024 ** 3;
const HYBRID = join(FIXTURES, "families", "qwen3_5_moe", "qwen3_5_moe.gguf");

// Qwen3.6-35B-A3B: 10 attention layers of 2 KV heads of 256; 30 delta-net layers of 16 k heads and 32 v heads of 128, conv of 4 taps
const Q36_KV_TOKEN = 10 * 2 * 256 * 2 * 2; // 20 KiB a position
const Q36_STATE = 30 * (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 4; // 62.8 MiB a slot

describe("a recurrent model's state a slot", () => {
  test("Qwen3.6-35B-A3B's known shape: 30 layers of 548,864 floats (62.8 MiB a slot), and the checkpoint beside it", () => {
    const hp = shapeHParams(SHAPES["qwen3.6-35b-a3b"], 262144);
    expect(hp.kvLayers).toBe(10);
    expect(kvBytesPerToken(hp)).toBe(Q36_KV_TOKEN);
    expect(hp.rsLayers).toBe(30);
    expect(rsStateBytes(hp)).toBe(Q36_STATE);
    expect(recurrentSlotBytes(hp)).toBe((1 + MAX_CHECKPOINTS) * Q36_STATE);
    // a model without recurrent layers has none
    expect(recurrentSlotBytes(shapeHParams(SHAPES["qwen3-30b-a3b"], 40960))).toBe(0);
  });

  const dir = mkdtempSync(join(tmpdir(), "bloomery-rs-fit-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  for (const shape of ["test-qwen35moe", "test-qwen3next"]) {
    test(`${shape}: the known shape's recurrent layers and state as the family reads them from a file of that shape`, async () => {
      const path = join(dir, `${shape}.gguf`);
      await synth({ model: shape, quant: "Q8_0", out: path });
      const f = GgufFile.open(path);
      const fromFile = familyFor(f).hparams(f);
      const known = shapeHParams(SHAPES[shape], fromFile.nCtxTrain);
      expect(fromFile.rsLayers).toBeGreaterThan(0);
      expect({ kvLayers: known.kvLayers, rsLayers: known.rsLayers, rsDim: known.rsDim }).toEqual({ kvLayers: fromFile.kvLayers, rsLayers: fromFile.rsLayers, rsDim: fromFile.rsDim });
    });
  }

  test.skipIf(!existsSync(HYBRID))("the fixture's: the estimate is the CPU library's bl_cpu_rs_bytes; the memory need, the plan at load and -np auto count it with its checkpoint", () => {
    const g = geometryFromGguf(GgufFile.open(HYBRID));
    const m = Model.load(HYBRID, { nCtx: 256, nSlots: 2, nThreads: 1, log: () => {} });
    try {
      expect(m.backend.rsBytes!()).toBe(rsStateBytes(g.hp));
    } finally {
      m.close();
    }
    const one = { nSlots: 1, nCtxSlot: 128, maxTokens: 64, nThreads: 2 }, three = { ...one, nSlots: 3 };
    const per = recurrentSlotBytes(g.hp);
    expect(per).toBe(2 * rsStateBytes(g.hp));
    expect(hostNeed(g, one).state).toBe(per);
    expect(hostNeed(g, three).state).toBe(3 * per);
    // each slot more: its KV, its state and checkpoint, and an int in the delta-net's token groups
    const slotMore = per + hostNeed(g, one).kv + 4;
    expect(hostNeed(g, three).total - hostNeed(g, one).total).toBe(2 * slotMore);
    expect(cpuContextBytes(g.hp, three) - cpuContextBytes(g.hp, one)).toBe(2 * slotMore);
    // -np auto on the host, slots of 128 positions (64 KiB of KV, 114 KiB of state and its checkpoint): the room for 3
    // slots and a half gives 3; counting the KV alone would give more
    const FIT = { nParallel: -1, maxTokens: 64, nThreads: 2, exact: false };
    const a = autoSlotFit(g, "host", 128, { available: 1e15 }, FIT);
    const fixed = 1e15 - a.roomBytes;
    const slot = hostNeed(g, one).kv + per;
    const fit = autoSlotFit(g, "host", 128, { available: fixed + 3.5 * slot }, FIT);
    expect(fit.nSlots).toBe(3);
    expect(fit.stateBytes).toBe(3 * per);
    expect(Math.floor((3.5 * slot) / hostNeed(g, one).kv)).toBeGreaterThan(3);
    expect(fit.line).toMatch(/^-np auto: 3 slots of 128 tokens \(KV and recurrent states .* left on host RAM .*; a 4th would need .* more\)$/);
  });

  function machine(ram: number): Machine {
    return {
      os: "linux", arch: "x64",
      cuda: { usable: false, reason: "no NVIDIA driver", devices: 0, driver_version: 0 },
      cards: [],
      ram: { total_bytes: ram, available_bytes: ram, cgroup_limit_bytes: null, cgroup_available_bytes: null, usable_bytes: ram },
      cpu: { model: "test", cores: 2, logical_cpus: 2, avx2: true, avx512: false, kernel_path: "avx2" },
    };
  }

  test.skipIf(!existsSync(HYBRID))("the start plan: -np auto's slots with their states within the RAM, the memory event and its line naming the states", () => {
    const g = geometryFromGguf(GgufFile.open(HYBRID));
    const argv = ["-m", HYBRID, "-t", "2", "-ub", "64", "-b", "64", "-ngl", "0", "--slot-ctx", "128", "--cache-ram", "0"];
    const p = parseArgs(argv, {});
    if (p.action !== "serve") throw new Error("not a start");
    const FIT = { nParallel: -1, maxTokens: 64, nThreads: 2, exact: false };
    const fixed = 1e15 - autoSlotFit(g, "host", 128, { available: 1e15 }, FIT).roomBytes;
    const one = hostNeed(g, { nSlots: 1, nCtxSlot: 128, maxTokens: 64, nThreads: 2 });
    const r = planStart({ o: p.options, explicit: p.explicit, argv, source: { kind: "file", path: HYBRID, byName: false }, machine: machine(fixed + 2.5 * (one.kv + one.state)), dryRun: true, geometry: g, path: HYBRID });
    expect(r.refusal).toBeUndefined();
    expect(r.event.context).toMatchObject({ n_slots: 2, n_ctx_slot: 128 });
    expect(Math.floor((2.5 * (one.kv + one.state)) / one.kv)).toBeGreaterThan(2); // the KV alone: more
    const mem = r.event.memory;
    expect(mem.recurrent_bytes).toBe(2 * recurrentSlotBytes(g.hp));
    expect(mem.total_bytes).toBe(mem.weights_bytes + mem.kv_bytes! + mem.recurrent_bytes! + mem.work_bytes!);
    expect(mem.total_bytes! + HOST_MARGIN).toBeLessThanOrEqual(mem.available_bytes);
  });
});

describe("-np auto with a state a slot (pure)", () => {
  const base = { kvBytesPerToken: Q36_KV_TOKEN, weightBytes: 20 * GiB, workBytes: 1 * GiB, marginBytes: 1 * GiB, where: "host RAM", availableText: "usable" };
  const slots = (over: Partial<SlotFitInput>) => fitSlots({ ...base, nCtxSlot: 32768, availableBytes: 32 * GiB, ...over });

  test("fixed slots: as many as hold their KV and their states; the line and the refusal name the states", () => {
    const kv = 32768 * Q36_KV_TOKEN, state = 2 * Q36_STATE; // 640 MiB and 125.6 MiB a slot
    const room = 32 * GiB - 22 * GiB;
    const a = slots({ stateBytesPerSlot: state });
    expect(a.nSlots).toBe(Math.min(8, Math.floor(room / (kv + state))));
    const tight = slots({ availableBytes: 22 * GiB + 3.5 * (kv + state), stateBytesPerSlot: state });
    expect(tight.nSlots).toBe(3);
    expect(tight.stateBytes).toBe(3 * state);
    expect(tight.kvBytes).toBe(3 * kv);
    expect(tight.line).toMatch(/KV and recurrent states 2\.24 GiB \(1\.88 GiB \+ 376\.9 MiB\) of 2\.62 GiB left on host RAM/);
    expect(tight.line).toMatch(/a 4th would need 382\.8 MiB more/);
    // the KV alone would have taken a 4th
    expect(slots({ availableBytes: 22 * GiB + 3.5 * (kv + state) }).nSlots).toBe(4);
    const none = slots({ availableBytes: 22 * GiB + kv + state / 2, stateBytesPerSlot: state });
    expect(none.nSlots).toBe(0);
    expect(none.refusal).toMatch(/\+ recurrent state 125\.6 MiB \(a slot's, with the checkpoints it keeps\) \+ buffers/);
    // no state, or 0: the same as before
    expect(slots({ stateBytesPerSlot: 0 })).toEqual(slots({}));
    expect(() => slots({ stateBytesPerSlot: -1 })).toThrow(/stateBytesPerSlot/);
  });

  const shared = (over: Partial<SharedFitInput>): SharedFit =>
    fitSharedContext({ ...base, nCtxTotal: 262144, minSlotCtx: 4096, shrink: true, availableBytes: 64 * GiB, ...over });

  test("a shared context: the slots' KV and states never pass the room, over a sweep of memory sizes, contexts and states", () => {
    let checked = 0;
    for (const nCtxTotal of [8192, 32768, 65536, 262144])
      for (const state of [0, 2 * Q36_STATE, 2 * GiB])
        for (let avail = 22.5 * GiB; avail <= 90 * GiB; avail += 0.37 * GiB) {
          const f = shared({ nCtxTotal, availableBytes: avail, stateBytesPerSlot: state });
          const room = avail - 22 * GiB;
          if (f.nSlots === 0) {
            expect(room).toBeLessThan(4096 * Q36_KV_TOKEN + state);
            continue;
          }
          checked++;
          expect(f.kvBytes).toBe(f.nSlots * f.nCtxSlot * Q36_KV_TOKEN);
          expect(f.stateBytes).toBe(f.nSlots * state);
          expect(f.kvBytes + f.stateBytes).toBeLessThanOrEqual(room);
          expect(f.nCtxSlot).toBeGreaterThanOrEqual(Math.min(4096, nCtxTotal));
        }
    expect(checked).toBeGreaterThan(1000);
  });

  test("a shared context: the states take the room of positions, and a short context's whole slots count theirs", () => {
    const kvTotal = 262144 * Q36_KV_TOKEN; // 5 GiB
    // room for the whole training context's KV but not beside its states: the total shrinks to leave them room
    const a = shared({ availableBytes: 22 * GiB + kvTotal + 0.1 * GiB, stateBytesPerSlot: 2 * Q36_STATE });
    const b = shared({ availableBytes: 22 * GiB + kvTotal + 0.1 * GiB });
    expect(b.shrunk).toBe(false);
    expect(a.shrunk).toBe(true);
    expect(a.nCtxTotal).toBeLessThan(262144);
    expect(a.line).toMatch(/KV and recurrent states/);
    // a short context of whole slots: 4096 tokens (80 MiB of KV) and 1 GiB of state a slot in 2.5 GiB of room: 2 slots
    const c = shared({ nCtxTotal: 4096, availableBytes: 22 * GiB + 2.5 * (4096 * Q36_KV_TOKEN + GiB), stateBytesPerSlot: GiB });
    expect(c).toMatchObject({ nSlots: 2, nCtxSlot: 4096, stateBytes: 2 * GiB });
    expect(shared({ nCtxTotal: 4096, availableBytes: 22 * GiB + 2.5 * (4096 * Q36_KV_TOKEN + GiB) }).nSlots).toBe(4);
    // no state: the same as before
    expect(shared({ stateBytesPerSlot: 0 })).toEqual(shared({}));
  });
});
