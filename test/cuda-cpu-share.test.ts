// The CPU's share of a sparse prompt layer's host experts (cuda/hybrid/cpu_share.cu, issue 6): copies ahead
// skip the experts the last picks gave few tokens, and the CPU computes the used ones no copy brought
// (bl_cpu_expert_rows on the rows they take) while the card computes the rest; the card adds the
// CPU's rows after its combine. The logits stay within the bound the hybrid tests hold for the CPU
// hook against the card (int8 activations on the card, not on the CPU), with the same greedy token
// where the margin is clear, with the CPU taking every used expert (CudaOption.cpuTokens 65536); at 2
// tokens these 32-token batches leave it nothing (the log says how many it took), at 0 (off) the bits
// are those of whole-layer uploads. Skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaOption, cudaStatus } from "../ffi/cuda.ts";
import type { CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { synth } from "../src/cli/synth.ts";
import { maxAbs, std, top2 } from "./logit-math.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-cpu-share: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-cpushare-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

gpu("the CPU's share of a prompt layer's experts", () => {
  for (const c of [{ model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 4 }, { model: "test-moe", quant: "Q8_0", layers: 0 }]) {
    test(`${c.model}:${c.quant}, --cpu-moe: a prompt of 4 batches against whole-layer uploads`, async () => {
      const file = join(tmp, `${c.model}-${c.quant}.gguf`);
      await synth({ model: c.model, quant: c.quant, out: file, layers: c.layers, seed: 31 });
      const m = Model.load(file, { nCtx: 256, nSlots: 1, maxTokens: 32, nThreads: 8, nGpuLayers: "all", placement: { cpuMoe: true } });
      try {
        const be = m.backend as CudaBackend, V = m.hp.nVocab;
        be.setOption(CudaOption.uploadMin, 16);
        const prompt = Array.from({ length: 128 }, (_, i) => (i * 7919 + 31) % V);
        const run = (sparse: number, tokens: number, all = false) => {
          be.setOption(CudaOption.sparseUpload, sparse);
          be.setOption(CudaOption.cpuTokens, tokens);
          const h0 = be.hostStats()!;
          const lg = m.evalSequence(prompt, 0, 0, all).slice();
          const h1 = be.hostStats()!;
          return { lg, experts: h1.cpuExperts - h0.cpuExperts, pairs: h1.cpuPairs - h0.cpuPairs, layers: h1.cpuLayers - h0.cpuLayers, pairUs: h1.pairUs };
        };
        const whole = run(0, 0);
        run(1, 0); // the counts a first prompt leaves (the copies ahead guess from them)
        const off = run(1, 0);
        let differ = 0;
        for (let i = 0; i < V; i++) if (!(off.lg[i] === whole.lg[i])) differ++;
        expect(off.experts).toBe(0);
        expect(differ).toBe(0);
        const sd = std(whole.lg);
        for (const tokens of [65536, 2]) {
          for (const all of [false, true]) {
            run(1, tokens, all); // its own counts first
            const r = run(1, tokens, all);
            const ref = all ? run(0, 0, true).lg : whole.lg;
            const rows = ref.length / V;
            let worst = 0, clear = 0, same = 0;
            for (let t = 0; t < rows; t++) {
              const a = ref.subarray(t * V, (t + 1) * V), b = r.lg.subarray(t * V, (t + 1) * V);
              worst = Math.max(worst, maxAbs(a, b) / sd);
              const ga = top2(a);
              if (ga.gap > 0.01 * sd) {
                clear++;
                if (top2(b).id === ga.id) same++;
              }
            }
            console.log(`${c.model}:${c.quant} cpuTokens ${tokens}${all ? ", every row's logits" : ""}: ${r.experts} experts (${r.pairs} pairs) of ${r.layers} layers on the CPU (${r.pairUs} us a pair); ` +
              `max |dlogit| / std ${worst.toExponential(2)} over ${rows} rows; greedy ${same}/${clear} at a clear margin`);
            expect(r.lg.every(Number.isFinite)).toBe(true);
            if (tokens === 65536) expect(r.experts).toBeGreaterThan(0);
            expect(worst).toBeLessThan(5e-3);
            expect(same).toBe(clear);
          }
        }
        expect(() => be.setOption(CudaOption.cpuTokens, 65537)).toThrow(/CPU share/);
        be.setOption(CudaOption.cpuTokens, -1);
      } finally {
        m.close();
      }
    }, 300_000);
  }
});
