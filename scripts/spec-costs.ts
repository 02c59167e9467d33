// bloomery: what a recurrent model's speculative rollback costs, one slot, interleaved, medians of 12: a decode pass
// (one token, its logits), a verifying pass (k+1 tokens, their logits), a snapshot taken and put back (the rollback
// kept: bl_cpu_rs_snap_*), the retake pass after it (j of the verified tokens again, no logits: their experts just
// read) and one of a fresh token. Keeping the state after every verified token instead would copy k+1 states a
// verification: k+1 times `take`. One JSON line.
// Usage: bun scripts/spec-costs.ts MODEL.gguf [K=4]   (env THREADS, 2)
import { Model } from "../src/engine/model.ts";

const [path, kArg = "4"] = process.argv.slice(2);
if (!path) {
  console.error("usage: bun scripts/spec-costs.ts MODEL.gguf [K]");
  process.exit(2);
}
const k = Number(kArg);
const m = Model.load(path, { nCtx: 1024, nSlots: 1, nThreads: Number(process.env.THREADS ?? 2), maxTokens: 64, log: () => {} });
const be = m.backend, V = m.hp.nVocab;
if (!(be.rsBytes?.() ?? 0)) throw new Error(`${path}: no recurrent layers`);
be.rsSnapReserve!();
let seed = 3;
const lo = Math.min(1000, V >> 2), span = V - lo;
const tok = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return lo + (seed % span); };
const logits = new Float32Array((k + 1) * V);
let pos = 0;
/** a pass of these tokens at pos.. (logits for all when out); returns its ms */
function pass(t: number[], at: number, out: boolean): number {
  const n = t.length;
  const b = { tokens: Int32Array.from(t), pos: Int32Array.from(t, (_, i) => at + i), seq: new Int32Array(n), outRows: out ? Int32Array.from(t, (_, i) => i) : new Int32Array(0), logits: logits.subarray(0, out ? n * V : 0) };
  const t0 = performance.now();
  be.forward(b);
  return performance.now() - t0;
}
const time = (f: () => void) => { const t0 = performance.now(); f(); return performance.now() - t0; };
pass(Array.from({ length: 64 }, tok), 0, false);
pos = 64;
const R: Record<string, number[]> = { decode: [], verify: [], take: [], back: [], retake1: [], retake3: [], fresh1: [] };
for (let r = 0; r < 12; r++) {
  R.decode.push(pass([tok()], pos++, true));
  R.take.push(time(() => be.rsSnapTake!(0)));
  const v = Array.from({ length: k + 1 }, tok);
  R.verify.push(pass(v, pos, true));
  R.back.push(time(() => be.rsSnapBack!(0)));
  R.retake1.push(pass(v.slice(0, 1), pos, false));
  be.rsSnapBack!(0);
  R.retake3.push(pass(v.slice(0, 3), pos, false));
  pos += 3;
  R.fresh1.push(pass([tok()], pos++, false));
}
const med = (a: number[]) => +[...a].sort((x, y) => x - y)[a.length >> 1].toFixed(2);
console.log(JSON.stringify({
  model: path.split("/").pop(), stateMiB: +(be.rsBytes!() / 2 ** 20).toFixed(2), k, load1: (await Bun.file("/proc/loadavg").text()).split(" ")[0],
  ms: Object.fromEntries(Object.entries(R).map(([n, a]) => [n, med(a)])),
}));
m.close();
