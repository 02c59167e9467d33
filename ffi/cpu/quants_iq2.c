/* bloomery CPU library: the 2-bit grid types IQ2_XXS, IQ2_XS and IQ2_S - dequantization (gguf-py
 * bit-exact: test/quants-iq.test.ts) and the scalar products with Q8_K activations (integer sums
 * per block, one float step per block, the block factor applied once at the end, as ggml's
 * scalar code orders them). Each block is 8 groups of 32 elements, each group 4 grid points of
 * 8 elements from the codebooks of iq_grids.h, with a sign bit per element and a scale
 * ls = 2s + 1 per 32 (IQ2_XXS) or per 16 (IQ2_XS, IQ2_S) elements: y = d * ls / 8 * grid * sign
 * (the dequantizers' d * (0.5 + s) * 0.25). Files of these types are read, not written. */
#include "quants_impl.h"

#define QK BL_QK_K

/* ---- IQ2_XXS: group g is qs[8g .. 8g + 7]: bytes 0-3 the grid indices of its 4 points, bytes
 * 4-7 a word: bits 7l .. 7l + 6 the sign index of point l, bits 28-31 the scale s. ---- */

static inline uint32_t iq2xxs_word(const bl_block_iq2_xxs *b, int g) {
  uint32_t w;
  memcpy(&w, b->qs + 8 * g + 4, 4);
  return w;
}

/* 8 dequantized elements: db * grid * sign */
static inline void put8(float *y, float db, uint64_t grid, uint32_t signs) {
  for (int j = 0; j < 8; j++) y[j] = db * (float)((grid >> (8 * j)) & 255) * ((signs >> j) & 1 ? -1.0f : 1.0f);
}

void bl_to_float_iq2_xxs(const void *src, float *y, int64_t n) {
  const bl_block_iq2_xxs *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(b->d);
    for (int g = 0; g < 8; g++) {
      const uint32_t w = iq2xxs_word(b, g);
      const float db = d * (0.5f + (float)(w >> 28)) * 0.25f;
      for (int l = 0; l < 4; l++, y += 8) put8(y, db, bl_iq2xxs_grid[b->qs[8 * g + l]], bl_iq_signs7((w >> (7 * l)) & 127));
    }
  }
}

void bl_vec_dot_iq2_xxs_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_iq2_xxs *x = vx;
  const bl_block_q8_K *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    const int8_t *q8 = y[i].qs;
    int32_t bsum = 0;
    for (int g = 0; g < 8; g++) {
      const uint32_t w = iq2xxs_word(&x[i], g);
      int32_t sumi = 0;
      for (int l = 0; l < 4; l++, q8 += 8) sumi += bl_iq_dot8(q8, bl_iq2xxs_grid[x[i].qs[8 * g + l]], bl_iq_signs7((w >> (7 * l)) & 127));
      bsum += sumi * (int32_t)(2 * (w >> 28) + 1);
    }
    sumf += bl_fp16_to_f32(x[i].d) * y[i].d * (float)bsum;
  }
  *s = 0.125f * sumf;
}

/* ---- IQ2_XS: point k (8 elements, k = 4g + l) is qs[k]: a 9-bit grid index, the sign index
 * above it; scales[g] low nibble for points 0-1 of group g, high nibble for points 2-3. ---- */

void bl_to_float_iq2_xs(const void *src, float *y, int64_t n) {
  const bl_block_iq2_xs *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(b->d);
    for (int g = 0; g < 8; g++) {
      const float db0 = d * (0.5f + (float)(b->scales[g] & 15)) * 0.25f;
      const float db1 = d * (0.5f + (float)(b->scales[g] >> 4)) * 0.25f;
      for (int l = 0; l < 4; l++, y += 8) {
        const uint16_t q = b->qs[4 * g + l];
        put8(y, l < 2 ? db0 : db1, bl_iq2xs_grid[q & 511], bl_iq_signs7(q >> 9));
      }
    }
  }
}

void bl_vec_dot_iq2_xs_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_iq2_xs *x = vx;
  const bl_block_q8_K *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    const int8_t *q8 = y[i].qs;
    int32_t bsum = 0;
    for (int g = 0; g < 8; g++) {
      int32_t sumi[2] = {0, 0};
      for (int l = 0; l < 4; l++, q8 += 8) {
        const uint16_t q = x[i].qs[4 * g + l];
        sumi[l / 2] += bl_iq_dot8(q8, bl_iq2xs_grid[q & 511], bl_iq_signs7(q >> 9));
      }
      bsum += sumi[0] * (2 * (x[i].scales[g] & 15) + 1) + sumi[1] * (2 * (x[i].scales[g] >> 4) + 1);
    }
    sumf += bl_fp16_to_f32(x[i].d) * y[i].d * (float)bsum;
  }
  *s = 0.125f * sumf;
}

/* ---- IQ2_S: point k = 4g + l: grid index qs[k] | ((qh[g] >> 2l) & 3) << 8, sign bits signs[k];
 * scales as IQ2_XS. ---- */

static inline uint64_t iq2s_point(const bl_block_iq2_s *b, int g, int l) {
  return bl_iq2s_grid[b->qs[4 * g + l] | (((b->qh[g] >> (2 * l)) & 3) << 8)];
}

void bl_to_float_iq2_s(const void *src, float *y, int64_t n) {
  const bl_block_iq2_s *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(b->d);
    for (int g = 0; g < 8; g++) {
      const float db0 = d * (0.5f + (float)(b->scales[g] & 15)) * 0.25f;
      const float db1 = d * (0.5f + (float)(b->scales[g] >> 4)) * 0.25f;
      for (int l = 0; l < 4; l++, y += 8) put8(y, l < 2 ? db0 : db1, iq2s_point(b, g, l), b->signs[4 * g + l]);
    }
  }
}

void bl_vec_dot_iq2_s_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_iq2_s *x = vx;
  const bl_block_q8_K *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    const int8_t *q8 = y[i].qs;
    int32_t bsum = 0;
    for (int g = 0; g < 8; g++) {
      int32_t sumi[2] = {0, 0};
      for (int l = 0; l < 4; l++, q8 += 8) sumi[l / 2] += bl_iq_dot8(q8, iq2s_point(&x[i], g, l), x[i].signs[4 * g + l]);
      bsum += sumi[0] * (2 * (x[i].scales[g] & 15) + 1) + sumi[1] * (2 * (x[i].scales[g] >> 4) + 1);
    }
    sumf += bl_fp16_to_f32(x[i].d) * y[i].d * (float)bsum;
  }
  *s = 0.125f * sumf;
}
