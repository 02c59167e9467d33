// `bloomery-serve perplexity`: the arithmetic on one row of logits, as llama.cpp's
// tools/perplexity/perplexity.cpp does it: the negative log-likelihood of the next token, the
// row's log-probabilities packed as llama's uint16 record (scale, minimum, 16-bit steps), and one
// row's KL divergence and probability difference against such a record; then the statistics
// (mean and uncertainty, covariance, percentiles). No allocation per row: a row is a view
// (Float32Array and offset), the sums live in one object.

const f = Math.fround;

/** Uint16 entries of one packed row: two f32 (scale, min log-prob), then the vocabulary, padded to even. */
export function packedRowLength(nVocab: number): number {
  return 2 * Math.floor((nVocab + 1) / 2) + 4;
}

/** -log p(tok) from logits l[o .. o+V): llama's log_softmax (the maximum in f32, the sum of exps in f64). */
export function rowNll(l: Float32Array, o: number, V: number, tok: number): number {
  let max = l[o];
  for (let i = 1; i < V; i++) {
    const x = l[o + i];
    if (x > max) max = x;
  }
  let sum = 0;
  for (let i = 0; i < V; i++) sum += Math.exp(l[o + i] - max);
  return Math.log(sum) - f(l[o + tok] - max);
}

/**
 * One row's log-probabilities packed as llama packs them for a --kl-divergence-base file: at
 * uint16 index qo (even) of q (and f32 index qo/2 of qf, the same memory) the scale and the
 * smallest log-probability kept (16 below the top at most), then one uint16 step per token.
 * Returns -log p(tok) as llama computes it there (in f32).
 */
export function packRow(l: Float32Array, o: number, V: number, tok: number, q: Uint16Array, qf: Float32Array, qo: number): number {
  let max = l[o], min = l[o];
  for (let i = 1; i < V; i++) {
    const x = l[o + i];
    if (x > max) max = x;
    if (x < min) min = x;
  }
  min = Math.max(min, f(max - 16));
  let sum = 0;
  for (let i = 0; i < V; i++) sum += Math.exp(l[o + i] - max);
  const lse = f(Math.log(sum));
  const minLogProb = f(f(min - max) - lse);
  const scale = f(f(max - min) / 65535);
  qf[qo >> 1] = scale;
  qf[(qo >> 1) + 1] = minLogProb;
  const d = qo + 4;
  if (scale) {
    const inv = f(1 / scale);
    // llama's nearest_int: adding 1.5 * 2^23 in f32 rounds to an integer, ties to even
    for (let i = 0; i < V; i++) {
      const x = l[o + i];
      q[d + i] = x > min ? f(f(inv * f(x - min)) + 12582912) - 12582912 : 0;
    }
  } else {
    q.fill(0, d, d + V);
  }
  return f(f(max + lse) - l[o + tok]);
}

/** The running sums of a KL-divergence run (llama's kl_divergence_result). */
export class KldSums {
  sumNll = 0;
  sumNll2 = 0;
  sumNllBase = 0;
  sumNllBase2 = 0;
  sumNllNllBase = 0;
  sumKld = 0;
  sumKld2 = 0;
  sumPDiff = 0;
  sumPDiff2 = 0;
  sumPDiff4 = 0;
  maxPDiff = 0;
  nSameTop = 0;
  count = 0;
}

/**
 * One row of logits against its packed base row (q / qf at qo, as packRow writes it): adds to the
 * sums and writes the row's KL divergence and p(tok) - p_base(tok) at kld[idx] and pDiff[idx].
 */
export function kldRow(
  l: Float32Array, o: number, V: number, tok: number, q: Uint16Array, qf: Float32Array, qo: number,
  s: KldSums, kld: Float32Array, pDiff: Float32Array, idx: number,
): void {
  let max = l[o], imax = 0;
  for (let i = 1; i < V; i++) {
    const x = l[o + i];
    if (x > max) {
      max = x;
      imax = i;
    }
  }
  let sumExp = 0;
  for (let i = 0; i < V; i++) sumExp += Math.exp(l[o + i] - max);
  const lse = f(Math.log(sumExp));
  const scale = qf[qo >> 1], minLogProb = qf[(qo >> 1) + 1];
  const d = qo + 4;
  const nll = f(f(max + lse) - l[o + tok]);
  s.sumNll += nll;
  s.sumNll2 += nll * nll;
  const nllBase = -f(f(scale * q[d + tok]) + minLogProb);
  s.sumNllBase += nllBase;
  s.sumNllBase2 += nllBase * nllBase;
  s.sumNllNllBase += nll * nllBase;
  const top = f(max + lse);
  let sum = 0, imaxBase = 0, baseMax = 0;
  for (let i = 0; i < V; i++) {
    const pl = f(f(scale * q[d + i]) + minLogProb);
    if (i === 0 || pl > baseMax) {
      baseMax = pl;
      imaxBase = i;
    }
    if (pl > -16) sum += Math.exp(pl) * (pl - l[o + i] + top);
  }
  s.sumKld += sum;
  s.sumKld2 += sum * sum;
  s.count++;
  if (imax === imaxBase) s.nSameTop++;
  const pd = f(f(Math.exp(-nll)) - f(Math.exp(-nllBase)));
  s.sumPDiff += pd;
  s.sumPDiff2 += pd * pd;
  s.sumPDiff4 += pd * pd * pd * pd;
  s.maxPDiff = Math.max(s.maxPDiff, Math.abs(pd));
  kld[idx] = sum;
  pDiff[idx] = pd;
}

/** A figure and its uncertainty. */
export interface Estimate {
  value: number;
  err: number;
}

/** llama's mean_and_uncertainty: the mean, and the standard error when there are more than 10 values. */
export function meanAndUncertainty(sum: number, sum2: number, count: number): Estimate {
  if (count < 1) return { value: 0, err: 0 };
  const m = sum / count;
  const v = sum2 / count - m * m;
  return { value: m, err: v > 0 && count > 10 ? Math.sqrt(v / (count - 1)) : 0 };
}

/** llama's covariance of two means (0 under 10 values). */
export function covariance(sumA: number, sumB: number, sumAB: number, count: number): number {
  if (count < 10) return 0;
  return (sumAB / count - (sumA / count) * (sumB / count)) / (count - 1);
}

/** llama's percentile of sorted values: linear between the two nearest ranks. */
export function percentile(sorted: Float32Array, fraction: number): number {
  if (fraction <= 0) return sorted[0];
  if (fraction >= 1) return sorted[sorted.length - 1];
  let p = f(fraction * (sorted.length - 1));
  const ip = Math.floor(p);
  p -= ip;
  return (1 - p) * sorted[ip] + p * sorted[Math.min(ip + 1, sorted.length - 1)];
}

/** The median of sorted values (the mean of the middle two for an even count). */
export function median(sorted: Float32Array): number {
  const n = sorted.length;
  return n % 2 === 0 ? f(0.5 * (sorted[n / 2] + sorted[n / 2 - 1])) : sorted[(n - 1) / 2];
}

/**
 * The perplexity and its uncertainty from the sums of the scored tokens' negative
 * log-likelihoods and their squares (llama's "Final estimate"): exp(mean) and exp(mean) times the
 * standard error of the mean; err is NaN when the variance is not positive (llama prints an
 * error then).
 */
export function pplEstimate(nll: number, nll2: number, count: number): Estimate {
  const m = nll / count;
  const v = nll2 / count - m * m;
  const ppl = Math.exp(m);
  return { value: ppl, err: v > 0 ? Math.sqrt(v / (count - 1)) * ppl : NaN };
}
