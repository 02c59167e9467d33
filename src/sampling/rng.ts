// bloomery sampling: the seeded random source of the samplers. The generator is MT19937 (the
// standard 32-bit Mersenne Twister llama.cpp's samplers use as std::mt19937), and the draws are
// those of libstdc++'s uniform_real_distribution<double> / <float>, so a seed gives the same
// stream of uniforms as llama's samplers.
import { SamplingParamError } from "./errors.ts";

const N = 624;
const M = 397;

export class Mt19937 {
  private readonly mt = new Uint32Array(N);
  private idx = N;

  constructor(seed: number) {
    this.seed(seed);
  }

  seed(seed: number): void {
    const mt = this.mt;
    mt[0] = seed >>> 0;
    for (let i = 1; i < N; i++) {
      const prev = mt[i - 1] ^ (mt[i - 1] >>> 30);
      mt[i] = (Math.imul(1812433253, prev) + i) >>> 0;
    }
    this.idx = N;
  }

  /** The next 32-bit output. */
  nextU32(): number {
    const mt = this.mt;
    if (this.idx >= N) {
      for (let i = 0; i < N; i++) {
        const y = (mt[i] & 0x80000000) | (mt[(i + 1) % N] & 0x7fffffff);
        let v = mt[(i + M) % N] ^ (y >>> 1);
        if (y & 1) v ^= 0x9908b0df;
        mt[i] = v >>> 0;
      }
      this.idx = 0;
    }
    let y = mt[this.idx++];
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  }

  /** A uniform double in [0, 1) from two outputs (generate_canonical<double, 53>). */
  nextDouble(): number {
    const lo = this.nextU32();
    const hi = this.nextU32();
    const r = (lo + hi * 4294967296) / 18446744073709551616;
    return r >= 1 ? 1 - Number.EPSILON / 2 : r;
  }

  /** A uniform float in [0, 1) from one output (generate_canonical<float, 24>). */
  nextFloat(): number {
    const r = Math.fround(Math.fround(this.nextU32()) / 4294967296);
    return r >= 1 ? Math.fround(1 - 2 ** -24) : r;
  }

  /** A copy with the same state. */
  clone(): Mt19937 {
    const c = new Mt19937(0);
    c.mt.set(this.mt);
    c.idx = this.idx;
    return c;
  }
}

/** llama's "random seed" value (LLAMA_DEFAULT_SEED): -1 as a uint32. */
export const RANDOM_SEED = 0xffffffff;

/** The seed a sampler uses: `seed` itself, or a fresh random uint32 for -1 / 0xFFFFFFFF. */
export function resolveSeed(seed: number): number {
  if (!Number.isInteger(seed) || seed < -1 || seed > RANDOM_SEED)
    throw new SamplingParamError("seed", `must be an integer in [-1, ${RANDOM_SEED}], got ${seed}`);
  if (seed === -1 || seed === RANDOM_SEED) {
    const b = new Uint32Array(1);
    crypto.getRandomValues(b);
    // llama never hands the default seed itself to a generator as a value it chose.
    return b[0] === RANDOM_SEED ? 0 : b[0];
  }
  return seed;
}

/**
 * Index drawn from weights `w` (non-negative, not all zero) as libstdc++'s
 * std::discrete_distribution does: cumulative normalized weights, lower bound of one
 * canonical double; a single weight draws nothing.
 */
export function discreteDraw(rng: Mt19937, w: ArrayLike<number>, n: number = w.length): number {
  if (n < 2) return 0;
  let sum = 0;
  for (let i = 0; i < n; i++) sum += w[i];
  const u = rng.nextDouble();
  let cum = 0;
  for (let i = 0; i < n - 1; i++) {
    cum += w[i] / sum;
    if (cum >= u) return i;
  }
  return n - 1;
}
