/* bloomery CPU library: the AVX-512 (element-order) super-block product shared by the 256-element
 * types (simd_avx512_k.c: the K-quants and IQ4_XS; simd_avx512_iq.c: the grid types): a weight
 * block unpacked once into one common shape - 256 unsigned 8-bit values in element order (4 x 64),
 * an int16 scale per 16-element group, an int16 multiplier of the activation's 16-element sums (the
 * block's mins or offset), the negative elements' masks of signed types, and two float scales - so
 * that one inner loop serves every type: vpmaddubsw (u8 x s8 pairs) then vpdpwssd (pairs x group
 * scale), for up to BL_TILE_A activation rows. Included after the file's #pragma GCC target. */
#ifndef BL_SIMD_AVX512_KBLK_H
#define BL_SIMD_AVX512_KBLK_H
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>

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

#endif
