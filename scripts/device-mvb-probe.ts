// bloomery: decode-batch step times on the GPU machine - 8 sequences (or argv[3]) decoding together,
// each step one token a sequence (the 2..8-token decode path), graphs on then off; the
// per-section times print when the context closes with BLOOMERY_CUDA_PROFILE=1 (graphs off then).
// Usage: device-mvb-probe.ts <model.gguf> [steps=64] [sequences=8]. A/B: BLOOMERY_CUDA_MV_BATCH=0.
import { CudaOption } from "../ffi/cuda.ts";
import { CudaBackend } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";

const path = process.argv[2];
if (!path) {
  process.stderr.write("usage: device-mvb-probe.ts <model.gguf> [steps] [sequences]\n");
  process.exit(2);
}
const steps = Number(process.argv[3] ?? 64), S = Number(process.argv[4] ?? 8);
if (!Number.isInteger(steps) || steps < 1 || !Number.isInteger(S) || S < 2 || S > 8) throw new Error("steps >= 1, sequences 2..8");
const m = Model.load(path, { nCtx: 1, maxTokens: 1, nThreads: 1 });
const be = m.backends.create({ nSlots: S, nCtxSlot: 2 * steps + 128, maxTokens: 64, nThreads: 1, nThreadsBatch: 1 }, { nGpuLayers: 99 });
if (!(be instanceof CudaBackend)) throw new Error(`the probe needs the CUDA backend, got ${be.name}`);
const cb: CudaBackend = be;
const V = m.hp.nVocab;
const prompt = 32;
for (let s = 0; s < S; s++) {
  const toks = Int32Array.from({ length: prompt }, (_, i) => (i * 7919 + s * 31 + 5) % V);
  be.forward({ tokens: toks, pos: Int32Array.from(toks.keys()), seq: new Int32Array(prompt).fill(s), outRows: Int32Array.of(prompt - 1), logits: new Float32Array(V) });
}
const ids = new Int32Array(S), vals = new Float32Array(S);
const seqs = Int32Array.from({ length: S }, (_, i) => i);
let pos = prompt;
function run(label: string): void {
  const t0 = performance.now();
  for (let i = 0; i < steps; i++, pos++) {
    const tokens = Int32Array.from({ length: S }, (_, s) => (ids[s] + s + i) % V);
    cb.forwardTopK({ tokens, pos: new Int32Array(S).fill(pos), seq: seqs, outRows: seqs, logits: new Float32Array(0) }, 1, ids, vals);
  }
  const us = (1000 * (performance.now() - t0)) / steps;
  console.log(`${label}: ${S}-token steps ${us.toFixed(1)} us a step, ${((S * 1e6) / us).toFixed(0)} tok/s in total (MV_BATCH=${process.env.BLOOMERY_CUDA_MV_BATCH ?? "1"})`);
}
run("warm-up");
pos -= steps; // the same positions again
run("graphs on");
cb.setOption(CudaOption.graphs, 0);
run("graphs off");
be.close();
m.close();
