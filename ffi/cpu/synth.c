/* bloomery CPU library: fills buffers with random quant blocks whose scales are small, finite
 * values (for `bloomery-serve synth`). Blocks depend only on (seed, block index), so a tensor
 * can be written in chunks of any whole number of blocks. */
#include "common.h"
#include "quants_impl.h"
#include <stddef.h>

static inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* a scale in [0.5, 1) * base as f16 */
static inline uint16_t scale16(uint64_t r, float base) {
  return bl_f32_to_fp16(base * (0.5f + (float)(r >> 40) / (float)(1ull << 25)));
}

static inline void put16(uint8_t *blk, size_t off, uint16_t v) { memcpy(blk + off, &v, 2); }

/* Gaussian-ish float from 4 uniform bytes (sum of uniforms), std about 1 */
static inline float gauss(uint64_t r) {
  float s = 0;
  for (int i = 0; i < 4; i++) s += (float)((r >> (16 * i)) & 0xffff) / 65535.0f;
  return (s - 2.0f) * 1.7320508f;
}

/* A K-quant block's 8 (scale, min) pairs with each min equal to its scale (the 12-byte packing of
 * ggml's get_scale_min_k4): with dmin = mid * d every sub-block's values d*sc*q - dmin*m have mean
 * zero over q (mid: the middle of q's range). */
static void centre_k(uint8_t *sc, uint8_t *d16, uint8_t *dmin16, float mid) {
  memcpy(sc + 4, sc, 4);
  for (int j = 8; j < 12; j++) sc[j] = (uint8_t)((sc[j] & 0x0f) | (sc[j] << 4));
  uint16_t d;
  memcpy(&d, d16, 2);
  put16(dmin16, 0, bl_f32_to_fp16(mid * bl_fp16_to_f32(d)));
}

int64_t bl_synth_fill(int64_t type, void *dst, int64_t first_block, int64_t n_blocks, uint64_t seed, double weight_std, int64_t flags) {
  const bl_type_traits *tr = bl_traits((int32_t)type);
  if (!tr || !dst || n_blocks < 0) return bl_fail(BL_E_INVAL, "synth_fill: bad type %lld or arguments", (long long)type);
  const int bb = tr->block_bytes;
  uint8_t *out = dst;
  const float ws = weight_std > 0 ? (float)weight_std : 0.02f;
  for (int64_t b = 0; b < n_blocks; b++) {
    uint8_t *blk = out + b * bb;
    uint64_t s = mix64(seed ^ mix64((uint64_t)(first_block + b)));
    uint64_t r = s;
    /* random payload, 8 bytes per step */
    for (int i = 0; i < bb; i += 8) {
      r = mix64(r);
      int n = bb - i < 8 ? bb - i : 8;
      memcpy(blk + i, &r, (size_t)n);
    }
    uint64_t r1 = mix64(s ^ 1), r2 = mix64(s ^ 2);
    /* scales chosen so a weight's spread is about ws */
    switch (type) {
      case BL_F32: { float v = ws * gauss(r1); memcpy(blk, &v, 4); break; }
      case BL_F16: put16(blk, 0, bl_f32_to_fp16(ws * gauss(r1))); break;
      case BL_BF16: put16(blk, 0, bl_f32_to_bf16(ws * gauss(r1))); break;
      case BL_Q4_0: put16(blk, offsetof(bl_block_q4_0, d), scale16(r1, ws / 4.6f)); break;
      case BL_Q4_1: put16(blk, offsetof(bl_block_q4_1, d), scale16(r1, ws / 4.6f)); put16(blk, offsetof(bl_block_q4_1, m), bl_f32_to_fp16(-8 * ws / 4.6f)); break;
      case BL_Q5_0: put16(blk, offsetof(bl_block_q5_0, d), scale16(r1, ws / 9.2f)); break;
      case BL_Q5_1: put16(blk, offsetof(bl_block_q5_1, d), scale16(r1, ws / 9.2f)); put16(blk, offsetof(bl_block_q5_1, m), bl_f32_to_fp16(-16 * ws / 9.2f)); break;
      case BL_Q8_0: put16(blk, offsetof(bl_block_q8_0, d), scale16(r1, ws / 74.0f)); break;
      case BL_IQ4_NL: put16(blk, offsetof(bl_block_iq4_nl, d), scale16(r1, ws / 60.0f)); break;
      case BL_MXFP4: blk[0] = 127 - 6; break; /* 2^-6: e2m1 values up to 6 -> about 0.05 */
      case BL_Q2_K: put16(blk, offsetof(bl_block_q2_K, d), scale16(r1, ws / 12.0f)); put16(blk, offsetof(bl_block_q2_K, dmin), scale16(r2, ws / 12.0f)); break;
      case BL_Q3_K: put16(blk, offsetof(bl_block_q3_K, d), scale16(r1, ws / 40.0f)); break;
      case BL_Q4_K:
        put16(blk, offsetof(bl_block_q4_K, d), scale16(r1, ws / 180.0f));
        put16(blk, offsetof(bl_block_q4_K, dmin), scale16(r2, ws / 180.0f));
        if (flags & BL_SYNTH_CENTERED) centre_k(blk + offsetof(bl_block_q4_K, scales), blk + offsetof(bl_block_q4_K, d), blk + offsetof(bl_block_q4_K, dmin), 7.5f);
        break;
      case BL_Q5_K:
        put16(blk, offsetof(bl_block_q5_K, d), scale16(r1, ws / 360.0f));
        put16(blk, offsetof(bl_block_q5_K, dmin), scale16(r2, ws / 360.0f));
        if (flags & BL_SYNTH_CENTERED) centre_k(blk + offsetof(bl_block_q5_K, scales), blk + offsetof(bl_block_q5_K, d), blk + offsetof(bl_block_q5_K, dmin), 15.5f);
        break;
      case BL_Q6_K: put16(blk, offsetof(bl_block_q6_K, d), scale16(r1, ws / 1300.0f)); break;
      case BL_IQ4_XS: put16(blk, offsetof(bl_block_iq4_xs, d), scale16(r1, ws / 1500.0f)); break;
      /* the grid types: every index is a point of the codebook, so only d is set (rms at d = 1:
       * about 55 for IQ2, 140 for IQ3, 7.2 for IQ1) */
      case BL_IQ2_XXS: put16(blk, offsetof(bl_block_iq2_xxs, d), scale16(r1, ws / 42.0f)); break;
      case BL_IQ2_XS: put16(blk, offsetof(bl_block_iq2_xs, d), scale16(r1, ws / 42.0f)); break;
      case BL_IQ2_S: put16(blk, offsetof(bl_block_iq2_s, d), scale16(r1, ws / 42.0f)); break;
      case BL_IQ3_XXS: put16(blk, offsetof(bl_block_iq3_xxs, d), scale16(r1, ws / 110.0f)); break;
      case BL_IQ3_S: put16(blk, offsetof(bl_block_iq3_s, d), scale16(r1, ws / 110.0f)); break;
      case BL_IQ1_S: put16(blk, offsetof(bl_block_iq1_s, d), scale16(r1, ws / 5.5f)); break;
      case BL_IQ1_M: { /* d's 16 bits in the top nibbles of the four scale words */
        const uint16_t d = scale16(r1, ws / 5.5f);
        uint8_t *sc = blk + offsetof(bl_block_iq1_m, scales);
        for (int k = 0; k < 4; k++) sc[2 * k + 1] = (uint8_t)((sc[2 * k + 1] & 0x0f) | (((d >> (4 * k)) & 15) << 4));
        break;
      }
      default: return bl_fail(BL_E_UNSUPPORTED, "synth_fill: type %s is not generated", tr->name);
    }
  }
  return BL_OK;
}
