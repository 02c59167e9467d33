// bloomery: where a CUDA decode step's time goes, on the GPU machine - one model upload, then per
// configuration (one-token kernels, programmatic dependent launch, carveout, graphs): decode tokens a
// second through the backend as the bench runs them, and the captured graph replayed alone (GPU
// time back to back, host time of the launch call, latency with a synchronisation).
// Usage: BUN_BE_BUN=1 bloomery-serve scripts/device-cuda-probe.ts <model.gguf> [depths, e.g. 64,4096]
// (every configuration at the first depth, the first two at the others)
import { CudaOption } from "../ffi/cuda.ts";
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

interface Config { name: string; fast: number; pdl: number; graphs: number; carveout: number }
const configs: Config[] = [
  { name: "one-token kernels on int8 activations, PDL, graphs (default)", fast: 15, pdl: 1, graphs: 1, carveout: -1 },
  { name: "one-token kernels on f32 activations (fast 7)", fast: 7, pdl: 1, graphs: 1, carveout: -1 },
  { name: "general kernels (fast 0)", fast: 0, pdl: 1, graphs: 1, carveout: -1 },
  { name: "default without PDL", fast: 15, pdl: 0, graphs: 1, carveout: -1 },
  { name: "int8 without the one-token experts (13)", fast: 13, pdl: 1, graphs: 1, carveout: -1 },
  { name: "int8 without the fused attention (11)", fast: 11, pdl: 1, graphs: 1, carveout: -1 },
  { name: "default, graphs off", fast: 15, pdl: 1, graphs: 0, carveout: -1 },
];
for (const [di, depth] of depths.entries()) {
  for (const c of di === 0 ? configs : configs.slice(0, 2)) {
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
