// bloomery: reads the kernel timeline records of a -DBL_TRACE CUDA build (cuda/runtime/trace.cuh;
// BLOOMERY_CUDA_TRACE=<file>) and prints, per kernel launch of a decode step (median over the
// steps of the most common shape), when its first block started, when its first block passed the
// wait on the previous kernel, and when its last block ended, relative to the previous launch.
// Usage: bun scripts/trace-report.ts <file> [--skip N] (N: steps to skip at the start, default 4)
import { readFileSync } from "node:fs";

const NAMES: Record<number, string> = {
  1: "fmv", 2: "fgu", 3: "fgu8", 4: "fdown", 5: "fo", 6: "attn2", 7: "a2merge", 8: "rmsnorm", 9: "topk_chunk",
  10: "topk_merge", 11: "mv", 12: "rows_f32", 13: "qk", 14: "qk_tok", 15: "attn_dec", 16: "router", 17: "moe_gu",
  18: "moe_down", 19: "attn1", 20: "mla_cache", 21: "mla_qrope", 22: "mla_attn", 23: "mla_merge", 24: "head_rows",
};

interface Launch { name: string; grid: number; t0: number; t0max: number; tw: number; twmax: number; te: number; temin: number; tws: number[]; t0s: number[]; tes: number[]; m1: number[]; m2: number[]; m3: number[]; }

const file = process.argv[2];
if (!file) {
  console.error("usage: bun scripts/trace-report.ts <trace file> [--skip N]");
  process.exit(2);
}
const si = process.argv.indexOf("--skip");
const skip = si > 0 ? Number(process.argv[si + 1]) : 4;
const buf = readFileSync(file);
const REC = 64;
const n = Math.floor(buf.length / REC);
const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
// records grouped by (tag, grid) in append order; launches of one kernel never overlap in a step
const open = new Map<string, Launch & { left: number }>();
const launches: Launch[] = [];
let gran = Infinity;
let prevT = -1;
for (let i = 0; i < n; i++) {
  const o = i * REC;
  const tag = dv.getUint32(o, true), grid = dv.getUint32(o + 4, true);
  const t0 = Number(dv.getBigUint64(o + 8, true)), tw = Number(dv.getBigUint64(o + 16, true)), te = Number(dv.getBigUint64(o + 24, true));
  if (prevT >= 0 && te !== prevT) gran = Math.min(gran, Math.abs(te - prevT));
  prevT = te;
  const m1 = Number(dv.getBigUint64(o + 32, true)), m2 = Number(dv.getBigUint64(o + 40, true)), m3 = Number(dv.getBigUint64(o + 48, true));
  const key = `${tag}:${grid}`;
  let l = open.get(key);
  if (!l) {
    l = { name: `${NAMES[tag] ?? `tag${tag}`}/${grid}`, grid, t0, t0max: t0, tw: tw || Infinity, twmax: tw, te, temin: te, tws: [], t0s: [], tes: [], m1: [], m2: [], m3: [], left: grid };
    open.set(key, l);
  } else {
    l.t0 = Math.min(l.t0, t0);
    l.t0max = Math.max(l.t0max, t0);
    if (tw) l.tw = Math.min(l.tw, tw);
    l.twmax = Math.max(l.twmax, tw);
    l.te = Math.max(l.te, te);
    l.temin = Math.min(l.temin, te);
  }
  // per block, in the same order: its own wait (or start) and the marks (NaN where absent)
  l.tws.push(tw);
  l.t0s.push(t0);
  l.tes.push(te);
  l.m1.push(m1 || NaN);
  l.m2.push(m2 || NaN);
  l.m3.push(m3 || NaN);
  if (--l.left === 0) {
    open.delete(key);
    launches.push(l);
  }
}
launches.sort((a, b) => a.t0 - b.t0);
// steps: a gap of more than 20 us between one launch's end and the next one's start
const steps: Launch[][] = [];
let cur: Launch[] = [];
let lastEnd = 0;
for (const l of launches) {
  if (cur.length && l.t0 - lastEnd > 20000) {
    steps.push(cur);
    cur = [];
    lastEnd = 0;
  }
  cur.push(l);
  lastEnd = Math.max(lastEnd, l.te);
}
if (cur.length) steps.push(cur);
const shapes = new Map<string, Launch[][]>();
for (const s of steps.slice(skip)) {
  const k = s.map((l) => l.name).join(",");
  shapes.set(k, [...(shapes.get(k) ?? []), s]);
}
const best = [...shapes.values()].filter((v) => v[0].length >= 50).sort((a, b) => b.length - a.length)[0];
if (!best) {
  console.log(`no steps (${n} records, ${launches.length} launches)`);
  process.exit(1);
}
const med = (v: number[]) => {
  const s = [...v].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};
const len = best[0].length;
console.log(`${n} records, ${launches.length} launches, ${steps.length} steps; shape of ${len} launches in ${best.length} steps; timer step ${gran} ns`);
console.log(`step: ${(med(best.map((s) => s[s.length - 1].te - s[0].t0)) / 1000).toFixed(1)} us (first start to last end, median)`);
// per position: handoff = first wait passed - previous last end; body = last end - first wait passed;
// early = first wait passed - first start; resident = share of blocks that started before the previous launch ended
const rows: { name: string; hand: number; body: number; early: number; tail: number; startLate: number }[] = [];
for (let i = 0; i < len; i++) {
  const hand: number[] = [], body: number[] = [], early: number[] = [], tail: number[] = [], late: number[] = [];
  for (const s of best) {
    const l = s[i], p = i > 0 ? s[i - 1] : null;
    const tw = Number.isFinite(l.tw) ? l.tw : l.t0;
    hand.push(p ? tw - p.te : 0);
    body.push(l.te - tw);
    early.push(tw - l.t0);
    tail.push(l.te - l.temin);
    late.push(p ? l.t0max - p.te : 0);
  }
  rows.push({ name: best[0][i].name, hand: med(hand), body: med(body), early: med(early), tail: med(tail), startLate: med(late) });
}
const f = (x: number) => (x / 1000).toFixed(2).padStart(7);
console.log("pos  kernel/grid            handoff    body   early  endspread lastStart-prevEnd (us)");
rows.forEach((r, i) => {
  if (i < 14 || i >= len - 8) console.log(`${String(i).padStart(3)}  ${r.name.padEnd(20)} ${f(r.hand)} ${f(r.body)} ${f(r.early)} ${f(r.tail)} ${f(r.startLate)}`);
  else if (i === 14) console.log("  ...");
});
// the marks (BL_TR_MARK 1-3): median and last over the blocks, from each block's own wait, then
// from the first block's wait (where the launch's critical path starts)
const firstWait = (l: Launch) => (Number.isFinite(l.tw) ? l.tw : l.t0);
const ownWait = (l: Launch, k: number) => l.tws[k] || l.t0s[k];
function fromRef(l: Launch, v: number[], ref: (l: Launch, k: number) => number, last: boolean): number {
  const d = v.map((x, k) => x - ref(l, k)).filter(Number.isFinite);
  if (!d.length) return NaN;
  return last ? Math.max(...d) : med(d);
}
function marksTable(title: string, ref: (l: Launch, k: number) => number, lead: (l: Launch) => number[], tail: (l: Launch) => number): void {
  console.log(title);
  rows.forEach((r, i) => {
    if (i < 6 || i > 11) return;
    const m = (pick: (l: Launch) => number) => med(best.map((s) => pick(s[i])));
    const cols = [
      ...lead(best[0][i]).map((_, c) => m((l) => lead(l)[c])),
      ...[0, 1, 2].flatMap((q) => [false, true].map((last) => m((l) => fromRef(l, [l.m1, l.m2, l.m3][q], ref, last)))),
      m(tail),
    ];
    console.log(`${String(i).padStart(3)}  ${r.name.padEnd(20)} ${cols.map(f).join(" ")}`);
  });
}
marksTable("marks from each block's own wait (us): wait spread (last - first), mark1 median/last, mark2 median/last, mark3 median/last, end median",
  ownWait, (l) => [l.twmax - firstWait(l)], (l) => fromRef(l, l.tes, ownWait, false));
marksTable("marks from the first block past the wait (us): mark1 median/last, mark2 median/last, mark3 median/last, end",
  (l) => firstWait(l), () => [], (l) => l.te - firstWait(l));
// per kernel kind: the sum over the step of handoff and body
const kinds = new Map<string, { hand: number; body: number; n: number }>();
for (const r of rows) {
  const k = kinds.get(r.name) ?? { hand: 0, body: 0, n: 0 };
  k.hand += r.hand;
  k.body += r.body;
  k.n++;
  kinds.set(r.name, k);
}
console.log("kernel/grid            launches  handoff/launch  body/launch  total a step (us)");
for (const [k, v] of [...kinds.entries()].sort((a, b) => b[1].hand + b[1].body - a[1].hand - a[1].body))
  console.log(`${k.padEnd(22)} ${String(v.n).padStart(6)} ${f(v.hand / v.n)}        ${f(v.body / v.n)}      ${f(v.hand + v.body)}`);
