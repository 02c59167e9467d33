// The host hook (ffi/cpu/hook.c): a card's step hands a MoE layer's ops (NORM, ROUTER, EXPERTS) whose
// experts stay in host memory to the CPU library, which runs them on residual rows the caller owns. Checked on the demo
// model without a card: rows at once are the same bits as rows one at a time (each row as the
// one-row kernels compute it), the block changes them, and bad calls fail with a message.
import { afterAll, describe, expect, test } from "bun:test";
import { ptr } from "bun:ffi";
import { join } from "node:path";
import { cpu } from "../ffi/cpu.ts";
import { HostHook } from "../src/engine/host-hook.ts";
import { hostExpertThreads } from "../src/engine/placement.ts";
import { Model } from "../src/engine/model.ts";
import { OpKind } from "../src/models/ops.ts";
import { FIXTURES } from "./paths.ts";
import { lcgRows } from "./model-fixtures.ts";

const file = join(FIXTURES, "demo-model", "bloomery-demo-q4_k_m.gguf");
const m = Model.load(file, { nCtx: 64, nThreads: 2, maxTokens: 16 });
const hook = new HostHook(m.hp, 8, 2);
afterAll(() => {
  hook.close();
  m.close();
});

const specs = m.family.program(m.gguf, m.hp);
const blockAddr = (bi: number) => m.program.opAddr(bi);
// each MoE layer's run: the NORM before its ROUTER and EXPERTS
const RUN = 3;
const moeBlocks = specs.map((b, i) => (b.kind === OpKind.Router ? i - 1 : -1)).filter((i) => i >= 0);
const attnBlock = specs.findIndex((b) => b.kind === OpKind.Attn);

const rows = (n: number, seed: number): Float32Array => lcgRows(n, m.hp.nEmbd, seed);

function run(bi: number, x: Float32Array, n: number): { status: number; msg: string } {
  const err = new Uint8Array(512);
  const status = Number(cpu().bl_cpu_ops_rows(hook.ctx, blockAddr(bi), RUN, n, ptr(x), ptr(err), err.length));
  const end = err.indexOf(0);
  return { status, msg: new TextDecoder().decode(err.subarray(0, end < 0 ? err.length : end)) };
}

describe("the host hook on the CPU", () => {
  test("its pool leaves two of 6+ cores to the rest of the process", () => {
    expect(hostExpertThreads(16, 16)).toBe(14);
    expect(hostExpertThreads(12, 16)).toBe(12);
    expect(hostExpertThreads(8, 8)).toBe(6);
    expect(hostExpertThreads(4, 4)).toBe(4);
    expect(hostExpertThreads(2, 2)).toBe(2);
    expect(hostExpertThreads(0, 2)).toBe(1);
  });

  test("the hook's thread keeps its cores: a pool made after a call sees every usable core", async () => {
    const { usableCores } = await import("../ffi/cpu-kernels.ts");
    const before = usableCores();
    const x = rows(1, 5);
    expect(run(moeBlocks[0], x, 1).status).toBe(0);
    expect(usableCores()).toBe(before);
  });

  test("the hook's address is the library's", () => {
    expect(hook.fn).not.toBe(0n);
    expect(hook.ctx).not.toBe(0n);
  });

  test("a MoE layer's ops on 6 rows: the same bits as each row alone, and the rows change", () => {
    expect(moeBlocks.length).toBeGreaterThan(0);
    const E = m.hp.nEmbd, n = 6;
    for (const bi of [moeBlocks[0], moeBlocks[moeBlocks.length - 1]]) {
      const x0 = rows(n, 7 + bi), all = x0.slice();
      expect(run(bi, all, n)).toEqual({ status: 0, msg: "" });
      let changed = 0;
      for (let i = 0; i < all.length; i++) {
        expect(Number.isFinite(all[i])).toBe(true);
        if (all[i] !== x0[i]) changed++;
      }
      expect(changed).toBeGreaterThan(all.length / 2);
      for (let r = 0; r < n; r++) {
        const one = x0.slice(r * E, (r + 1) * E);
        expect(run(bi, one, 1).status).toBe(0);
        expect(Buffer.from(one.buffer).equals(Buffer.from(all.buffer, r * E * 4, E * 4))).toBe(true);
      }
    }
  });

  test("a MoE layer's experts on the caller's picks: order does not matter, a split adds up, bad picks are refused", () => {
    const E = m.hp.nEmbd, K = m.hp.nExpertUsed, X = m.hp.nExpert, bi = moeBlocks[0];
    const x = rows(1, 3);
    const sel = Int32Array.from({ length: K }, (_, i) => (i * 5 + 1) % X);
    const selw = Float32Array.from({ length: K }, (_, i) => 1 / (i + 2));
    const experts = (s: Int32Array, w: Float32Array, k: number) => {
      const out = new Float32Array(E), err = new Uint8Array(512);
      const st = Number(cpu().bl_cpu_expert_rows(hook.ctx, blockAddr(bi), RUN, 1, ptr(x), ptr(s), ptr(w), k, ptr(out), ptr(err), err.length));
      return { st, out, msg: new TextDecoder().decode(err.subarray(0, Math.max(0, err.indexOf(0)))) };
    };
    const all = experts(sel, selw, K);
    expect(all.st).toBe(0);
    expect(all.out.some((v) => v !== 0)).toBe(true);
    const rev = experts(sel.slice().reverse(), selw.slice().reverse(), K);
    expect(Buffer.from(rev.out.buffer).equals(Buffer.from(all.out.buffer))).toBe(true); // summed in ascending expert order
    const h = K >> 1;
    const a = experts(sel.slice(0, h), selw.slice(0, h), h), b = experts(sel.slice(h), selw.slice(h), K - h);
    let d = 0, mx = 0;
    for (let i = 0; i < E; i++) {
      d = Math.max(d, Math.abs(a.out[i] + b.out[i] - all.out[i]));
      mx = Math.max(mx, Math.abs(all.out[i]));
    }
    expect(d).toBeLessThan(1e-5 * Math.max(1, mx));
    expect(experts(Int32Array.of(X, 0), selw, 2).msg).toMatch(/pick \d+ outside the \d+ experts/);
    expect(experts(Int32Array.of(-2, 0), selw, 2).msg).toMatch(/pick -2 outside the \d+ experts/);
    expect(experts(sel, selw, K + 1).msg).toMatch(/picks a token/);
  });

  test("picks of -1 are none: rows on several tokens equal the same picks without them, bit for bit", () => {
    const E = m.hp.nEmbd, K = m.hp.nExpertUsed, X = m.hp.nExpert, bi = moeBlocks[moeBlocks.length - 1], n = 5;
    const x = rows(n, 11);
    const run = (s: Int32Array, w: Float32Array, k: number) => {
      const out = new Float32Array(n * E), err = new Uint8Array(512);
      const st = Number(cpu().bl_cpu_expert_rows(hook.ctx, blockAddr(bi), RUN, n, ptr(x), ptr(s), ptr(w), k, ptr(out), ptr(err), err.length));
      expect(st).toBe(0);
      return out;
    };
    const sel = Int32Array.from({ length: n * K }, (_, i) => (i * 7 + 3) % X);
    const selw = Float32Array.from({ length: n * K }, (_, i) => 1 / (2 + (i % K)));
    // every other pick of each token left to someone else (-1), and the same picks compacted to K - K/2 a token
    const holes = sel.map((e, i) => (i % K) % 2 === 1 ? -1 : e);
    const kk = K - (K >> 1);
    const compact = new Int32Array(n * kk), compactW = new Float32Array(n * kk);
    for (let t = 0; t < n; t++)
      for (let i = 0, q = 0; i < K; i++)
        if (i % 2 === 0) {
          compact[t * kk + q] = sel[t * K + i];
          compactW[t * kk + q++] = selw[t * K + i];
        }
    const withHoles = run(holes, selw, K), compacted = run(compact, compactW, kk);
    expect(withHoles.some((v) => v !== 0)).toBe(true);
    expect(Buffer.from(withHoles.buffer).equals(Buffer.from(compacted.buffer))).toBe(true);
    // the other half by -1s too: the two parts add up to all of a token's picks
    const rest = run(sel.map((e, i) => (i % K) % 2 === 0 ? -1 : e), selw, K), all = run(sel, selw, K);
    let d = 0, mx = 0;
    for (let i = 0; i < all.length; i++) {
      d = Math.max(d, Math.abs(withHoles[i] + rest[i] - all[i]));
      mx = Math.max(mx, Math.abs(all[i]));
    }
    expect(d).toBeLessThan(1e-5 * Math.max(1, mx));
    // no pick at all: zeros
    expect(run(new Int32Array(n * K).fill(-1), selw, K).every((v) => v === 0)).toBe(true);
  });

  test("bad calls fail with a message and leave the rows alone", () => {
    const x = rows(9, 1), keep = x.slice();
    const big = run(moeBlocks[0], x, 9);
    expect(big.status).not.toBe(0);
    expect(big.msg).toMatch(/9 rows \(the context takes 1\.\.8\)/);
    const attn = run(attnBlock, x, 2); // a run that starts at the attention op
    expect(attn.status).not.toBe(0);
    expect(attn.msg).toMatch(/op 0 is attention, not a norm, router, experts or ffn op/);
    expect(Buffer.from(x.buffer).equals(Buffer.from(keep.buffer))).toBe(true);
  });
});
