/* bloomery CPU library: the 256-element K-quant super-blocks Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and
 * the activation type Q8_K - dequantization (ggml / gguf-py bit-exact), ggml's Q8_K reference
 * quantizer, and ggml's scalar vec_dot against Q8_K. The quantizers of the weight types are in
 * quants_k_quantize.c. */
#include "quants_impl.h"
#include <math.h>

#define QK BL_QK_K

/* ---- Q2_K: 16 groups of 16; y = d*(sc & 15)*q - dmin*(sc >> 4), q 2 bits ----
 * Element 128h + 32j + l (h half, j bit-pair 0..3, l 0..31) is bits 2j of qs[32h + l];
 * its group is 8h + 2j + l/16. */

void bl_to_float_q2_K(const void *src, float *y, int64_t n) {
  const bl_block_q2_K *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(b->d), dmin = bl_fp16_to_f32(b->dmin);
    for (int h = 0; h < 2; h++) {
      const uint8_t *q = b->qs + 32 * h;
      for (int j = 0; j < 4; j++) {
        for (int g = 0; g < 2; g++) {
          const uint8_t sc = b->scales[8 * h + 2 * j + g];
          const float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
          for (int l = 16 * g; l < 16 * g + 16; l++) *y++ = dl * (float)((q[l] >> (2 * j)) & 3) - ml;
        }
      }
    }
  }
}

/* ---- Q3_K: 16 groups of 16; y = d*(sc - 32)*(q - 4), q = 2 low bits | hmask bit << 2 ----
 * Element 128h + 32j + l: low bits 2j of qs[32h + l], high bit (4h + j) of hmask[l];
 * 6-bit scale k: low nibble of scales[k % 8] (k < 8 low half, else high half), top 2 bits
 * from scales[8 + k % 4] at bit 2*(k / 4). */

static void q3_K_scales(const uint8_t s[12], int sc[16]) {
  for (int k = 0; k < 16; k++) {
    int lo = k < 8 ? (s[k] & 15) : (s[k - 8] >> 4);
    int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
    sc[k] = (lo | (hi << 4)) - 32;
  }
}

void bl_to_float_q3_K(const void *src, float *y, int64_t n) {
  const bl_block_q3_K *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(b->d);
    int sc[16];
    q3_K_scales(b->scales, sc);
    for (int h = 0; h < 2; h++) {
      const uint8_t *q = b->qs + 32 * h;
      for (int j = 0; j < 4; j++) {
        const uint8_t m = (uint8_t)(1u << (4 * h + j));
        for (int g = 0; g < 2; g++) {
          const float dl = d * (float)sc[8 * h + 2 * j + g];
          for (int l = 16 * g; l < 16 * g + 16; l++) {
            int v = ((q[l] >> (2 * j)) & 3) - ((b->hmask[l] & m) ? 0 : 4);
            *y++ = dl * (float)v;
          }
        }
      }
    }
  }
}

/* ---- Q4_K: 8 groups of 32; y = d*sc*q - dmin*m; chunk c of 64: low nibbles of qs[32c..] are
 * its first 32 elements (group 2c), high nibbles the next 32 (group 2c+1). ---- */

void bl_to_float_q4_K(const void *src, float *y, int64_t n) {
  const bl_block_q4_K *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(b->d), dmin = bl_fp16_to_f32(b->dmin);
    for (int c = 0; c < 4; c++) {
      const uint8_t *q = b->qs + 32 * c;
      for (int g = 0; g < 2; g++) {
        uint8_t sc, m;
        bl_k4_scale_min(2 * c + g, b->scales, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        for (int l = 0; l < 32; l++) *y++ = dl * (float)((q[l] >> (4 * g)) & 15) - ml;
      }
    }
  }
}

/* ---- Q5_K: Q4_K plus a fifth bit: element 32k + l (group k) has bit k of qh[l] ---- */

void bl_to_float_q5_K(const void *src, float *y, int64_t n) {
  const bl_block_q5_K *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(b->d), dmin = bl_fp16_to_f32(b->dmin);
    for (int c = 0; c < 4; c++) {
      const uint8_t *q = b->qs + 32 * c;
      for (int g = 0; g < 2; g++) {
        const int k = 2 * c + g;
        uint8_t sc, m;
        bl_k4_scale_min(k, b->scales, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
          int v = ((q[l] >> (4 * g)) & 15) | (((b->qh[l] >> k) & 1) << 4);
          *y++ = dl * (float)v - ml;
        }
      }
    }
  }
}

/* ---- Q6_K: 16 groups of 16 with int8 scales; y = d*sc*(q - 32), q 6 bits ----
 * Half h (128 elements), l in 0..31: element 128h + 32r + l for r = 0..3 takes the low (r < 2)
 * or high (r >= 2) nibble of ql[64h + l + 32(r % 2)] and bits 2r of qh[32h + l]. */

static inline int q6_K_value(const bl_block_q6_K *b, int e) {
  const int h = e / 128, r = (e % 128) / 32, l = e % 32;
  const int lo = (b->ql[64 * h + l + 32 * (r & 1)] >> (4 * (r >> 1))) & 15;
  const int hi = (b->qh[32 * h + l] >> (2 * r)) & 3;
  return (lo | (hi << 4)) - 32;
}

void bl_to_float_q6_K(const void *src, float *y, int64_t n) {
  const bl_block_q6_K *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = bl_fp16_to_f32(b->d);
    for (int e = 0; e < QK; e++) y[e] = d * (float)b->scales[e / 16] * (float)q6_K_value(b, e);
    y += QK;
  }
}

/* ---- Q8_K: activations; ggml's reference: iscale = -127 / (signed value of largest |x|, first
 * on ties), q = min(127, nearest_int(iscale * x)), d = 1 / iscale, bsums per 16. ---- */

void bl_to_float_q8_K(const void *src, float *y, int64_t n) {
  const bl_block_q8_K *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++) {
    const float d = b->d;
    for (int j = 0; j < QK; j++) *y++ = d * (float)b->qs[j];
  }
}

void bl_from_float_q8_K(const float *x, void *dst, int64_t n) {
  bl_block_q8_K *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++) {
      if (fabsf(x[j]) > amax) {
        amax = fabsf(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      b->d = 0.0f;
      memset(b->qs, 0, sizeof b->qs);
      for (int g = 0; g < 16; g++) b->bsums[g] = 0;
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < QK; j++) {
      int v = bl_nearest_int(iscale * x[j]);
      b->qs[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int g = 0; g < 16; g++) {
      int sum = 0;
      for (int l = 0; l < 16; l++) sum += b->qs[16 * g + l];
      b->bsums[g] = (int16_t)sum;
    }
    b->d = 1.0f / iscale;
  }
}

/* ---- vec_dot against Q8_K ----
 * ggml's scalar code: integer products summed per block; the scaled part is accumulated in
 * eight float lanes (lane = element index mod 8, sums[lane] += d * isum[lane] per block) that are
 * added at the end; the min part (bsums times mins) goes straight into the total. Q2_K instead
 * adds one float per block. We keep that order so results match ggml bit for bit. */

/* Finish a lane-structured dot: sumf holds the min terms, sums[] the lane partials. */
static inline float lanes_total(float sumf, const float sums[8]) {
  for (int l = 0; l < 8; l++) sumf += sums[l];
  return sumf;
}

void bl_vec_dot_q2_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_q2_K *x = vx;
  const bl_block_q8_K *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    int summs = 0; /* sum over groups of min * sum(q8) */
    for (int g = 0; g < 16; g++) summs += y[i].bsums[g] * (x[i].scales[g] >> 4);
    int isum = 0;
    for (int h = 0; h < 2; h++) {
      const uint8_t *q2 = x[i].qs + 32 * h;
      for (int j = 0; j < 4; j++) {
        const int8_t *q8 = y[i].qs + 128 * h + 32 * j;
        for (int g = 0; g < 2; g++) {
          int sl = 0;
          for (int l = 16 * g; l < 16 * g + 16; l++) sl += q8[l] * ((q2[l] >> (2 * j)) & 3);
          isum += (x[i].scales[8 * h + 2 * j + g] & 15) * sl;
        }
      }
    }
    const float dall = y[i].d * bl_fp16_to_f32(x[i].d);
    const float dmin = y[i].d * bl_fp16_to_f32(x[i].dmin);
    sumf += dall * (float)isum - dmin * (float)summs;
  }
  *s = sumf;
}

/* Shared tail of the lane-structured types: w[256] are the block's integer weights (before the
 * group scale), sc[group] the integer group scales, group size gs (16 or 32). */
static inline void lanes_block(const int8_t *w, const int *sc, int gs, const int8_t *q8, float d,
                               float sums[8]) {
  int32_t lane[8] = {0};
  for (int e = 0; e < QK; e++) lane[e % 8] += sc[e / gs] * (q8[e] * w[e]);
  for (int l = 0; l < 8; l++) sums[l] += d * (float)lane[l];
}

void bl_vec_dot_q3_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_q3_K *x = vx;
  const bl_block_q8_K *y = vy;
  float sums[8] = {0};
  for (int64_t i = 0; i < n / QK; i++) {
    int8_t w[QK];
    for (int e = 0; e < QK; e++) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      const int lo = (x[i].qs[32 * h + l] >> (2 * j)) & 3;
      w[e] = (int8_t)(lo - ((x[i].hmask[l] >> (4 * h + j)) & 1 ? 0 : 4));
    }
    int sc[16];
    q3_K_scales(x[i].scales, sc);
    lanes_block(w, sc, 16, y[i].qs, bl_fp16_to_f32(x[i].d) * y[i].d, sums);
  }
  *s = lanes_total(0.0f, sums);
}

/* Q4_K and Q5_K: the min part is sum over groups of m * (bsums of its two 16-element halves). */
static float k4_min_part(const uint8_t *scales, const bl_block_q8_K *y, float dmin16) {
  int summ = 0;
  for (int g = 0; g < 8; g++) {
    uint8_t sc, m;
    bl_k4_scale_min(g, scales, &sc, &m);
    summ += m * (y->bsums[2 * g] + y->bsums[2 * g + 1]);
  }
  return dmin16 * y->d * (float)summ;
}

void bl_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_q4_K *x = vx;
  const bl_block_q8_K *y = vy;
  float sums[8] = {0};
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    int8_t w[QK];
    int sc[8];
    for (int e = 0; e < QK; e++) w[e] = (int8_t)((x[i].qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) & 1))) & 15);
    for (int g = 0; g < 8; g++) {
      uint8_t a, m;
      bl_k4_scale_min(g, x[i].scales, &a, &m);
      sc[g] = a;
    }
    lanes_block(w, sc, 32, y[i].qs, bl_fp16_to_f32(x[i].d) * y[i].d, sums);
    sumf -= k4_min_part(x[i].scales, &y[i], bl_fp16_to_f32(x[i].dmin));
  }
  *s = lanes_total(sumf, sums);
}

void bl_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_q5_K *x = vx;
  const bl_block_q8_K *y = vy;
  float sums[8] = {0};
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    int8_t w[QK];
    int sc[8];
    for (int e = 0; e < QK; e++) {
      const int k = e / 32, l = e % 32;
      const int lo = (x[i].qs[32 * (k / 2) + l] >> (4 * (k & 1))) & 15;
      w[e] = (int8_t)(lo | (((x[i].qh[l] >> k) & 1) << 4));
    }
    for (int g = 0; g < 8; g++) {
      uint8_t a, m;
      bl_k4_scale_min(g, x[i].scales, &a, &m);
      sc[g] = a;
    }
    lanes_block(w, sc, 32, y[i].qs, bl_fp16_to_f32(x[i].d) * y[i].d, sums);
    sumf -= k4_min_part(x[i].scales, &y[i], bl_fp16_to_f32(x[i].dmin));
  }
  *s = lanes_total(sumf, sums);
}

void bl_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_q6_K *x = vx;
  const bl_block_q8_K *y = vy;
  float sums[8] = {0};
  for (int64_t i = 0; i < n / QK; i++) {
    int8_t w[QK];
    int sc[16];
    for (int e = 0; e < QK; e++) w[e] = (int8_t)q6_K_value(&x[i], e);
    for (int g = 0; g < 16; g++) sc[g] = x[i].scales[g];
    lanes_block(w, sc, 16, y[i].qs, bl_fp16_to_f32(x[i].d) * y[i].d, sums);
  }
  *s = lanes_total(0.0f, sums);
}
