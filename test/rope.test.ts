// RoPE (normal and NEOX pairs, linear scaling and YaRN) against an independent double-precision
// evaluation of the formulas (YaRN as in Peng et al. 2023 and ggml's rope_yarn).
import { describe, expect, test } from "bun:test";
import { ptr } from "bun:ffi";
import { cpu } from "../ffi/cpu.ts";
import { paramSlot, PARAM_FIELDS, Slots } from "../ffi/layout.ts";

interface RopeCfg { nRot: number; mode: 0 | 2; base: number; freqScale: number; ext: number; attn: number; fast: number; slow: number; orig: number }

function nativeRope(c: RopeCfg, v: Float32Array, heads: number, hd: number, pos: number): Float32Array {
  const b = new Slots(PARAM_FIELDS.rope.length);
  const at = (n: string) => paramSlot("rope", n);
  b.setInt(at("n_rot"), c.nRot);
  b.setInt(at("type"), c.mode);
  b.setInt(at("orig_ctx"), c.orig);
  b.setFloat(at("base"), c.base);
  b.setFloat(at("freq_scale"), c.freqScale);
  b.setFloat(at("ext_factor"), c.ext);
  b.setFloat(at("attn_factor"), c.attn);
  b.setFloat(at("beta_fast"), c.fast);
  b.setFloat(at("beta_slow"), c.slow);
  const out = v.slice();
  expect(Number(cpu().bl_rope_apply_params(ptr(b.i), ptr(out), heads, hd, pos))).toBe(0);
  return out;
}

function refRope(c: RopeCfg, v: Float32Array, heads: number, hd: number, pos: number): Float64Array {
  const out = Float64Array.from(v);
  const corr = (beta: number) => (c.nRot * Math.log(c.orig / (beta * 2 * Math.PI))) / (2 * Math.log(c.base));
  const lo = Math.max(0, Math.floor(corr(c.fast))), hi = Math.min(c.nRot - 1, Math.ceil(corr(c.slow)));
  let mscale = c.attn;
  if (c.ext !== 0) mscale *= 1 + 0.1 * Math.log(1 / c.freqScale);
  for (let i = 0; i < c.nRot / 2; i++) {
    const extrap = pos * Math.pow(c.base, (-2 * i) / c.nRot);
    let theta = c.freqScale * extrap;
    if (c.ext !== 0) {
      const ramp = 1 - Math.min(1, Math.max(0, (i - lo) / Math.max(0.001, hi - lo)));
      const mix = ramp * c.ext;
      theta = theta * (1 - mix) + extrap * mix;
    }
    for (let h = 0; h < heads; h++) {
      const [a, b] = c.mode === 2 ? [h * hd + i, h * hd + i + c.nRot / 2] : [h * hd + 2 * i, h * hd + 2 * i + 1];
      const x0 = v[a], x1 = v[b];
      out[a] = (x0 * Math.cos(theta) - x1 * Math.sin(theta)) * mscale;
      out[b] = (x0 * Math.sin(theta) + x1 * Math.cos(theta)) * mscale;
    }
  }
  return out;
}

const cases: [string, RopeCfg][] = [
  ["neox, qwen3", { nRot: 128, mode: 2, base: 1e6, freqScale: 1, ext: 0, attn: 1, fast: 32, slow: 1, orig: 0 }],
  ["normal pairs", { nRot: 64, mode: 0, base: 10000, freqScale: 1, ext: 0, attn: 1, fast: 32, slow: 1, orig: 0 }],
  ["linear scaling x4", { nRot: 64, mode: 2, base: 10000, freqScale: 0.25, ext: 0, attn: 1, fast: 32, slow: 1, orig: 4096 }],
  ["yarn x4 (Qwen3 long context)", { nRot: 128, mode: 2, base: 1e6, freqScale: 0.25, ext: 1, attn: 1, fast: 32, slow: 1, orig: 32768 }],
  ["partial rotation", { nRot: 32, mode: 2, base: 10000, freqScale: 1, ext: 0, attn: 1, fast: 32, slow: 1, orig: 0 }],
];

describe("RoPE", () => {
  for (const [name, c] of cases) {
    test(name, () => {
      const heads = 3, hd = c.nRot === 32 ? 64 : c.nRot;
      const v = Float32Array.from({ length: heads * hd }, (_, i) => Math.sin(i * 0.37) + 0.1 * (i % 7));
      for (const pos of [0, 1, 17, 4095, 100000]) {
        const got = nativeRope(c, v, heads, hd, pos);
        const want = refRope(c, v, heads, hd, pos);
        let d = 0;
        for (let i = 0; i < got.length; i++) d = Math.max(d, Math.abs(got[i] - want[i]));
        // f32 angle products drift with position; the bound grows with it
        expect(d).toBeLessThan(pos > 50000 ? 2e-2 : 2e-3);
        // dimensions past n_rot are untouched
        for (let h = 0; h < heads; h++) for (let i = c.nRot; i < hd; i++) expect(got[h * hd + i]).toBe(v[h * hd + i]);
      }
    });
  }
});
