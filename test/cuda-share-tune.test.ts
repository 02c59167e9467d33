// The card's share of a token's host picks moved online (cuda/hybrid/share_tune.cu) on the card: with
// --cpu-moe and no share asked for, one-token steps leave their splits' timings in the mailbox's
// ring (the card's share, its wait, the CPU's call), every step's end reads them, and whatever
// share they settle on, the logits stay within the bound of every expert on the card. A share
// asked for (CudaOption.cardShare) stays put. Skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaOption, cudaStatus } from "../ffi/cuda.ts";
import type { CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model, type LoadOptions } from "../src/engine/model.ts";
import { synth } from "../src/cli/synth.ts";
import { maxAbs, std } from "./logit-math.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-share-tune: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-share-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const argmax = (v: Float32Array): number => v.reduce((k, x, i) => (x > v[k] ? i : k), 0);

gpu("the card's share sized online", () => {
  test("qwen3-30b-a3b Q4_K_M (4 layers), --cpu-moe: the timings are read, the share stays in range, the logits within the bound", async () => {
    const file = join(tmp, "q.gguf");
    await synth({ model: "qwen3-30b-a3b", quant: "Q4_K_M", out: file, layers: 4, seed: 23 });
    const base: LoadOptions = { nCtx: 256, nSlots: 1, maxTokens: 64, nThreads: 8, nGpuLayers: "all" };
    const ref = Model.load(file, { ...base, placement: {} });
    const m = Model.load(file, { ...base, placement: { cpuMoe: true } });
    try {
      const be = m.backend as CudaBackend, V = m.hp.nVocab, K = m.hp.nExpertUsed;
      const prompt = Array.from({ length: 8 }, (_, i) => (i * 7919 + 13) % V);
      let lr = ref.evalSequence(prompt, 0).slice();
      m.evalSequence(prompt, 0);
      const h0 = be.hostStats()!;
      const shares = new Set<number>();
      let worst = 0;
      for (let s = 0; s < 80; s++) {
        const t = argmax(lr);
        lr = ref.evalSequence([t], prompt.length + s).slice();
        const y = m.evalSequence([t], prompt.length + s);
        worst = Math.max(worst, maxAbs(y, lr) / std(lr));
        shares.add(be.hostStats()!.cardShare);
      }
      const h1 = be.hostStats()!;
      console.log(`share-tune: ${h1.shareSamples - h0.shareSamples} splits timed, ${h1.shareMoves - h0.shareMoves} moves, shares ${[...shares].join(", ")} of ${K}; max |dlogit| / std ${worst.toExponential(2)}`);
      expect(h1.shareSamples - h0.shareSamples).toBeGreaterThanOrEqual(80 * m.hp.nLayer * 0.9);
      for (const sh of shares) {
        expect(sh).toBeGreaterThanOrEqual(0);
        expect(sh).toBeLessThan(K);
      }
      expect(worst).toBeLessThan(1e-1);
      // asked for: fixed
      be.setOption(CudaOption.cardShare, 2);
      const moves = be.hostStats()!.shareMoves;
      for (let s = 0; s < 60; s++) m.evalSequence([(s * 31) % V], prompt.length + 80 + s);
      expect(be.hostStats()!.shareMoves).toBe(moves);
      expect(be.hostStats()!.cardShare).toBe(2);
    } finally {
      m.close();
      ref.close();
    }
  }, 300_000);
});
