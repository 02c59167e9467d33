/* bloomery CPU library: the AVX-512 attention sub-tile (kernels.h's attn_sub). The KV head's rows
 * are converted from f16 once for all the query heads that share them: K transposed (16x16 blocks)
 * so that each head's scores of 16 positions are one vector of FMAs over the head dimension, V as
 * f32 rows that each head's values accumulate from in registers. The float operations are, lane by
 * lane, those of the AVX2 file, so both paths give the same bits. */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "simd_attn.h"
#include "quants_impl.h"
#include <immintrin.h>
#include <math.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")

#define INLINE static inline __attribute__((always_inline))

/* r[i] = row i of a 16x16 block; on return r[e] = column e. */
INLINE void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int m = 0; m < 4; m++) {
    const __m512 a = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88), b = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xdd);
    const __m512 c = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88), d = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xdd);
    r[m] = _mm512_shuffle_f32x4(a, c, 0x88);
    r[8 + m] = _mm512_shuffle_f32x4(a, c, 0xdd);
    r[4 + m] = _mm512_shuffle_f32x4(b, d, 0x88);
    r[12 + m] = _mm512_shuffle_f32x4(b, d, 0xdd);
  }
}

static void attn_prep(const uint16_t *kr, const uint16_t *vr, int64_t kd, int nb, int hd, float *work) {
  if (hd % 16 != 0 || hd > 1024) return; /* the generic heads step reads the f16 rows */
  const int nblk = (nb + 15) / 16; /* 16-position blocks */
  float *kt = work;                 /* [hd][64]: K transposed */
  float *vf = work + BL_ATTN_SUB * hd; /* [nb][hd]: V as f32 */
  for (int pb = 0; pb < nblk; pb++) {
    for (int db = 0; db < hd; db += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; i++) {
        const int p = 16 * pb + i;
        r[i] = p < nb ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kr + p * kd + db))) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int e = 0; e < 16; e++) _mm512_storeu_ps(kt + (int64_t)(db + e) * BL_ATTN_SUB + 16 * pb, r[e]);
    }
  }
  for (int p = 0; p < nb; p++)
    for (int d = 0; d < hd; d += 16)
      _mm512_storeu_ps(vf + (int64_t)p * hd + d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + p * kd + d))));
}

static void attn_heads(const float *q0, int64_t qstride, int G, const uint16_t *kr, const uint16_t *vr, int64_t kd, int nb,
                       int hd, float scale, float *st, float *work) {
  const bl_kernels *k = bl_kern_path(BL_PATH_AVX512);
  if (hd % 16 != 0 || hd > 1024) {
    bl_attn_sub_generic(k, q0, qstride, G, kr, vr, kd, nb, hd, scale, st, work);
    return;
  }
  const int nblk = (nb + 15) / 16;
  const float *kt = work, *vf = work + BL_ATTN_SUB * hd;
  float *s = work + 2 * BL_ATTN_SUB * hd;
  const __m512 vs = _mm512_set1_ps(scale);
  for (int hh = 0; hh < G; hh++) {
    const float *q = q0 + hh * qstride;
    float *m = st + hh * (hd + 2), *l = m + 1, *acc = m + 2;
    /* scores: lane p of block pb = sum over d of q[d] * k[p][d], d in order; one broadcast of
     * q[d] for the four blocks */
    {
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int d = 0; d < hd; d++) {
        const __m512 qd = _mm512_set1_ps(q[d]);
        const float *row = kt + (int64_t)d * BL_ATTN_SUB;
        a0 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(row), a0);
        if (nblk > 1) a1 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(row + 16), a1);
        if (nblk > 2) a2 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(row + 32), a2);
        if (nblk > 3) a3 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(row + 48), a3);
      }
      _mm512_storeu_ps(s, _mm512_mul_ps(a0, vs));
      if (nblk > 1) _mm512_storeu_ps(s + 16, _mm512_mul_ps(a1, vs));
      if (nblk > 2) _mm512_storeu_ps(s + 32, _mm512_mul_ps(a2, vs));
      if (nblk > 3) _mm512_storeu_ps(s + 48, _mm512_mul_ps(a3, vs));
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
    /* values: acc[d] += s[p] * v[p][d], p in order, 8 vectors of 16 at a time */
    for (int d0 = 0; d0 < hd; d0 += 128) {
      const int w = hd - d0 < 128 ? (hd - d0) / 16 : 8;
      __m512 o[8];
      for (int i = 0; i < w; i++) o[i] = _mm512_loadu_ps(acc + d0 + 16 * i);
      for (int p = 0; p < nb; p++) {
        const __m512 sp = _mm512_set1_ps(s[p]);
        const float *vp = vf + (int64_t)p * hd + d0;
        for (int i = 0; i < w; i++) o[i] = _mm512_fmadd_ps(sp, _mm512_loadu_ps(vp + 16 * i), o[i]);
      }
      for (int i = 0; i < w; i++) _mm512_storeu_ps(acc + d0 + 16 * i, o[i]);
    }
  }
}

void bl_avx512_fill_attn(bl_kernels *k) {
  k->attn_prep = attn_prep;
  k->attn_heads = attn_heads;
}
#endif /* __x86_64__ */
