// Prompt attention with a KV group's query heads sharing each staged K/V tile and the next tile
// copied while this one is used (CudaFast.fa2, cuda/attention/fa.cu's k_fa2) against one head a block with
// plain loads (k_fa): every warp does the same arithmetic, so the logits agree bit for bit - head
// size 128 in groups of 8 (Qwen3-30B-A3B's shapes), head size 64 in groups of 2 and 4; prompts of
// 200 and 700 tokens (for Qwen3-30B-A3B two micro-batches of 512 and 188) and a chunk at position
// 300 after a first one (tiles that start past 0, the last tile's zero rows past the largest
// position). k_fa2 pairs a group's heads in a block only where the launch fills the card (on an
// H200's 132 SMs: Qwen3-30B-A3B's 512- and 300-token batches; test-moe's 2,200 and test-moe-wide's
// 1,200-token prompts), else one head a block - both run here.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, CudaOption, cudaStatus } from "../ffi/cuda.ts";
import type { CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { synth } from "../src/cli/synth.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-fa2: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-fa2-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Fa2Case { model: string; quant: string; layers?: number; ubatch: number; nCtx: number; long?: number }
// qwen3-30b-a3b: 32 query heads over 4 KV heads of 128; test-moe: 4 over 2 of 64; test-moe-wide: 8 over 2 of 64
const CASES: Fa2Case[] = [
  { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 2, ubatch: 512, nCtx: 1024 },
  { model: "test-moe", quant: "Q4_K_M", ubatch: 2304, nCtx: 4096, long: 2200 },
  { model: "test-moe-wide", quant: "Q4_K_M", ubatch: 1280, nCtx: 2048, long: 1200 },
];

/** Logits of tokens at positions pos0.. of slot 0, in the backend's micro-batches, for every step-th row (and the last). */
function evalRows(m: Model, tokens: number[], pos0: number, step: number): Float32Array {
  const V = m.hp.nVocab, B = m.backend.maxTokens;
  const rows: Float32Array[] = [];
  for (let s = 0; s < tokens.length; s += B) {
    const n = Math.min(B, tokens.length - s);
    const out = Array.from({ length: n }, (_, i) => i).filter((i) => (s + i) % step === 0 || s + i === tokens.length - 1);
    const logits = new Float32Array(out.length * V);
    m.backend.forward({
      tokens: Int32Array.from({ length: n }, (_, i) => tokens[s + i]), pos: Int32Array.from({ length: n }, (_, i) => pos0 + s + i),
      seq: new Int32Array(n), outRows: Int32Array.from(out), logits,
    });
    rows.push(logits);
  }
  const all = new Float32Array(rows.reduce((t, r) => t + r.length, 0));
  let o = 0;
  for (const r of rows) {
    all.set(r, o);
    o += r.length;
  }
  return all;
}

gpu("prompt attention sharing K/V tiles among a KV group's heads gives the logits of one head a block", () => {
  for (const c of CASES) {
    test(`${c.model}:${c.quant}: prompts of 200${c.long ? `, 700 and ${c.long}` : " and 700"}, a chunk of 300 at position 300, bit for bit`, async () => {
      const file = join(tmp, `fa2-${c.model}-${c.quant}.gguf`);
      await synth({ model: c.model, quant: c.quant, out: file, layers: c.layers ?? 0, seed: 29 });
      const m = Model.load(file, { nCtx: c.nCtx, maxTokens: c.ubatch, nGpuLayers: "all" });
      const be = m.backend as CudaBackend;
      try {
        const V = m.hp.nVocab;
        // every logit row for the small vocabularies; every 5th (and the last) for the 151,936-token one
        const step = V > 100_000 ? 5 : 1;
        const toks = (n: number, salt: number) => Array.from({ length: n }, (_, i) => (i * 7001 + 31 * salt + 11) % V);
        const runs: { name: string; first?: number[]; tokens: number[]; pos0: number }[] = [
          { name: "prompt of 200", tokens: toks(200, 1), pos0: 0 },
          { name: "prompt of 700", tokens: toks(700, 2), pos0: 0 },
          { name: "300 at position 300 after 300", first: toks(300, 3), tokens: toks(300, 4), pos0: 300 },
        ];
        if (c.long) runs.push({ name: `prompt of ${c.long}`, tokens: toks(c.long, 5), pos0: 0 });
        for (const r of runs) {
          be.setOption(CudaOption.fast, CudaFast.default);
          if (r.first) evalRows(m, r.first, 0, r.first.length);
          const before = be.stats().fa2;
          const shared = evalRows(m, r.tokens, r.pos0, step);
          const taken = be.stats().fa2 - before; // launches of k_fa2 (the path under test ran)
          be.setOption(CudaOption.fast, CudaFast.default & ~CudaFast.fa2);
          const single = evalRows(m, r.tokens, r.pos0, step);
          let differ = 0, finite = true;
          for (let i = 0; i < shared.length; i++) {
            if (!(shared[i] === single[i])) differ++;
            if (!Number.isFinite(shared[i])) finite = false;
          }
          console.log(`${c.model}:${c.quant} ${r.name}: ${differ} of ${shared.length} logits differ between shared K/V tiles and one head a block (${taken} k_fa2 launches)`);
          expect(taken).toBeGreaterThan(0);
          expect(shared.length).toBe(Math.floor((r.tokens.length - 1) / step + 1) * V + ((r.tokens.length - 1) % step ? V : 0));
          expect(finite).toBe(true);
          expect(differ).toBe(0);
        }
      } finally {
        be.setOption(CudaOption.fast, CudaFast.default);
        m.close();
        rmSync(file, { force: true });
      }
    }, 600_000);
  }
});
