/* bloomery CPU library: the 3-bit grid types IQ3_XXS and IQ3_S and the 1-bit grid types IQ1_S
 * and IQ1_M - dequantization (gguf-py bit-exact: test/quants-iq.test.ts) and the scalar products
 * with Q8_K activations (integer sums per block, one float step per block, as ggml's scalar code
 * orders them). Codebooks: iq_grids.h. Files of these types are read, not written.
 *   IQ3_XXS, IQ3_S: grid points of 4 elements, a sign bit per element, a scale ls = 2s + 1 per 32:
 *     y = d * ls / 4 * grid * sign (IQ3_XXS: the dequantizer's d * (0.5 + s) * 0.5), d * ls * grid * sign (IQ3_S)
 *   IQ1_S, IQ1_M: grid points of 8 elements in {-1, 0, 1} shifted by +-1/8 per 8 (IQ1_M) or per 32
 *     (IQ1_S) elements, a scale ls = 2s + 1 per 32 (IQ1_S) or per 16 (IQ1_M): y = d * ls * (grid + shift) */
#include "quants_impl.h"

#define QK BL_QK_K

/* ---- IQ3_XXS: group g: grid indices qs[8g .. 8g + 7] (points of 4: elements 8l .. 8l + 3 are
 * point 2l, 8l + 4 .. 8l + 7 point 2l + 1), word g of sas: bits 7l .. 7l + 6 the sign index of
 * elements 8l .. 8l + 7, bits 28-31 the scale s. ---- */

static inline uint32_t iq3xxs_word(const bl_block_iq3_xxs *b, int g) {
  uint32_t w;
  memcpy(&w, b->sas + 4 * g, 4);
  return w;
}

/* two 4-element points as one 8-element point */
static inline uint64_t pair(uint32_t lo, uint32_t hi) { return (uint64_t)lo | ((uint64_t)hi << 32); }

static inline void put8(float *y, float db, uint64_t grid, uint32_t signs) {
  for (int j = 0; j < 8; j++) y[j] = db * (float)((grid >> (8 * j)) & 255) * ((signs >> j) & 1 ? -1.0f : 1.0f);
}

static inline uint64_t iq3xxs_point8(const bl_block_iq3_xxs *b, int g, int l) {
  return pair(bl_iq3xxs_grid[b->qs[8 * g + 2 * l]], bl_iq3xxs_grid[b->qs[8 * g + 2 * l + 1]]);
}

void bl_to_float_iq3_xxs(const void *src, float *y, int64_t n) {
  const bl_block_iq3_xxs *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(b->d);
    for (int g = 0; g < 8; g++) {
      const uint32_t w = iq3xxs_word(b, g);
      const float db = d * (0.5f + (float)(w >> 28)) * 0.5f;
      for (int l = 0; l < 4; l++, y += 8) put8(y, db, iq3xxs_point8(b, g, l), bl_iq_signs7((w >> (7 * l)) & 127));
    }
  }
}

void bl_vec_dot_iq3_xxs_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_iq3_xxs *x = vx;
  const bl_block_q8_K *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    const int8_t *q8 = y[i].qs;
    int32_t bsum = 0;
    for (int g = 0; g < 8; g++) {
      const uint32_t w = iq3xxs_word(&x[i], g);
      int32_t sumi = 0;
      for (int l = 0; l < 4; l++, q8 += 8) sumi += bl_iq_dot8(q8, iq3xxs_point8(&x[i], g, l), bl_iq_signs7((w >> (7 * l)) & 127));
      bsum += sumi * (int32_t)(2 * (w >> 28) + 1);
    }
    sumf += bl_fp16_to_f32(x[i].d) * y[i].d * (float)bsum;
  }
  *s = 0.25f * sumf;
}

/* ---- IQ3_S: group g: point k (4 elements 4k.., k = 0..7) has grid index
 * qs[8g + k] | ((qh[g] >> k) & 1) << 8; sign bits signs[4g + l] for elements 8l .. 8l + 7;
 * scale s: nibble g % 2 of scales[g / 2]. ---- */

static inline uint64_t iq3s_point8(const bl_block_iq3_s *b, int g, int l) {
  const int k = 2 * l;
  return pair(bl_iq3s_grid[b->qs[8 * g + k] | (((b->qh[g] >> k) & 1) << 8)],
              bl_iq3s_grid[b->qs[8 * g + k + 1] | (((b->qh[g] >> (k + 1)) & 1) << 8)]);
}

static inline int iq3s_scale(const bl_block_iq3_s *b, int g) { return (b->scales[g / 2] >> (4 * (g % 2))) & 15; }

void bl_to_float_iq3_s(const void *src, float *y, int64_t n) {
  const bl_block_iq3_s *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(b->d);
    for (int g = 0; g < 8; g++) {
      const float db = d * (float)(1 + 2 * iq3s_scale(b, g));
      for (int l = 0; l < 4; l++, y += 8) put8(y, db, iq3s_point8(b, g, l), b->signs[4 * g + l]);
    }
  }
}

void bl_vec_dot_iq3_s_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_iq3_s *x = vx;
  const bl_block_q8_K *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    const int8_t *q8 = y[i].qs;
    int32_t bsum = 0;
    for (int g = 0; g < 8; g++) {
      int32_t sumi = 0;
      for (int l = 0; l < 4; l++, q8 += 8) sumi += bl_iq_dot8(q8, iq3s_point8(&x[i], g, l), x[i].signs[4 * g + l]);
      bsum += sumi * (1 + 2 * iq3s_scale(&x[i], g));
    }
    sumf += bl_fp16_to_f32(x[i].d) * y[i].d * (float)bsum;
  }
  *s = sumf;
}

/* ---- IQ1_S: group g: point l (elements 8l ..) has grid index qs[4g + l] | ((qh[g] >> 3l) & 7) << 8;
 * qh[g] bits 12-14 the scale s, bit 15 the shift's sign (set: -1/8). ---- */

static inline int8_t gsb(uint64_t grid, int j) { return (int8_t)(uint8_t)(grid >> (8 * j)); }

static inline uint64_t iq1s_point(const bl_block_iq1_s *b, int g, int l) {
  return bl_iq1s_grid[b->qs[4 * g + l] | (((b->qh[g] >> (3 * l)) & 7) << 8)];
}

void bl_to_float_iq1_s(const void *src, float *y, int64_t n) {
  const bl_block_iq1_s *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(b->d);
    for (int g = 0; g < 8; g++) {
      const float dl = d * (float)(2 * ((b->qh[g] >> 12) & 7) + 1);
      const float delta = b->qh[g] & 0x8000 ? -0.125f : 0.125f;
      for (int l = 0; l < 4; l++, y += 8) {
        const uint64_t p = iq1s_point(b, g, l);
        for (int j = 0; j < 8; j++) y[j] = dl * ((float)gsb(p, j) + delta);
      }
    }
  }
}

static inline int dot8s(const int8_t *q8, uint64_t grid) {
  int s = 0;
  for (int j = 0; j < 8; j++) s += gsb(grid, j) * q8[j];
  return s;
}

void bl_vec_dot_iq1_s_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_iq1_s *x = vx;
  const bl_block_q8_K *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    const int8_t *q8 = y[i].qs;
    int sumi = 0, sumi1 = 0; /* the points' part, the shifts' part (in units of 1/8) */
    for (int g = 0; g < 8; g++) {
      const int ls = 2 * ((x[i].qh[g] >> 12) & 7) + 1;
      const int delta = x[i].qh[g] & 0x8000 ? -1 : 1;
      int lsum = 0;
      for (int l = 0; l < 4; l++, q8 += 8) lsum += dot8s(q8, iq1s_point(&x[i], g, l));
      sumi += ls * lsum;
      sumi1 += ls * delta * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
    }
    sumf += bl_fp16_to_f32(x[i].d) * y[i].d * ((float)sumi + 0.125f * (float)sumi1);
  }
  *s = sumf;
}

/* ---- IQ1_M: group g: point l has grid index qs[4g + l] | (h & 7) << 8 and shift sign h & 8, h the
 * nibble l % 2 of qh[2g + l / 2]; scale of elements 16h' .. 16h' + 15 of the group: 3 bits at
 * 6 (g % 2) + 3h' of word g / 2 of scales; the block's f16 d in the words' top nibbles. ---- */

static inline uint32_t iq1m_nib(const bl_block_iq1_m *b, int g, int l) { return (b->qh[2 * g + l / 2] >> (4 * (l % 2))) & 15; }

static inline int iq1m_scale(const bl_block_iq1_m *b, int g, int h) {
  uint16_t w;
  memcpy(&w, b->scales + 2 * (g / 2), 2);
  return (w >> (6 * (g % 2) + 3 * h)) & 7;
}

void bl_to_float_iq1_m(const void *src, float *y, int64_t n) {
  const bl_block_iq1_m *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(bl_iq1m_d(b->scales));
    for (int g = 0; g < 8; g++) {
      for (int l = 0; l < 4; l++, y += 8) {
        const float dl = d * (float)(2 * iq1m_scale(b, g, l / 2) + 1);
        const uint32_t h = iq1m_nib(b, g, l);
        const float delta = h & 8 ? -0.125f : 0.125f;
        const uint64_t p = bl_iq1s_grid[b->qs[4 * g + l] | ((h & 7) << 8)];
        for (int j = 0; j < 8; j++) y[j] = dl * ((float)gsb(p, j) + delta);
      }
    }
  }
}

void bl_vec_dot_iq1_m_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_iq1_m *x = vx;
  const bl_block_q8_K *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    const int8_t *q8 = y[i].qs;
    int sumi1 = 0, sumi2 = 0; /* the points' part, the shifts' part (in units of 1/8) */
    for (int g = 0; g < 8; g++) {
      int sum1[2] = {0, 0}, sum2[2] = {0, 0};
      for (int l = 0; l < 4; l++, q8 += 8) {
        const uint32_t h = iq1m_nib(&x[i], g, l);
        int lsum2 = 0;
        for (int j = 0; j < 8; j++) lsum2 += q8[j];
        sum1[l / 2] += dot8s(q8, bl_iq1s_grid[x[i].qs[4 * g + l] | ((h & 7) << 8)]);
        sum2[l / 2] += h & 8 ? -lsum2 : lsum2;
      }
      const int ls1 = 2 * iq1m_scale(&x[i], g, 0) + 1, ls2 = 2 * iq1m_scale(&x[i], g, 1) + 1;
      sumi1 += sum1[0] * ls1 + sum1[1] * ls2;
      sumi2 += sum2[0] * ls1 + sum2[1] * ls2;
    }
    sumf += bl_fp16_to_f32(bl_iq1m_d(x[i].scales)) * y[i].d * ((float)sumi1 + 0.125f * (float)sumi2);
  }
  *s = sumf;
}
