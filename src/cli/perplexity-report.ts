// `bloomery-serve perplexity`: what llama-perplexity prints, in its words and number formats
// (printf's %W.Pf, nan and inf as C prints them): a KL-divergence run's line a chunk and its
// closing statistics, and the same figures as a JSON object for scripts.
import { covariance, meanAndUncertainty, median, percentile, type Estimate, type KldSums } from "./perplexity-score.ts";

/** printf("%W.Pf"): fixed with P decimals, right-aligned in W characters. */
export function fx(v: number, p: number, w = 0): string {
  const s = Number.isNaN(v) ? "nan" : v === Infinity ? "inf" : v === -Infinity ? "-inf" : v.toFixed(p);
  return s.padStart(w);
}

/** printf("%g") for the magnitudes printed here (six significant digits, trailing zeros dropped). */
export function fg(v: number): string {
  if (!Number.isFinite(v)) return fx(v, 0);
  if (v !== 0 && (Math.abs(v) >= 1e6 || Math.abs(v) < 1e-4)) return v.toExponential(5).replace(/\.?0+e/, "e").replace(/e([+-])(\d)$/, "e$10$2");
  return String(Number(v.toPrecision(6)));
}

/** The per-chunk table's header line (printed once, after the first chunks are evaluated). */
export const KLD_HEADER = "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n";

/** The figures of a KL-divergence run so far (llama's running columns). */
export interface KldRunning {
  ppl: Estimate;
  lnPplRatio: Estimate;
  kld: Estimate;
  /** sqrt(mean of Δp²), a fraction */
  rmsDp: Estimate;
  /** the share of rows whose most likely token is the base's, a fraction */
  sameTop: Estimate;
}

export function kldRunning(s: KldSums): KldRunning {
  const lp = meanAndUncertainty(s.sumNll, s.sumNll2, s.count);
  const lb = meanAndUncertainty(s.sumNllBase, s.sumNllBase2, s.count);
  const cov = covariance(s.sumNll, s.sumNllBase, s.sumNllNllBase, s.count);
  const mse = meanAndUncertainty(s.sumPDiff2, s.sumPDiff4, s.count);
  const rms = Math.sqrt(mse.value);
  const top = s.nSameTop / s.count;
  const ppl = Math.exp(lp.value);
  return {
    ppl: { value: ppl, err: ppl * lp.err },
    lnPplRatio: { value: lp.value - lb.value, err: Math.sqrt(lp.err * lp.err + lb.err * lb.err - 2 * cov) },
    kld: meanAndUncertainty(s.sumKld, s.sumKld2, s.count),
    rmsDp: { value: rms, err: (0.5 / rms) * mse.err },
    sameTop: { value: top, err: Math.sqrt((top * (1 - top)) / (s.count - 1)) },
  };
}

/** One chunk's line of the table (chunk counts from 1). */
export function kldChunkLine(chunk: number, r: KldRunning): string {
  return `${String(chunk).padStart(4)}` +
    `    ${fx(r.ppl.value, 4, 9)} ± ${fx(r.ppl.err, 4, 9)}` +
    `    ${fx(r.lnPplRatio.value, 5, 10)} ± ${fx(r.lnPplRatio.err, 5, 10)}` +
    `    ${fx(r.kld.value, 5, 10)} ± ${fx(r.kld.err, 5, 10)}` +
    `    ${fx(100 * r.rmsDp.value, 3, 6)} ± ${fx(100 * r.rmsDp.err, 3, 6)} %` +
    `    ${fx(100 * r.sameTop.value, 3, 6)} ± ${fx(100 * r.sameTop.err, 3, 6)} %\n`;
}

const KLD_PCT: [string, number][] = [["99.9%", 0.999], ["99.0%", 0.99], ["95.0%", 0.95], ["90.0%", 0.9]];
const KLD_LOW: [string, number][] = [["10.0%", 0.1], [" 5.0%", 0.05], [" 1.0%", 0.01], [" 0.1%", 0.001]];
const DP_PCT: [string, number][] = [...KLD_PCT, ["75.0%", 0.75]];
const DP_LOW: [string, number][] = [["25.0%", 0.25], ...KLD_LOW];

/** The closing statistics of a KL-divergence run, every figure of llama's three blocks. */
export interface KldStats {
  ppl: Estimate;
  pplBase: Estimate;
  /** correlation of the two ln(PPL) estimates */
  corLnPpl: number;
  lnPplRatio: Estimate;
  pplRatio: Estimate;
  pplDiff: Estimate;
  kld: Estimate;
  /** name ("max", "99.9%", ..., "median", ..., "min") to value */
  kldPercentiles: Record<string, number>;
  /** Δp = p(token) - p_base(token), fractions */
  dp: Estimate;
  dpPercentiles: Record<string, number>;
  rmsDp: Estimate;
  sameTop: Estimate;
  count: number;
}

/** The statistics from the sums and the rows' KL divergences and Δp, each sorted ascending. */
export function kldStats(s: KldSums, kldSorted: Float32Array, dpSorted: Float32Array): KldStats {
  const lp = meanAndUncertainty(s.sumNll, s.sumNll2, s.count);
  const lb = meanAndUncertainty(s.sumNllBase, s.sumNllBase2, s.count);
  const cov = covariance(s.sumNll, s.sumNllBase, s.sumNllNllBase, s.count);
  const ppl = Math.exp(lp.value), pplBase = Math.exp(lb.value);
  const pplErr = ppl * lp.err, pplBaseErr = pplBase * lb.err;
  const ratio = lp.value - lb.value, ratioErr = Math.sqrt(lp.err * lp.err + lb.err * lb.err - 2 * cov);
  const pplCov = ppl * pplBase * cov;
  const pcts = (v: Float32Array, high: [string, number][], low: [string, number][]): Record<string, number> => {
    const o: Record<string, number> = { max: v[v.length - 1] };
    for (const [n, q] of high) o[n.trim()] = percentile(v, q);
    o.median = median(v);
    for (const [n, q] of low) o[n.trim()] = percentile(v, q);
    o.min = v[0];
    return o;
  };
  const mse = meanAndUncertainty(s.sumPDiff2, s.sumPDiff4, s.count);
  const rms = Math.sqrt(mse.value);
  const top = s.nSameTop / s.count;
  return {
    ppl: { value: ppl, err: pplErr },
    pplBase: { value: pplBase, err: pplBaseErr },
    corLnPpl: cov / (lp.err * lb.err),
    lnPplRatio: { value: ratio, err: ratioErr },
    pplRatio: { value: Math.exp(ratio), err: Math.exp(ratio) * ratioErr },
    pplDiff: { value: ppl - pplBase, err: Math.sqrt(pplErr * pplErr + pplBaseErr * pplBaseErr - 2 * pplCov) },
    kld: meanAndUncertainty(s.sumKld, s.sumKld2, s.count),
    kldPercentiles: pcts(kldSorted, KLD_PCT, KLD_LOW),
    dp: meanAndUncertainty(s.sumPDiff, s.sumPDiff2, s.count),
    dpPercentiles: pcts(dpSorted, DP_PCT, DP_LOW),
    rmsDp: { value: rms, err: (0.5 / rms) * mse.err },
    sameTop: { value: top, err: Math.sqrt((top * (1 - top)) / (s.count - 1)) },
    count: s.count,
  };
}

/** llama's three closing blocks: perplexity, KL divergence, token probability. */
export function kldStatsText(k: KldStats): string {
  const e = (x: Estimate, p = 6, w = 10) => `${fx(x.value, p, w)} ± ${fx(x.err, p, w)}`;
  const L: string[] = [];
  L.push("====== Perplexity statistics ======");
  L.push(`Mean PPL(Q)                   : ${e(k.ppl)}`);
  L.push(`Mean PPL(base)                : ${e(k.pplBase)}`);
  L.push(`Cor(ln(PPL(Q)), ln(PPL(base))): ${fx(100 * k.corLnPpl, 2, 6)}%`);
  L.push(`Mean ln(PPL(Q)/PPL(base))     : ${e(k.lnPplRatio)}`);
  L.push(`Mean PPL(Q)/PPL(base)         : ${e(k.pplRatio)}`);
  L.push(`Mean PPL(Q)-PPL(base)         : ${e(k.pplDiff)}`);
  L.push("");
  L.push("====== KL divergence statistics ======");
  L.push(`Mean    KLD: ${e(k.kld)}`);
  const kp = k.kldPercentiles;
  L.push(`Maximum KLD: ${fx(kp.max, 6, 10)}`);
  for (const [n] of KLD_PCT) L.push(`${n}   KLD: ${fx(kp[n.trim()], 6, 10)}`);
  L.push(`Median  KLD: ${fx(kp.median, 6, 10)}`);
  for (const [n] of KLD_LOW) L.push(`${n}   KLD: ${fx(kp[n.trim()], 6, 10)}`);
  L.push(`Minimum KLD: ${fx(kp.min, 6, 10)}`);
  L.push("");
  L.push("====== Token probability statistics ======");
  L.push(`Mean    Δp: ${fx(100 * k.dp.value, 3, 6)} ± ${fx(100 * k.dp.err, 3, 5)} %`);
  const dp = k.dpPercentiles;
  L.push(`Maximum Δp: ${fx(100 * dp.max, 3, 6)}%`);
  for (const [n] of DP_PCT) L.push(`${n}   Δp: ${fx(100 * dp[n.trim()], 3, 6)}%`);
  L.push(`Median  Δp: ${fx(100 * dp.median, 3, 6)}%`);
  for (const [n] of DP_LOW) L.push(`${n}   Δp: ${fx(100 * dp[n.trim()], 3, 6)}%`);
  L.push(`Minimum Δp: ${fx(100 * dp.min, 3, 6)}%`);
  L.push(`RMS Δp    : ${fx(100 * k.rmsDp.value, 3, 6)} ± ${fx(100 * k.rmsDp.err, 3, 5)} %`);
  L.push(`Same top p: ${fx(100 * k.sameTop.value, 3, 6)} ± ${fx(100 * k.sameTop.err, 3, 5)} %`);
  return L.join("\n") + "\n";
}

/** An estimate as JSON ({ value, err }; NaN and infinities as null). */
export function jsonEstimate(x: Estimate): { value: number | null; err: number | null } {
  const n = (v: number) => (Number.isFinite(v) ? v : null);
  return { value: n(x.value), err: n(x.err) };
}
