/* bloomery CPU library: the aarch64 attention sub-tile (kernels.h's attn_prep / attn_heads), one
 * for the neon, dotprod and i8mm paths: the x86 files' algorithm in 4-lane vectors - K converted
 * from f16 and transposed in 4x4 blocks so that each head's scores of 16 positions are four
 * vectors of FMAs over the head dimension, V converted to f32 rows that the values accumulate
 * from in registers, 64 dimensions at a time - then the online-softmax update. */
#if defined(__aarch64__) /* the whole file: aarch64 only */
#include "simd_attn.h"
#include "quants_impl.h"
#include <arm_neon.h>
#include <math.h>

#define INLINE static inline __attribute__((always_inline))

INLINE float32x4_t load_h4(const uint16_t *h) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h))); }

/* r[i] = row i of a 4x4 block; on return r[e] = column e. */
INLINE void transpose4(float32x4_t r[4]) {
  const float32x4_t t0 = vtrn1q_f32(r[0], r[1]), t1 = vtrn2q_f32(r[0], r[1]);
  const float32x4_t t2 = vtrn1q_f32(r[2], r[3]), t3 = vtrn2q_f32(r[2], r[3]);
  r[0] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
  r[1] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
  r[2] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
  r[3] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
}

static void attn_prep(const uint16_t *kr, const uint16_t *vr, int64_t kd, int nb, int hd, float *work) {
  if (hd % 16 != 0 || hd > 1024) return; /* the generic heads step reads the f16 rows */
  float *kt = work;
  float *vf = work + BL_ATTN_SUB * hd;
  /* positions up to the next multiple of 16 (the scores' vectors), zero past nb */
  const int nb16 = (nb + 15) / 16 * 16;
  for (int pb = 0; pb < nb16; pb += 4) {
    for (int db = 0; db < hd; db += 4) {
      float32x4_t r[4];
      for (int i = 0; i < 4; i++) r[i] = pb + i < nb ? load_h4(kr + (pb + i) * kd + db) : vdupq_n_f32(0.0f);
      transpose4(r);
      for (int e = 0; e < 4; e++) vst1q_f32(kt + (int64_t)(db + e) * BL_ATTN_SUB + pb, r[e]);
    }
  }
  for (int p = 0; p < nb; p++)
    for (int d = 0; d < hd; d += 4) vst1q_f32(vf + (int64_t)p * hd + d, load_h4(vr + p * kd + d));
}

static void attn_heads(const float *q0, int64_t qstride, int G, const uint16_t *kr, const uint16_t *vr, int64_t kd, int nb,
                       int hd, float scale, float *st, float *work) {
  const bl_kernels *k = bl_kern_path(BL_PATH_NEON);
  if (hd % 16 != 0 || hd > 1024) {
    bl_attn_sub_generic(k, q0, qstride, G, kr, vr, kd, nb, hd, scale, st, work);
    return;
  }
  const int nblk = (nb + 15) / 16;
  const float *kt = work, *vf = work + BL_ATTN_SUB * hd;
  float *s = work + 2 * BL_ATTN_SUB * hd;
  for (int hh = 0; hh < G; hh++) {
    const float *q = q0 + hh * qstride;
    float *m = st + hh * (hd + 2), *l = m + 1, *acc = m + 2;
    for (int pb = 0; pb < nblk; pb++) {
      float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
      for (int d = 0; d < hd; d++) {
        const float32x4_t qd = vdupq_n_f32(q[d]);
        const float *row = kt + (int64_t)d * BL_ATTN_SUB + 16 * pb;
        a0 = vfmaq_f32(a0, qd, vld1q_f32(row));
        a1 = vfmaq_f32(a1, qd, vld1q_f32(row + 4));
        a2 = vfmaq_f32(a2, qd, vld1q_f32(row + 8));
        a3 = vfmaq_f32(a3, qd, vld1q_f32(row + 12));
      }
      vst1q_f32(s + 16 * pb, vmulq_n_f32(a0, scale));
      vst1q_f32(s + 16 * pb + 4, vmulq_n_f32(a1, scale));
      vst1q_f32(s + 16 * pb + 8, vmulq_n_f32(a2, scale));
      vst1q_f32(s + 16 * pb + 12, vmulq_n_f32(a3, scale));
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
      const int w = hd - d0 < 64 ? (hd - d0) / 4 : 16;
      float32x4_t o[16];
      for (int i = 0; i < w; i++) o[i] = vld1q_f32(acc + d0 + 4 * i);
      for (int p = 0; p < nb; p++) {
        const float32x4_t sp = vdupq_n_f32(s[p]);
        const float *vp = vf + (int64_t)p * hd + d0;
        for (int i = 0; i < w; i++) o[i] = vfmaq_f32(o[i], sp, vld1q_f32(vp + 4 * i));
      }
      for (int i = 0; i < w; i++) vst1q_f32(acc + d0 + 4 * i, o[i]);
    }
  }
}

void bl_neon_fill_attn(bl_kernels *k) {
  k->attn_prep = attn_prep;
  k->attn_heads = attn_heads;
}
#endif /* __aarch64__ */
