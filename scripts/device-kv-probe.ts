// bloomery: where the time of a prompt-cache save and restore goes on the card - loads <model>
// on the card (one slot of 8192 positions), evaluates a 4,000-token prompt, then times kvSave
// into a fresh buffer, kvSave into the same buffer again, kvLoad from it, and the equivalent
// plain host copies (fresh allocation + memcpy-like fill) for comparison.
// Usage: BUN_BE_BUN=1 bloomery-serve scripts/device-kv-probe.ts <model.gguf>
import { Model } from "../src/engine/model.ts";

const path = process.argv[2];
if (!path) {
  process.stderr.write("usage: device-kv-probe.ts <model.gguf>\n");
  process.exit(2);
}
const m = Model.load(path, { nCtx: 8192, nSlots: 2, maxTokens: 512, nGpuLayers: "all" });
const n = 4000;
const prompt = Array.from({ length: n }, (_, i) => (i * 7919 + 13) % Math.min(m.hp.nVocab, 100000));
let t = performance.now();
m.evalSequence(prompt, 0, 0);
console.log(`prompt of ${n} tokens: ${(performance.now() - t).toFixed(1)} ms`);
const P = m.backend.kvPosBytes();
const ms = (f: () => void) => { const t0 = performance.now(); f(); return (performance.now() - t0).toFixed(1); };
let buf = new Uint8Array(0);
console.log(`alloc ${((n * P) / 2 ** 20).toFixed(0)} MiB: ${ms(() => { buf = new Uint8Array(n * P); })} ms`);
console.log(`kvSave into the fresh buffer: ${ms(() => m.backend.kvSave(0, n, buf))} ms`);
console.log(`kvSave into the same buffer: ${ms(() => m.backend.kvSave(0, n, buf))} ms`);
console.log(`kvLoad into slot 1: ${ms(() => m.backend.kvLoad(1, n, buf))} ms`);
console.log(`kvLoad again: ${ms(() => m.backend.kvLoad(1, n, buf))} ms`);
const other = new Uint8Array(n * P);
console.log(`host copy of the buffer into a fresh one: ${ms(() => other.set(buf))} ms; again: ${ms(() => other.set(buf))} ms`);
t = performance.now();
m.backend.kvCopy(0, 1, n);
console.log(`kvCopy slot 0 -> 1 on the card: ${(performance.now() - t).toFixed(1)} ms`);
m.close();
