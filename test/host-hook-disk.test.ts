// The host hooks (ffi/cpu/hook.c) on MoE layers whose experts are on the NVMe tier beside a card: the
// program wired as Model.load wires it for a card whose plan puts host experts on disk (the EXPERTS ops
// marked HOST_EXPERTS_DISK, an expert store holding only those, with fewer slots than a layer has
// experts). bl_cpu_ops_rows and bl_cpu_expert_rows through the store give the same bits as through
// the mapped model, call after call; a disk mark without a store and a file cut while serving fail
// with a message.
import { afterAll, describe, expect, test } from "bun:test";
import { ptr } from "bun:ffi";
import { copyFileSync, mkdtempSync, rmSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cpu } from "../ffi/cpu.ts";
import { ExpertStore } from "../src/engine/expert-store.ts";
import { HostHook } from "../src/engine/host-hook.ts";
import { Model } from "../src/engine/model.ts";
import { encodeProgram, HOST_EXPERTS_DISK, HOST_EXPERTS_RAM, hostExpertsMark, markHostExperts, type EncodedProgram } from "../src/engine/program.ts";
import { expertTensors, OpKind } from "../src/models/ops.ts";
import { FIXTURES } from "./paths.ts";
import { lcgRows } from "./model-fixtures.ts";

const file = join(FIXTURES, "demo-model", "bloomery-demo-q4_k_m.gguf");
const ROWS = 16;
const m = Model.load(file, { nCtx: 64, nThreads: 2, maxTokens: ROWS });
const hook = new HostHook(m.hp, ROWS, 2);
const specs = m.family.program(m.gguf, m.hp);
const moe = specs.map((b, i) => (b.kind === OpKind.Experts ? i : -1)).filter((i) => i >= 0);
// a MoE layer's run for the hooks: its NORM, ROUTER and EXPERTS ops
const RUN = 3;
// the first and the last MoE layers on disk, the others in host memory
const diskBlocks = new Set([moe[0], moe[moe.length - 1]]);
const diskNames = new Set(specs.flatMap((b, i) => (diskBlocks.has(i) ? expertTensors(b) : [])));
const prog = encodeProgram(specs, (n) => m.weights.tensor(n), m.hp.nEmbd, m.hp.nVocab);
markHostExperts(prog, (n) => /_exps\./.test(n) && !diskNames.has(n), (n) => diskNames.has(n));
const sizes = ExpertStore.sizes(m.gguf, specs)!;
const SLOTS = 3; // fewer than a layer's experts: a batch's experts are loaded in rounds, and evicted
const store = ExpertStore.attach(m.gguf, specs, prog, SLOTS * sizes.slotBytes, { blocks: (bi) => hostExpertsMark(prog, bi) === HOST_EXPERTS_DISK })!;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-hook-disk-"));
afterAll(() => {
  hook.close();
  store.close();
  m.close();
  rmSync(tmp, { recursive: true, force: true });
});

const addr = (p: EncodedProgram, bi: number) => p.opAddr(bi - RUN + 1);
const text = (err: Uint8Array) => new TextDecoder().decode(err.subarray(0, Math.max(0, err.indexOf(0))));

const rows = (n: number, seed: number): Float32Array => lcgRows(n, m.hp.nEmbd, seed);

function blockRows(h: HostHook, p: EncodedProgram, bi: number, x: Float32Array, n: number): { st: number; msg: string } {
  const err = new Uint8Array(512);
  const st = Number(cpu().bl_cpu_ops_rows(h.ctx, addr(p, bi), RUN, n, ptr(x), ptr(err), err.length));
  return { st, msg: text(err) };
}

function expertRows(p: EncodedProgram, bi: number, x: Float32Array, n: number, sel: Int32Array, selw: Float32Array, k: number): { st: number; out: Float32Array; msg: string } {
  const out = new Float32Array(n * m.hp.nEmbd), err = new Uint8Array(512);
  const st = Number(cpu().bl_cpu_expert_rows(hook.ctx, addr(p, bi), RUN, n, ptr(x), ptr(sel), ptr(selw), k, ptr(out), ptr(err), err.length));
  return { st, out, msg: text(err) };
}

const same = (a: Float32Array, b: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

describe("host hooks through the expert store (disk beside a card)", () => {
  test("the wiring: only the disk blocks are marked DISK and point at the store, whose slots are fewer than a layer's experts", () => {
    for (const bi of moe) {
      const onDisk = diskBlocks.has(bi);
      expect(hostExpertsMark(prog, bi)).toBe(onDisk ? HOST_EXPERTS_DISK : HOST_EXPERTS_RAM);
      expect(prog.getInt(bi, "store") !== 0n).toBe(onDisk);
    }
    expect(store.stats().slots).toBe(SLOTS);
    expect(SLOTS).toBeLessThan(m.hp.nExpert);
    expect(SLOTS).toBeGreaterThanOrEqual(m.hp.nExpertUsed);
  });

  test("bl_cpu_ops_rows: 16 rows and rows one at a time, the same bits as the mapped block", () => {
    const before = store.stats();
    for (const bi of diskBlocks) {
      for (let rep = 0; rep < 2; rep++) {
        const x0 = rows(ROWS, 11 + bi + rep), a = x0.slice(), b = x0.slice();
        expect(blockRows(hook, m.program, bi, a, ROWS)).toEqual({ st: 0, msg: "" });
        expect(blockRows(hook, prog, bi, b, ROWS)).toEqual({ st: 0, msg: "" });
        expect(same(a, x0)).toBe(false);
        expect(same(b, a)).toBe(true);
      }
      for (let r = 0; r < 6; r++) {
        const x0 = rows(1, 100 + 7 * r + bi), a = x0.slice(), b = x0.slice();
        expect(blockRows(hook, m.program, bi, a, 1).st).toBe(0);
        expect(blockRows(hook, prog, bi, b, 1).st).toBe(0);
        expect(same(b, a)).toBe(true);
      }
    }
    const s = store.stats();
    expect(s.lookups - before.lookups).toBeGreaterThan(0);
    expect(s.misses - before.misses).toBeGreaterThan(SLOTS); // 16 rows use more experts than the slots: rounds
    expect(s.evictions - before.evictions).toBeGreaterThan(0);
    expect(s.readErrors).toBe(0);
  });

  test("bl_cpu_expert_rows: every expert of a layer picked across 16 rows, and a token's first pick, the same bits as the mapped block", () => {
    const K = m.hp.nExpertUsed, X = m.hp.nExpert, before = store.stats();
    for (const bi of diskBlocks) {
      const x = rows(ROWS, 31 + bi);
      const sel = Int32Array.from({ length: ROWS * K }, (_, i) => (i * 3 + (i >> 1)) % X);
      const selw = Float32Array.from({ length: ROWS * K }, (_, i) => 0.25 + ((i * 37) % 11) / 16);
      expect(new Set(sel).size).toBe(X);
      for (const k of [K, 1]) {
        const s = k === K ? sel : Int32Array.from({ length: ROWS }, (_, t) => sel[t * K]);
        const w = k === K ? selw : Float32Array.from({ length: ROWS }, (_, t) => selw[t * K]);
        const a = expertRows(m.program, bi, x, ROWS, s, w, k), b = expertRows(prog, bi, x, ROWS, s, w, k);
        expect({ st: a.st, msg: a.msg }).toEqual({ st: 0, msg: "" });
        expect({ st: b.st, msg: b.msg }).toEqual({ st: 0, msg: "" });
        expect(a.out.some((v) => v !== 0)).toBe(true);
        expect(same(b.out, a.out)).toBe(true);
      }
    }
    const s = store.stats();
    expect(s.misses - before.misses).toBeGreaterThanOrEqual(X - SLOTS);
    expect(s.lookups).toBe(s.hits + s.misses);
  });

  test("an EXPERTS op marked as on disk without an expert store is refused with a message", () => {
    const bi = moe.find((b) => !diskBlocks.has(b))!;
    prog.set(bi, "host", HOST_EXPERTS_DISK);
    try {
      const x = rows(2, 5), keep = x.slice();
      const r = blockRows(hook, prog, bi, x, 2);
      expect(r.st).not.toBe(0);
      expect(r.msg).toMatch(/experts of layer \d+: marked as read from disk \(host 2\) but no expert store/);
      expect(same(x, keep)).toBe(true);
      const e = expertRows(prog, bi, x, 1, Int32Array.of(0, 1), Float32Array.of(0.5, 0.5), 2);
      expect(e.msg).toMatch(/experts of layer \d+: .*no expert store/);
    } finally {
      prog.set(bi, "host", HOST_EXPERTS_RAM);
    }
  });

  test("a file cut while serving: the hook fails naming the file and offset, and gives the mapped bits again once it is whole", () => {
    const p = join(tmp, "cut.gguf");
    copyFileSync(file, p);
    const was = process.env.BLOOMERY_EXPERT_PREFETCH;
    process.env.BLOOMERY_EXPERT_PREFETCH = "0";
    let cut: Model;
    try {
      cut = Model.load(p, { nCtx: 64, nThreads: 2, maxTokens: ROWS, expertRamBytes: SLOTS * sizes.slotBytes });
    } finally {
      if (was === undefined) delete process.env.BLOOMERY_EXPERT_PREFETCH;
      else process.env.BLOOMERY_EXPERT_PREFETCH = was;
    }
    try {
      const last = [...cut.gguf.tensors.values()].sort((a, b) => b.fileOffset - a.fileOffset)[0];
      const bi = specs.findIndex((b) => Object.values(b.tensors).includes(last.name));
      expect(moe).toContain(bi);
      truncateSync(p, last.fileOffset + 1000);
      const x0 = rows(ROWS, 77), x = x0.slice();
      const r = blockRows(hook, cut.program, bi, x, ROWS);
      expect(r.st).not.toBe(0);
      expect(r.msg).toMatch(new RegExp(`expert store: reading layer \\d+ expert \\d+ \\(\\w+ slab\\) from ${p} at offset \\d+: short read`));
      copyFileSync(file, p);
      const a = x0.slice(), b = x0.slice();
      expect(blockRows(hook, m.program, bi, a, ROWS).st).toBe(0);
      expect(blockRows(hook, cut.program, bi, b, ROWS)).toEqual({ st: 0, msg: "" });
      expect(same(b, a)).toBe(true);
    } finally {
      cut.close();
    }
  });
});
