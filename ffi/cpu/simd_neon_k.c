/* bloomery CPU library: aarch64 products of the K-quant super-blocks (Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K) and IQ4_XS with Q8_K activation rows, for the neon, dotprod and i8mm paths. A block is
 * unpacked once into 256 8-bit weights in element order (sixteen vectors of 16) with an integer
 * scale (and min) per 16 elements, and used for up to BL_TILE_A activation rows.
 * - neon: 8 x 8 -> 16-bit products summed per element index mod 8 and scaled into eight 32-bit
 *   lanes, the reference's own lanes (quants_k.c's lanes_block), and then its float steps: the
 *   scalar path's bits for every type.
 * - dotprod (sdot) and i8mm (smmla: two weight rows by two activation rows): the exact integer sum
 *   of the block (group scales applied, mins apart) and one float step a block; Q2_K and IQ4_XS
 *   keep the reference's steps (its bits), Q3_K..Q6_K differ from it in float order only. The two
 *   paths give the same bits as each other. */
#if defined(__aarch64__) /* the whole file: aarch64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <arm_neon.h>
#include <stddef.h>

#define INLINE static inline __attribute__((always_inline))
#define DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#define I8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))

typedef struct {
  int8x16_t v[16]; /* elements 16j..16j+15 */
  int16_t sc[16];  /* integer scale of each 16 elements */
  int16_t mn[16];  /* min multiplier of each 16-element activation sum (0: none) */
  float d, dmin;
} kblk;

INLINE float h2f(const void *p) {
  __fp16 h;
  memcpy(&h, p, 2);
  return (float)h;
}

INLINE uint8x16_t shr(uint8x16_t x, int s) { return vshlq_u8(x, vdupq_n_s8((int8_t)-s)); }
#define U2S(x) vreinterpretq_s8_u8(x)

INLINE void k4_scales(const uint8_t *s, kblk *k) {
  for (int g = 0; g < 8; g++) {
    uint8_t a, m;
    bl_k4_scale_min(g, s, &a, &m);
    k->sc[2 * g] = k->sc[2 * g + 1] = a;
    k->mn[2 * g] = k->mn[2 * g + 1] = m;
  }
}

INLINE void unpack_q4_K(const uint8_t *p, kblk *k) {
  const bl_block_q4_K *b = (const bl_block_q4_K *)p;
  k4_scales(b->scales, k);
  k->d = h2f(&b->d);
  k->dmin = h2f(&b->dmin);
  const uint8x16_t m4 = vdupq_n_u8(0x0f);
  for (int c = 0; c < 4; c++) {
    const uint8x16_t x0 = vld1q_u8(b->qs + 32 * c), x1 = vld1q_u8(b->qs + 32 * c + 16);
    k->v[4 * c] = U2S(vandq_u8(x0, m4));
    k->v[4 * c + 1] = U2S(vandq_u8(x1, m4));
    k->v[4 * c + 2] = U2S(vshrq_n_u8(x0, 4));
    k->v[4 * c + 3] = U2S(vshrq_n_u8(x1, 4));
  }
}

INLINE void unpack_q5_K(const uint8_t *p, kblk *k) {
  const bl_block_q5_K *b = (const bl_block_q5_K *)p;
  k4_scales(b->scales, k);
  k->d = h2f(&b->d);
  k->dmin = h2f(&b->dmin);
  const uint8x16_t m4 = vdupq_n_u8(0x0f), h0 = vld1q_u8(b->qh), h1 = vld1q_u8(b->qh + 16), one = vdupq_n_u8(1);
  for (int c = 0; c < 4; c++) {
    const uint8x16_t x0 = vld1q_u8(b->qs + 32 * c), x1 = vld1q_u8(b->qs + 32 * c + 16);
    const int k0 = 2 * c, k1 = 2 * c + 1; /* 32-element chunks: low nibbles, high nibbles */
    k->v[4 * c] = U2S(vorrq_u8(vandq_u8(x0, m4), vshlq_n_u8(vandq_u8(shr(h0, k0), one), 4)));
    k->v[4 * c + 1] = U2S(vorrq_u8(vandq_u8(x1, m4), vshlq_n_u8(vandq_u8(shr(h1, k0), one), 4)));
    k->v[4 * c + 2] = U2S(vorrq_u8(vshrq_n_u8(x0, 4), vshlq_n_u8(vandq_u8(shr(h0, k1), one), 4)));
    k->v[4 * c + 3] = U2S(vorrq_u8(vshrq_n_u8(x1, 4), vshlq_n_u8(vandq_u8(shr(h1, k1), one), 4)));
  }
}

/* weights q - 32 (signed) */
INLINE void unpack_q6_K(const uint8_t *p, kblk *k) {
  const bl_block_q6_K *b = (const bl_block_q6_K *)p;
  for (int g = 0; g < 16; g++) {
    k->sc[g] = b->scales[g];
    k->mn[g] = 0;
  }
  k->d = h2f(&b->d);
  k->dmin = 0.0f;
  const uint8x16_t m4 = vdupq_n_u8(0x0f), m2 = vdupq_n_u8(3);
  const int8x16_t off = vdupq_n_s8(32);
  for (int h = 0; h < 2; h++) {
    const uint8x16_t l[4] = {vld1q_u8(b->ql + 64 * h), vld1q_u8(b->ql + 64 * h + 16), vld1q_u8(b->ql + 64 * h + 32),
                             vld1q_u8(b->ql + 64 * h + 48)};
    const uint8x16_t q[2] = {vld1q_u8(b->qh + 32 * h), vld1q_u8(b->qh + 32 * h + 16)};
    for (int r = 0; r < 4; r++)
      for (int s = 0; s < 2; s++) {
        const uint8x16_t x = l[2 * (r & 1) + s];
        const uint8x16_t lo = r < 2 ? vandq_u8(x, m4) : vshrq_n_u8(x, 4);
        const uint8x16_t hi = vandq_u8(shr(q[s], 2 * r), m2);
        k->v[8 * h + 2 * r + s] = vsubq_s8(U2S(vorrq_u8(lo, vshlq_n_u8(hi, 4))), off);
      }
  }
}

/* weights (q | h << 2) - 4 (signed) */
INLINE void unpack_q3_K(const uint8_t *p, kblk *k) {
  const bl_block_q3_K *b = (const bl_block_q3_K *)p;
  for (int g = 0; g < 16; g++) {
    const int lo = g < 8 ? (b->scales[g] & 15) : (b->scales[g - 8] >> 4);
    const int hi = (b->scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    k->sc[g] = (int16_t)((lo | (hi << 4)) - 32);
    k->mn[g] = 0;
  }
  k->d = h2f(&b->d);
  k->dmin = 0.0f;
  const uint8x16_t m3 = vdupq_n_u8(3), one = vdupq_n_u8(1);
  const int8x16_t four = vdupq_n_s8(4);
  const uint8x16_t hm[2] = {vld1q_u8(b->hmask), vld1q_u8(b->hmask + 16)};
  for (int h = 0; h < 2; h++) {
    const uint8x16_t q[2] = {vld1q_u8(b->qs + 32 * h), vld1q_u8(b->qs + 32 * h + 16)};
    for (int j = 0; j < 4; j++)
      for (int s = 0; s < 2; s++) {
        const uint8x16_t lo = vandq_u8(shr(q[s], 2 * j), m3);
        const uint8x16_t hb = vandq_u8(shr(hm[s], 4 * h + j), one);
        k->v[8 * h + 2 * j + s] = vsubq_s8(U2S(vorrq_u8(lo, vshlq_n_u8(hb, 2))), four);
      }
  }
}

INLINE void unpack_q2_K(const uint8_t *p, kblk *k) {
  const bl_block_q2_K *b = (const bl_block_q2_K *)p;
  for (int g = 0; g < 16; g++) {
    k->sc[g] = b->scales[g] & 15;
    k->mn[g] = b->scales[g] >> 4;
  }
  k->d = h2f(&b->d);
  k->dmin = h2f(&b->dmin);
  const uint8x16_t m3 = vdupq_n_u8(3);
  for (int h = 0; h < 2; h++) {
    const uint8x16_t q[2] = {vld1q_u8(b->qs + 32 * h), vld1q_u8(b->qs + 32 * h + 16)};
    for (int j = 0; j < 4; j++)
      for (int s = 0; s < 2; s++) k->v[8 * h + 2 * j + s] = U2S(vandq_u8(shr(q[s], 2 * j), m3));
  }
}

/* sc[j] is the group's ls (the reference's (ls - 32)); the float steps are per 32-element group */
INLINE void unpack_iq4_xs(const uint8_t *p, kblk *k) {
  const bl_block_iq4_xs *b = (const bl_block_iq4_xs *)p;
  for (int g = 0; g < 8; g++) {
    const int ls = (((b->scales_l[g / 2] >> (4 * (g % 2))) & 15) | (((b->scales_h >> (2 * g)) & 3) << 4)) - 32;
    k->sc[2 * g] = k->sc[2 * g + 1] = (int16_t)ls;
    k->mn[2 * g] = k->mn[2 * g + 1] = 0;
  }
  k->d = h2f(&b->d);
  k->dmin = 0.0f;
  const int8x16_t tab = vld1q_s8(bl_kvalues_iq4nl);
  for (int g = 0; g < 8; g++) {
    const uint8x16_t x = vld1q_u8(b->qs + 16 * g);
    k->v[2 * g] = vqtbl1q_s8(tab, vandq_u8(x, vdupq_n_u8(0x0f)));
    k->v[2 * g + 1] = vqtbl1q_s8(tab, vshrq_n_u8(x, 4));
  }
}

/* ---- neon: the reference's eight lanes (element index mod 8), scales applied ---- */

/* 16-bit lane l of the product of 16 elements: w[l] y[l] + w[l+8] y[l+8] (|.| <= 2 * 127 * 127) */
INLINE int16x8_t prod16(int8x16_t w, int8x16_t y) {
  return vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(y)), w, y);
}

INLINE void lanes_neon(const kblk *k, const int8_t *y, int32x4_t *l0, int32x4_t *l1) {
  int32x4_t a = vdupq_n_s32(0), b = a;
  for (int j = 0; j < 16; j++) {
    const int16x8_t p = prod16(k->v[j], vld1q_s8(y + 16 * j));
    a = vmlal_n_s16(a, vget_low_s16(p), k->sc[j]);
    b = vmlal_high_n_s16(b, p, k->sc[j]);
  }
  *l0 = a;
  *l1 = b;
}

/* sum of mn[j] * bsums[j] (bs: the block's bsums, unaligned in the packed block) */
INLINE int32_t min_sum(const kblk *k, const void *bs) {
  const int16x8_t m0 = vld1q_s16(k->mn), m1 = vld1q_s16(k->mn + 8);
  const int16x8_t b0 = vreinterpretq_s16_u8(vld1q_u8(bs)), b1 = vreinterpretq_s16_u8(vld1q_u8((const uint8_t *)bs + 16));
  int32x4_t s = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
  s = vmlal_high_s16(s, m0, b0);
  s = vmlal_s16(s, vget_low_s16(m1), vget_low_s16(b1));
  s = vmlal_high_s16(s, m1, b1);
  return vaddvq_s32(s);
}

/* The per-row state of the neon path: the eight float lanes and the running total. */
typedef struct {
  float32x4_t s0, s1;
  float sumf;
} lacc;

/* Q3_K..Q6_K: sums[l] += d * (float)lane[l]; Q4_K / Q5_K: sumf -= dmin * d8 * (float)summ */
INLINE void step_lanes(lacc *st, const kblk *k, const bl_block_q8_K *yb, int has_min) {
  int32x4_t l0, l1;
  lanes_neon(k, yb->qs, &l0, &l1);
  const float d = k->d * yb->d;
  st->s0 = vaddq_f32(st->s0, vmulq_n_f32(vcvtq_f32_s32(l0), d));
  st->s1 = vaddq_f32(st->s1, vmulq_n_f32(vcvtq_f32_s32(l1), d));
  if (has_min) st->sumf -= k->dmin * yb->d * (float)min_sum(k, (const uint8_t *)yb + offsetof(bl_block_q8_K, bsums));
}

INLINE float total_lanes(const lacc *st) {
  float l[8], s = st->sumf;
  vst1q_f32(l, st->s0);
  vst1q_f32(l + 4, st->s1);
  for (int i = 0; i < 8; i++) s += l[i];
  return s;
}

/* Q2_K on neon: the block's integer totals and the reference's one float step a block */
INLINE void step_q2_neon(lacc *st, const kblk *k, const bl_block_q8_K *yb) {
  int32x4_t l0, l1;
  lanes_neon(k, yb->qs, &l0, &l1);
  const int32_t isum = vaddvq_s32(vaddq_s32(l0, l1)), summs = min_sum(k, (const uint8_t *)yb + offsetof(bl_block_q8_K, bsums));
  const float dall = yb->d * k->d, dmin = yb->d * k->dmin;
  st->sumf += dall * (float)isum - dmin * (float)summs;
}

/* IQ4_XS: per 32-element group, sumf += (d4d8 * ls) * (float)sumi */
INLINE void step_iq4_neon(lacc *st, const kblk *k, const bl_block_q8_K *yb) {
  const float d4d8 = k->d * yb->d;
  for (int g = 0; g < 8; g++) {
    const int16x8_t p0 = prod16(k->v[2 * g], vld1q_s8(yb->qs + 32 * g));
    const int16x8_t p1 = prod16(k->v[2 * g + 1], vld1q_s8(yb->qs + 32 * g + 16));
    const int32_t s = vaddvq_s32(vpadalq_s16(vpaddlq_s16(p0), p1));
    st->sumf += (d4d8 * (float)k->sc[2 * g]) * (float)s;
  }
}

#define FIN_lanes(st) total_lanes(&(st))
#define FIN_sum(st) ((st).sumf)

#define KTILE_NEON_N(NAME, UNPACK, BSZ, STEP, FIN, NA)                                                        \
  static void NAME##_neon_##NA(int64_t nb, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a,      \
                               float *const *y) {                                                          \
    for (int i = 0; i < nw; i++) {                                                                         \
      const uint8_t *wr = w + i * ws;                                                                      \
      lacc st[NA];                                                                                         \
      for (int r = 0; r < NA; r++) st[r] = (lacc){vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), 0.0f};             \
      for (int64_t b = 0; b < nb; b++) {                                                                   \
        kblk k;                                                                                            \
        UNPACK(wr + b * (BSZ), &k);                                                                        \
        for (int r = 0; r < NA; r++) STEP(&st[r], &k, (const bl_block_q8_K *)a[r] + b);                    \
      }                                                                                                    \
      for (int r = 0; r < NA; r++) y[r][i] = FIN(st[r]);                                                   \
    }                                                                                                      \
  }

#define KTILE_DRIVER(NAME, SUFFIX, ATTR)                                                                      \
  ATTR static void NAME##_##SUFFIX(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a,   \
                                   int na, float *const *y) {                                              \
    const int64_t nb = n / BL_QK_K;                                                                        \
    while (na > 0) {                                                                                       \
      const int take = na >= 4 ? 4 : na >= 2 ? 2 : 1;                                                      \
      if (take == 4) NAME##_##SUFFIX##_4(nb, w, ws, nw, a, y);                                             \
      else if (take == 2) NAME##_##SUFFIX##_2(nb, w, ws, nw, a, y);                                        \
      else NAME##_##SUFFIX##_1(nb, w, ws, nw, a, y);                                                       \
      a += take;                                                                                           \
      y += take;                                                                                           \
      na -= take;                                                                                          \
    }                                                                                                      \
  }

#define KTILE_NEON(NAME, UNPACK, BSZ, STEP, FIN)                                                              \
  KTILE_NEON_N(NAME, UNPACK, BSZ, STEP, FIN, 1)                                                               \
  KTILE_NEON_N(NAME, UNPACK, BSZ, STEP, FIN, 2)                                                               \
  KTILE_NEON_N(NAME, UNPACK, BSZ, STEP, FIN, 4)                                                               \
  KTILE_DRIVER(NAME, neon, )

#define STEP_min(st, k, yb) step_lanes(st, k, yb, 1)
#define STEP_nomin(st, k, yb) step_lanes(st, k, yb, 0)
KTILE_NEON(tile_q4_K, unpack_q4_K, 144, STEP_min, FIN_lanes)
KTILE_NEON(tile_q5_K, unpack_q5_K, 176, STEP_min, FIN_lanes)
KTILE_NEON(tile_q6_K, unpack_q6_K, 210, STEP_nomin, FIN_lanes)
KTILE_NEON(tile_q3_K, unpack_q3_K, 110, STEP_nomin, FIN_lanes)
KTILE_NEON(tile_q2_K, unpack_q2_K, 84, step_q2_neon, FIN_sum)
KTILE_NEON(tile_iq4_xs, unpack_iq4_xs, 136, step_iq4_neon, FIN_sum)

/* ---- dotprod and i8mm: exact block totals, one float step a block (IQ4_XS: a group) ---- */

/* The float step of one (weight row, activation row) pair from its exact integers: isum (the
 * scaled sum, signed weights), summ (mins times activation sums), and for IQ4_XS the 8 group sums. */
typedef enum { F_MIN, F_NOMIN, F_Q2, F_IQ4 } fkind;

INLINE void fstep(float *acc, fkind f, const kblk *k, const bl_block_q8_K *yb, int32_t isum, int32_t summ, const int32_t *gs) {
  switch (f) {
    case F_MIN: /* Q4_K, Q5_K */
      *acc += (k->d * yb->d) * (float)isum;
      *acc -= (k->dmin * yb->d) * (float)summ;
      break;
    case F_NOMIN: /* Q3_K, Q6_K */
      *acc += (k->d * yb->d) * (float)isum;
      break;
    case F_Q2: {
      const float dall = yb->d * k->d, dmin = yb->d * k->dmin;
      *acc += dall * (float)isum - dmin * (float)summ;
      break;
    }
    case F_IQ4: {
      const float d4d8 = k->d * yb->d;
      for (int g = 0; g < 8; g++) *acc += (d4d8 * (float)k->sc[2 * g]) * (float)gs[g];
      break;
    }
  }
}

DOTPROD INLINE void step_dot(float *acc, fkind f, const kblk *k, const bl_block_q8_K *yb) {
  int32_t gs[8];
  int32_t isum = 0;
  if (f == F_IQ4) {
    for (int g = 0; g < 8; g++) {
      const int32x4_t s = vdotq_s32(vdotq_s32(vdupq_n_s32(0), k->v[2 * g], vld1q_s8(yb->qs + 32 * g)), k->v[2 * g + 1],
                                    vld1q_s8(yb->qs + 32 * g + 16));
      gs[g] = vaddvq_s32(s);
    }
  } else {
    int32x4_t blk = vdupq_n_s32(0);
    for (int j = 0; j < 16; j++) blk = vmlaq_n_s32(blk, vdotq_s32(vdupq_n_s32(0), k->v[j], vld1q_s8(yb->qs + 16 * j)), k->sc[j]);
    isum = vaddvq_s32(blk);
  }
  fstep(acc, f, k, yb, isum, f == F_MIN || f == F_Q2 ? min_sum(k, (const uint8_t *)yb + offsetof(bl_block_q8_K, bsums)) : 0, gs);
}

#define KTILE_DOT_N(NAME, UNPACK, BSZ, FK, NA)                                                                \
  DOTPROD static void NAME##_dot_##NA(int64_t nb, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, \
                                      float *const *y) {                                                   \
    for (int i = 0; i < nw; i++) {                                                                         \
      const uint8_t *wr = w + i * ws;                                                                      \
      float acc[NA];                                                                                       \
      for (int r = 0; r < NA; r++) acc[r] = 0.0f;                                                          \
      for (int64_t b = 0; b < nb; b++) {                                                                   \
        kblk k;                                                                                            \
        UNPACK(wr + b * (BSZ), &k);                                                                        \
        for (int r = 0; r < NA; r++) step_dot(&acc[r], FK, &k, (const bl_block_q8_K *)a[r] + b);           \
      }                                                                                                    \
      for (int r = 0; r < NA; r++) y[r][i] = acc[r];                                                       \
    }                                                                                                      \
  }

I8MM INLINE int32x4_t zip_lo(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
I8MM INLINE int32x4_t zip_hi(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
#define S8(v) vreinterpretq_s8_s32(v)

/* Weight rows A, B (zipped 8 bytes at a time: za[j], zb[j] low and high halves) by activation rows
 * x, y: lanes (A x, A y, B x, B y) of each 16-element group, scaled and summed. */
I8MM INLINE void step_mm(float acc[4], fkind f, const kblk *ka, const kblk *kb, const int8x16_t zl[16], const int8x16_t zh[16],
                         const bl_block_q8_K *xb, const bl_block_q8_K *yb) {
  int32_t gs[4][8];
  int32_t isum[4] = {0, 0, 0, 0};
  int32x4_t blk = vdupq_n_s32(0), grp = blk;
  for (int j = 0; j < 16; j++) {
    const int8x16_t x = vld1q_s8(xb->qs + 16 * j), y = vld1q_s8(yb->qs + 16 * j);
    const int32x4_t s = vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), zl[j], S8(zip_lo(x, y))), zh[j], S8(zip_hi(x, y)));
    if (f == F_IQ4) {
      grp = vaddq_s32(grp, s);
      if (j & 1) {
        int32_t t[4];
        vst1q_s32(t, grp);
        for (int q = 0; q < 4; q++) gs[q][j / 2] = t[q];
        grp = vdupq_n_s32(0);
      }
    } else {
      const int32_t scv[4] = {ka->sc[j], ka->sc[j], kb->sc[j], kb->sc[j]};
      blk = vmlaq_s32(blk, s, vld1q_s32(scv));
    }
  }
  if (f != F_IQ4) vst1q_s32(isum, blk);
  const int need_min = f == F_MIN || f == F_Q2;
  const int32_t mx = need_min ? min_sum(ka, (const uint8_t *)xb + offsetof(bl_block_q8_K, bsums)) : 0, my = need_min ? min_sum(ka, (const uint8_t *)yb + offsetof(bl_block_q8_K, bsums)) : 0;
  const int32_t nx = need_min ? min_sum(kb, (const uint8_t *)xb + offsetof(bl_block_q8_K, bsums)) : 0, ny = need_min ? min_sum(kb, (const uint8_t *)yb + offsetof(bl_block_q8_K, bsums)) : 0;
  fstep(&acc[0], f, ka, xb, isum[0], mx, gs[0]);
  fstep(&acc[1], f, ka, yb, isum[1], my, gs[1]);
  fstep(&acc[2], f, kb, xb, isum[2], nx, gs[2]);
  fstep(&acc[3], f, kb, yb, isum[3], ny, gs[3]);
}

#define KTILE_MM(NAME, UNPACK, BSZ, FK)                                                                       \
  KTILE_DOT_N(NAME, UNPACK, BSZ, FK, 1)                                                                       \
  KTILE_DOT_N(NAME, UNPACK, BSZ, FK, 2)                                                                       \
  KTILE_DOT_N(NAME, UNPACK, BSZ, FK, 4)                                                                       \
  KTILE_DRIVER(NAME, dot, DOTPROD)                                                                            \
  I8MM static void NAME##_mm(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na, \
                             float *const *y) {                                                            \
    const int64_t nb = n / BL_QK_K;                                                                        \
    const int na2 = na & ~1, nw2 = nw & ~1;                                                                \
    for (int i = 0; i < nw2; i += 2) {                                                                     \
      const uint8_t *wa = w + i * ws, *wb = wa + ws;                                                       \
      for (int r0 = 0; r0 < na2; r0 += 4) {                                                                \
        const int np = (na2 - r0 < 4 ? na2 - r0 : 4) / 2;                                                  \
        float acc[2][4] = {{0}};                                                                           \
        for (int64_t b = 0; b < nb; b++) {                                                                 \
          kblk ka, kb;                                                                                     \
          UNPACK(wa + b * (BSZ), &ka);                                                                     \
          UNPACK(wb + b * (BSZ), &kb);                                                                     \
          int8x16_t zl[16], zh[16];                                                                        \
          for (int j = 0; j < 16; j++) {                                                                   \
            zl[j] = S8(zip_lo(ka.v[j], kb.v[j]));                                                          \
            zh[j] = S8(zip_hi(ka.v[j], kb.v[j]));                                                          \
          }                                                                                                \
          for (int p = 0; p < np; p++)                                                                     \
            step_mm(acc[p], FK, &ka, &kb, zl, zh, (const bl_block_q8_K *)a[r0 + 2 * p] + b,                \
                    (const bl_block_q8_K *)a[r0 + 2 * p + 1] + b);                                         \
        }                                                                                                  \
        for (int p = 0; p < np; p++) {                                                                     \
          y[r0 + 2 * p][i] = acc[p][0];                                                                    \
          y[r0 + 2 * p + 1][i] = acc[p][1];                                                                \
          y[r0 + 2 * p][i + 1] = acc[p][2];                                                                \
          y[r0 + 2 * p + 1][i + 1] = acc[p][3];                                                            \
        }                                                                                                  \
      }                                                                                                    \
    }                                                                                                      \
    if (na2 < na) NAME##_dot(n, w, ws, nw2, a + na2, na - na2, y + na2);                                   \
    if (nw2 < nw) {                                                                                        \
      float *yt[BL_TILE_A];                                                                                \
      for (int r = 0; r < na; r++) yt[r] = y[r] + nw2;                                                     \
      NAME##_dot(n, w + nw2 * ws, ws, nw - nw2, a, na, yt);                                                \
    }                                                                                                      \
  }

KTILE_MM(tile_q4_K, unpack_q4_K, 144, F_MIN)
KTILE_MM(tile_q5_K, unpack_q5_K, 176, F_MIN)
KTILE_MM(tile_q6_K, unpack_q6_K, 210, F_NOMIN)
KTILE_MM(tile_q3_K, unpack_q3_K, 110, F_NOMIN)
KTILE_MM(tile_q2_K, unpack_q2_K, 84, F_Q2)
KTILE_MM(tile_iq4_xs, unpack_iq4_xs, 136, F_IQ4)

void bl_neon_fill_k(bl_kernels *k, bl_path p) {
#define SET(T, NAME) k->tile[T] = p == BL_PATH_I8MM ? NAME##_mm : p == BL_PATH_DOTPROD ? NAME##_dot : NAME##_neon
  SET(BL_Q4_K, tile_q4_K);
  SET(BL_Q5_K, tile_q5_K);
  SET(BL_Q6_K, tile_q6_K);
  SET(BL_Q3_K, tile_q3_K);
  SET(BL_Q2_K, tile_q2_K);
  SET(BL_IQ4_XS, tile_iq4_xs);
#undef SET
}
#endif /* __aarch64__ */
