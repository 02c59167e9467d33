// bloomery sampling: the stages on the whole vocabulary, before any stage has cut it to a list
// (llama's samplers when top_k is off or comes later). The set is a sorted source, a number of
// leading entries XTC removed, and the temperature divisor so far; probabilities come from the
// native statistics of the whole row, so the results are those of llama's full-vocabulary
// arithmetic while only the entries a stage actually reaches are read.
import { CandList, dynamicTemperatureOf } from "./list.ts";
import type { Mt19937 } from "./rng.ts";
import { sourceSize, type SortedSource } from "./view.ts";

const f32 = Math.fround;

export class VirtualSet {
  constructor(
    readonly src: SortedSource,
    public head = 0,
    /** Product of the temperatures applied so far (logits are divided by it). */
    public tdiv = 1,
  ) {}

  get scale(): number {
    return 1 / this.tdiv;
  }

  /** Chain logit of entry i (the adjusted logit over the temperatures). */
  logit(i: number): number {
    return this.tdiv === 1 ? this.src.logit(i) : f32(this.src.logit(i) / this.tdiv);
  }

  /** Z and S (sum exp(d), sum exp(d) d with d = scale (logit - max)) of the entries from head on. */
  mass(): { max: number; z: number; s: number } {
    const sc = this.scale;
    const st = this.src.stats(sc);
    let z = st.z;
    let s = st.s;
    for (let i = 0; i < this.head; i++) {
      const d = sc * (this.src.logit(i) - st.max);
      const e = Math.exp(d);
      z -= e;
      s -= e * d;
    }
    return { max: st.max, z, s };
  }

  /** Entropy (nats) of the softmax over the entries from head on. */
  entropy(): number {
    const m = this.mass();
    return m.z > 0 ? Math.log(m.z) - m.s / m.z : 0;
  }

  /** Entries from head on. */
  size(): number {
    return sourceSize(this.src) - this.head;
  }

  /** The first n entries from head on (fewer when the source ends) as a sorted list. */
  toList(n: number): CandList {
    const ids: number[] = [];
    const logits: number[] = [];
    for (let i = this.head; ids.length < n && this.src.has(i); i++) {
      ids.push(this.src.id(i));
      logits.push(this.logit(i));
    }
    return new CandList(ids, logits, true);
  }

  all(): CandList {
    return this.toList(Infinity);
  }
}

export function topKVirtual(v: VirtualSet, k: number): VirtualSet | CandList {
  return k <= 0 ? v : v.toList(k);
}

/** Smallest prefix whose probability reaches p (llama's top-p with its float running sum). */
export function topPVirtual(v: VirtualSet, p: number, minKeep: number): VirtualSet | CandList {
  if (p >= 1) return v;
  const m = v.mass();
  const sc = v.scale;
  let cum = 0;
  let n = 0;
  for (let i = v.head; v.src.has(i); i++) {
    cum = f32(cum + f32(Math.exp(sc * (v.src.logit(i) - m.max)) / m.z));
    n++;
    if (cum >= p && n >= minKeep) break;
  }
  return v.toList(n);
}

export function minPVirtual(v: VirtualSet, p: number, minKeep: number): VirtualSet | CandList {
  if (p <= 0) return v;
  if (!v.src.has(v.head)) return v.toList(0);
  const thr = f32(v.logit(v.head) + f32(Math.log(p)));
  let n = 1;
  for (let i = v.head + 1; v.src.has(i); i++, n++) if (v.logit(i) < thr && n >= minKeep) break;
  return v.toList(n);
}

/**
 * Locally typical: tokens by |-log p - H| ascending until the mass exceeds p. With d = scale
 * (logit - max), -log p - H = c - d where c = S / Z, so the chosen tokens are those whose d
 * is nearest c: a window around c in the sorted order, grown from both sides.
 */
export function typicalVirtual(v: VirtualSet, p: number, minKeep: number): VirtualSet | CandList {
  if (p >= 1) return v;
  const m = v.mass();
  const sc = v.scale;
  const c = m.s / m.z;
  const d = (i: number): number => sc * (v.src.logit(i) - m.max);
  let split = v.head;
  while (v.src.has(split) && d(split) > c) split++;
  let up = split - 1;
  let down = split;
  const chosen: number[] = [];
  let cum = 0;
  for (;;) {
    const upOk = up >= v.head;
    const downOk = v.src.has(down);
    if (!upOk && !downOk) break;
    let i: number;
    if (!downOk) i = up--;
    else if (!upOk) i = down++;
    else if (d(up) - c <= c - d(down)) i = up--;
    else i = down++;
    chosen.push(i);
    cum = f32(cum + f32(Math.exp(d(i)) / m.z));
    if (cum > p && (minKeep === 0 || chosen.length >= minKeep)) break;
  }
  return new CandList(
    chosen.map((i) => v.src.id(i)),
    chosen.map((i) => v.logit(i)),
    false,
  );
}

export function xtcVirtual(v: VirtualSet, prob: number, thr: number, minKeep: number, rng: Mt19937): VirtualSet | CandList {
  if (prob <= 0 || thr > 0.5 || !v.src.has(v.head + 1)) return v;
  if (rng.nextFloat() > prob) return v;
  const m = v.mass();
  const sc = v.scale;
  let posLast = 0;
  for (let i = v.head; v.src.has(i); i++) {
    const q = f32(Math.exp(sc * (v.src.logit(i) - m.max)) / m.z);
    if (q >= thr) posLast = i - v.head;
    else break;
  }
  if (posLast > 0 && (minKeep <= 1 || v.size() - posLast >= minKeep)) v.head += posLast;
  return v;
}

/** Temperature t (<= 0: only the best entry stays). */
export function temperatureVirtual(v: VirtualSet, t: number): VirtualSet | CandList {
  if (t <= 0) return v.toList(1);
  v.tdiv *= t;
  return v;
}

export function dynamicTemperatureVirtual(v: VirtualSet, t: number, delta: number, exponent: number): VirtualSet | CandList {
  const size = v.size();
  if (size <= 1) return v;
  return temperatureVirtual(v, dynamicTemperatureOf(f32(v.entropy()), size, t, delta, exponent));
}

/** A draw from the softmax of the whole set: the entry index and its probability. */
export function distVirtual(v: VirtualSet, rng: Mt19937): { index: number; p: number } {
  const m = v.mass();
  const sc = v.scale;
  const target = m.z * rng.nextDouble();
  let acc = 0;
  let lastPositive = v.head;
  for (let i = v.head; v.src.has(i); i++) {
    const e = Math.exp(sc * (v.src.logit(i) - m.max));
    if (e > 0) lastPositive = i;
    acc += e;
    if (acc >= target && e > 0) return { index: i, p: e / m.z };
  }
  return { index: lastPositive, p: Math.exp(sc * (v.src.logit(lastPositive) - m.max)) / m.z };
}

/** Probability of entry i of the set. */
export function probVirtual(v: VirtualSet, i: number): number {
  const m = v.mass();
  return Math.exp(v.scale * (v.src.logit(i) - m.max)) / m.z;
}
