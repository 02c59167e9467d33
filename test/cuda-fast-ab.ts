// Decode-batch A/B runs of the CUDA library's fast bits (CudaFast): a model with 8 slots holding
// prompts of chosen lengths, then steps of several sequences, each run once with a set of bits
// and again (rewriting the same KV rows) with another; the two steps' logits compared. The
// decode batches' run-time choice of expert kernels (CudaOption.mmaPairs) is off in them.
import { expect } from "bun:test";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { CudaFast, CudaOption } from "../ffi/cuda.ts";
import type { Batch } from "../src/engine/backend.ts";
import type { CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { synth } from "../src/cli/synth.ts";
import { maxAbs, std } from "./logit-math.ts";

export interface AbCase { model: string; quant: string; layers?: number; fixture?: string; centered?: boolean }

export const caseName = (c: AbCase): string => `${c.model}:${c.quant}${c.layers ? ` (${c.layers} layers)` : ""}${c.centered ? " centered" : ""}`;

/** A loaded model with every slot holding a prompt; len[s] is slot s's next position. */
export interface AbModel {
  m: Model;
  be: CudaBackend;
  V: number;
  len: number[];
  round: number;
}

export interface AbOptions {
  dir: string;            // where synthetic files are written
  tag: string;            // file name prefix
  seed: number;
  nCtx: number;           // per slot
  maxTokens: number;
  promptLength: (slot: number) => number;
}

export const SLOTS = 8;

/** Runs fn on the case's model (synthesized when not a fixture; skipped by the caller when a fixture is absent), then closes it. */
export async function withAbModel(c: AbCase, o: AbOptions, fn: (t: AbModel) => void): Promise<void> {
  let file = c.fixture;
  if (!file) {
    file = join(o.dir, `${o.tag}-${c.model}-${c.quant}.gguf`);
    await synth({ model: c.model, quant: c.quant, out: file, layers: c.layers ?? 0, seed: o.seed, centered: c.centered });
  }
  const m = Model.load(file, { nCtx: o.nCtx, nSlots: SLOTS, maxTokens: o.maxTokens, nGpuLayers: "all" });
  const be = m.backend as CudaBackend;
  // the kernels the bits name: decode batches' run-time move to the dp4a kernels off (cuda-mma-choice sets it itself)
  be.setOption(CudaOption.mmaPairs, 0);
  try {
    const V = m.hp.nVocab;
    const len: number[] = [];
    for (let s = 0; s < SLOTS; s++) {
      const p = Array.from({ length: o.promptLength(s) }, (_, i) => (i * 5003 + 43 * s + o.seed) % V);
      m.evalSequence(p, 0, s);
      len.push(p.length);
    }
    fn({ m, be, V, len, round: 0 });
  } finally {
    be.setOption(CudaOption.fast, CudaFast.default);
    m.close();
    if (!c.fixture && existsSync(file)) rmSync(file, { force: true });
  }
}

export interface AbResult {
  a: Float32Array;
  b: Float32Array;
  differ: number;        // logits not bit-equal
  finite: boolean;       // every logit of a finite
  rel: number;           // max |a - b| / std(b) over the rows
  sameArgmax: boolean;
  statA: number;         // the counter's growth over each step (0 without one)
  statB: number;
}

/** One step of the sequences seqs (a slot may repeat: its tokens at adjacent positions) with bits a, then again with bits b. */
export function abStep(t: AbModel, seqs: number[], bitsA: number, bitsB: number, stat?: () => number): AbResult {
  const { be, V } = t;
  const n = seqs.length;
  const toks = seqs.map((s, i) => (s * 59 + i * 23 + t.round * 13 + 1) % V);
  const pos = seqs.map((s, i) => t.len[s] + seqs.slice(0, i).filter((q) => q === s).length);
  const batch = (logits: Float32Array): Batch => ({ tokens: Int32Array.from(toks), pos: Int32Array.from(pos), seq: Int32Array.from(seqs), outRows: Int32Array.from(seqs.keys()), logits });
  const a = new Float32Array(n * V), b = new Float32Array(n * V);
  const count = stat ?? (() => 0);
  be.setOption(CudaOption.fast, bitsA);
  let c0 = count();
  be.forward(batch(a));
  const statA = count() - c0;
  be.setOption(CudaOption.fast, bitsB);
  c0 = count();
  be.forward(batch(b)); // rewrites the KV rows the first step wrote
  const statB = count() - c0;
  let differ = 0, finite = true, rel = 0, sameArgmax = true;
  for (let i = 0; i < a.length; i++) {
    if (!(a[i] === b[i])) differ++;
    if (!Number.isFinite(a[i])) finite = false;
  }
  for (let i = 0; i < n; i++) {
    const ra = a.subarray(i * V, (i + 1) * V), rb = b.subarray(i * V, (i + 1) * V);
    const r = maxAbs(ra, rb) / std(rb);
    rel = Math.max(rel, Number.isFinite(r) ? r : Infinity);
    if (argmaxOf(ra) !== argmaxOf(rb)) sameArgmax = false;
  }
  for (const s of seqs) t.len[s]++;
  t.round++;
  return { a, b, differ, finite, rel, sameArgmax, statA, statB };
}

function argmaxOf(v: Float32Array): number {
  let k = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[k]) k = i;
  return k;
}

/** Steps of n distinct slots from a rotating start, for n in ns. */
export function rotatingSteps(ns: number[], stride: number): number[][] {
  return ns.map((n, r) => Array.from({ length: n }, (_, i) => (i * stride + r) % SLOTS));
}

/**
 * abStep for a path that sums in another order than the one it replaces: finite logits, the same
 * greedy token, the path taken with bitsA (stat grows) and not with bitsB. Returns max |dlogit| / std.
 */
export function expectReordered(t: AbModel, c: AbCase, seqs: number[], bitsA: number, bitsB: number, stat: () => number, what: string): number {
  const r = abStep(t, seqs, bitsA, bitsB, stat);
  console.log(`${c.model}:${c.quant} batch of ${seqs.length}: ${what} ${r.statA} launches, max |dlogit| / std ${r.rel.toExponential(2)} (${r.differ} of ${r.a.length} differ)`);
  expect(r.finite).toBe(true);
  expect(r.sameArgmax).toBe(true);
  expect(r.statA).toBeGreaterThan(0);
  expect(r.statB).toBe(0);
  return r.rel;
}

/** abStep for a path that must give the same bits as the one it replaces, taken with bitsA only. */
export function expectExact(t: AbModel, c: AbCase, seqs: number[], bitsA: number, bitsB: number, stat: () => number, what: string): void {
  const r = abStep(t, seqs, bitsA, bitsB, stat);
  console.log(`${c.model}:${c.quant} slots ${seqs.join(",")}: ${what} ${r.statA} times, ${r.differ} of ${r.a.length} logits differ`);
  expect(r.finite).toBe(true);
  expect(r.differ).toBe(0);
  expect(r.statA).toBeGreaterThan(0);
  expect(r.statB).toBe(0);
}
