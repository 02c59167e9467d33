/* bloomery CPU library: aarch64 products of the 32-element block types against Q8_0 activation
 * rows - Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 - and of the float types F16, BF16, F32 against rows of
 * their own type, for the neon, dotprod and i8mm paths. A block is unpacked once into 32 signed
 * 8-bit weights and used for up to BL_TILE_A activation rows; its exact integer sum with each row
 * is formed by smull/sadalp (neon), sdot (dotprod) or, two weight rows by two activation rows at
 * once, smmla (i8mm); the float step is then the reference's own (quants_legacy.c, quants_iq.c),
 * so every path gives the scalar path's bits. Float rows: products in f32 (exact for f16 and bf16
 * pairs) summed in double, in four 2-lane sums. */
#if defined(__aarch64__) /* the whole file: aarch64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <arm_neon.h>

#define INLINE static inline __attribute__((always_inline))
#define DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#define I8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))

typedef struct {
  int8x16_t w0, w1; /* elements 0..15, 16..31 */
  float d;
} qblk;

INLINE float h2f(const void *p) {
  __fp16 h;
  memcpy(&h, p, 2);
  return (float)h;
}

/* low nibbles (elements 0..15) and high nibbles (16..31) */
INLINE void nibbles(const uint8_t *qs, uint8x16_t *lo, uint8x16_t *hi) {
  const uint8x16_t x = vld1q_u8(qs);
  *lo = vandq_u8(x, vdupq_n_u8(0x0f));
  *hi = vshrq_n_u8(x, 4);
}

/* bits 16h..16h+15 of qh as bytes: 0x10 where set */
INLINE uint8x16_t bits16(uint32_t qh, int h) {
  static const uint8_t idx[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t v = vqtbl1q_u8(vreinterpretq_u8_u32(vdupq_n_u32(qh >> (16 * h))), vld1q_u8(idx));
  return vandq_u8(vtstq_u8(v, vld1q_u8(bit)), vdupq_n_u8(0x10));
}

INLINE void unpack_q4_0(const uint8_t *p, qblk *k) {
  const bl_block_q4_0 *b = (const bl_block_q4_0 *)p;
  uint8x16_t lo, hi;
  nibbles(b->qs, &lo, &hi);
  k->w0 = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(8));
  k->w1 = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(8));
  k->d = h2f(&b->d);
}

INLINE void unpack_q5_0(const uint8_t *p, qblk *k) {
  const bl_block_q5_0 *b = (const bl_block_q5_0 *)p;
  uint32_t qh;
  memcpy(&qh, b->qh, 4);
  uint8x16_t lo, hi;
  nibbles(b->qs, &lo, &hi);
  k->w0 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, bits16(qh, 0))), vdupq_n_s8(16));
  k->w1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, bits16(qh, 1))), vdupq_n_s8(16));
  k->d = h2f(&b->d);
}

INLINE void unpack_q8_0(const uint8_t *p, qblk *k) {
  const bl_block_q8_0 *b = (const bl_block_q8_0 *)p;
  k->w0 = vld1q_s8(b->qs);
  k->w1 = vld1q_s8(b->qs + 16);
  k->d = h2f(&b->d);
}

INLINE void unpack_iq4_nl(const uint8_t *p, qblk *k) {
  const bl_block_iq4_nl *b = (const bl_block_iq4_nl *)p;
  const int8x16_t tab = vld1q_s8(bl_kvalues_iq4nl);
  uint8x16_t lo, hi;
  nibbles(b->qs, &lo, &hi);
  k->w0 = vqtbl1q_s8(tab, lo);
  k->w1 = vqtbl1q_s8(tab, hi);
  k->d = h2f(&b->d);
}

INLINE void unpack_mxfp4(const uint8_t *p, qblk *k) {
  const bl_block_mxfp4 *b = (const bl_block_mxfp4 *)p;
  const int8x16_t tab = vld1q_s8(bl_kvalues_mxfp4);
  uint8x16_t lo, hi;
  nibbles(b->qs, &lo, &hi);
  k->w0 = vqtbl1q_s8(tab, lo);
  k->w1 = vqtbl1q_s8(tab, hi);
  k->d = bl_e8m0_to_f32_half(b->e);
}

/* The reference's float step of one block (sumi exact), per weight type. */
#define STEP_q4_0(acc, s, dw, dy) (acc) += (float)(s) * (dw) * (dy)
#define STEP_q5_0(acc, s, dw, dy) (acc) += ((dw) * (dy)) * (float)(s)
#define STEP_q8_0(acc, s, dw, dy) (acc) += (float)(s) * ((dw) * (dy))
#define STEP_iq4_nl(acc, s, dw, dy) (acc) += ((dy) * (dw)) * (float)(s)
#define STEP_mxfp4(acc, s, dw, dy) (acc) += ((dy) * (dw)) * (float)(s)

/* ---- the exact integer sums ---- */

/* neon: 8 x 8 -> 16-bit products (two per lane: |w y| <= 128 * 127), pairwise into 32 bits */
INLINE int32_t isum_neon(const qblk *k, const int8_t *y) {
  const int8x16_t y0 = vld1q_s8(y), y1 = vld1q_s8(y + 16);
  int16x8_t p0 = vmull_s8(vget_low_s8(k->w0), vget_low_s8(y0));
  p0 = vmlal_high_s8(p0, k->w0, y0);
  int16x8_t p1 = vmull_s8(vget_low_s8(k->w1), vget_low_s8(y1));
  p1 = vmlal_high_s8(p1, k->w1, y1);
  return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p0), p1));
}

DOTPROD INLINE int32_t isum_dot(const qblk *k, const int8_t *y) {
  return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), k->w0, vld1q_s8(y)), k->w1, vld1q_s8(y + 16)));
}

/* One weight row against NA activation rows, NA = 1, 2, 4 or 8, on the neon or dotprod path. */
#define QTILE_N(PATH, ATTR, NAME, UNPACK, STEP, BSZ, NA)                                                     \
  ATTR static void NAME##_##PATH##_##NA(int64_t nb, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, \
                                        float *const *y) {                                                  \
    for (int i = 0; i < nw; i++) {                                                                          \
      const uint8_t *wr = w + i * ws;                                                                       \
      float acc[NA];                                                                                        \
      for (int r = 0; r < NA; r++) acc[r] = 0.0f;                                                           \
      for (int64_t b = 0; b < nb; b++) {                                                                    \
        qblk k;                                                                                             \
        UNPACK(wr + b * (BSZ), &k);                                                                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < NA; r++) {                                              \
          const bl_block_q8_0 *yb = (const bl_block_q8_0 *)a[r] + b;                                        \
          const int32_t s = isum_##PATH(&k, yb->qs);                                                        \
          STEP(acc[r], s, k.d, h2f(&yb->d));                                                                \
        }                                                                                                   \
      }                                                                                                     \
      for (int r = 0; r < NA; r++) y[r][i] = acc[r];                                                        \
    }                                                                                                       \
  }

#define QTILE_PATH(PATH, ATTR, NAME, UNPACK, STEP, BSZ)                                                      \
  QTILE_N(PATH, ATTR, NAME, UNPACK, STEP, BSZ, 1)                                                            \
  QTILE_N(PATH, ATTR, NAME, UNPACK, STEP, BSZ, 2)                                                            \
  QTILE_N(PATH, ATTR, NAME, UNPACK, STEP, BSZ, 4)                                                            \
  QTILE_N(PATH, ATTR, NAME, UNPACK, STEP, BSZ, 8)                                                            \
  ATTR static void NAME##_##PATH(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na, \
                                 float *const *y) {                                                         \
    const int64_t nb = n / 32;                                                                              \
    while (na > 0) {                                                                                        \
      const int take = na >= 8 ? 8 : na >= 4 ? 4 : na >= 2 ? 2 : 1;                                         \
      if (take == 8) NAME##_##PATH##_8(nb, w, ws, nw, a, y);                                                \
      else if (take == 4) NAME##_##PATH##_4(nb, w, ws, nw, a, y);                                           \
      else if (take == 2) NAME##_##PATH##_2(nb, w, ws, nw, a, y);                                           \
      else NAME##_##PATH##_1(nb, w, ws, nw, a, y);                                                          \
      a += take;                                                                                            \
      y += take;                                                                                            \
      na -= take;                                                                                           \
    }                                                                                                       \
  }

/* i8mm: weight rows i, i+1 by activation rows r, r+1 in one smmla per 8 elements. The 2x2 sums
 * come out as lanes (i r, i r+1, i+1 r, i+1 r+1); the float steps are the dotprod path's. An odd
 * row or activation left over goes through the dotprod kernel. */
I8MM INLINE int32x4_t zip_lo(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
I8MM INLINE int32x4_t zip_hi(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
#define S8(v) vreinterpretq_s8_s32(v)

I8MM INLINE int32x4_t isum_mm(const qblk *ka, const qblk *kb, const int8_t *x, const int8_t *y) {
  const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16), y0 = vld1q_s8(y), y1 = vld1q_s8(y + 16);
  int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), S8(zip_lo(ka->w0, kb->w0)), S8(zip_lo(x0, y0)));
  s = vmmlaq_s32(s, S8(zip_hi(ka->w0, kb->w0)), S8(zip_hi(x0, y0)));
  s = vmmlaq_s32(s, S8(zip_lo(ka->w1, kb->w1)), S8(zip_lo(x1, y1)));
  return vmmlaq_s32(s, S8(zip_hi(ka->w1, kb->w1)), S8(zip_hi(x1, y1)));
}

#define QTILE_MM(NAME, UNPACK, STEP, BSZ)                                                                    \
  QTILE_PATH(dot, DOTPROD, NAME, UNPACK, STEP, BSZ)                                                          \
  I8MM static void NAME##_mm(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na, \
                             float *const *y) {                                                             \
    const int64_t nb = n / 32;                                                                              \
    const int na2 = na & ~1, nw2 = nw & ~1;                                                                 \
    for (int i = 0; i < nw2; i += 2) {                                                                      \
      const uint8_t *wa = w + i * ws, *wb = wa + ws;                                                        \
      for (int r0 = 0; r0 < na2; r0 += 8) {                                                                 \
        const int np = (na2 - r0 < 8 ? na2 - r0 : 8) / 2;                                                   \
        float acc[4][4] = {{0}};                                                                            \
        for (int64_t b = 0; b < nb; b++) {                                                                  \
          qblk ka, kb;                                                                                      \
          UNPACK(wa + b * (BSZ), &ka);                                                                      \
          UNPACK(wb + b * (BSZ), &kb);                                                                      \
          for (int p = 0; p < np; p++) {                                                                    \
            const bl_block_q8_0 *xb = (const bl_block_q8_0 *)a[r0 + 2 * p] + b;                             \
            const bl_block_q8_0 *yb = (const bl_block_q8_0 *)a[r0 + 2 * p + 1] + b;                         \
            const int32x4_t s = isum_mm(&ka, &kb, xb->qs, yb->qs);                                          \
            const float dx = h2f(&xb->d), dy = h2f(&yb->d);                                                 \
            STEP(acc[p][0], vgetq_lane_s32(s, 0), ka.d, dx);                                                \
            STEP(acc[p][1], vgetq_lane_s32(s, 1), ka.d, dy);                                                \
            STEP(acc[p][2], vgetq_lane_s32(s, 2), kb.d, dx);                                                \
            STEP(acc[p][3], vgetq_lane_s32(s, 3), kb.d, dy);                                                \
          }                                                                                                 \
        }                                                                                                   \
        for (int p = 0; p < np; p++) {                                                                      \
          y[r0 + 2 * p][i] = acc[p][0];                                                                     \
          y[r0 + 2 * p + 1][i] = acc[p][1];                                                                 \
          y[r0 + 2 * p][i + 1] = acc[p][2];                                                                 \
          y[r0 + 2 * p + 1][i + 1] = acc[p][3];                                                             \
        }                                                                                                   \
      }                                                                                                     \
    }                                                                                                       \
    if (na2 < na) NAME##_dot(n, w, ws, nw2, a + na2, na - na2, y + na2);                                    \
    if (nw2 < nw) {                                                                                         \
      float *yt[BL_TILE_A];                                                                                 \
      for (int r = 0; r < na; r++) yt[r] = y[r] + nw2;                                                      \
      NAME##_dot(n, w + nw2 * ws, ws, nw - nw2, a, na, yt);                                                 \
    }                                                                                                       \
  }

#define QTILE(NAME, UNPACK, STEP, BSZ)                                                                       \
  QTILE_PATH(neon, , NAME, UNPACK, STEP, BSZ)                                                                \
  QTILE_MM(NAME, UNPACK, STEP, BSZ)

QTILE(tile_q4_0, unpack_q4_0, STEP_q4_0, 18)
QTILE(tile_q5_0, unpack_q5_0, STEP_q5_0, 22)
QTILE(tile_q8_0, unpack_q8_0, STEP_q8_0, 34)
QTILE(tile_iq4_nl, unpack_iq4_nl, STEP_iq4_nl, 18)
QTILE(tile_mxfp4, unpack_mxfp4, STEP_mxfp4, 17)

/* ---- float rows: 8 elements at a time as f32 products, summed in four 2-lane double sums ---- */

INLINE float32x4_t load_f16(const uint8_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p))); }
INLINE float32x4_t load_bf16(const uint8_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p), 16)); }
INLINE float32x4_t load_f32(const uint8_t *p) { return vld1q_f32((const float *)p); }

INLINE float one_f16(const uint8_t *p) { return h2f(p); }
INLINE float one_bf16(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return bl_bf16_to_f32(h);
}
INLINE float one_f32(const uint8_t *p) {
  float f;
  memcpy(&f, p, 4);
  return f;
}

#define FTILE(NAME, LOAD, ONE, ESZ)                                                                          \
  static void NAME(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na,         \
                   float *const *y) {                                                                       \
    const int64_t n8 = n / 8 * 8;                                                                           \
    for (int i = 0; i < nw; i++) {                                                                          \
      const uint8_t *wr = w + i * ws;                                                                       \
      for (int r = 0; r < na; r++) {                                                                        \
        float64x2_t s0 = vdupq_n_f64(0.0), s1 = s0, s2 = s0, s3 = s0;                                       \
        for (int64_t k = 0; k < n8; k += 8) {                                                               \
          const float32x4_t p = vmulq_f32(LOAD(wr + k * (ESZ)), LOAD(a[r] + k * (ESZ)));                    \
          const float32x4_t q = vmulq_f32(LOAD(wr + (k + 4) * (ESZ)), LOAD(a[r] + (k + 4) * (ESZ)));        \
          s0 = vaddq_f64(s0, vcvt_f64_f32(vget_low_f32(p)));                                                \
          s1 = vaddq_f64(s1, vcvt_high_f64_f32(p));                                                         \
          s2 = vaddq_f64(s2, vcvt_f64_f32(vget_low_f32(q)));                                                \
          s3 = vaddq_f64(s3, vcvt_high_f64_f32(q));                                                         \
        }                                                                                                   \
        double s = vaddvq_f64(vaddq_f64(vaddq_f64(s0, s2), vaddq_f64(s1, s3)));                             \
        for (int64_t k = n8; k < n; k++) s += (double)(ONE(wr + k * (ESZ)) * ONE(a[r] + k * (ESZ)));        \
        y[r][i] = (float)s;                                                                                 \
      }                                                                                                     \
    }                                                                                                       \
  }

FTILE(tile_f16, load_f16, one_f16, 2)
FTILE(tile_bf16, load_bf16, one_bf16, 2)
FTILE(tile_f32, load_f32, one_f32, 4)

void bl_neon_fill_q(bl_kernels *k, bl_path p) {
#define SET(T, NAME) k->tile[T] = p == BL_PATH_I8MM ? NAME##_mm : p == BL_PATH_DOTPROD ? NAME##_dot : NAME##_neon
  SET(BL_Q4_0, tile_q4_0);
  SET(BL_Q5_0, tile_q5_0);
  SET(BL_Q8_0, tile_q8_0);
  SET(BL_IQ4_NL, tile_iq4_nl);
  SET(BL_MXFP4, tile_mxfp4);
#undef SET
  k->tile[BL_F16] = tile_f16;
  k->tile[BL_BF16] = tile_bf16;
  k->tile[BL_F32] = tile_f32;
}
#endif /* __aarch64__ */
