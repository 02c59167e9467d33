// bloomery tests: the native candidate step (ffi/cpu/sample.c through src/sampling/native.ts):
// top-k against a JavaScript sort on 151936-token rows with ties, every op against a
// JavaScript reference of llama's arithmetic, softmax statistics, refusals, and the cost per
// token (printed).
import { describe, expect, test } from "bun:test";
import { nativeArgmax, nativeCandidates, type NativeOp, SamplingError } from "../src/sampling/index.ts";

const N = 151936;
const f32 = Math.fround;

/** Deterministic uniform numbers (xorshift32). */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 4294967296;
  };
}

/** A row with many ties: values on a 1/8 grid in [-12, 12). */
function tiedRow(n: number, seed: number): Float32Array {
  const r = rng(seed);
  const row = new Float32Array(n);
  for (let i = 0; i < n; i++) row[i] = Math.floor(r() * 192 - 96) / 8;
  return row;
}

function jsOrder(row: ArrayLike<number>): number[] {
  const idx = Array.from({ length: row.length }, (_, i) => i);
  idx.sort((a, b) => (row[b] === row[a] ? a - b : row[b] > row[a] ? 1 : -1));
  return idx;
}

/** llama's arithmetic of the ops on a copy of the row (float at every step). */
function jsApply(row: Float32Array, ops: readonly NativeOp[]): Float32Array {
  const v = Float32Array.from(row);
  for (const op of ops) {
    if (op.kind === "add") op.ids.forEach((id, e) => (v[id] = f32(v[id] + op.values[e])));
    else if (op.kind === "ban") op.ids.forEach((id) => (v[id] = -Infinity));
    else if (op.kind === "penalty") {
      op.ids.forEach((id, e) => {
        const c = op.counts[e];
        if (!(c > 0)) return;
        let x = v[id];
        x = x <= 0 ? f32(x * f32(op.repeat)) : f32(x / f32(op.repeat));
        v[id] = f32(x - f32(f32(c * f32(op.frequency)) + f32(op.presence)));
      });
    } else if (op.kind === "nsigma" && op.n > 0) {
      let mx = -Infinity;
      let sum = 0;
      let cnt = 0;
      for (const x of v) if (x !== -Infinity) (mx = Math.max(mx, x)), (sum += x), cnt++;
      const mean = sum / cnt;
      let acc = 0;
      for (const x of v) if (x !== -Infinity) acc += (x - mean) * (x - mean);
      const thr = f32(mx - f32(f32(op.n) * f32(Math.sqrt(acc / cnt))));
      for (let i = 0; i < v.length; i++) if (v[i] < thr) v[i] = -Infinity;
    }
  }
  return v;
}

function expectTopK(row: Float32Array, ops: readonly NativeOp[], k: number): void {
  const ref = jsApply(row, ops);
  const order = jsOrder(ref).slice(0, k);
  const got = nativeCandidates(row, ops, k);
  expect(got.ids.length).toBe(Math.min(k, row.length));
  for (let i = 0; i < order.length; i++) {
    if (got.ids[i] !== order[i] || got.logits[i] !== ref[order[i]]) {
      throw new Error(`k=${k} rank ${i}: native ${got.ids[i]} (${got.logits[i]}), reference ${order[i]} (${ref[order[i]]})`);
    }
  }
}

describe("top-k candidates", () => {
  const row = tiedRow(N, 7);
  for (const k of [1, 40, 1000, 4096, 5000, 30000, N, N + 10]) {
    test(`k = ${k} on ${N} tokens with ties equals a JS sort (logit desc, id asc)`, () => expectTopK(row, [], k));
  }

  test("rows of every small size, -inf logits, all ties", () => {
    for (const n of [1, 2, 3, 7, 8, 9, 63, 64, 65, 200]) {
      const r = tiedRow(n, n);
      for (let i = 0; i < n; i += 3) r[i] = -Infinity;
      for (const k of [1, 2, 5, n]) expectTopK(r, [], k);
    }
    expectTopK(new Float32Array(1000).fill(2.5), [], 10);
    expectTopK(new Float32Array(1000).fill(-Infinity), [], 10);
  });

  test("a row that is a view into a larger buffer (a batch of logits)", () => {
    const big = tiedRow(3 * 5000, 21);
    const view = big.subarray(5000, 10000);
    expectTopK(view, [], 50);
    expectTopK(view, [{ kind: "ban", ids: Int32Array.from([jsOrder(view)[0]]) }], 50);
  });

  test("-0 and +0 tie and fall back to id order", () => {
    const r = Float32Array.from([-0, 0, -0, 1, 0]);
    expect(Array.from(nativeCandidates(r, [], 5).ids)).toEqual([3, 0, 1, 2, 4]);
  });
});

describe("ops", () => {
  const row = tiedRow(N, 11);
  // pick ids with positive, negative and zero logits
  const pos = [...row.keys()].filter((i) => row[i] > 1).slice(0, 20);
  const neg = [...row.keys()].filter((i) => row[i] < -1).slice(0, 20);
  const zero = [...row.keys()].filter((i) => row[i] === 0).slice(0, 5);
  const top = jsOrder(row).slice(0, 30);

  test("logit bias adds (repeated ids add up), bans send to -inf", () => {
    const ops: NativeOp[] = [
      { kind: "add", ids: Int32Array.from([neg[0], neg[0], pos[1], top[0]]), values: Float32Array.from([30, 5, -2.5, -100]) },
      { kind: "ban", ids: Int32Array.from([top[1], top[2]]) },
    ];
    expectTopK(row, ops, 50);
    const got = nativeCandidates(row, ops, 3);
    expect(got.ids[0]).toBe(neg[0]);
    expect(got.logits[0]).toBe(f32(f32(row[neg[0]] + 30) + 5));
    expect(Array.from(nativeCandidates(row, ops, N).ids.slice(-2)).sort((a, b) => a - b)).toEqual([top[1], top[2]].sort((a, b) => a - b));
  });

  test("repeat penalty divides positive logits and multiplies the others; frequency and presence subtract", () => {
    const ids = [...top.slice(0, 10), ...neg.slice(0, 5), ...zero.slice(0, 2)];
    const counts = ids.map((_, i) => (i % 3) + 1);
    const ops: NativeOp[] = [{ kind: "penalty", ids: Int32Array.from(ids), counts: Float32Array.from(counts), repeat: 1.3, frequency: 0.25, presence: 0.5 }];
    expectTopK(row, ops, 100);
    const all = nativeCandidates(row, ops, N);
    const at = new Map<number, number>();
    all.ids.forEach((id, i) => at.set(id, all.logits[i]));
    // hand-checked: positive logit 9.875 with count 1 -> 9.875 / 1.3 - (0.25 + 0.5)
    const id0 = ids[0];
    expect(row[id0]).toBeGreaterThan(0);
    expect(at.get(id0)).toBeCloseTo(row[id0] / 1.3 - 0.75, 5);
    const n0 = neg[0];
    const cn = counts[ids.indexOf(n0)];
    expect(at.get(n0)).toBeCloseTo(row[n0] * 1.3 - (cn * 0.25 + 0.5), 5);
    const z0 = zero[0];
    expect(at.get(z0)).toBeCloseTo(-(counts[ids.indexOf(z0)] * 0.25 + 0.5), 5);
  });

  test("a zero count leaves the token alone; ops apply in order", () => {
    const a: NativeOp = { kind: "penalty", ids: Int32Array.from([pos[0], pos[1]]), counts: Float32Array.from([0, 2]), repeat: 2, frequency: 0, presence: 0 };
    const b: NativeOp = { kind: "add", ids: Int32Array.from([pos[0], pos[1]]), values: Float32Array.from([-20, -20]) };
    expectTopK(row, [a, b], 200);
    expectTopK(row, [b, a], 200);
    const ab = nativeCandidates(row, [a, b], N);
    const ba = nativeCandidates(row, [b, a], N);
    const v = (r: typeof ab, id: number) => r.logits[Array.from(r.ids).indexOf(id)];
    expect(v(ab, pos[0])).toBe(f32(row[pos[0]] - 20));
    expect(v(ab, pos[1])).toBe(f32(f32(row[pos[1]] / 2) - 20));
    expect(v(ba, pos[1])).toBe(f32(f32(row[pos[1]] - 20) * 2)); // now negative: multiplied
  });

  test("top-n-sigma masks below max - n * std, and later ops cannot revive masked tokens", () => {
    const ns: NativeOp = { kind: "nsigma", n: 1.5 };
    expectTopK(row, [ns], 5000);
    const bump: NativeOp = { kind: "add", ids: Int32Array.from([neg[3]]), values: Float32Array.from([40]) };
    expectTopK(row, [ns, bump], 5000);
    expect(nativeCandidates(row, [ns, bump], 1).ids[0]).not.toBe(neg[3]);
    expectTopK(row, [bump, ns], 5000);
    expect(nativeCandidates(row, [bump, ns], 1).ids[0]).toBe(neg[3]);
    expectTopK(row, [ns, { kind: "nsigma", n: 0.5 }], 3000);
    expectTopK(row, [{ kind: "nsigma", n: 0 }], 100); // n <= 0: no-op
  });

  test("a mixed op list (bias, ban, penalties, nsigma, add) on the whole row", () => {
    const r = rng(3);
    const ids = Array.from({ length: 64 }, () => Math.floor(r() * N));
    const uniq = [...new Set(ids)];
    const ops: NativeOp[] = [
      { kind: "add", ids: Int32Array.from(ids.slice(0, 10)), values: Float32Array.from(ids.slice(0, 10), (_, i) => i - 5) },
      { kind: "ban", ids: Int32Array.from(ids.slice(10, 14)) },
      { kind: "penalty", ids: Int32Array.from(uniq), counts: Float32Array.from(uniq, (_, i) => i % 4), repeat: 1.1, frequency: 0.2, presence: 0.1 },
      { kind: "nsigma", n: 2 },
      { kind: "add", ids: Int32Array.from(top.slice(0, 5)), values: Float32Array.from([-1, -2, -3, -4, -5]) },
    ];
    for (const k of [1, 40, 7000]) expectTopK(row, ops, k);
  });
});

describe("softmax statistics", () => {
  test("Z and S at scale 1 and at a second scale match double-precision sums over the adjusted row", () => {
    const r = rng(5);
    const row = new Float32Array(N);
    for (let i = 0; i < N; i++) row[i] = r() * 30 - 18;
    row[17] = -Infinity;
    const ops: NativeOp[] = [{ kind: "ban", ids: Int32Array.from([1, 2, 3]) }, { kind: "add", ids: Int32Array.from([4]), values: Float32Array.from([25]) }];
    const ref = jsApply(row, ops);
    for (const scale of [1, 1 / 0.7, 0.25]) {
      const st = nativeCandidates(row, ops, 8, scale).stats!;
      let mx = -Infinity;
      for (const x of ref) mx = Math.max(mx, x);
      let z1 = 0, s1 = 0, zs = 0, ss = 0, fin = 0;
      for (const x of ref) {
        if (x === -Infinity) continue;
        fin++;
        const d = x - mx;
        z1 += Math.exp(d);
        s1 += Math.exp(d) * d;
        zs += Math.exp(scale * d);
        ss += Math.exp(scale * d) * scale * d;
      }
      expect(st.max).toBe(mx);
      expect(st.finite).toBe(fin);
      for (const [a, b] of [[st.z1, z1], [st.s1, s1], [st.zs, zs], [st.ss, ss]]) expect(Math.abs(a - b) / Math.abs(b)).toBeLessThan(2e-7);
    }
  });

  test("an all-banned row has max -inf and no mass", () => {
    const st = nativeCandidates(Float32Array.from([1, 2, 3]), [{ kind: "ban", ids: Int32Array.from([0, 1, 2]) }], 0, 1).stats!;
    expect(st.max).toBe(-Infinity);
    expect(st.z1).toBe(0);
    expect(st.finite).toBe(0);
  });
});

describe("refusals", () => {
  const row = tiedRow(1000, 1);
  test("NaN or +inf logits", () => {
    const bad = Float32Array.from(row);
    bad[500] = NaN;
    expect(() => nativeCandidates(bad, [], 40)).toThrow(/NaN or \+inf.*token 500/);
    expect(() => nativeCandidates(bad, [], 1000)).toThrow(SamplingError);
    expect(() => nativeArgmax(bad)).toThrow(/NaN/);
    bad[500] = Infinity;
    expect(() => nativeCandidates(bad, [], 40)).toThrow(/token 500/);
    bad[500] = 0;
    bad[3] = NaN; // inside the first k, before the heap fills
    expect(() => nativeCandidates(bad, [], 40)).toThrow(/token 3/);
  });
  test("bad ops", () => {
    expect(() => nativeCandidates(row, [{ kind: "ban", ids: Int32Array.from([1000]) }], 4)).toThrow(/outside the vocabulary/);
    expect(() => nativeCandidates(row, [{ kind: "add", ids: Int32Array.from([1]), values: Float32Array.from([NaN]) }], 4)).toThrow(/bias/);
    const dup: NativeOp = { kind: "penalty", ids: Int32Array.from([5, 5]), counts: Float32Array.from([1, 1]), repeat: 1.1, frequency: 0, presence: 0 };
    expect(() => nativeCandidates(row, [dup], 4)).toThrow(/twice/);
    const zeroRep: NativeOp = { kind: "penalty", ids: Int32Array.from([5]), counts: Float32Array.from([1]), repeat: 0, frequency: 0, presence: 0 };
    expect(() => nativeCandidates(row, [zeroRep], 4)).toThrow(/repeat penalty/);
    expect(() => nativeCandidates(row, [], 4, 0)).toThrow(/scale/);
    expect(() => nativeCandidates(new Float32Array(0), [], 4)).toThrow(SamplingError);
  });
});

test("argmax takes the first of equal maxima", () => {
  expect(nativeArgmax(Float32Array.from([1, 5, -Infinity, 5, 2]))).toBe(1);
  expect(nativeArgmax(Float32Array.from([-Infinity, -Infinity]))).toBe(0);
  const row = tiedRow(N, 9);
  expect(nativeArgmax(row)).toBe(jsOrder(row)[0]);
});

test("cost per token of the native candidate step on 151936 logits (printed)", () => {
  const r = rng(99);
  const row = new Float32Array(N);
  for (let i = 0; i < N; i++) row[i] = r() * 12 - 4 + (r() < 0.001 ? 8 : 0);
  const hist = Int32Array.from({ length: 64 }, () => Math.floor(r() * N));
  const uniq = [...new Set(hist)];
  const ops: NativeOp[] = [
    { kind: "add", ids: Int32Array.from([11, 12]), values: Float32Array.from([1, -1]) },
    { kind: "penalty", ids: Int32Array.from(uniq), counts: Float32Array.from(uniq, () => 1), repeat: 1.1, frequency: 0, presence: 0 },
  ];
  const time = (f: () => void): number => {
    for (let i = 0; i < 20; i++) f();
    const t: number[] = [];
    for (let i = 0; i < 200; i++) {
      const t0 = performance.now();
      f();
      t.push(performance.now() - t0);
    }
    t.sort((a, b) => a - b);
    return t[t.length >> 1];
  };
  const k40 = time(() => nativeCandidates(row, ops, 40));
  const k40s = time(() => nativeCandidates(row, ops, 40, 1));
  const k40s2 = time(() => nativeCandidates(row, ops, 40, 1 / 0.8));
  const arg = time(() => nativeArgmax(row));
  console.log(
    `native candidate step, ${N} logits (median of 200): top-40 ${k40.toFixed(3)} ms; + softmax stats ${k40s.toFixed(3)} ms; ` +
      `+ stats at two scales ${k40s2.toFixed(3)} ms; argmax ${arg.toFixed(3)} ms`,
  );
  expect(k40).toBeLessThan(2);
});
