// bloomery tests: the synthetic weights' blocks (ffi/cpu/synth.c) - `synth --centered`'s Q4_K and
// Q5_K blocks have zero mean where plain random ones share a positive offset (the offset makes every
// token's hidden state nearly alike, so a prompt on such a file picks the same few experts).
import { describe, expect, test } from "bun:test";
import { ptr } from "bun:ffi";
import { check, cpu } from "../ffi/cpu.ts";

const Q4_K = 12, Q5_K = 13, BLOCK = 256;
const BYTES: Record<number, number> = { [Q4_K]: 144, [Q5_K]: 176 };

function weights(type: number, blocks: number, flags: number): Float32Array {
  const raw = new Uint8Array(blocks * BYTES[type]);
  check(cpu().bl_synth_fill(type, ptr(raw), 0, blocks, 77n, 0.02, flags), "synth fill");
  const out = new Float32Array(blocks * BLOCK);
  check(cpu().bl_dequantize(type, raw, out, out.length), "dequantize");
  return out;
}

/** each 32-value sub-block's mean over the spread of all values (mean absolute, and the largest) */
function subBlockMeans(w: Float32Array): { mean: number; max: number } {
  let s2 = 0;
  for (const v of w) s2 += v * v;
  const rms = Math.sqrt(s2 / w.length);
  let sum = 0, max = 0;
  const n = w.length / 32;
  for (let i = 0; i < n; i++) {
    let m = 0;
    for (let j = 0; j < 32; j++) m += w[i * 32 + j];
    const r = Math.abs(m / 32) / rms;
    sum += r;
    max = Math.max(max, r);
  }
  return { mean: sum / n, max };
}

describe("synth blocks", () => {
  for (const [name, type] of [["Q4_K", Q4_K], ["Q5_K", Q5_K]] as const) {
    test(`${name}: centered blocks have zero-mean sub-blocks, plain ones an offset`, () => {
      const plain = subBlockMeans(weights(type, 512, 0));
      const centered = subBlockMeans(weights(type, 512, 1));
      console.log(`${name}: sub-block |mean| / rms, plain ${plain.mean.toFixed(3)} (max ${plain.max.toFixed(2)}), centered ${centered.mean.toFixed(3)} (max ${centered.max.toFixed(2)})`);
      // plain: min and scale drawn apart, so a sub-block's mean sits well away from zero
      expect(plain.mean).toBeGreaterThan(0.5);
      // centered: only the random quants' own spread (32 values: about 1/sqrt(32) of the rms)
      expect(centered.mean).toBeLessThan(0.25);
      expect(centered.max).toBeLessThan(plain.max);
      // the same payload otherwise: a second fill is byte-identical (deterministic in seed and index)
      expect(weights(type, 64, 1)).toEqual(weights(type, 64, 1));
    });
  }
});
