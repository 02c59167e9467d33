/* bloomery CPU library: matrix products on the stored quant blocks (activation rows are
 * converted once to the weight type's vec_dot_type, as ggml does), RMSNorm. */
#include "ctx.h"
#include "common.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t bl_weight_f32(const bl_tensor *w, float *dst, int64_t n) {
  const bl_type_traits *tr = bl_traits((int32_t)w->type);
  if (!tr || !tr->to_float) return bl_fail(BL_E_UNSUPPORTED, "weight of type %lld cannot be read as floats", (long long)w->type);
  if (w->ne[0] != n) return bl_fail(BL_E_INVAL, "weight vector has %lld elements, expected %lld", (long long)w->ne[0], (long long)n);
  tr->to_float((const void *)(uintptr_t)w->data, dst, n);
  return BL_OK;
}

typedef struct {
  const bl_type_traits *vt;
  const float *x;
  int64_t xs, n;
  uint8_t *dst;
  int64_t rb;
  int64_t n_tok;
} quant_job;

static void quant_task(void *a, int ith, int nth) {
  quant_job *j = a;
  int64_t lo, hi;
  bl_split(j->n_tok, ith, nth, &lo, &hi);
  for (int64_t t = lo; t < hi; t++) j->vt->from_float(j->x + t * j->xs, j->dst + t * j->rb, j->n);
}

int64_t bl_quantize_rows(bl_cpu_ctx *c, int32_t vt, const float *x, int64_t xs, int64_t n_tok, int64_t n, uint8_t *dst) {
  const bl_type_traits *tr = bl_traits(vt);
  int64_t rb = bl_row_bytes(vt, n);
  if (!tr || !tr->from_float || rb < 0) return -1;
  quant_job j = {tr, x, xs, n, dst, rb, n_tok};
  if (n_tok == 1) quant_task(&j, 0, 1);
  else bl_pool_run(c->pool, quant_task, &j);
  return rb;
}

typedef struct {
  const bl_tensor *w;
  int64_t slab;
  const bl_type_traits *tr;
  const uint8_t *q;
  int64_t qs;
  const int32_t *idx;
  int64_t n_idx;
  float *y;
  int64_t ys;
} mm_job;

static void mm_task(void *a, int ith, int nth) {
  mm_job *j = a;
  int64_t rows = j->w->ne[1], n = j->w->ne[0];
  int64_t lo, hi;
  bl_split(rows, ith, nth, &lo, &hi);
  for (int64_t r = lo; r < hi; r++) {
    const uint8_t *wr = bl_tensor_row(j->w, j->slab, r);
    for (int64_t i = 0; i < j->n_idx; i++) {
      int64_t t = j->idx ? j->idx[i] : i;
      j->tr->vec_dot(n, &j->y[i * j->ys + r], wr, j->q + t * j->qs);
    }
  }
}

/* The exact path: weight rows dequantized, f32 activations, double accumulation. */
static void mm_exact_task(void *a, int ith, int nth) {
  mm_job *j = a;
  int64_t rows = j->w->ne[1], n = j->w->ne[0];
  int64_t lo, hi;
  bl_split(rows, ith, nth, &lo, &hi);
  float *wf = malloc(sizeof(float) * (size_t)n);
  if (!wf) return;
  for (int64_t r = lo; r < hi; r++) {
    j->tr->to_float(bl_tensor_row(j->w, j->slab, r), wf, n);
    for (int64_t i = 0; i < j->n_idx; i++) {
      int64_t t = j->idx ? j->idx[i] : i;
      const float *x = (const float *)(j->q + t * j->qs);
      double s = 0;
      for (int64_t k = 0; k < n; k++) s += (double)wf[k] * x[k];
      j->y[i * j->ys + r] = (float)s;
    }
  }
  free(wf);
}

void bl_matmul_q(bl_cpu_ctx *c, const bl_tensor *w, int64_t slab, const uint8_t *qrows, int64_t qstride,
                 const int32_t *idx, int64_t n_idx, float *y, int64_t ys) {
  mm_job j = {w, slab, bl_traits((int32_t)w->type), qrows, qstride, idx, n_idx, y, ys};
  bl_pool_run(c->pool, (c->p.flags & BL_CTX_EXACT) ? mm_exact_task : mm_task, &j);
}

int32_t bl_act_type(const bl_cpu_ctx *c, int32_t wtype) {
  const bl_type_traits *tr = bl_traits(wtype);
  if (!tr) return -1;
  return (c->p.flags & BL_CTX_EXACT) ? BL_F32 : tr->vec_dot_type;
}

int64_t bl_matmul(bl_cpu_ctx *c, const bl_tensor *w, int64_t slab, const float *x, int64_t xs,
                  int64_t n_tok, float *y, int64_t ys) {
  const bl_type_traits *tr = bl_traits((int32_t)w->type);
  if (!w->data) return bl_fail(BL_E_INVAL, "matmul: missing weight");
  if (!tr || !tr->vec_dot) return bl_fail(BL_E_UNSUPPORTED, "matmul: weight type %lld has no CPU dot product", (long long)w->type);
  int64_t rb = bl_quantize_rows(c, bl_act_type(c, (int32_t)w->type), x, xs, n_tok, w->ne[0], c->qact);
  if (rb < 0 || rb > c->qact_row) return bl_fail(BL_E_INVAL, "matmul: cannot convert activations for type %lld", (long long)w->type);
  bl_matmul_q(c, w, slab, c->qact, rb, NULL, n_tok, y, ys);
  return BL_OK;
}

typedef struct {
  const float *x;
  int64_t xs;
  float *y;
  int64_t ys, n;
  const float *w;
  float eps;
  int64_t n_tok;
} norm_job;

static void norm_task(void *a, int ith, int nth) {
  norm_job *j = a;
  int64_t lo, hi;
  bl_split(j->n_tok, ith, nth, &lo, &hi);
  for (int64_t t = lo; t < hi; t++) {
    const float *x = j->x + t * j->xs;
    float *y = j->y + t * j->ys;
    double ss = 0;
    for (int64_t i = 0; i < j->n; i++) ss += (double)x[i] * x[i];
    float scale = 1.0f / sqrtf((float)(ss / j->n) + j->eps);
    for (int64_t i = 0; i < j->n; i++) y[i] = x[i] * scale * (j->w ? j->w[i] : 1.0f);
  }
}

int64_t bl_rmsnorm_rows(bl_cpu_ctx *c, const float *x, int64_t xs, float *y, int64_t ys, int64_t n_tok, int64_t n,
                        const bl_tensor *w, float eps) {
  float wbuf[BL_MAX_NORM];
  const float *wp = NULL;
  if (w && w->data) {
    if (n > BL_MAX_NORM) return bl_fail(BL_E_UNSUPPORTED, "rmsnorm: %lld elements is more than %d", (long long)n, BL_MAX_NORM);
    int64_t s = bl_weight_f32(w, wbuf, n);
    if (s != BL_OK) return s;
    wp = wbuf;
  }
  norm_job j = {x, xs, y, ys, n, wp, eps, n_tok};
  if (n_tok == 1) norm_task(&j, 0, 1);
  else bl_pool_run(c->pool, norm_task, &j);
  return BL_OK;
}
