// Routed experts in host memory beside the card (cuda/hybrid/hybrid.cu, issue 6): the same synthetic
// model with every expert on the card and with --cpu-moe, --n-cpu-moe (half) and one layer by -ot
// keeping experts in host memory. A batch that uploads its host experts runs the card's kernels on
// the same bytes: the same bits as the all-card forward. Batches that call the host hook (the CPU
// library's numerics for those layers) stay within the bound the CUDA tests hold against the CPU
// path, with the same greedy token wherever the all-card top-2 margin is clear. Decode steps run
// as graphs with the hook inside. Host experts past a small host budget go to the NVMe tier: the hook
// reads them through the expert store, the same bits as from host memory. Skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaOption, cudaStatus } from "../ffi/cuda.ts";
import type { CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model, type LoadOptions } from "../src/engine/model.ts";
import type { PlacementFlags } from "../src/engine/plan.ts";
import { synth } from "../src/cli/synth.ts";
import { maxAbs, std, top2 } from "./logit-math.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-hybrid: GPU tests skipped (${st.reason})`);
const gpu = st.ok ? describe : describe.skip;
const tmp = mkdtempSync(join(tmpdir(), "bloomery-hybrid-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const CASES = [
  { model: "qwen3-30b-a3b", quant: "Q4_K_M", layers: 4 },
  { model: "test-moe", quant: "Q8_0", layers: 0 },
];

gpu("experts in host memory beside the card", () => {
  for (const c of CASES) {
    test(`${c.model}:${c.quant}: --cpu-moe, --n-cpu-moe, -ot against every expert on the card`, async () => {
      const file = join(tmp, `${c.model}-${c.quant}.gguf`);
      await synth({ model: c.model, quant: c.quant, out: file, layers: c.layers, seed: 11 });
      const lines: string[] = [];
      const base: LoadOptions = { nCtx: 256, nSlots: 2, maxTokens: 64, nThreads: 8, nGpuLayers: "all", log: (l) => lines.push(l) };
      const ref = Model.load(file, { ...base, placement: {} });
      const V = ref.hp.nVocab, L = ref.hp.nLayer;
      const prompt = Array.from({ length: 40 }, (_, i) => (i * 7919 + 13) % V);
      const refPrompt = ref.evalSequence(prompt, 0, 0, true);
      // greedy continuation on the card, then the same tokens fed to each placement
      const cont: number[] = [];
      const refSteps: Float32Array[] = [];
      let lg: Float32Array = refPrompt.slice((prompt.length - 1) * V);
      for (let s = 0; s < 8; s++) {
        const t = top2(lg).id;
        cont.push(t);
        lg = ref.evalSequence([t], prompt.length + s);
        refSteps.push(lg);
      }
      const placements: { name: string; f: PlacementFlags; layers: number }[] = [
        { name: "--cpu-moe", f: { cpuMoe: true }, layers: L },
        { name: `--n-cpu-moe ${Math.max(1, L >> 1)}`, f: { nCpuMoe: Math.max(1, L >> 1) }, layers: Math.max(1, L >> 1) },
        { name: "-ot blk.1 experts=CPU", f: { overrides: [{ pattern: "blk\\.1\\.ffn_.*_exps", buffer: "CPU" }] }, layers: 1 },
      ];
      try {
        for (const p of placements) {
          const m = Model.load(file, { ...base, placement: p.f });
          try {
            const be = m.backend as CudaBackend;
            expect(lines.some((l) => l.includes(`the routed experts of ${p.layers} layers stay in host memory`))).toBe(true);
            // a prompt that uploads its experts: the card's kernels on the same bytes
            be.setOption(CudaOption.uploadMin, 9);
            be.setOption(CudaOption.hostShare, 0);
            be.setOption(CudaOption.cpuTokens, 0); // every used expert copied (the CPU's share: test/cuda-cpu-share.test.ts)
            // every layer whole, two ahead; then only the experts each layer's picks use, copied once
            // they are made: the same bits either way
            be.setOption(CudaOption.sparseUpload, 0);
            const up = m.evalSequence(prompt, 0, 0, true);
            const sWhole = be.hostStats()!;
            expect(sWhole.uploadRuns).toBe(p.layers);
            expect(sWhole.sparseRuns).toBe(0);
            expect(maxAbs(up, refPrompt)).toBe(0);
            be.setOption(CudaOption.sparseUpload, 1);
            const upSparse = m.evalSequence(prompt, 0, 0, true);
            const sUp = be.hostStats()!;
            expect(sUp.uploadRuns - sWhole.uploadRuns).toBe(p.layers);
            expect(sUp.sparseRuns).toBe(p.layers);
            expect(maxAbs(upSparse, refPrompt)).toBe(0);
            // the share of the bytes the whole step's picks used, then the bytes the sparse step copied
            expect(sUp.usedShare).toBeGreaterThan(0);
            expect(sUp.usedShare).toBeLessThanOrEqual(1);
            const whole = sWhole.uploadBytes, sparse = sUp.uploadBytes - sWhole.uploadBytes;
            expect(Math.abs(sparse - sUp.usedShare * whole)).toBeLessThanOrEqual(0.002 * whole);
            // the same prompt again: every used expert was copied ahead of its picks (from the last counts)
            expect(sUp.prefetchedBytes - sWhole.prefetchedBytes).toBe(sparse);
            console.log(`${p.name}: ${prompt.length} tokens used ${(100 * sUp.usedShare).toFixed(1)}% of the host experts' bytes: sparse uploads ${sparse} of ${whole} bytes`);
            // a shorter prompt (the copies ahead by the last counts a superset of its picks), then the
            // first again (a subset: the picks copy what was missed): the same bits as whole layers,
            // and for the first as every expert on the card. (Prompts of 9-20 tokens differ from the
            // all-card forward by up to 0.009 with whole uploads as well; 40 tokens match bit for bit.)
            const short = prompt.slice(3, 15);
            const shortSparse = m.evalSequence(short, 0, 0, true);
            const s2 = be.hostStats()!;
            expect(maxAbs(m.evalSequence(prompt, 0, 0, true), refPrompt)).toBe(0);
            const s3 = be.hostStats()!;
            expect(s3.sparseRuns).toBe(3 * p.layers);
            be.setOption(CudaOption.sparseUpload, 0);
            expect(maxAbs(m.evalSequence(short, 0, 0, true), shortSparse)).toBe(0);
            const late = s3.uploadBytes - s2.uploadBytes - (s3.prefetchedBytes - s2.prefetchedBytes);
            console.log(`${p.name}: ${short.length} tokens after ${prompt.length}: ${s2.uploadBytes - sUp.uploadBytes} bytes; ${prompt.length} after ${short.length}: ${late} bytes copied after the picks`);
            be.setOption(CudaOption.sparseUpload, -1);
            // half the host layers on the CPU while the others upload: each layer as the hook or
            // the card computes it (within the hook's bound below, checked there)
            const sPre = be.hostStats()!;
            be.setOption(CudaOption.hostShare, 500);
            const mixed = m.evalSequence(prompt, 0, 0, true);
            const s0 = be.hostStats()!;
            const onHook = s0.splitRuns - sPre.splitRuns, uploaded = s0.uploadRuns - sPre.uploadRuns;
            expect(onHook + uploaded).toBe(p.layers);
            expect(onHook).toBe(Math.floor(p.layers * 0.5));
            expect(s0.hostShare).toBe(0.5);
            be.setOption(CudaOption.hostShare, -1);
            // the same prompt through the hook (the CPU's numerics for the host layers)
            be.setOption(CudaOption.uploadMin, 0);
            const hk = m.evalSequence(prompt, 0, 0, true);
            const s1 = be.hostStats()!;
            expect(s1.hookRuns - s0.hookRuns).toBe(p.layers);
            const dPrompt = maxAbs(hk, refPrompt) / std(refPrompt.subarray((prompt.length - 1) * V));
            const dMixed = maxAbs(mixed, refPrompt) / std(refPrompt.subarray((prompt.length - 1) * V));
            console.log(`${p.name}: a prompt with ${onHook} of ${p.layers} host layers on the CPU while the others upload: max |dlogit| / std ${dMixed.toExponential(2)}`);
            expect(dMixed).toBeLessThan(1e-1);
            // decode steps (graphs with the hook inside): the default split of a token's picks (the
            // card reading its share from host memory), then every pick on the CPU, then every
            // pick read by the card (each step's KV row rewritten with nearly the same values)
            const K = m.hp.nExpertUsed, hs0 = be.hostStats()!, share0 = hs0.cardShare;
            // copied and not asked for: the share sized by measuring both sides, one to K - 1 picks
            if (hs0.copied && hs0.cpuPickUs > 0) {
              expect(hs0.cardPickUs).toBeGreaterThan(0);
              expect(share0).toBeGreaterThanOrEqual(1);
              expect(share0).toBeLessThan(K);
              console.log(`${p.name}: the card's share sized at ${share0} of ${K} (the CPU ${hs0.cpuFixedUs.toFixed(1)} us a call + ${hs0.cpuPickUs.toFixed(1)} us a pick, the card's copy ${hs0.cardPickUs.toFixed(1)} us)`);
            }
            const shares = [share0, 0, K];
            const dDec = shares.map(() => 0);
            let clear = 0, agree = 0;
            for (let s = 0; s < cont.length; s++) {
              const r = refSteps[s];
              shares.forEach((sh, i) => {
                be.setOption(CudaOption.cardShare, sh);
                const y = m.evalSequence([cont[s]], prompt.length + s);
                dDec[i] = Math.max(dDec[i], maxAbs(y, r) / std(r));
                const t = top2(r);
                if (i === 0 && t.gap > 0.1 * std(r)) {
                  clear++;
                  if (top2(y).id === t.id) agree++;
                }
              });
              be.setOption(CudaOption.cardShare, share0);
            }
            const dDecode = Math.max(...dDec);
            const st2 = be.stats();
            console.log(`${c.model}:${c.quant} ${p.name}: max |dlogit| / std: prompt via the hook ${dPrompt.toExponential(2)}, decode with the card reading ${shares.map((sh, i) => `${sh} picks ${dDec[i].toExponential(2)}`).join(", ")}; ` +
              `greedy ${agree}/${clear} where the margin is clear; upload threshold ${be.hostStats()!.uploadMin}, graphs replayed ${st2.graphSteps}`);
            expect(dPrompt).toBeLessThan(1e-1);
            expect(dDecode).toBeLessThan(1e-1);
            expect(agree).toBe(clear);
            expect(st2.graphSteps).toBeGreaterThan(0);
            expect(be.hostStats()!.hookRuns).toBeGreaterThan(s1.hookRuns);
            // two sequences in one decode batch: each as in its own step, within the bound
            const two = new Float32Array(2 * V);
            be.forward({ tokens: Int32Array.of(cont[0], cont[1]), pos: Int32Array.of(0, 0), seq: Int32Array.of(0, 1), outRows: Int32Array.of(0, 1), logits: two });
            expect(two.every(Number.isFinite)).toBe(true);
          } finally {
            m.close();
          }
        }
      } finally {
        ref.close();
      }
    }, 600_000);
  }

  test("disk beside the card: --cpu-moe past a small --host-budget reads the host experts through the expert store (a cache of half a layer's experts): the same bits as those experts in host memory through the hook, within the bound of every expert on the card", async () => {
    const file = join(tmp, "qwen3-disk.gguf");
    await synth({ model: "qwen3-30b-a3b", quant: "Q4_K_M", out: file, layers: 4, seed: 11 });
    const lines: string[] = [];
    const base: LoadOptions = { nCtx: 256, nSlots: 2, maxTokens: 64, nThreads: 8, nGpuLayers: "all", log: (l) => lines.push(l) };
    const ref = Model.load(file, { ...base, placement: {} });
    const ram = Model.load(file, { ...base, placement: { cpuMoe: true } });
    const V = ref.hp.nVocab, L = ref.hp.nLayer, X = ref.hp.nExpert;
    const expertBytes = [...ref.gguf.tensors.values()].filter((t) => /_exps\./.test(t.name)).reduce((a, t) => a + t.nbytes, 0);
    const budget = Math.floor((expertBytes / (L * X)) * (X / 2));
    let disk: Model | undefined;
    try {
      disk = Model.load(file, { ...base, placement: { cpuMoe: true, hostBudgetBytes: budget } });
      expect(disk.plan!.expertRamBytes).toBe(budget);
      expect(disk.plan!.disk.nExperts).toBe(L * X);
      expect(lines.some((l) => new RegExp(`^placement: card .*; disk: ${L * X} experts .* read on demand into a .* RAM cache$`).test(l))).toBe(true);
      expect(disk.expertStats()!.slots).toBeLessThan(X);
      const beR = ram.backend as CudaBackend, beD = disk.backend as CudaBackend;
      const h0 = beD.hostStats()!;
      expect(h0.blocks).toBe(L);
      expect(h0.pinned).toBe(false);
      expect(h0.uploadMin).toBeGreaterThanOrEqual(2 ** 30);
      // host memory through the hook alone (no uploads, the CPU computes every pick), as the disk tier always runs
      beR.setOption(CudaOption.uploadMin, 0);
      beR.setOption(CudaOption.cardShare, 0);
      // a prompt that would upload: the layers on disk take the hook
      beD.setOption(CudaOption.uploadMin, 9);
      const prompt = Array.from({ length: 40 }, (_, i) => (i * 7919 + 13) % V);
      const refPrompt = ref.evalSequence(prompt, 0, 0, true);
      const pr = ram.evalSequence(prompt, 0, 0, true), pd = disk.evalSequence(prompt, 0, 0, true);
      const h1 = beD.hostStats()!;
      expect(h1.uploadRuns).toBe(0);
      expect(h1.hookRuns - h0.hookRuns).toBe(L);
      expect(maxAbs(pd, pr)).toBe(0);
      const dPrompt = maxAbs(pd, refPrompt) / std(refPrompt.subarray((prompt.length - 1) * V));
      // greedy steps on the card, the same tokens fed to both (decode graphs with the hook inside)
      let lg: Float32Array = refPrompt.slice((prompt.length - 1) * V);
      let dDecode = 0, clear = 0, agree = 0;
      for (let s = 0; s < 8; s++) {
        const t = top2(lg).id;
        const pos = prompt.length + s;
        lg = ref.evalSequence([t], pos);
        const yr = ram.evalSequence([t], pos), yd = disk.evalSequence([t], pos);
        expect(maxAbs(yd, yr)).toBe(0);
        dDecode = Math.max(dDecode, maxAbs(yd, lg) / std(lg));
        const r = top2(lg);
        if (r.gap > 0.1 * std(lg)) {
          clear++;
          if (top2(yd).id === r.id) agree++;
        }
      }
      // two sequences in one decode batch: the same bits as host memory
      const two = (m: Model) => {
        const out = new Float32Array(2 * V);
        m.backend.forward({ tokens: Int32Array.of(prompt[0], prompt[1]), pos: Int32Array.of(0, 0), seq: Int32Array.of(0, 1), outRows: Int32Array.of(0, 1), logits: out });
        return out;
      };
      const tr = two(ram), td = two(disk);
      expect(td.every(Number.isFinite)).toBe(true);
      expect(maxAbs(td, tr)).toBe(0);
      const xs = disk.expertStats()!;
      console.log(`disk beside the card (a ${(budget / 2 ** 20).toFixed(0)} MiB cache, ${xs.slots} slots of ${X} experts a layer): max |dlogit| / std against every expert on the card: ` +
        `prompt ${dPrompt.toExponential(2)}, decode ${dDecode.toExponential(2)}; greedy ${agree}/${clear} where the margin is clear; store ${xs.hits} hits, ${xs.misses} misses, ` +
        `${xs.evictions} evictions, ${xs.prefetchHits}/${xs.prefetchReads} prefetches used; graphs replayed ${beD.stats().graphSteps}`);
      expect(dPrompt).toBeLessThan(1e-1);
      expect(dDecode).toBeLessThan(1e-1);
      expect(agree).toBe(clear);
      expect(beD.stats().graphSteps).toBeGreaterThan(0);
      expect(xs.misses).toBeGreaterThan(0);
      expect(xs.evictions).toBeGreaterThan(0);
      expect(xs.readErrors).toBe(0);
      expect(beD.hostStats()!.uploadRuns).toBe(0);
      // promotion copies from host memory: refused for layers on disk
      expect(() => beD.setOption(CudaOption.promoteSlots, 2 * ref.hp.nExpertUsed)).toThrow(/promotion: the experts of all 4 host layers are read from disk/);
    } finally {
      disk?.close();
      ram.close();
      ref.close();
    }
  }, 600_000);

  test("a host budget for two of four host layers beside the card: the first two stay in host memory, the others are read from disk; through the hook the same bits as every host expert in memory; with the card's share and uploads within the bound", async () => {
    const file = join(tmp, "qwen3-disk.gguf");
    if (!existsSync(file)) await synth({ model: "qwen3-30b-a3b", quant: "Q4_K_M", out: file, layers: 4, seed: 11 });
    const lines: string[] = [];
    const base: LoadOptions = { nCtx: 256, nSlots: 2, maxTokens: 64, nThreads: 8, nGpuLayers: "all", log: (l) => lines.push(l) };
    const ref = Model.load(file, { ...base, placement: {} });
    const ram = Model.load(file, { ...base, placement: { cpuMoe: true } });
    const V = ref.hp.nVocab, L = ref.hp.nLayer, X = ref.hp.nExpert;
    // Q4_K_M's layers differ (some downs Q6_K): each layer's own bytes
    const bytesOf = (l: number) => [...ref.gguf.tensors.values()].filter((t) => t.name.startsWith(`blk.${l}.`) && /_exps\./.test(t.name)).reduce((a, t) => a + t.nbytes, 0);
    const layerBytes = [0, 1, 2, 3].map(bytesOf).reduce((a, b) => a + b, 0) / L;
    const budget = Math.floor(2.5 * layerBytes);
    let mixed: Model | undefined;
    try {
      mixed = Model.load(file, { ...base, placement: { cpuMoe: true, hostBudgetBytes: budget } });
      const where = (l: number) => mixed!.plan!.where.get(`blk.${l}.ffn_down_exps.weight`);
      expect([0, 1, 2, 3].map(where)).toEqual(["host", "host", "disk", "disk"]);
      expect(mixed.plan!.expertRamBytes).toBe(Math.floor(budget - bytesOf(0) - bytesOf(1)));
      expect(lines.some((l) => /^placement: the routed experts of 2 layers stay in host memory \((not )?pinned\) and 2 layers are read from the file into the CPU's RAM cache/.test(l))).toBe(true);
      const beR = ram.backend as CudaBackend, beM = mixed.backend as CudaBackend;
      expect(beM.hostStats()!.blocks).toBe(L);
      // the hook alone on both (no uploads, no card share): the same bits
      for (const be of [beR, beM]) {
        be.setOption(CudaOption.uploadMin, 0);
        be.setOption(CudaOption.cardShare, 0);
      }
      const prompt = Array.from({ length: 40 }, (_, i) => (i * 7919 + 13) % V);
      expect(maxAbs(mixed.evalSequence(prompt, 0, 0, true), ram.evalSequence(prompt, 0, 0, true))).toBe(0);
      for (let s = 0; s < 4; s++) {
        const t = (s * 131 + 7) % V;
        expect(maxAbs(mixed.evalSequence([t], prompt.length + s), ram.evalSequence([t], prompt.length + s))).toBe(0);
      }
      // the layers in host memory upload for a prompt and give the card its share of a token's picks; the others take the hook
      beM.setOption(CudaOption.uploadMin, 9);
      beM.setOption(CudaOption.cardShare, 2);
      const h0 = beM.hostStats()!;
      const refPrompt = ref.evalSequence(prompt, 0, 1, true), pm = mixed.evalSequence(prompt, 0, 1, true);
      const h1 = beM.hostStats()!;
      expect(h1.uploadRuns - h0.uploadRuns).toBe(2);
      expect(h1.hookRuns - h0.hookRuns).toBeGreaterThanOrEqual(2);
      const dPrompt = maxAbs(pm, refPrompt) / std(refPrompt.subarray((prompt.length - 1) * V));
      let lg: Float32Array = refPrompt.slice((prompt.length - 1) * V), dDecode = 0;
      for (let s = 0; s < 6; s++) {
        const t = top2(lg).id;
        lg = ref.evalSequence([t], prompt.length + s, 1);
        dDecode = Math.max(dDecode, maxAbs(mixed.evalSequence([t], prompt.length + s, 1), lg) / std(lg));
      }
      const xs = mixed.expertStats()!;
      console.log(`host RAM and disk beside the card (2 + 2 layers, a ${(mixed.plan!.expertRamBytes! / 2 ** 20).toFixed(0)} MiB cache): max |dlogit| / std against every expert on the card: ` +
        `prompt ${dPrompt.toExponential(2)}, decode ${dDecode.toExponential(2)}; store ${xs.hits} hits, ${xs.misses} misses`);
      expect(dPrompt).toBeLessThan(1e-1);
      expect(dDecode).toBeLessThan(1e-1);
      expect(xs.readErrors).toBe(0);
      expect(xs.misses).toBeGreaterThan(0);
    } finally {
      mixed?.close();
      ram.close();
      ref.close();
    }
  }, 600_000);

  test("promotion: the hottest experts of a skewed router move into card slots; logits stay within the bound", async () => {
    const file = join(tmp, "qwen3-skew.gguf");
    await synth({ model: "qwen3-30b-a3b", quant: "Q4_K_M", out: file, layers: 4, seed: 13, skew: 4 });
    const base: LoadOptions = { nCtx: 256, nSlots: 1, maxTokens: 16, nThreads: 8, nGpuLayers: "all", log: () => {} };
    const ref = Model.load(file, { ...base, placement: {} });
    const m = Model.load(file, { ...base, placement: { cpuMoe: true } });
    try {
      const be = m.backend as CudaBackend;
      const K = m.hp.nExpertUsed, V = m.hp.nVocab;
      be.setOption(CudaOption.promoteSlots, 2 * K);
      const toks = Array.from({ length: 48 }, (_, i) => (i * 4099 + 7) % V);
      let d = 0;
      for (let i = 0; i < toks.length; i++) {
        const r = ref.evalSequence([toks[i]], i), y = m.evalSequence([toks[i]], i);
        d = Math.max(d, maxAbs(y, r) / std(r));
      }
      const hs = be.hostStats()!;
      console.log(`promotion (${hs.promoteSlots} slots a layer, skew 4): ${hs.promoted} experts moved, ${hs.residentPicks} of ${hs.picks} picks on the card; max |dlogit| / std ${d.toExponential(2)}`);
      expect(hs.promoted).toBeGreaterThan(0);
      expect(hs.residentPicks).toBeGreaterThan(0);
      expect(hs.picks).toBe(toks.length * m.hp.nLayer * K);
      expect(d).toBeLessThan(1e-1);
      // off again: every pick back on the CPU and the card's zero-copy share
      be.setOption(CudaOption.promoteSlots, 0);
      const y = m.evalSequence([toks[0]], toks.length), r = ref.evalSequence([toks[0]], toks.length);
      expect(maxAbs(y, r) / std(r)).toBeLessThan(1e-1);
    } finally {
      m.close();
      ref.close();
    }
  }, 600_000);
});
