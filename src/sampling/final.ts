// bloomery sampling: the stages that pick the token (llama.cpp src/llama-sampler.cpp): dist,
// Mirostat 1 and 2 (with their learning state mu), adaptive-p (with its moving average), and
// the post-sampling probabilities of the set they picked from.
import { SamplingError } from "./errors.ts";
import { CandList, topKList } from "./list.ts";
import { discreteDraw, type Mt19937 } from "./rng.ts";
import { distVirtual, probVirtual, VirtualSet } from "./virtual.ts";

const f32 = Math.fround;

export interface TokenProb {
  readonly id: number;
  readonly p: number;
  /** The logit behind p (the chain's logit for post-sampling probabilities, the raw logit otherwise). */
  readonly logit: number;
}

export interface Picked {
  readonly id: number;
  /** Probability of the picked token in the set it was drawn from. */
  readonly p: number;
  /** The top n of that set by probability, stopping at the first zero (llama's post-sampling probs). */
  top(n: number): TokenProb[];
}

function listMax(c: CandList): number {
  let mx = -Infinity;
  for (const l of c.logits) if (l > mx) mx = l;
  return mx;
}

function noneLeft(): never {
  throw new SamplingError("sampling: no token is left to sample (every candidate is banned or masked)");
}

/** The entries of a list with their p, best first, stopping at p = 0. */
function pickedFromList(c: CandList, index: number): Picked {
  return {
    id: c.ids[index],
    p: c.p[index],
    top(n: number): TokenProb[] {
      const idx = c.ids.map((_, i) => i);
      idx.sort((a, b) => c.p[b] - c.p[a]);
      const out: TokenProb[] = [];
      for (const i of idx) {
        if (out.length >= n || c.p[i] === 0) break;
        out.push({ id: c.ids[i], p: c.p[i], logit: c.logits[i] });
      }
      return out;
    },
  };
}

/** llama_sampler_dist: softmax in the current order, one uniform double, the first index whose running sum reaches it. */
export function distList(c: CandList, rng: Mt19937): Picked {
  if (c.size === 0) noneLeft();
  const u = rng.nextDouble();
  if (c.size === 1) {
    if (c.logits[0] === -Infinity) noneLeft();
    c.p = [1];
    return pickedFromList(c, 0);
  }
  const mx = listMax(c);
  if (mx === -Infinity) noneLeft();
  const p = new Array<number>(c.size);
  let sum = 0;
  for (let i = 0; i < c.size; i++) {
    p[i] = f32(Math.exp(c.logits[i] - mx));
    sum += p[i];
  }
  const target = sum * u;
  let run = 0;
  let sel = -1;
  for (let i = 0; i < c.size; i++) {
    run += p[i];
    if (sel < 0 && run >= target && p[i] > 0) sel = i;
    p[i] = f32(p[i] / sum);
  }
  if (sel < 0) for (let i = c.size - 1; i >= 0 && sel < 0; i--) if (p[i] > 0) sel = i;
  c.p = p;
  return pickedFromList(c, sel);
}

export function distVirtualPicked(v: VirtualSet, rng: Mt19937): Picked {
  if (!v.src.has(v.head) || v.mass().max === -Infinity) noneLeft();
  const { index, p } = distVirtual(v, rng);
  return {
    id: v.src.id(index),
    p,
    top(n: number): TokenProb[] {
      const out: TokenProb[] = [];
      for (let i = v.head; out.length < n && v.src.has(i); i++) {
        const q = probVirtual(v, i);
        if (q === 0) break;
        out.push({ id: v.src.id(i), p: q, logit: v.logit(i) });
      }
      return out;
    },
  };
}

/** Mirostat state: mu starts at 2 tau and follows the observed surprise. */
export class MirostatState {
  mu: number;
  constructor(
    readonly tau: number,
    readonly eta: number,
  ) {
    this.mu = f32(2 * tau);
  }
  reset(): void {
    this.mu = f32(2 * this.tau);
  }
  /** llama updates mu as soon as a token is drawn. */
  observe(p: number): void {
    const surprise = f32(-Math.log2(p));
    this.mu = f32(this.mu - f32(this.eta * f32(surprise - this.tau)));
  }
}

function drawFromList(c: CandList, rng: Mt19937): Picked {
  if (listMax(c) === -Infinity) noneLeft();
  c.softmax(true);
  return pickedFromList(c, discreteDraw(rng, c.p));
}

const MIROSTAT_M = 100;

/**
 * Mirostat 1: estimate the Zipf exponent s from the top m = 100 probabilities, keep the top k
 * with k = ((e 2^mu) / (1 - N^-e))^(1/s), e = s - 1, N the vocabulary size, and draw.
 */
export function mirostat1(set: VirtualSet | CandList, st: MirostatState, nVocab: number, rng: Mt19937): Picked {
  const scale = set instanceof VirtualSet ? set.scale : 1;
  const at = (i: number): number | undefined => {
    if (set instanceof VirtualSet) return set.src.has(set.head + i) ? set.src.logit(set.head + i) : undefined;
    return i < set.size ? set.logits[i] : undefined;
  };
  if (set instanceof CandList) set.sortDesc();
  let sumTiBi = 0;
  let sumTiSq = 0;
  for (let i = 0; i < MIROSTAT_M - 1; i++) {
    const a = at(i);
    const b = at(i + 1);
    if (a === undefined || b === undefined) break;
    const ti = f32(Math.log(f32((i + 2) / (i + 1))));
    const bi = f32(scale * (a - b)); // log(p_i / p_i+1)
    sumTiBi = f32(sumTiBi + f32(ti * bi));
    sumTiSq = f32(sumTiSq + f32(ti * ti));
  }
  const sHat = f32(sumTiBi / sumTiSq);
  const eps = f32(sHat - 1);
  const kf = f32(Math.pow(f32(f32(eps * f32(Math.pow(2, st.mu))) / f32(1 - f32(Math.pow(nVocab, -eps)))), f32(1 / sHat)));
  const k = Number.isNaN(kf) || kf < 1 ? 1 : Math.min(Math.floor(kf), nVocab);
  const list = set instanceof VirtualSet ? set.toList(k) : (topKList(set, k), set);
  const picked = drawFromList(list, rng);
  st.observe(picked.p);
  return picked;
}

/** Mirostat 2: keep the tokens whose surprise -log2 p is at most mu (at least one), draw. */
export function mirostat2(set: VirtualSet | CandList, st: MirostatState, rng: Mt19937): Picked {
  let list: CandList;
  if (set instanceof VirtualSet) {
    const m = set.mass();
    let n = 0;
    for (let i = set.head; set.src.has(i); i++, n++) {
      const q = f32(Math.exp(set.scale * (set.src.logit(i) - m.max)) / m.z);
      if (f32(-Math.log2(q)) > st.mu) break;
    }
    list = set.toList(Math.max(1, n));
  } else {
    set.softmax(true);
    let n = 0;
    while (n < set.size && !(f32(-Math.log2(set.p[n])) > st.mu)) n++;
    set.truncate(Math.max(1, n));
    list = set;
  }
  const picked = drawFromList(list, rng);
  st.observe(picked.p);
  return picked;
}

const WIDTH = 0.3;
const PEAK = 5;
const SHARPNESS = 10;

/** Adaptive-p: reshape the distribution to favour tokens near a target probability that adapts to the picks so far. */
export class AdaptiveState {
  weightedSum: number;
  totalWeight: number;
  readonly decay: number;
  private pending: { id: number; p: number } | null = null;

  constructor(readonly target: number, decay: number) {
    this.decay = f32(Math.min(0.99, Math.max(0, decay)));
    this.weightedSum = f32(target / f32(1 - this.decay));
    this.totalWeight = f32(1 / f32(1 - this.decay));
  }

  reset(): void {
    this.weightedSum = f32(this.target / f32(1 - this.decay));
    this.totalWeight = f32(1 / f32(1 - this.decay));
    this.pending = null;
  }

  pick(c: CandList, rng: Mt19937): Picked {
    if (listMax(c) === -Infinity) noneLeft();
    c.softmax(false);
    if (this.target < 0) return pickedFromList(c, discreteDraw(rng, c.p));
    const orig = c.p.slice();
    const target = Math.min(1, Math.max(0, this.target));
    const adapted = Math.min(1, Math.max(0, this.totalWeight === 0 ? target : f32(2 * target - f32(this.weightedSum / this.totalWeight))));
    for (let i = 0; i < c.size; i++) {
      if (c.logits[i] === -Infinity) continue;
      const d = Math.abs(f32(f32(c.p[i] - adapted) / WIDTH));
      c.logits[i] = f32(PEAK - f32(f32(SHARPNESS * d * d) / f32(1 + d)));
    }
    c.softmax(false);
    const idx = discreteDraw(rng, c.p);
    this.pending = { id: c.ids[idx], p: orig[idx] };
    return pickedFromList(c, idx);
  }

  accept(id: number): void {
    if (this.pending && this.pending.id === id) {
      this.weightedSum = f32(this.pending.p + f32(this.decay * this.weightedSum));
      this.totalWeight = f32(1 + f32(this.decay * this.totalWeight));
    }
    this.pending = null;
  }
}
