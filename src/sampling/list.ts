// bloomery sampling: a concrete candidate list (llama's llama_token_data_array) and the sampler
// stages acting on one, each as llama.cpp's src/llama-sampler.cpp defines it: top-k, top-p,
// min-p, locally typical, XTC, temperature (with dynamic temperature), top-n-sigma, and sparse
// logit changes (repetition penalties, DRY) on the candidates.
import type { Mt19937 } from "./rng.ts";

const f32 = Math.fround;

/** Candidates in their current order; `p` holds the probabilities of the last softmax. */
export class CandList {
  constructor(
    public ids: number[],
    public logits: number[],
    public sorted: boolean,
    public p: number[] = [],
  ) {}

  get size(): number {
    return this.ids.length;
  }

  /** Keep the entries at `idx` (in that order). */
  pick(idx: readonly number[], sorted: boolean): void {
    const hasP = this.p.length === this.ids.length;
    this.ids = idx.map((i) => this.ids[i]);
    this.logits = idx.map((i) => this.logits[i]);
    this.p = hasP ? idx.map((i) => this.p[i]) : [];
    this.sorted = sorted;
  }

  truncate(n: number): void {
    this.ids.length = n;
    this.logits.length = n;
    if (this.p.length > n) this.p.length = n;
  }

  /** Sort by logit, descending (ties: lower id first), carrying p along. */
  sortDesc(): void {
    if (this.sorted) return;
    const idx = this.ids.map((_, i) => i);
    idx.sort((a, b) => this.logits[b] - this.logits[a] || this.ids[a] - this.ids[b]);
    this.pick(idx, true);
  }

  /** llama_sampler_softmax_impl: p = softmax(logits) in float, optionally sorting first. */
  softmax(sort: boolean): void {
    if (sort) this.sortDesc();
    const n = this.size;
    let mx = -Infinity;
    for (let i = 0; i < n; i++) if (this.logits[i] > mx) mx = this.logits[i];
    const p = new Array<number>(n);
    let sum = 0;
    for (let i = 0; i < n; i++) {
      const e = f32(Math.exp(this.logits[i] - mx));
      p[i] = e;
      sum = f32(sum + e);
    }
    for (let i = 0; i < n; i++) p[i] = f32(p[i] / sum);
    this.p = p;
  }
}

export function topKList(c: CandList, k: number): void {
  if (k <= 0) return;
  const kk = Math.min(k, c.size);
  c.sortDesc();
  c.truncate(kk);
}

export function topPList(c: CandList, p: number, minKeep: number): void {
  if (p >= 1 || c.size === 0) return;
  c.softmax(true);
  let cum = 0;
  let last = c.size;
  for (let i = 0; i < c.size; i++) {
    cum = f32(cum + c.p[i]);
    if (cum >= p && i + 1 >= minKeep) {
      last = i + 1;
      break;
    }
  }
  c.truncate(last);
}

export function minPList(c: CandList, p: number, minKeep: number): void {
  if (p <= 0 || c.size === 0) return;
  const logP = f32(Math.log(p));
  if (!c.sorted) {
    let mx = -Infinity;
    for (const l of c.logits) if (l > mx) mx = l;
    const thr = f32(mx + logP);
    const keep: number[] = [];
    for (let i = 0; i < c.size; i++) if (c.logits[i] >= thr) keep.push(i);
    if (keep.length > 0 && keep.length >= minKeep) {
      c.pick(keep, false);
      return;
    }
    c.sortDesc();
  }
  const thr = f32(c.logits[0] + logP);
  let i = 1;
  for (; i < c.size; i++) if (c.logits[i] < thr && i >= minKeep) break;
  c.truncate(i);
}

/** Shifted scores |-log p - H| (entries with p = 0 get +Infinity instead of llama's NaN). */
export function typicalList(c: CandList, p: number, minKeep: number): void {
  if (p >= 1 || c.size === 0) return;
  c.softmax(true);
  let entropy = 0;
  for (const q of c.p) if (q > 0) entropy = f32(entropy - f32(q * f32(Math.log(q))));
  const score = c.p.map((q) => (q > 0 ? Math.abs(f32(-f32(Math.log(q)) - entropy)) : Infinity));
  const idx = c.ids.map((_, i) => i).sort((a, b) => score[a] - score[b]);
  let cum = 0;
  let last = idx.length;
  for (let i = 0; i < idx.length; i++) {
    cum = f32(cum + c.p[idx[i]]);
    if (cum > p && (minKeep === 0 || i >= minKeep - 1)) {
      last = i + 1;
      break;
    }
  }
  c.pick(idx.slice(0, last), false);
}

/** XTC: with chance `prob`, drop every top candidate at or above `thr` but the last of them. */
export function xtcList(c: CandList, prob: number, thr: number, minKeep: number, rng: Mt19937): void {
  if (prob <= 0 || thr > 0.5 || c.size < 2) return;
  if (rng.nextFloat() > prob) return;
  c.softmax(true);
  let posLast = 0;
  for (let i = 0; i < c.size; i++) {
    if (c.p[i] >= thr) posLast = i;
    else break;
  }
  if (c.size - posLast >= minKeep && posLast > 0) c.pick(c.ids.map((_, i) => i).slice(posLast), true);
}

/** llama_sampler_temp_impl: t <= 0 keeps only the first largest logit (the rest become -inf). */
export function temperatureList(c: CandList, t: number): void {
  if (c.size === 0) return;
  if (t <= 0) {
    let best = 0;
    for (let i = 1; i < c.size; i++) {
      if (c.logits[i] > c.logits[best]) {
        c.logits[best] = -Infinity;
        best = i;
      } else c.logits[i] = -Infinity;
    }
    return;
  }
  for (let i = 0; i < c.size; i++) c.logits[i] = f32(c.logits[i] / t);
}

/** Dynamic temperature (llama_sampler_temp_ext with delta > 0): the temperature it used. */
export function dynamicTemperatureOf(entropy: number, size: number, t: number, delta: number, exponent: number): number {
  const minT = Math.max(0, t - delta);
  const maxT = t + delta;
  const maxEntropy = f32(-f32(Math.log(f32(1 / size))));
  const norm = f32(entropy / maxEntropy);
  return f32(minT + (maxT - minT) * f32(Math.pow(norm, exponent)));
}

export function dynamicTemperatureList(c: CandList, t: number, delta: number, exponent: number): void {
  if (c.size <= 1) return;
  c.softmax(true);
  let entropy = 0;
  for (const q of c.p) if (q > 0) entropy = f32(entropy - f32(q * f32(Math.log(q))));
  temperatureList(c, dynamicTemperatureOf(entropy, c.size, t, delta, exponent));
}

/** Top-n-sigma: logits below max - n * std (of the finite logits) become -inf. */
export function topNSigmaList(c: CandList, n: number): void {
  if (n <= 0 || c.size <= 1) return;
  let mx = c.logits[0];
  let sum = 0;
  let cnt = 0;
  for (const l of c.logits) {
    if (l === -Infinity) continue;
    if (l > mx) mx = l;
    sum += l;
    cnt++;
  }
  const mean = cnt > 0 ? sum / cnt : 0;
  let acc = 0;
  for (const l of c.logits) if (l !== -Infinity) acc += (l - mean) * (l - mean);
  const sd = cnt > 0 ? Math.sqrt(acc / cnt) : 0;
  const thr = f32(mx - f32(n * sd));
  for (let i = 0; i < c.size; i++) if (c.logits[i] < thr) c.logits[i] = -Infinity;
}

/** Repetition penalties on the candidates, `counts` from the window (llama_sampler_penalties). */
export function penaltiesList(c: CandList, counts: ReadonlyMap<number, number>, repeat: number, freq: number, pres: number): void {
  for (let i = 0; i < c.size; i++) {
    const n = counts.get(c.ids[i]);
    if (!n) continue;
    let l = c.logits[i];
    l = l <= 0 ? f32(l * repeat) : f32(l / repeat);
    c.logits[i] = f32(l - f32(f32(n * freq) + pres));
  }
  c.sorted = false;
}

/** Subtracts `amount` from the listed candidates' logits (DRY). */
export function subtractList(c: CandList, amount: ReadonlyMap<number, number>): void {
  for (let i = 0; i < c.size; i++) {
    const a = amount.get(c.ids[i]);
    if (a !== undefined) c.logits[i] = f32(c.logits[i] - a);
  }
  c.sorted = false;
}
