// Test helpers for model runs: greedy decoding and argmax over logits.
import { cpuPath, setCpuPath } from "../ffi/cpu-kernels.ts";
import type { Batch } from "../src/engine/backend.ts";
import type { Model } from "../src/engine/model.ts";

export function argmax(v: Float32Array): number {
  let b = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[b]) b = i;
  return b;
}

/** Greedy continuation of `n` tokens after `prompt` (slot 0, from position 0). */
export function greedy(m: Model, prompt: number[], n: number): number[] {
  let lg = m.evalSequence(prompt, 0);
  let pos = prompt.length;
  const out: number[] = [];
  for (let s = 0; s < n; s++) {
    const t = argmax(lg);
    out.push(t);
    if (s + 1 < n) lg = m.evalSequence([t], pos++);
  }
  return out;
}

export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}

/** n rows of e pseudo-random values in [-1, 1) (an LCG from seed): residual rows for the host hooks' tests. */
export function lcgRows(n: number, e: number, seed: number): Float32Array {
  const x = new Float32Array(n * e);
  let s = seed >>> 0;
  for (let i = 0; i < x.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    x[i] = ((s >>> 8) & 0xffff) / 32768 - 1;
  }
  return x;
}

/** Run f on one CPU path, then go back to the path in use. */
export function onPath<T>(path: string, f: () => T): T {
  const was = cpuPath();
  setCpuPath(path);
  try {
    return f();
  } finally {
    setCpuPath(was);
  }
}

/**
 * Teacher-forced top-1 picks of one-token steps: the prompt, then the reference's own tokens one at
 * a time (so every step after the prompt is a decode step); of the steps whose reference margin is
 * at least `minMargin`, how many pick the reference's token.
 */
export function teacherForcedSteps(m: Model, ref: { prompt: number[]; greedy: number[]; margins: number[] }, minMargin = 0.1): { clear: number; agree: number } {
  let lg = m.evalSequence(ref.prompt, 0);
  let clear = 0, agree = 0;
  for (let s = 0; s < ref.greedy.length; s++) {
    if (ref.margins[s] >= minMargin) {
      clear++;
      if (argmax(lg) === ref.greedy[s]) agree++;
    }
    if (s + 1 < ref.greedy.length) lg = m.evalSequence([ref.greedy[s]], ref.prompt.length + s);
  }
  return { clear, agree };
}

/** One forward of the given rows (token, position, sequence) in one batch; the logits of rows `out`. */
export function oneBatch(m: Model, rows: { tok: number; pos: number; seq: number }[], out: number[]): Float32Array {
  const V = m.hp.nVocab, logits = new Float32Array(out.length * V);
  const b: Batch = {
    tokens: Int32Array.from(rows, (r) => r.tok), pos: Int32Array.from(rows, (r) => r.pos), seq: Int32Array.from(rows, (r) => r.seq),
    outRows: Int32Array.from(out), logits,
  };
  m.backend.forward(b);
  return logits;
}
