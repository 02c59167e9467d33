// bloomery grammar: sets of Unicode code points as sorted, disjoint, inclusive [lo, hi] range pairs.

/** Largest Unicode scalar value. */
export const MAX_CODE_POINT = 0x10ffff;
export const SURROGATE_LO = 0xd800;
export const SURROGATE_HI = 0xdfff;

/**
 * A code point set: a flat array [lo0, hi0, lo1, hi1, ...], sorted, disjoint, not adjacent,
 * inclusive bounds. Built only through the functions of this file.
 */
export type Ranges = readonly number[];

/** Sort and merge arbitrary (possibly overlapping) [lo, hi] pairs into canonical form. */
export function normalizeRanges(pairs: readonly number[]): number[] {
  const items: [number, number][] = [];
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const lo = pairs[i];
    const hi = pairs[i + 1];
    if (lo <= hi) items.push([lo, hi]);
  }
  items.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const out: number[] = [];
  for (const [lo, hi] of items) {
    const n = out.length;
    if (n > 0 && lo <= out[n - 1] + 1) {
      if (hi > out[n - 1]) out[n - 1] = hi;
    } else {
      out.push(lo, hi);
    }
  }
  return out;
}

/** Every code point 0..MAX_CODE_POINT that is not in `r`. */
export function complementRanges(r: Ranges): number[] {
  const out: number[] = [];
  let next = 0;
  for (let i = 0; i < r.length; i += 2) {
    if (r[i] > next) out.push(next, r[i] - 1);
    next = r[i + 1] + 1;
  }
  if (next <= MAX_CODE_POINT) out.push(next, MAX_CODE_POINT);
  return out;
}

export function unionRanges(a: Ranges, b: Ranges): number[] {
  return normalizeRanges([...a, ...b]);
}

export function intersectRanges(a: Ranges, b: Ranges): number[] {
  const out: number[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const lo = Math.max(a[i], b[j]);
    const hi = Math.min(a[i + 1], b[j + 1]);
    if (lo <= hi) out.push(lo, hi);
    if (a[i + 1] < b[j + 1]) i += 2;
    else j += 2;
  }
  return out;
}

export function subtractRanges(a: Ranges, b: Ranges): number[] {
  return intersectRanges(a, complementRanges(b));
}

/** The set without UTF-16 surrogates (which no valid UTF-8 text contains). */
export function withoutSurrogates(r: Ranges): number[] {
  return subtractRanges(r, [SURROGATE_LO, SURROGATE_HI]);
}

/** Whether `cp` is in the set (binary search). */
export function rangesContain(r: Ranges, cp: number): boolean {
  let lo = 0;
  let hi = (r.length >> 1) - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (cp < r[2 * mid]) hi = mid - 1;
    else if (cp > r[2 * mid + 1]) lo = mid + 1;
    else return true;
  }
  return false;
}

/** Whether some code point of [lo, hi] is in the set. */
export function rangesIntersect(r: Ranges, lo: number, hi: number): boolean {
  for (let i = 0; i < r.length; i += 2) {
    if (r[i] > hi) return false;
    if (r[i + 1] >= lo) return true;
  }
  return false;
}

/** Number of code points in the set. */
export function rangesSize(r: Ranges): number {
  let n = 0;
  for (let i = 0; i < r.length; i += 2) n += r[i + 1] - r[i] + 1;
  return n;
}

/** A stable text key for a set (for deduplication). */
export function rangesKey(r: Ranges): string {
  return r.join(",");
}
