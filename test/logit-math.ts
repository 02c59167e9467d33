// Test helpers shared by the CUDA tests: how far two logit arrays are apart, and their spread.

/** The largest |a[i] - b[i]| over b's length. */
export function maxAbs(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  for (let i = 0; i < b.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}

/** The standard deviation of the values (at least 1e-15). */
export function std(a: ArrayLike<number>): number {
  let s = 0, s2 = 0;
  for (let i = 0; i < a.length; i++) { s += a[i]; s2 += a[i] * a[i]; }
  const m = s / a.length;
  return Math.sqrt(Math.max(s2 / a.length - m * m, 1e-30));
}

/** The largest value's index and its lead over the second largest. */
export function top2(v: ArrayLike<number>): { id: number; gap: number } {
  let a = 0, b = -1;
  for (let i = 1; i < v.length; i++) {
    if (v[i] > v[a]) { b = a; a = i; } else if (b < 0 || v[i] > v[b]) b = i;
  }
  return { id: a, gap: v[a] - v[b] };
}
