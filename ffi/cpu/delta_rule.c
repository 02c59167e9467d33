/* bloomery CPU library: the gated delta rule of one head over one sequence's tokens (the DELTANET op's core,
 * deltanet.c), in two forms of the same sums.
 *
 * The recurrent form takes a token at a time: S = e^g S; d = beta (v - S k); S += d k^T; o = S q (four passes
 * over the state a token: decode, and runs too short to chunk).
 *
 * The chunked form is transformers' chunk_gated_delta_rule (the fla library's, chunks of 64 tokens), reordered
 * for a CPU. Within a chunk of L tokens with cumulative log decays G_t (from the chunk's start) and S0 the
 * state before it, the recurrence unrolls to
 *   u_t = beta_t (v_t - e^G_t S0 k_t) - sum_{s<t} beta_t e^(G_t-G_s) (k_t . k_s) u_s       (the new values)
 *   o_t = e^G_t S0 q_t + sum_{s<=t} e^(G_t-G_s) (q_t . k_s) u_s
 *   S_L = e^G_(L-1) S0 + sum_s u_s (e^(G_(L-1)-G_s) k_s)^T
 * The first line is the lower-triangular system transformers solves by inverting (I + A); here it is solved
 * row by row, which gives the same u without forming the inverse (and without its products with v and with
 * the decayed keys). What costs is two products with the state a chunk (S0 against the chunk's keys and
 * queries, the state's update) and two of L x L, all through the path's gemm_f32: the state is read twice a
 * chunk instead of four times a token, and the products run from registers. The run keeps the state
 * transposed (k rows of v elements, transformers' layout) so that every product reads rows. Decay factors are
 * exponentials of differences of the cumulative sums, kept in double, so no factor is a ratio of two tiny
 * numbers. */
#include "delta_rule.h"
#include "common.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void bl_delta_rule_recurrent(const bl_kernels *kn, float *S, const bl_dr_in *in) {
  const int64_t hk = in->hk, hv = in->hv;
  for (int64_t t = 0; t < in->n; t++) {
    const int64_t r = in->rows ? in->rows[t] : t;
    const float *q = in->q + r * in->qk_stride, *k = in->k + r * in->qk_stride, *v = in->v + r * in->v_stride;
    float *o = in->o + r * in->o_stride;
    const float beta = in->beta[t], decay = expf(in->g[t]);
    /* a row of S at a time: decayed, its delta from v along k, then its product with q (the path's float kernels) */
    for (int64_t i = 0; i < hv; i++) {
      float *row = S + i * hk;
      kn->scale_f32(decay, row, hk);
      const float d = beta * (v[i] - kn->dot_f32(row, k, hk));
      kn->axpy_f32(d, k, row, hk);
      o[i] = kn->dot_f32(row, q, hk);
    }
  }
}

/* The chunked form's work space, in floats: every piece a multiple of 16 floats. */
typedef struct {
  float *St;  /* [hk][hv]: the state transposed, for the run (its products then read rows of v elements) */
  float *KQ;  /* [2L][hk]: the chunk's keys (rows 0..L-1), then its queries; later the decayed keys */
  float *KT;  /* [hk][L]: the keys transposed */
  float *P;   /* [2L][hv]: S0's products with the keys and the queries; the queries' rows become the outputs */
  float *AQ;  /* [2L][L]: the keys' and queries' products with the keys */
  float *U;   /* [L][hv]: the new values u_t */
  float *E;   /* [L][L]: e^(G_t - G_s), s <= t */
  float *eG;  /* [L]: e^G_t */
  double *G;  /* [L]: the cumulative log decays */
} dr_work;

#define R16(x) (((x) + 15) & ~(size_t)15)

static dr_work work_of(float *w, int64_t hk, int64_t hv) {
  const size_t L = BL_DR_CHUNK;
  dr_work d;
  d.St = w, w += R16((size_t)(hk * hv));
  d.KQ = w, w += R16(2 * L * hk);
  d.KT = w, w += R16(L * hk);
  d.P = w, w += R16(2 * L * hv);
  d.AQ = w, w += R16(2 * L * L);
  d.U = w, w += R16(L * hv);
  d.E = w, w += R16(L * L);
  d.eG = w, w += R16(L);
  d.G = (double *)(void *)w; /* w stays 64-byte aligned: every piece is a multiple of 16 floats */
  return d;
}

size_t bl_delta_rule_work(int64_t hk, int64_t hv) {
  const size_t L = BL_DR_CHUNK;
  return R16((size_t)(hk * hv)) + R16(2 * L * hk) + R16(L * hk) + R16(2 * L * hv) + R16(2 * L * L) + R16(L * hv) + R16(L * L) + R16(L) + R16(2 * L);
}

/* dst[c][r] = src[r][c] for r < rows, c < cols, in tiles of 16 x 16 */
static void transpose(const float *src, int64_t rows, int64_t cols, float *dst) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16)
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      const int64_t r1 = r0 + 16 < rows ? r0 + 16 : rows, c1 = c0 + 16 < cols ? c0 + 16 : cols;
      for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++) dst[c * rows + r] = src[r * cols + c];
    }
}

/* One chunk of L tokens, list positions c..c+L-1: the transposed state St0 -> St_L in place, the outputs written. */
static void chunk(const bl_kernels *kn, const bl_dr_in *in, int64_t c, int64_t L, const dr_work *w) {
  const int64_t hk = in->hk, hv = in->hv;
  /* gather the keys and queries, the keys transposed */
  for (int64_t t = 0; t < L; t++) {
    const int64_t r = in->rows ? in->rows[c + t] : c + t;
    const float *k = in->k + r * in->qk_stride;
    memcpy(w->KQ + t * hk, k, sizeof(float) * (size_t)hk);
    memcpy(w->KQ + (L + t) * hk, in->q + r * in->qk_stride, sizeof(float) * (size_t)hk);
    for (int64_t j = 0; j < hk; j++) w->KT[j * L + t] = k[j];
  }
  /* the decays: G_t, e^G_t, e^(G_t - G_s) for s <= t (the path's exponential, a row at a time) */
  double acc = 0;
  for (int64_t t = 0; t < L; t++) {
    acc += in->g[c + t];
    w->G[t] = acc;
    w->eG[t] = expf((float)acc);
  }
  for (int64_t t = 0; t < L; t++) {
    float *e = w->E + t * L;
    for (int64_t s = 0; s <= t; s++) e[s] = (float)(w->G[t] - w->G[s]);
    kn->exp_sum(e, 0.0f, t + 1);
  }
  /* P[r] = S0 (key or query r); AQ[r][s] = (key or query r) . key s for s <= r (the lower triangles of the keys'
   * rows and of the queries', in blocks of 16 rows) */
  kn->gemm_f32(2 * L, hv, hk, w->KQ, hk, 1, w->St, hv, 0.0f, w->P, hv);
  for (int64_t h = 0; h < 2; h++)
    for (int64_t t0 = 0; t0 < L; t0 += 16) {
      const int64_t m = L - t0 < 16 ? L - t0 : 16;
      kn->gemm_f32(m, t0 + m, hk, w->KQ + (h * L + t0) * hk, hk, 1, w->KT, L, 0.0f, w->AQ + (h * L + t0) * L, L);
    }
  /* the new values, a row at a time: u_t = beta_t (v_t - e^G_t S0 k_t) - sum_{s<t} beta_t E[t][s] (k_t . k_s) u_s */
  for (int64_t t = 0; t < L; t++) {
    const int64_t r = in->rows ? in->rows[c + t] : c + t;
    const float b = in->beta[c + t];
    float *u = w->U + t * hv, *a = w->AQ + t * L;
    memcpy(u, in->v + r * in->v_stride, sizeof(float) * (size_t)hv);
    kn->axpy_f32(-w->eG[t], w->P + t * hv, u, hv);
    kn->scale_f32(b, u, hv);
    for (int64_t s = 0; s < t; s++) a[s] *= -b * w->E[t * L + s];
    if (t > 0) kn->gemm_f32(1, hv, t, a, 0, 1, w->U, hv, 1.0f, u, hv);
  }
  /* the outputs, in the queries' rows of P: o_t = e^G_t S0 q_t + sum_{s<=t} E[t][s] (q_t . k_s) u_s, in blocks of
   * 16 rows (the mask's upper part zero, a block's sums stopping at its last row) */
  float *O = w->P + L * hv;
  for (int64_t t = 0; t < L; t++) {
    float *a = w->AQ + (L + t) * L;
    for (int64_t s = 0; s <= t; s++) a[s] *= w->E[t * L + s];
    for (int64_t s = t + 1; s < L; s++) a[s] = 0.0f;
    kn->scale_f32(w->eG[t], O + t * hv, hv);
  }
  for (int64_t t0 = 0; t0 < L; t0 += 16) {
    const int64_t m = L - t0 < 16 ? L - t0 : 16;
    kn->gemm_f32(m, hv, t0 + m, w->AQ + (L + t0) * L, L, 1, w->U, hv, 1.0f, O + t0 * hv, hv);
  }
  for (int64_t t = 0; t < L; t++) {
    const int64_t r = in->rows ? in->rows[c + t] : c + t;
    memcpy(in->o + r * in->o_stride, O + t * hv, sizeof(float) * (size_t)hv);
  }
  /* the state: S = e^G_(L-1) S0 + sum_s u_s (E[L-1][s] k_s)^T, transposed: St[j] = e^G_(L-1) St[j] + sum_s (E[L-1][s] k_s[j]) u_s */
  const float *last = w->E + (L - 1) * L;
  for (int64_t s = 0; s < L; s++) kn->scale_f32(last[s], w->KQ + s * hk, hk);
  kn->gemm_f32(hk, hv, L, w->KQ, 1, hk, w->U, hv, w->eG[L - 1], w->St, hv);
}

void bl_delta_rule_chunked(const bl_kernels *kn, float *S, const bl_dr_in *in, float *work) {
  const dr_work w = work_of(work, in->hk, in->hv);
  transpose(S, in->hv, in->hk, w.St);
  for (int64_t c = 0; c < in->n; c += BL_DR_CHUNK) chunk(kn, in, c, in->n - c < BL_DR_CHUNK ? in->n - c : BL_DR_CHUNK, &w);
  transpose(w.St, in->hk, in->hv, S);
}

/* ---- one head's rule on one path, for tests (bloomery.h's bl_kernel_delta_rule) ---- */
int64_t bl_kernel_delta_rule(const char *path, int64_t form, int64_t n, int64_t hk, int64_t hv, const float *q, const float *k,
                             const float *v, const float *g, const float *beta, float *S, float *o) {
  const int p = path && *path ? bl_path_by_name(path) : -1;
  const bl_kernels *kn = !path || !*path ? bl_kern() : p < 0 ? NULL : bl_kern_path((bl_path)p);
  if (!kn) return bl_fail(BL_E_UNSUPPORTED, "bl_kernel_delta_rule: path '%s' is unknown or this CPU cannot run it", path);
  if (form < 0 || form > 2) return bl_fail(BL_E_INVAL, "bl_kernel_delta_rule: form %lld (0 recurrent, 1 chunked, 2 as the op picks)", (long long)form);
  if (n < 0 || hk < 1 || hv < 1 || hk > 1024 || hv > 1024) return bl_fail(BL_E_INVAL, "bl_kernel_delta_rule: %lld tokens, heads of %lld and %lld", (long long)n, (long long)hk, (long long)hv);
  if (n && (!q || !k || !v || !g || !beta || !o)) return bl_fail(BL_E_INVAL, "bl_kernel_delta_rule: null buffer");
  if (!S) return bl_fail(BL_E_INVAL, "bl_kernel_delta_rule: null state");
  const bl_dr_in in = {.n = n, .hk = hk, .hv = hv, .q = q, .k = k, .v = v, .qk_stride = hk, .v_stride = hv, .g = g, .beta = beta, .o = o, .o_stride = hv};
  if (form == 0 || (form == 2 && n < BL_DR_CHUNK_MIN)) {
    bl_delta_rule_recurrent(kn, S, &in);
    return BL_OK;
  }
  float *w = NULL;
  if (posix_memalign((void **)&w, 64, sizeof(float) * bl_delta_rule_work(hk, hv)) != 0) return bl_fail(BL_E_NOMEM, "bl_kernel_delta_rule: out of memory");
  bl_delta_rule_chunked(kn, S, &in, w);
  free(w);
  return BL_OK;
}
