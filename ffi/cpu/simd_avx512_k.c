/* bloomery CPU library: AVX-512 (F/BW/VL/DQ + VNNI) products of the K-quant super-blocks (Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS with Q8_K activation rows, on the stored blocks.
 *
 * Each weight block is unpacked in registers into one common shape - 256 unsigned 8-bit values
 * in element order (4 x 64), an int16 scale per 16-element group, an int16 multiplier of the
 * activation's 16-element sums (the block's mins or offset), and two float scales - so that one
 * inner loop serves every type: vpmaddubsw (u8 x s8 pairs) then vpdpwssd (pairs x group scale).
 * A block is unpacked once and used for up to BL_TILE_A activation rows. The integer part of
 * every block is exact; the float accumulation differs from the scalar reference only in order. */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")

#define INLINE static inline __attribute__((always_inline))
#ifndef BL_PF_DIST
#define BL_PF_DIST 256 /* bytes ahead of the block being read (the next rows of an item follow) */
#endif

typedef struct {
  __m512i q[4];   /* u8 values (0..127) of elements 64c..64c+63 */
  __m512i s[4];   /* int16 scale of each u8 pair of chunk c */
  __m256i mn;     /* int16 multiplier of each 16-element activation sum (bsums) */
  __mmask64 neg[4]; /* signed types: elements whose weight is negative (q holds |w|) */
  __m128 dd;      /* [d, dmin]: result = da * (d * sum(s * q * a) - dmin * sum(mn * bsums)) */
  __m512 dw, dm;  /* d in every lane; dmin in the low 8 lanes (the mins' lanes), 0 above */
} kblk;

/* Index vectors for vpermw: the scale of pair lane k of chunk c, for 32- and 16-element groups. */
static const int16_t idx32[4][32] __attribute__((aligned(64))) = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7},
};
static const int16_t idx16[4][32] __attribute__((aligned(64))) = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

/* epi16 shift counts: a in the low 256 bits, b in the high 256 bits */
INLINE __m512i shifts2(int a, int b) {
  return _mm512_inserti64x4(_mm512_set1_epi16((short)a), _mm256_set1_epi16((short)b), 1);
}
/* 32 bytes at p in both halves */
INLINE __m512i bcast32(const uint8_t *p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p)); }
INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }
/* two adjacent f16 (d, dmin) as [d, dmin, 0, 0] */
INLINE __m128 h2f2(const void *p) {
  uint32_t u;
  memcpy(&u, p, 4);
  return _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
}

INLINE void scales_32(kblk *k, __m128i sc8) {
  const __m512i s = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sc8));
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) k->s[c] = _mm512_permutexvar_epi16(_mm512_load_si512(idx32[c]), s);
}
INLINE void scales_16(kblk *k, __m256i s16) {
  const __m512i s = _mm512_castsi256_si512(s16);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) k->s[c] = _mm512_permutexvar_epi16(_mm512_load_si512(idx16[c]), s);
}

/* Q4_K / Q5_K six-bit scales and mins, 8 each, as bytes (the packing of SPEC.md), in 32-bit
 * lanes u0 u1 u2 of the 12 bytes: sc = u0 & 63 | (u2 & 15) + (u0 >> 6) << 4, m likewise from u1.
 * `s` is read 16 bytes wide (the block's quants follow its scales). */
INLINE void k4_scales(const uint8_t *s, __m128i *sc8, __m128i *mn8) {
  const __m128i x = _mm_loadu_si128((const __m128i *)s);
  const __m128i lo = _mm_and_si128(x, _mm_set1_epi8(0x3f));                                   /* sc0-3 mn0-3 */
  const __m128i u2 = _mm_srlv_epi32(_mm_shuffle_epi32(x, 0xaa), _mm_setr_epi32(0, 4, 0, 0));   /* u2, u2 >> 4 */
  const __m128i top = _mm_and_si128(_mm_srli_epi32(x, 2), _mm_set1_epi8(0x30));
  const __m128i hi = _mm_or_si128(_mm_and_si128(u2, _mm_set1_epi8(0x0f)), top);              /* sc4-7 mn4-7 */
  const __m128i all = _mm_unpacklo_epi32(lo, hi);                                             /* sc0-7 mn0-7 */
  *sc8 = all;
  *mn8 = _mm_unpackhi_epi64(all, all);
}

INLINE void unpack_q4_K(const uint8_t *p, kblk *k) {
  const bl_block_q4_K *b = (const bl_block_q4_K *)p;
  __m128i sc8, mn8;
  k4_scales(b->scales, &sc8, &mn8);
  scales_32(k, sc8);
  k->mn = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
  k->dd = h2f2(&b->d);
  const __m512i sh = shifts2(0, 4), m4 = _mm512_set1_epi8(0x0f);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) k->q[c] = _mm512_and_si512(_mm512_srlv_epi16(bcast32(b->qs + 32 * c), sh), m4);
}

INLINE void unpack_q5_K(const uint8_t *p, kblk *k) {
  const bl_block_q5_K *b = (const bl_block_q5_K *)p;
  __m128i sc8, mn8;
  k4_scales(b->scales, &sc8, &mn8);
  scales_32(k, sc8);
  k->mn = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
  k->dd = h2f2(&b->d);
  const __m512i sh = shifts2(0, 4), m4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
  const __m512i qh = bcast32(b->qh);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(bcast32(b->qs + 32 * c), sh), m4);
    const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts2(2 * c, 2 * c + 1)), one);
    k->q[c] = _mm512_or_si512(lo, _mm512_slli_epi16(hb, 4));
  }
}

INLINE void unpack_q6_K(const uint8_t *p, kblk *k) {
  const bl_block_q6_K *b = (const bl_block_q6_K *)p;
  const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
  scales_16(k, s16);
  k->mn = s16;
  k->dd = _mm_mul_ps(_mm_set1_ps(h2f(b->d)), _mm_setr_ps(1.0f, 32.0f, 0.0f, 0.0f));
  const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    const __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
    const __m512i qh = bcast32(b->qh + 32 * h);
    const __m512i lo = _mm512_and_si512(ql, m4), hi = _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4);
    const __m512i h0 = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts2(0, 2)), m2);
    const __m512i h1 = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts2(4, 6)), m2);
    k->q[2 * h] = _mm512_or_si512(lo, _mm512_slli_epi16(h0, 4));
    k->q[2 * h + 1] = _mm512_or_si512(hi, _mm512_slli_epi16(h1, 4));
  }
}

INLINE void unpack_q2_K(const uint8_t *p, kblk *k) {
  const bl_block_q2_K *b = (const bl_block_q2_K *)p;
  const __m128i s = _mm_loadu_si128((const __m128i *)b->scales), m4 = _mm_set1_epi8(0x0f);
  scales_16(k, _mm256_cvtepu8_epi16(_mm_and_si128(s, m4)));
  k->mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), m4));
  k->dd = h2f2(&b->d);
  const __m512i m2 = _mm512_set1_epi8(3);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const int j = 4 * (c & 1);
    k->q[c] = _mm512_and_si512(_mm512_srlv_epi16(bcast32(b->qs + 32 * (c >> 1)), shifts2(j, j + 2)), m2);
  }
}

INLINE void unpack_q3_K(const uint8_t *p, kblk *k) {
  const bl_block_q3_K *b = (const bl_block_q3_K *)p;
  uint64_t s_lo, s_hi;
  bl_q3k_scale_bytes(b->scales, &s_lo, &s_hi);
  const __m256i s16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_set_epi64x((long long)s_hi, (long long)s_lo)),
                                       _mm256_set1_epi16(32));
  scales_16(k, s16);
  k->mn = s16;
  k->dd = _mm_mul_ps(_mm_set1_ps(h2f(b->d)), _mm_setr_ps(1.0f, 4.0f, 0.0f, 0.0f));
  const __m512i v3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
  const __m512i hm = bcast32(b->hmask);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const int h = c >> 1, j = 2 * (c & 1);
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(bcast32(b->qs + 32 * h), shifts2(2 * j, 2 * j + 2)), v3);
    const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(hm, shifts2(4 * h + j, 4 * h + j + 1)), one);
    k->q[c] = _mm512_or_si512(lo, _mm512_slli_epi16(hb, 2));
  }
}

/* IQ4_XS: signed table values; q holds |value|, neg marks the negative ones. */
INLINE void unpack_iq4_xs(const uint8_t *p, kblk *k) {
  const bl_block_iq4_xs *b = (const bl_block_iq4_xs *)p;
  int16_t ls[8];
  for (int g = 0; g < 8; g++)
    ls[g] = (int16_t)((((b->scales_l[g / 2] >> (4 * (g % 2))) & 15) | (((b->scales_h >> (2 * g)) & 3) << 4)) - 32);
  const __m512i s = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)ls));
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) k->s[c] = _mm512_permutexvar_epi16(_mm512_load_si512(idx32[c]), s);
  k->mn = _mm256_setzero_si256();
  k->dd = _mm_setr_ps(h2f(b->d), 0.0f, 0.0f, 0.0f);
  const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)bl_kvalues_iq4nl));
  const __m512i sh = _mm512_set_epi64(4 * 0x0001000100010001ll, 4 * 0x0001000100010001ll, 0, 0,
                                      4 * 0x0001000100010001ll, 4 * 0x0001000100010001ll, 0, 0);
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    /* 16-byte halves X0 X1 of the chunk's 32 bytes as X0 X0 X1 X1: nibbles lo hi lo hi */
    const __m512i x = _mm512_shuffle_i64x2(bcast32(b->qs + 32 * c), bcast32(b->qs + 32 * c), _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i v = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srlv_epi16(x, sh), m4));
    k->neg[c] = _mm512_movepi8_mask(v);
    k->q[c] = _mm512_abs_epi8(v);
  }
}

/* One block of one activation row: acc += da * (d * main - dmin * mins), the mins in the low 8 lanes. */
INLINE __m512 kblock_row(const kblk *k, const bl_block_q8_K *y, __m512 acc, const int is_signed, const int has_min) {
  __m512i s = _mm512_setzero_si512();
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    __m512i a = _mm512_loadu_si512(y->qs + 64 * c);
    if (is_signed) a = _mm512_mask_sub_epi8(a, k->neg[c], _mm512_setzero_si512(), a);
    s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(k->q[c], a), k->s[c]);
  }
  /* acc += main * (d * da), then acc -= mins * (dmin * da): the reference's products and order */
  const __m512 da = _mm512_set1_ps(y->d);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(k->dw, da), acc);
  if (has_min) {
    const __m256i m = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), k->mn);
    acc = _mm512_fnmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(m)), _mm512_mul_ps(k->dm, da), acc);
  }
  return acc;
}

/* nw weight rows x NA activation rows: each weight block unpacked once for all NA rows. */
#define KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, NA)                                                     \
  static void NAME##_##NA(int64_t nb, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a,       \
                          float *const *y) {                                                              \
    for (int i = 0; i < nw; i++) {                                                                        \
      const uint8_t *wr = w + i * ws;                                                                     \
      __m512 acc[NA];                                                                                     \
      _Pragma("GCC unroll 16") for (int r = 0; r < NA; r++) acc[r] = _mm512_setzero_ps();                  \
      for (int64_t b = 0; b < nb; b++) {                                                                  \
        kblk k;                                                                                           \
        _Pragma("GCC unroll 4") for (int l = 0; l < ((BSZ) + 63) / 64; l++)                               \
            _mm_prefetch((const char *)(wr + b * (BSZ) + BL_PF_DIST + 64 * l), _MM_HINT_T0);              \
        UNPACK(wr + b * (BSZ), &k);                                                                       \
        k.dw = _mm512_broadcastss_ps(k.dd);                                                               \
        k.dm = _mm512_maskz_permutexvar_ps(0x00ff, _mm512_set1_epi32(1), _mm512_castps128_ps512(k.dd));   \
        _Pragma("GCC unroll 16") for (int r = 0; r < NA; r++) acc[r] =                                     \
            kblock_row(&k, (const bl_block_q8_K *)a[r] + b, acc[r], SIGNED, HASMIN);                      \
      }                                                                                                   \
      _Pragma("GCC unroll 16") for (int r = 0; r < NA; r++) y[r][i] = _mm512_reduce_add_ps(acc[r]);        \
    }                                                                                                     \
  }

#define KTILE(NAME, UNPACK, BSZ, SIGNED, HASMIN)                                                           \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 1)                                                            \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 2)                                                            \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 3)                                                            \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 4)                                                            \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 5)                                                            \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 6)                                                            \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 7)                                                            \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 8)                                                            \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 12)                                                           \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 16)                                                           \
  static void NAME(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na,       \
                   float *const *y) {                                                                     \
    const int64_t nb = n / BL_QK_K;                                                                       \
    while (na > 0) {                                                                                      \
      const int take = na >= 16 ? 16 : na >= 12 ? 12 : na >= 8 ? 8 : na;                                  \
      switch (take) {                                                                                     \
        case 1: NAME##_1(nb, w, ws, nw, a, y); break;                                                     \
        case 2: NAME##_2(nb, w, ws, nw, a, y); break;                                                     \
        case 3: NAME##_3(nb, w, ws, nw, a, y); break;                                                     \
        case 4: NAME##_4(nb, w, ws, nw, a, y); break;                                                     \
        case 5: NAME##_5(nb, w, ws, nw, a, y); break;                                                     \
        case 6: NAME##_6(nb, w, ws, nw, a, y); break;                                                     \
        case 7: NAME##_7(nb, w, ws, nw, a, y); break;                                                     \
        case 8: NAME##_8(nb, w, ws, nw, a, y); break;                                                     \
        case 12: NAME##_12(nb, w, ws, nw, a, y); break;                                                   \
        default: NAME##_16(nb, w, ws, nw, a, y); break;                                                   \
      }                                                                                                   \
      a += take;                                                                                          \
      y += take;                                                                                          \
      na -= take;                                                                                         \
    }                                                                                                     \
  }

KTILE(tile_q4_K, unpack_q4_K, 144, 0, 1)
KTILE(tile_q5_K, unpack_q5_K, 176, 0, 1)
KTILE(tile_q6_K, unpack_q6_K, 210, 0, 1)
KTILE(tile_q2_K, unpack_q2_K, 84, 0, 1)
KTILE(tile_q3_K, unpack_q3_K, 110, 0, 1)
KTILE(tile_iq4_xs, unpack_iq4_xs, 136, 1, 0)

void bl_avx512_fill_k(bl_kernels *k) {
  k->tile[BL_Q4_K] = tile_q4_K;
  k->tile[BL_Q5_K] = tile_q5_K;
  k->tile[BL_Q6_K] = tile_q6_K;
  k->tile[BL_Q2_K] = tile_q2_K;
  k->tile[BL_Q3_K] = tile_q3_K;
  k->tile[BL_IQ4_XS] = tile_iq4_xs;
}
#endif /* __x86_64__ */
