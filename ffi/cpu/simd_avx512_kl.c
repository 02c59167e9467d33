/* bloomery CPU library: AVX-512 (F/BW/VL/DQ + VNNI) products of the K-quant super-blocks (Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS with Q8_K activation rows in lane order - the AVX-512
 * path's kernels for every batch size, one-token steps included, so that a row's bits never depend
 * on its batch (kernels.h's tile_lanes; simd_avx512_k.c's element-order kernels remain for the
 * BLOOMERY_CPU_PATH=avx512 kernel tests' comparison and as the fallback of types without lanes).
 *
 * A lane-order Q8_K activation block keeps its 256 values: element 16j + 4c + i at
 * byte 64c + 4j + i (chunk c 0..3, lane j 0..15, i 0..3); d and the 16-element sums stay as
 * they are. Then every 32-bit lane j of vpdpbusd gathers exactly 16-element group j, so a block
 * against one activation row is four vpdpbusd and one float step per lane:
 *   acc[j] += da * (d * sc[j] * sum_j(q a) - dmin * m[j] * bsum[j])
 * (the mins, or the offset of the signed types, as the second term). The weights are gathered
 * into that order as they are unpacked (one 32-bit permute per 64 values), once per block for up
 * to BL_TILE_A activation rows, two weight rows at a time for 8 activation rows. The integer
 * group sums are exact; the float steps differ from the scalar reference in order and rounding
 * (more than simd_avx512_k.c's, which follow the reference's lanes more closely). */
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
  __m512i q[4];     /* u8 values of chunk c, lane j = elements 16j + 4c .. 16j + 4c + 3 */
  __mmask64 neg[4]; /* signed types: bytes whose weight is negative (q holds |w|) */
  __m512 dws;       /* lane j: the block's scale of group j (d * sc[j]) */
  __m512 dms;       /* lane j: what multiplies the group's activation sum (dmin * m[j], offsets) */
} kblk;

/* Lane index vectors: lane j's source dword for chunk c, as (c, j) -> index. */
#define LANES(EXPR)                                                                                        \
  {                                                                                                         \
    {EXPR(0, 0), EXPR(0, 1), EXPR(0, 2), EXPR(0, 3), EXPR(0, 4), EXPR(0, 5), EXPR(0, 6), EXPR(0, 7),        \
     EXPR(0, 8), EXPR(0, 9), EXPR(0, 10), EXPR(0, 11), EXPR(0, 12), EXPR(0, 13), EXPR(0, 14), EXPR(0, 15)}, \
    {EXPR(1, 0), EXPR(1, 1), EXPR(1, 2), EXPR(1, 3), EXPR(1, 4), EXPR(1, 5), EXPR(1, 6), EXPR(1, 7),        \
     EXPR(1, 8), EXPR(1, 9), EXPR(1, 10), EXPR(1, 11), EXPR(1, 12), EXPR(1, 13), EXPR(1, 14), EXPR(1, 15)}, \
    {EXPR(2, 0), EXPR(2, 1), EXPR(2, 2), EXPR(2, 3), EXPR(2, 4), EXPR(2, 5), EXPR(2, 6), EXPR(2, 7),        \
     EXPR(2, 8), EXPR(2, 9), EXPR(2, 10), EXPR(2, 11), EXPR(2, 12), EXPR(2, 13), EXPR(2, 14), EXPR(2, 15)}, \
    {EXPR(3, 0), EXPR(3, 1), EXPR(3, 2), EXPR(3, 3), EXPR(3, 4), EXPR(3, 5), EXPR(3, 6), EXPR(3, 7),        \
     EXPR(3, 8), EXPR(3, 9), EXPR(3, 10), EXPR(3, 11), EXPR(3, 12), EXPR(3, 13), EXPR(3, 14), EXPR(3, 15)}, \
  }
#define ROW16(EXPR) {EXPR(0), EXPR(1), EXPR(2), EXPR(3), EXPR(4), EXPR(5), EXPR(6), EXPR(7), \
                     EXPR(8), EXPR(9), EXPR(10), EXPR(11), EXPR(12), EXPR(13), EXPR(14), EXPR(15)}

/* Q4_K / Q5_K quants, Q2_K / Q3_K quants, Q6_K low bits, Q6_K high bits, 32-byte fields
 * (Q5_K qh, Q3_K hmask) and IQ4_XS quants: the dword holding elements 16j + 4c .. + 3. */
#define IX_Q4(c, j) (8 * ((j) / 4) + 4 * ((j) % 2) + (c))
#define IX_Q2(c, j) (8 * ((j) / 8) + 4 * ((j) % 2) + (c))
#define IX_Q6L(c, j) (16 * ((j) / 8) + 8 * (((j) / 2) % 2) + 4 * ((j) % 2) + (c))
#define IX_32(c, j) (4 * ((j) % 2) + (c))
#define IX_IQ4(c, j) (4 * ((j) / 2) + (c))
static const int32_t ix_q4[4][16] __attribute__((aligned(64))) = LANES(IX_Q4);
static const int32_t ix_q2[4][16] __attribute__((aligned(64))) = LANES(IX_Q2);
static const int32_t ix_q6l[4][16] __attribute__((aligned(64))) = LANES(IX_Q6L);
static const int32_t ix_32[4][16] __attribute__((aligned(64))) = LANES(IX_32);
static const int32_t ix_iq4[4][16] __attribute__((aligned(64))) = LANES(IX_IQ4);
/* per-lane bit shifts: Q4_K/Q5_K nibble, Q5_K high bit, Q6_K nibble, Q6_K/Q2_K/Q3_K bit pair,
 * Q3_K high bit, IQ4_XS nibble */
#define SH_Q4(j) (4 * (((j) % 4) / 2))
#define SH_Q5H(j) ((j) / 2)
#define SH_Q6L(j) (4 * (((j) % 8) / 4))
#define SH_PAIR(j) (2 * (((j) % 8) / 2))
#define SH_Q3H(j) (4 * ((j) / 8) + ((j) % 8) / 2)
#define SH_IQ4(j) (4 * ((j) % 2))
static const int32_t sh_q4[16] __attribute__((aligned(64))) = ROW16(SH_Q4);
static const int32_t sh_q5h[16] __attribute__((aligned(64))) = ROW16(SH_Q5H);
static const int32_t sh_q6l[16] __attribute__((aligned(64))) = ROW16(SH_Q6L);
static const int32_t sh_pair[16] __attribute__((aligned(64))) = ROW16(SH_PAIR);
static const int32_t sh_q3h[16] __attribute__((aligned(64))) = ROW16(SH_Q3H);
static const int32_t sh_iq4[16] __attribute__((aligned(64))) = ROW16(SH_IQ4);

INLINE __m512i ld(const int32_t *p) { return _mm512_load_si512(p); }
INLINE __m512i lo256(const void *p) { return _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)); }
INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* 8 group values (32-element groups) as 16 lane floats (lane j: value j / 2) */
INLINE __m512 lanes_of_8(__m128i v8) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(v8, v8))); }

/* Q4_K / Q5_K six-bit scales and mins, 8 each, as bytes: sc0-7 in the low 8 bytes, m0-7 above
 * (the packing of SPEC.md, in 32-bit lanes u0 u1 u2 of the 12 bytes). Reads 16 bytes. */
INLINE __m128i k4_scales(const uint8_t *s) {
  const __m128i x = _mm_loadu_si128((const __m128i *)s);
  const __m128i lo = _mm_and_si128(x, _mm_set1_epi8(0x3f));
  const __m128i u2 = _mm_srlv_epi32(_mm_shuffle_epi32(x, 0xaa), _mm_setr_epi32(0, 4, 0, 0));
  const __m128i top = _mm_and_si128(_mm_srli_epi32(x, 2), _mm_set1_epi8(0x30));
  const __m128i hi = _mm_or_si128(_mm_and_si128(u2, _mm_set1_epi8(0x0f)), top);
  return _mm_unpacklo_epi32(lo, hi);
}

INLINE void q4_quants(const uint8_t *qs, kblk *k) {
  const __m512i z0 = _mm512_loadu_si512(qs), z1 = _mm512_loadu_si512(qs + 64), m4 = _mm512_set1_epi8(0x0f);
  const __m512i sh = ld(sh_q4);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
      k->q[c] = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutex2var_epi32(z0, ld(ix_q4[c]), z1), sh), m4);
}

INLINE void unpack_q4_K(const uint8_t *p, kblk *k) {
  const bl_block_q4_K *b = (const bl_block_q4_K *)p;
  const __m128i sm = k4_scales(b->scales);
  k->dws = _mm512_mul_ps(lanes_of_8(sm), _mm512_set1_ps(h2f(b->d)));
  k->dms = _mm512_mul_ps(lanes_of_8(_mm_unpackhi_epi64(sm, sm)), _mm512_set1_ps(h2f(b->dmin)));
  q4_quants(b->qs, k);
}

INLINE void unpack_q5_K(const uint8_t *p, kblk *k) {
  const bl_block_q5_K *b = (const bl_block_q5_K *)p;
  const __m128i sm = k4_scales(b->scales);
  k->dws = _mm512_mul_ps(lanes_of_8(sm), _mm512_set1_ps(h2f(b->d)));
  k->dms = _mm512_mul_ps(lanes_of_8(_mm_unpackhi_epi64(sm, sm)), _mm512_set1_ps(h2f(b->dmin)));
  q4_quants(b->qs, k);
  const __m512i qh = lo256(b->qh), sh = ld(sh_q5h), one = _mm512_set1_epi8(1);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const __m512i hb = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(ld(ix_32[c]), qh), sh), one);
    k->q[c] = _mm512_or_si512(k->q[c], _mm512_slli_epi32(hb, 4));
  }
}

INLINE void unpack_q6_K(const uint8_t *p, kblk *k) {
  const bl_block_q6_K *b = (const bl_block_q6_K *)p;
  const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales)));
  const float d = h2f(b->d);
  k->dws = _mm512_mul_ps(sc, _mm512_set1_ps(d));
  k->dms = _mm512_mul_ps(sc, _mm512_set1_ps(32.0f * d)); /* values are q - 32 */
  const __m512i l0 = _mm512_loadu_si512(b->ql), l1 = _mm512_loadu_si512(b->ql + 64), qh = _mm512_loadu_si512(b->qh);
  const __m512i shl = ld(sh_q6l), shh = ld(sh_pair), m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutex2var_epi32(l0, ld(ix_q6l[c]), l1), shl), m4);
    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(ld(ix_q2[c]), qh), shh), m2);
    k->q[c] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4));
  }
}

INLINE void unpack_q2_K(const uint8_t *p, kblk *k) {
  const bl_block_q2_K *b = (const bl_block_q2_K *)p;
  const __m128i s = _mm_loadu_si128((const __m128i *)b->scales), m4 = _mm_set1_epi8(0x0f);
  k->dws = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(s, m4))), _mm512_set1_ps(h2f(b->d)));
  k->dms = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(s, 4), m4))),
                         _mm512_set1_ps(h2f(b->dmin)));
  const __m512i qs = _mm512_loadu_si512(b->qs), sh = ld(sh_pair), m2 = _mm512_set1_epi8(3);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
      k->q[c] = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(ld(ix_q2[c]), qs), sh), m2);
}

INLINE void unpack_q3_K(const uint8_t *p, kblk *k) {
  const bl_block_q3_K *b = (const bl_block_q3_K *)p;
  uint64_t s_lo, s_hi;
  bl_q3k_scale_bytes(b->scales, &s_lo, &s_hi);
  const __m512 sc = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_set_epi64x((long long)s_hi, (long long)s_lo)),
                                                       _mm512_set1_epi32(32)));
  const float d = h2f(b->d);
  k->dws = _mm512_mul_ps(sc, _mm512_set1_ps(d));
  k->dms = _mm512_mul_ps(sc, _mm512_set1_ps(4.0f * d)); /* values are q - 4 */
  const __m512i qs = _mm512_loadu_si512(b->qs), hm = lo256(b->hmask);
  const __m512i sh = ld(sh_pair), shh = ld(sh_q3h), v3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(ld(ix_q2[c]), qs), sh), v3);
    const __m512i hb = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(ld(ix_32[c]), hm), shh), one);
    k->q[c] = _mm512_or_si512(lo, _mm512_slli_epi32(hb, 2));
  }
}

/* IQ4_XS: signed table values; q holds |value|, neg marks the negative ones (no offset term). */
INLINE void unpack_iq4_xs(const uint8_t *p, kblk *k) {
  const bl_block_iq4_xs *b = (const bl_block_iq4_xs *)p;
  uint8_t ls[16];
  for (int g = 0; g < 8; g++)
    ls[g] = (uint8_t)(((b->scales_l[g / 2] >> (4 * (g % 2))) & 15) | (((b->scales_h >> (2 * g)) & 3) << 4));
  const __m512 sc = _mm512_cvtepi32_ps(
      _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)ls), _mm_loadl_epi64((const __m128i *)ls))),
                       _mm512_set1_epi32(32)));
  k->dws = _mm512_mul_ps(sc, _mm512_set1_ps(h2f(b->d)));
  k->dms = _mm512_setzero_ps();
  const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)bl_kvalues_iq4nl));
  const __m512i z0 = _mm512_loadu_si512(b->qs), z1 = _mm512_loadu_si512(b->qs + 64), sh = ld(sh_iq4), m4 = _mm512_set1_epi8(0x0f);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const __m512i nib = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutex2var_epi32(z0, ld(ix_iq4[c]), z1), sh), m4);
    const __m512i v = _mm512_shuffle_epi8(tab, nib);
    k->neg[c] = _mm512_movepi8_mask(v);
    k->q[c] = _mm512_abs_epi8(v);
  }
}

/* One block of one activation row; bs: the row's 16 group sums as floats. */
INLINE __m512 kblock_row(const kblk *k, const bl_block_q8_K *y, const float *bs, __m512 acc, const int is_signed, const int has_min) {
  __m512i s = _mm512_setzero_si512();
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    __m512i a = _mm512_loadu_si512(y->qs + 64 * c);
    if (is_signed) a = _mm512_mask_sub_epi8(a, k->neg[c], _mm512_setzero_si512(), a);
    s = _mm512_dpbusd_epi32(s, k->q[c], a);
  }
  __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(s), k->dws);
  if (has_min) t = _mm512_fnmadd_ps(_mm512_loadu_ps(bs), k->dms, t);
  return _mm512_fmadd_ps(t, _mm512_set1_ps(y->d), acc);
}

/* The activation rows' group sums as floats, block by block (bs[(r * nb + b) * 16 + j]). */
INLINE void group_sums(const uint8_t *const *a, int na, int64_t nb, float *bs) {
  for (int r = 0; r < na; r++)
    for (int64_t b = 0; b < nb; b++) {
      const bl_block_q8_K *y = (const bl_block_q8_K *)a[r] + b;
      _mm512_storeu_ps(bs + (r * nb + b) * 16, _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)y->bsums))));
    }
}

/* nw weight rows x NA activation rows: each weight block unpacked once for all NA rows. */
#define KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, NA)                                                     \
  static void NAME##_##NA(int64_t nb, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a,       \
                          float *const *y, const float *bs) {                                             \
    for (int i = 0; i < nw; i++) {                                                                        \
      const uint8_t *wr = w + i * ws;                                                                     \
      __m512 acc[NA];                                                                                     \
      _Pragma("GCC unroll 16") for (int r = 0; r < NA; r++) acc[r] = _mm512_setzero_ps();                 \
      for (int64_t b = 0; b < nb; b++) {                                                                  \
        kblk k;                                                                                           \
        _Pragma("GCC unroll 4") for (int l = 0; l < ((BSZ) + 63) / 64; l++)                               \
            _mm_prefetch((const char *)(wr + b * (BSZ) + BL_PF_DIST + 64 * l), _MM_HINT_T0);              \
        UNPACK(wr + b * (BSZ), &k);                                                                       \
        _Pragma("GCC unroll 16") for (int r = 0; r < NA; r++) acc[r] =                                    \
            kblock_row(&k, (const bl_block_q8_K *)a[r] + b, bs + (r * nb + b) * 16, acc[r], SIGNED, HASMIN); \
      }                                                                                                   \
      _Pragma("GCC unroll 16") for (int r = 0; r < NA; r++) y[r][i] = _mm512_reduce_add_ps(acc[r]);       \
    }                                                                                                     \
  }

/* Two weight rows x NA activation rows: each activation block read once for both rows. */
#define KTILE2_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, NA)                                                    \
  static void NAME##_2r##NA(int64_t nb, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a,     \
                            float *const *y, const float *bs) {                                           \
    int i = 0;                                                                                            \
    for (; i + 2 <= nw; i += 2) {                                                                         \
      const uint8_t *w0 = w + i * ws, *w1 = w0 + ws;                                                      \
      __m512 acc0[NA], acc1[NA];                                                                          \
      _Pragma("GCC unroll 16") for (int r = 0; r < NA; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();      \
      for (int64_t b = 0; b < nb; b++) {                                                                  \
        kblk k0, k1;                                                                                      \
        _Pragma("GCC unroll 4") for (int l = 0; l < ((BSZ) + 63) / 64; l++) {                             \
          _mm_prefetch((const char *)(w0 + b * (BSZ) + BL_PF_DIST + 64 * l), _MM_HINT_T0);                \
          _mm_prefetch((const char *)(w1 + b * (BSZ) + BL_PF_DIST + 64 * l), _MM_HINT_T0);                \
        }                                                                                                 \
        UNPACK(w0 + b * (BSZ), &k0);                                                                      \
        UNPACK(w1 + b * (BSZ), &k1);                                                                      \
        _Pragma("GCC unroll 16") for (int r = 0; r < NA; r++) {                                           \
          const bl_block_q8_K *yb = (const bl_block_q8_K *)a[r] + b;                                      \
          __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();                               \
          _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {                                           \
            const __m512i av = _mm512_loadu_si512(yb->qs + 64 * c);                                       \
            s0 = _mm512_dpbusd_epi32(s0, k0.q[c], SIGNED ? _mm512_mask_sub_epi8(av, k0.neg[c], _mm512_setzero_si512(), av) : av); \
            s1 = _mm512_dpbusd_epi32(s1, k1.q[c], SIGNED ? _mm512_mask_sub_epi8(av, k1.neg[c], _mm512_setzero_si512(), av) : av); \
          }                                                                                               \
          __m512 t0 = _mm512_mul_ps(_mm512_cvtepi32_ps(s0), k0.dws);                                      \
          __m512 t1 = _mm512_mul_ps(_mm512_cvtepi32_ps(s1), k1.dws);                                      \
          if (HASMIN) {                                                                                   \
            const __m512 bv = _mm512_loadu_ps(bs + (r * nb + b) * 16);                                    \
            t0 = _mm512_fnmadd_ps(bv, k0.dms, t0);                                                        \
            t1 = _mm512_fnmadd_ps(bv, k1.dms, t1);                                                        \
          }                                                                                               \
          const __m512 da = _mm512_set1_ps(yb->d);                                                        \
          acc0[r] = _mm512_fmadd_ps(t0, da, acc0[r]);                                                     \
          acc1[r] = _mm512_fmadd_ps(t1, da, acc1[r]);                                                     \
        }                                                                                                 \
      }                                                                                                   \
      _Pragma("GCC unroll 16") for (int r = 0; r < NA; r++) {                                             \
        y[r][i] = _mm512_reduce_add_ps(acc0[r]);                                                          \
        y[r][i + 1] = _mm512_reduce_add_ps(acc1[r]);                                                      \
      }                                                                                                   \
    }                                                                                                     \
    if (i < nw) {                                                                                         \
      float *yy[NA];                                                                                      \
      for (int r = 0; r < NA; r++) yy[r] = y[r] + i;                                                      \
      NAME##_##NA(nb, w + i * ws, ws, nw - i, a, yy, bs);                                                 \
    }                                                                                                     \
  }

/* Group sums of up to 16 rows of up to this many blocks sit on the stack; longer rows go in parts. */
#define KB_MAX 64

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
  KTILE2_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 8)                                                           \
  static void NAME(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na,       \
                   float *const *y) {                                                                     \
    const int64_t nb = n / BL_QK_K;                                                                       \
    if (nb > KB_MAX) { /* long rows: partial sums over parts of KB_MAX blocks, added up */                 \
      float part[BL_TILE_A * 256];                                                                        \
      for (int r = 0; r < na; r++)                                                                        \
        for (int i = 0; i < nw; i++) y[r][i] = 0;                                                         \
      for (int64_t b0 = 0; b0 < nb; b0 += KB_MAX) {                                                       \
        const int64_t m = nb - b0 < KB_MAX ? nb - b0 : KB_MAX;                                            \
        const uint8_t *ap[BL_TILE_A];                                                                     \
        for (int r = 0; r < na; r++) ap[r] = a[r] + b0 * (int64_t)sizeof(bl_block_q8_K);                 \
        for (int i0 = 0; i0 < nw; i0 += 256) {                                                            \
          const int cnt = nw - i0 < 256 ? nw - i0 : 256;                                                  \
          float *pp[BL_TILE_A];                                                                           \
          for (int r = 0; r < na; r++) pp[r] = part + r * 256;                                            \
          NAME(m * BL_QK_K, w + i0 * ws + b0 * (BSZ), ws, cnt, ap, na, pp);                                \
          for (int r = 0; r < na; r++)                                                                    \
            for (int i = 0; i < cnt; i++) y[r][i0 + i] += part[r * 256 + i];                              \
        }                                                                                                 \
      }                                                                                                   \
      return;                                                                                             \
    }                                                                                                     \
    float bs[BL_TILE_A * KB_MAX * 16];                                                                    \
    group_sums(a, na, nb, bs);                                                                            \
    int r0 = 0;                                                                                           \
    while (r0 < na) {                                                                                     \
      const int left = na - r0, take = left >= 8 ? 8 : left;                                              \
      const float *bsr = bs + r0 * nb * 16;                                                               \
      switch (take) {                                                                                     \
        case 1: NAME##_1(nb, w, ws, nw, a + r0, y + r0, bsr); break;                                      \
        case 2: NAME##_2(nb, w, ws, nw, a + r0, y + r0, bsr); break;                                      \
        case 3: NAME##_3(nb, w, ws, nw, a + r0, y + r0, bsr); break;                                      \
        case 4: NAME##_4(nb, w, ws, nw, a + r0, y + r0, bsr); break;                                      \
        case 5: NAME##_5(nb, w, ws, nw, a + r0, y + r0, bsr); break;                                      \
        case 6: NAME##_6(nb, w, ws, nw, a + r0, y + r0, bsr); break;                                      \
        case 7: NAME##_7(nb, w, ws, nw, a + r0, y + r0, bsr); break;                                      \
        case 8: NAME##_2r8(nb, w, ws, nw, a + r0, y + r0, bsr); break;                                    \
        case 12: NAME##_12(nb, w, ws, nw, a + r0, y + r0, bsr); break;                                    \
        default: NAME##_16(nb, w, ws, nw, a + r0, y + r0, bsr); break;                                    \
      }                                                                                                   \
      r0 += take;                                                                                         \
    }                                                                                                     \
  }

KTILE(tilel_q4_K, unpack_q4_K, 144, 0, 1)
KTILE(tilel_q5_K, unpack_q5_K, 176, 0, 1)
KTILE(tilel_q6_K, unpack_q6_K, 210, 0, 1)
KTILE(tilel_q2_K, unpack_q2_K, 84, 0, 1)
KTILE(tilel_q3_K, unpack_q3_K, 110, 0, 1)
KTILE(tilel_iq4_xs, unpack_iq4_xs, 136, 1, 0)

/* ---- the activation layout ---- */

/* Natural order to lane order, 256 bytes: dword 16c + j of the result is dword 4j + c of src. */
void bl_avx512_q8k_to_lanes(const int8_t *src, int8_t *dst) {
  static const int32_t lo[4][16] __attribute__((aligned(64))) = {
      {0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 5, 9, 13, 17, 21, 25, 29, 0, 0, 0, 0, 0, 0, 0, 0},
      {2, 6, 10, 14, 18, 22, 26, 30, 0, 0, 0, 0, 0, 0, 0, 0}, {3, 7, 11, 15, 19, 23, 27, 31, 0, 0, 0, 0, 0, 0, 0, 0}};
  static const int32_t hi[4][16] __attribute__((aligned(64))) = {
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 8, 12, 16, 20, 24, 28}, {0, 0, 0, 0, 0, 0, 0, 0, 1, 5, 9, 13, 17, 21, 25, 29},
      {0, 0, 0, 0, 0, 0, 0, 0, 2, 6, 10, 14, 18, 22, 26, 30}, {0, 0, 0, 0, 0, 0, 0, 0, 3, 7, 11, 15, 19, 23, 27, 31}};
  const __m512i s0 = _mm512_loadu_si512(src), s1 = _mm512_loadu_si512(src + 64), s2 = _mm512_loadu_si512(src + 128),
                s3 = _mm512_loadu_si512(src + 192);
  for (int c = 0; c < 4; c++) {
    const __m512i a = _mm512_permutex2var_epi32(s0, ld(lo[c]), s1), b = _mm512_permutex2var_epi32(s2, ld(hi[c]), s3);
    _mm512_storeu_si512(dst + 64 * c, _mm512_mask_blend_epi32(0xff00, a, b));
  }
}

/* Lane order back to natural order (for tests that compare with the reference quantizer). */
void bl_avx512_q8k_from_lanes(const int8_t *src, int8_t *dst) {
  int32_t d[64], s[64];
  memcpy(s, src, 256);
  for (int c = 0; c < 4; c++)
    for (int j = 0; j < 16; j++) d[4 * j + c] = s[16 * c + j];
  memcpy(dst, d, 256);
}

void bl_avx512_fill_kl(bl_kernels *k) {
  k->tile_lanes[BL_Q4_K] = tilel_q4_K;
  k->tile_lanes[BL_Q5_K] = tilel_q5_K;
  k->tile_lanes[BL_Q6_K] = tilel_q6_K;
  k->tile_lanes[BL_Q2_K] = tilel_q2_K;
  k->tile_lanes[BL_Q3_K] = tilel_q3_K;
  k->tile_lanes[BL_IQ4_XS] = tilel_iq4_xs;
  k->act_q8k_lanes = bl_avx512_act_q8k_lanes;
}
#endif /* __x86_64__ */
