/* bloomery CPU library: the non-linear 4-bit types IQ4_NL, IQ4_XS and MXFP4 - dequantization
 * (ggml / gguf-py bit-exact), simple reference quantizers (nearest level after a small scale
 * search; not ggml's importance-weighted search), and ggml's scalar vec_dot. */
#include "quants_impl.h"
#include <math.h>

const int8_t bl_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/* e2m1 values times two: 0 0.5 1 1.5 2 3 4 6, then the same negated (bit 3 is the sign) */
const int8_t bl_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ---- shared quantizer helpers ---- */

/* Index of the table level nearest to v (first on ties). */
static int nearest_level(const int8_t kv[16], float v) {
  int best = 0;
  float err = fabsf((float)kv[0] - v);
  for (int k = 1; k < 16; k++) {
    float e = fabsf((float)kv[k] - v);
    if (e < err) {
      err = e;
      best = k;
    }
  }
  return best;
}

static float signed_absmax(const float *x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; j++) {
    if (fabsf(x[j]) > amax) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  return max;
}

/* Best float scale s for x[0..32) on the IQ4 levels: the signed extreme is tried at several
 * levels near either end of the table; each candidate's levels are refit by least squares
 * and the scale with the smallest squared error wins. Returns 0 for an all-zero block. */
static float iq4_best_scale(const float *x) {
  const float max = signed_absmax(x, 32);
  if (max == 0.0f) return 0.0f;
  static const float ends[] = {-127, -122, -117, -112, -107, 113, 109, 105, 101, 97};
  float best_s = max / -127.0f, best_err = INFINITY;
  for (size_t t = 0; t < sizeof ends / sizeof ends[0]; t++) {
    const float s0 = max / ends[t];
    float sxk = 0.0f, skk = 0.0f;
    for (int j = 0; j < 32; j++) {
      const float k = bl_kvalues_iq4nl[nearest_level(bl_kvalues_iq4nl, x[j] / s0)];
      sxk += x[j] * k;
      skk += k * k;
    }
    const float s = skk > 0.0f ? sxk / skk : s0;
    if (s == 0.0f) continue;
    float err = 0.0f;
    for (int j = 0; j < 32; j++) {
      const float r = x[j] - s * bl_kvalues_iq4nl[nearest_level(bl_kvalues_iq4nl, x[j] / s)];
      err += r * r;
    }
    if (err < best_err) {
      best_err = err;
      best_s = s;
    }
  }
  return best_s;
}

/* Pack 32 elements at scale s (the stored scale): low nibbles are elements 0..15, high 16..31. */
static void pack_levels(const int8_t kv[16], const float *x, float s, uint8_t qs[16]) {
  const float is = s != 0.0f ? 1.0f / s : 0.0f;
  for (int j = 0; j < 16; j++) {
    int lo = nearest_level(kv, x[j] * is), hi = nearest_level(kv, x[j + 16] * is);
    qs[j] = (uint8_t)(lo | (hi << 4));
  }
}

/* ---- IQ4_NL: 32 elements, y = d * kvalues[q] ---- */

void bl_to_float_iq4_nl(const void *src, float *y, int64_t n) {
  const bl_block_iq4_nl *b = src;
  for (int64_t i = 0; i < n / 32; i++, b++, y += 32) {
    const float d = bl_fp16_to_f32(b->d);
    for (int j = 0; j < 16; j++) {
      y[j] = d * (float)bl_kvalues_iq4nl[b->qs[j] & 15];
      y[j + 16] = d * (float)bl_kvalues_iq4nl[b->qs[j] >> 4];
    }
  }
}

void bl_from_float_iq4_nl(const float *x, void *dst, int64_t n) {
  bl_block_iq4_nl *b = dst;
  for (int64_t i = 0; i < n / 32; i++, b++, x += 32) {
    b->d = bl_f32_to_fp16(iq4_best_scale(x));
    pack_levels(bl_kvalues_iq4nl, x, bl_fp16_to_f32(b->d), b->qs);
  }
}

/* ---- IQ4_XS: 8 groups of 32, 6-bit group scales ls (stored + 32); y = d*(ls-32)*kvalues[q];
 * ls low 4 bits: nibble (g % 2) of scales_l[g / 2]; high 2 bits: bits 2g of scales_h. ---- */

static inline int iq4_xs_ls(const bl_block_iq4_xs *b, int g) {
  return (((b->scales_l[g / 2] >> (4 * (g % 2))) & 15) | (((b->scales_h >> (2 * g)) & 3) << 4)) - 32;
}

void bl_to_float_iq4_xs(const void *src, float *y, int64_t n) {
  const bl_block_iq4_xs *b = src;
  for (int64_t i = 0; i < n / BL_QK_K; i++, b++) {
    const float d = bl_fp16_to_f32(b->d);
    for (int g = 0; g < 8; g++, y += 32) {
      const float dl = d * (float)iq4_xs_ls(b, g);
      const uint8_t *qs = b->qs + 16 * g;
      for (int j = 0; j < 16; j++) {
        y[j] = dl * (float)bl_kvalues_iq4nl[qs[j] & 15];
        y[j + 16] = dl * (float)bl_kvalues_iq4nl[qs[j] >> 4];
      }
    }
  }
}

void bl_from_float_iq4_xs(const float *x, void *dst, int64_t n) {
  bl_block_iq4_xs *b = dst;
  for (int64_t i = 0; i < n / BL_QK_K; i++, b++, x += BL_QK_K) {
    float s[8];
    for (int g = 0; g < 8; g++) s[g] = iq4_best_scale(x + 32 * g);
    const float d = signed_absmax(s, 8) / -32.0f;
    b->d = bl_f32_to_fp16(d);
    const float d16 = bl_fp16_to_f32(b->d);
    const float id = d16 != 0.0f ? 1.0f / d16 : 0.0f;
    uint16_t sh = 0;
    memset(b->scales_l, 0, sizeof b->scales_l);
    for (int g = 0; g < 8; g++) {
      int ls = bl_nearest_int(s[g] * id);
      ls = ls < -32 ? -32 : ls > 31 ? 31 : ls;
      const int u = ls + 32;
      b->scales_l[g / 2] |= (uint8_t)((u & 15) << (4 * (g % 2)));
      sh |= (uint16_t)((u >> 4) << (2 * g));
      pack_levels(bl_kvalues_iq4nl, x + 32 * g, d16 * (float)ls, b->qs + 16 * g);
    }
    b->scales_h = sh;
  }
}

/* ---- MXFP4: 32 elements, E8M0 exponent e; y = 2^(e-128) * kvalues_mxfp4[q] ---- */

void bl_to_float_mxfp4(const void *src, float *y, int64_t n) {
  const bl_block_mxfp4 *b = src;
  for (int64_t i = 0; i < n / 32; i++, b++, y += 32) {
    const float d = bl_e8m0_to_f32_half(b->e);
    for (int j = 0; j < 16; j++) {
      y[j] = (float)bl_kvalues_mxfp4[b->qs[j] & 15] * d;
      y[j + 16] = (float)bl_kvalues_mxfp4[b->qs[j] >> 4] * d;
    }
  }
}

static float mxfp4_sq_err(const float *x, uint8_t e) {
  const float d = bl_e8m0_to_f32_half(e), id = 1.0f / d;
  float err = 0.0f;
  for (int j = 0; j < 32; j++) {
    const float r = x[j] - d * (float)bl_kvalues_mxfp4[nearest_level(bl_kvalues_mxfp4, x[j] * id)];
    err += r * r;
  }
  return err;
}

/* The exponent puts the block maximum at 4..8 times the scale (the OCP rule, which clips the
 * top to 6) or one step higher (no clipping); the smaller squared error wins. */
void bl_from_float_mxfp4(const float *x, void *dst, int64_t n) {
  bl_block_mxfp4 *b = dst;
  for (int64_t i = 0; i < n / 32; i++, b++, x += 32) {
    const float amax = fabsf(signed_absmax(x, 32));
    int e = amax > 0.0f ? (int)floorf(log2f(amax)) - 2 + 127 : 0;
    e = e < 0 ? 0 : e > 253 ? 253 : e;
    if (amax > 0.0f && mxfp4_sq_err(x, (uint8_t)(e + 1)) < mxfp4_sq_err(x, (uint8_t)e)) e++;
    b->e = (uint8_t)e;
    pack_levels(bl_kvalues_mxfp4, x, bl_e8m0_to_f32_half(b->e), b->qs);
  }
}

/* ---- vec_dot against Q8_0 (IQ4_NL, MXFP4) and Q8_K (IQ4_XS) ---- */

void bl_vec_dot_iq4_nl_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_iq4_nl *x = vx;
  const bl_block_q8_0 *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / 32; i++) {
    const float d = bl_fp16_to_f32(y[i].d) * bl_fp16_to_f32(x[i].d);
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
      sumi += y[i].qs[j] * bl_kvalues_iq4nl[x[i].qs[j] & 15];
      sumi += y[i].qs[j + 16] * bl_kvalues_iq4nl[x[i].qs[j] >> 4];
    }
    sumf += d * (float)sumi;
  }
  *s = sumf;
}

void bl_vec_dot_mxfp4_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_mxfp4 *x = vx;
  const bl_block_q8_0 *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / 32; i++) {
    const float d = bl_fp16_to_f32(y[i].d) * bl_e8m0_to_f32_half(x[i].e);
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
      sumi += y[i].qs[j] * bl_kvalues_mxfp4[x[i].qs[j] & 15];
      sumi += y[i].qs[j + 16] * bl_kvalues_mxfp4[x[i].qs[j] >> 4];
    }
    sumf += d * (float)sumi;
  }
  *s = sumf;
}

/* ggml adds one float per 32-element group: (d_x * d_y) * (ls - 32) * sum. */
void bl_vec_dot_iq4_xs_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_iq4_xs *x = vx;
  const bl_block_q8_K *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / BL_QK_K; i++) {
    const float d4d8 = bl_fp16_to_f32(x[i].d) * y[i].d;
    for (int g = 0; g < 8; g++) {
      const uint8_t *qs = x[i].qs + 16 * g;
      const int8_t *q8 = y[i].qs + 32 * g;
      int sumi = 0;
      for (int j = 0; j < 16; j++) {
        sumi += q8[j] * bl_kvalues_iq4nl[qs[j] & 15];
        sumi += q8[j + 16] * bl_kvalues_iq4nl[qs[j] >> 4];
      }
      sumf += (d4d8 * (float)iq4_xs_ls(&x[i], g)) * (float)sumi;
    }
  }
  *s = sumf;
}
