/* bloomery CPU library: the AVX2 attention sub-tile (kernels.h's attn_sub): the AVX-512 file's
 * algorithm in 8-lane halves - K transposed in 8x8 blocks, each head's scores of 16 positions as
 * two vectors of FMAs over the head dimension, values accumulated from f32 V rows - with, lane by
 * lane, the same float operations, so both paths give the same bits. */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "simd_attn.h"
#include "quants_impl.h"
#include <immintrin.h>
#include <math.h>

#pragma GCC target("avx2,fma,f16c,bmi2")

#define INLINE static inline __attribute__((always_inline))

/* r[i] = row i of an 8x8 block; on return r[e] = column e. */
INLINE void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; i++) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int m = 0; m < 4; m++) {
    r[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
    r[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
  }
}

static void attn_prep(const uint16_t *kr, const uint16_t *vr, int64_t kd, int nb, int hd, float *work) {
  if (hd % 16 != 0 || hd > 1024) return; /* the generic heads step reads the f16 rows */
  const int nb8 = (nb + 7) / 8;
  float *kt = work;
  float *vf = work + BL_ATTN_SUB * hd;
  for (int pb = 0; pb < nb8; pb++) {
    for (int db = 0; db < hd; db += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; i++) {
        const int p = 8 * pb + i;
        r[i] = p < nb ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + p * kd + db))) : _mm256_setzero_ps();
      }
      transpose8(r);
      for (int e = 0; e < 8; e++) _mm256_storeu_ps(kt + (int64_t)(db + e) * BL_ATTN_SUB + 8 * pb, r[e]);
    }
  }
  /* a 16-position block whose second half holds no position still has its lanes computed */
  if (nb8 & 1)
    for (int d = 0; d < hd; d++) _mm256_storeu_ps(kt + (int64_t)d * BL_ATTN_SUB + 8 * nb8, _mm256_setzero_ps());
  for (int p = 0; p < nb; p++)
    for (int d = 0; d < hd; d += 8)
      _mm256_storeu_ps(vf + (int64_t)p * hd + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + p * kd + d))));
}

static void attn_heads(const float *q0, int64_t qstride, int G, const uint16_t *kr, const uint16_t *vr, int64_t kd, int nb,
                       int hd, float scale, float *st, float *work) {
  const bl_kernels *k = bl_kern_path(BL_PATH_AVX2);
  if (hd % 16 != 0 || hd > 1024) {
    bl_attn_sub_generic(k, q0, qstride, G, kr, vr, kd, nb, hd, scale, st, work);
    return;
  }
  const int nblk = (nb + 15) / 16;
  const float *kt = work, *vf = work + BL_ATTN_SUB * hd;
  float *s = work + 2 * BL_ATTN_SUB * hd;
  const __m256 vs = _mm256_set1_ps(scale);
  for (int hh = 0; hh < G; hh++) {
    const float *q = q0 + hh * qstride;
    float *m = st + hh * (hd + 2), *l = m + 1, *acc = m + 2;
    /* two 16-position blocks per pass: one broadcast of q[d] for four vectors */
    for (int pb = 0; pb < nblk; pb += 2) {
      const int two = pb + 1 < nblk;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
      for (int d = 0; d < hd; d++) {
        const __m256 qd = _mm256_set1_ps(q[d]);
        const float *row = kt + (int64_t)d * BL_ATTN_SUB + 16 * pb;
        a0 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(row), a0);
        a1 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(row + 8), a1);
        if (two) {
          b0 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(row + 16), b0);
          b1 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(row + 24), b1);
        }
      }
      _mm256_storeu_ps(s + 16 * pb, _mm256_mul_ps(a0, vs));
      _mm256_storeu_ps(s + 16 * pb + 8, _mm256_mul_ps(a1, vs));
      if (two) {
        _mm256_storeu_ps(s + 16 * pb + 16, _mm256_mul_ps(b0, vs));
        _mm256_storeu_ps(s + 16 * pb + 24, _mm256_mul_ps(b1, vs));
      }
    }
    float mx = -INFINITY;
    for (int p = 0; p < nb; p++)
      if (s[p] > mx) mx = s[p];
    if (mx > *m) {
      if (*l > 0) {
        const float f = expf(*m - mx);
        *l *= f;
        k->scale_f32(f, acc, hd);
      }
      *m = mx;
    }
    *l += (float)k->exp_sum(s, *m, nb);
    for (int d0 = 0; d0 < hd; d0 += 64) {
      const int w = hd - d0 < 64 ? (hd - d0) / 8 : 8;
      __m256 o[8];
      for (int i = 0; i < w; i++) o[i] = _mm256_loadu_ps(acc + d0 + 8 * i);
      for (int p = 0; p < nb; p++) {
        const __m256 sp = _mm256_set1_ps(s[p]);
        const float *vp = vf + (int64_t)p * hd + d0;
        for (int i = 0; i < w; i++) o[i] = _mm256_fmadd_ps(sp, _mm256_loadu_ps(vp + 8 * i), o[i]);
      }
      for (int i = 0; i < w; i++) _mm256_storeu_ps(acc + d0 + 8 * i, o[i]);
    }
  }
}

void bl_avx2_fill_attn(bl_kernels *k) {
  k->attn_prep = attn_prep;
  k->attn_heads = attn_heads;
}
#endif /* __x86_64__ */
