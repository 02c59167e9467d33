// The rule that moves the card's share of a token's host picks online (cuda/hybrid/share_tune.cu,
// bl_cuda_share_decide): pure arithmetic in the CUDA library, so it runs where no card is (the
// library loads without a driver). Named cases, then a model of a split layer - the card's share
// a fixed part plus a part a pick, the CPU's call likewise plus a latency - stepped from every
// start: the share must settle (no back and forth), within 20% of the best split's layer time at
// worst and 2% on average (the rule's 10% margins keep it from chasing near-ties).
import { describe, expect, test } from "bun:test";
import { cudaLib } from "../ffi/cuda.ts";

const lib = cudaLib();
if (!lib) console.log("share-tune: skipped (no CUDA library in this build)");
const maybe = lib ? describe : describe.skip;
const decide = (K: number, share: number, card: number, wait: number, cpu: number, pick = 50, lat = 5): number =>
  Number(lib!.bl_cuda_share_decide(K, share, card, wait, cpu, pick, lat));

maybe("the card's share sized online", () => {
  test("named cases: the card waiting longer than a pick takes it moves one pick to the card; a card share ending late moves one back", () => {
    // a slow CPU (the H200 host of call 143): 5 picks in 308 us, the card's 3 in 175 us, waiting 135
    expect(decide(8, 3, 175, 135, 308)).toBe(4);
    // balanced: the card waits less than a pick takes it, and not at all is not the case
    expect(decide(8, 4, 225, 20, 246)).toBe(4);
    // the card's share ends 70 us after the CPU's call (a CPU pick 37.5 us): one back
    expect(decide(8, 4, 225, 1, 150)).toBe(3);
    // the CPU keeps one pick, and the card never gives back what it does not have
    expect(decide(8, 7, 400, 500, 600)).toBe(7);
    expect(decide(8, 0, 2, 0, 100)).toBe(0);
    // no card share yet: its time a pick is the given one
    expect(decide(8, 0, 2, 300, 300, 50)).toBe(1);
    expect(decide(8, 0, 2, 40, 300, 50)).toBe(0);
    // out of range in, in range out
    expect(decide(8, 9, 100, 0, 100)).toBe(7);
    expect(decide(8, -1, 100, 0, 100)).toBe(0);
    expect(decide(1, 0, 0, 0, 0)).toBe(0);
  });

  test("a modelled layer settles from every start, near its best split", () => {
    let seed = 7, sum = 0, n = 0;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
    for (let trial = 0; trial < 200; trial++) {
      const K = 8, g = 30 + 40 * rnd(), gf = 5 + 20 * rnd(), cp = 20 + 60 * rnd(), cf = 10 + 40 * rnd(), lat = 2 + 8 * rnd();
      const card = (s: number) => (s > 0 ? gf + g * s : 2);
      const cpu = (s: number) => cf + cp * (K - s);
      const layer = (s: number) => Math.max(card(s), cpu(s) + lat);
      let best = Infinity;
      for (let s = 0; s < K; s++) best = Math.min(best, layer(s));
      for (let start = 0; start < K; start++) {
        let s = start;
        const seen: number[] = [];
        for (let step = 0; step < 3 * K; step++) {
          const wait = Math.max(0, cpu(s) + lat - card(s)) + 1; // the answer's trip
          s = decide(K, s, card(s), wait, cpu(s), g + gf, lat);
          seen.push(s);
        }
        const tail = seen.slice(-4);
        expect(new Set(tail).size).toBe(1);
        expect(layer(s)).toBeLessThanOrEqual(best * 1.2);
        sum += layer(s) / best;
        n++;
      }
    }
    expect(sum / n).toBeLessThan(1.02);
  });
});
