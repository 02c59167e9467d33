// bloomery: where a CUDA decode step's time goes, on the GPU machine - one model upload, then per
// configuration (one-token kernels, programmatic dependent launch, carveout, graphs): decode tokens a
// second through the backend as the bench runs them, and the captured graph replayed alone (GPU
// time back to back, host time of the launch call, latency with a synchronisation).
// Usage: BUN_BE_BUN=1 bloomery-serve scripts/device-cuda-probe.ts <model.gguf> [depths, e.g. 64,4096] [check]
// (every configuration at the first depth, the first four at the others). With `check`: no timing;
// each new one-token kernel set's logits against the round-1 kernels' (fast 15) at every depth
// (`check <bits>`: that set alone), then a line AGREES=<bits> for each set that agreed.
// BLOOMERY_SAFE_FAST=<bits> skips configurations that use other bits.
import { CudaFast, CudaOption } from "../ffi/cuda.ts";
import { CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";

const path = process.argv[2];
if (!path) {
  process.stderr.write("usage: device-cuda-probe.ts <model.gguf> [depths]\n");
  process.exit(2);
}
const depths = (process.argv[3] ?? "64").split(",").map(Number);
if (depths.some((d) => !Number.isInteger(d) || d < 1)) throw new Error(`depths: ${process.argv[3]}`);
const maxDepth = Math.max(...depths);
const m = Model.load(path, { nCtx: 1, maxTokens: 1, nThreads: 1 });
const be = m.backends.create({ nSlots: 1, nCtxSlot: maxDepth + 1024, maxTokens: 512, nThreads: 1, nThreadsBatch: 1 }, { nGpuLayers: 99 });
if (!(be instanceof CudaBackend)) throw new Error(`the probe needs the CUDA backend, got ${be.name}`);
const V = m.hp.nVocab;
const logits = new Float32Array(V);
let seed = 7;
const tok = () => (seed = (seed * 1103515245 + 12345) % 2147483648) % V;

// the context filled to the largest depth in prompt batches (shallower steps overwrite their positions)
for (let p = 0; p < maxDepth; p += 512) {
  const n = Math.min(512, maxDepth - p);
  be.forward({
    tokens: Int32Array.from({ length: n }, tok),
    pos: Int32Array.from({ length: n }, (_, i) => p + i),
    seq: new Int32Array(n),
    outRows: Int32Array.of(n - 1),
    logits,
  });
}

function decode(n: number, pos0: number): number {
  const t0 = performance.now();
  for (let i = 0; i < n; i++)
    be.forward({ tokens: Int32Array.of(tok()), pos: Int32Array.of(pos0 + i), seq: new Int32Array(1), outRows: Int32Array.of(0), logits });
  return (1000 * n) / (performance.now() - t0);
}

function step(depth: number, t: number): Float32Array {
  const out = new Float32Array(V);
  be.forward({ tokens: Int32Array.of(t), pos: Int32Array.of(depth), seq: new Int32Array(1), outRows: Int32Array.of(0), logits: out });
  return out;
}
function std(a: Float32Array): number {
  let s1 = 0, s2 = 0;
  for (const v of a) { s1 += v; s2 += v * v; }
  const mean = s1 / a.length;
  return Math.sqrt(Math.max(s2 / a.length - mean * mean, 1e-30));
}

if (process.argv[4] === "check") {
  // each new kernel set against the round-1 kernels (15) on the same tokens and positions (one
  // set when named: `check <bits>`, so that a set that breaks the context spoils no other)
  const F = CudaFast;
  const only = process.argv[5] ? Number(process.argv[5]) : 0;
  const sets = [
    { name: "head groups", bits: 15 | F.headGroups },
    { name: "fused router", bits: 15 | F.fusedRouter },
    { name: "all", bits: F.all },
  ].filter((c) => !only || c.bits === only);
  const bad = new Set<number>();
  for (const depth of depths) {
    be.setOption(CudaOption.fast, 15);
    const ref = [3, 17].map((t) => step(depth, t));
    for (const c of sets) {
      let d = 0;
      try {
        be.setOption(CudaOption.fast, c.bits);
        [3, 17].forEach((t, i) => {
          const y = step(depth, t);
          let m = 0;
          for (let j = 0; j < V; j++) m = Math.max(m, Number.isFinite(y[j]) ? Math.abs(y[j] - ref[i][j]) : Infinity);
          d = Math.max(d, m / std(ref[i]));
        });
      } catch (e) {
        d = Infinity;
        console.log(`check ${c.name} (${c.bits}) at depth ${depth}: ${e instanceof Error ? e.message : String(e)}`);
      }
      const ok = d < 3e-2;
      if (!ok) bad.add(c.bits);
      console.log(`check ${c.name} (fast ${c.bits}) vs fast 15 at depth ${depth}: max |dlogit| / std ${d.toExponential(2)} ${ok ? "ok" : "DIFFERS"}`);
    }
  }
  for (const c of sets) if (!bad.has(c.bits)) console.log(`AGREES=${c.bits}`);
  be.close();
  m.close();
  process.exit(0);
}

interface Config { name: string; fast: number; pdl: number; graphs: number; carveout: number }
const configs: Config[] = [
  { name: `the library's default (fast ${CudaFast.default})`, fast: CudaFast.default, pdl: 1, graphs: 1, carveout: -1 },
  { name: "without the fused router (47)", fast: 47, pdl: 1, graphs: 1, carveout: -1 },
  { name: "without attention by head groups (31)", fast: 31, pdl: 1, graphs: 1, carveout: -1 },
  { name: "round-1 kernels (15)", fast: 15, pdl: 1, graphs: 1, carveout: -1 },
  { name: "f32 activations (55)", fast: 55, pdl: 1, graphs: 1, carveout: -1 },
  { name: "general kernels (fast 0)", fast: 0, pdl: 1, graphs: 1, carveout: -1 },
  { name: "default without PDL", fast: CudaFast.default, pdl: 0, graphs: 1, carveout: -1 },
  { name: "default, graphs off", fast: CudaFast.default, pdl: 1, graphs: 0, carveout: -1 },
];
const safeEnv = process.env.BLOOMERY_SAFE_FAST;
const safeBits = safeEnv ? Number(safeEnv) : CudaFast.default;
for (const [di, depth] of depths.entries()) {
  for (const c of di === 0 ? configs : configs.slice(0, 4)) {
    if ((c.fast & ~safeBits & (CudaFast.fusedRouter | CudaFast.headGroups)) !== 0) {
      console.log(`probe ${c.name}: skipped (fast ${c.fast} uses kernels the check refused)`);
      continue;
    }
    be.setOption(CudaOption.carveout, c.carveout);
    be.setOption(CudaOption.pdl, c.pdl);
    be.setOption(CudaOption.fast, c.fast);
    be.setOption(CudaOption.graphs, c.graphs);
    decode(4, depth); // capture
    const tps = decode(64, depth);
    let rep = "";
    if (c.graphs) {
      const r = be.replayProbe(64);
      rep = `; graph alone: ${r.gpuUs.toFixed(1)} us GPU a step (${(1e6 / r.gpuUs).toFixed(1)} t/s), launch call ${r.launchUs.toFixed(1)} us, synced ${r.syncedUs.toFixed(1)} us`;
    }
    const s = be.stats();
    console.log(`probe ${c.name}: decode ${tps.toFixed(1)} t/s at depth ${depth}${rep} [steps ${s.steps}, graph steps ${s.graphSteps}, graphs ${s.graphs}]`);
  }
}
be.close();
m.close();
