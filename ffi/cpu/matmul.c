/* bloomery CPU library: matrix products on the stored quant blocks (activation rows converted once
 * to the weight type's vec_dot_type by the path's quantizer, as ggml does; weight rows in items
 * of several rows claimed from an atomic counter, each item read once per BL_TILE_A activation
 * rows), the exact f32 reference product, and RMSNorm. */
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

int32_t bl_act_type(const bl_cpu_ctx *c, int32_t wtype) {
  const bl_type_traits *tr = bl_traits(wtype);
  if (!tr) return -1;
  return bl_exact(c) ? BL_F32 : tr->vec_dot_type;
}

int64_t bl_weight_type_check(const bl_tensor *w, const char *what) {
  const bl_type_traits *tr = bl_traits((int32_t)w->type);
  if (tr && tr->vec_dot && bl_kern()->tile[w->type]) return BL_OK;
  return bl_fail(BL_E_UNSUPPORTED, "%s: %s weights (ggml type %lld) are not implemented on the CPU (no product of that type)", what,
                 bl_type_name(w->type), (long long)w->type);
}

int64_t bl_check_weight(const bl_cpu_ctx *c, const bl_tensor *w, const char *what) {
  const bl_type_traits *tr = bl_traits((int32_t)w->type);
  if (!w->data) return bl_fail(BL_E_INVAL, "%s: missing weight", what);
  if (!tr || !tr->vec_dot || !c->kern->tile[w->type]) return bl_weight_type_check(w, what);
  if (w->ne[0] % tr->block_elems != 0)
    return bl_fail(BL_E_INVAL, "%s: rows of %lld elements are not whole %s blocks", what, (long long)w->ne[0], tr->name);
  if (w->ne[0] > c->widest)
    return bl_fail(BL_E_INVAL, "%s: rows of %lld elements are longer than the context's %lld", what, (long long)w->ne[0], (long long)c->widest);
  return BL_OK;
}

int bl_lanes(const bl_cpu_ctx *c, const bl_tensor *w, int64_t n_act) {
  return !bl_exact(c) && n_act >= BL_LANES_MIN && c->kern->act_q8k_lanes && bl_act_type(c, (int32_t)w->type) == BL_Q8_K &&
         c->kern->tile_lanes[w->type] != NULL;
}

void bl_job_quantize(bl_cpu_ctx *c, bl_counter *ctr, int32_t vt, int lanes, const float *x, int64_t xs, int64_t n_tok,
                     int64_t n, uint8_t *dst, int64_t rb) {
  bl_act_fn f = lanes ? c->kern->act_q8k_lanes : c->kern->act[vt];
  for (int64_t t; (t = bl_claim(ctr, 1)) < n_tok;) f(x + t * xs, dst + t * rb, n);
}

int64_t bl_rows_per_item(int64_t rows, int64_t n_act, int nth) {
  /* enough items for every thread to take several (balance); one-token steps stream the weights,
   * and long items keep each stream going (a new item starts cold: measured +10% tg on 2 cores
   * going from 64 to 256-1024 rows); batches keep an item's rows in L1/L2 across token tiles */
  int64_t r = rows / ((n_act > 1 ? 8 : 4) * (int64_t)nth);
  const int64_t hi = n_act > 1 ? 32 : 512;
  if (r > hi) r = hi;
  if (r < 4) r = 4;
  return r;
}

/* The exact path: a weight row dequantized, f32 activation rows, double accumulation. */
static void mm_rows_exact(bl_cpu_ctx *c, int ith, const bl_mm_spec *m, int64_t r0, int64_t r1) {
  const bl_type_traits *tr = bl_traits((int32_t)m->w->type);
  const int64_t n = m->w->ne[0];
  float *wf = c->wrow + (int64_t)ith * c->widest;
  for (int64_t r = r0; r < r1; r++) {
    tr->to_float(bl_tensor_row(m->w, m->slab, r), wf, n);
    for (int64_t i = 0; i < m->n_act; i++) {
      const float *x = (const float *)m->act[i];
      double s = 0;
      for (int64_t k = 0; k < n; k++) s += (double)wf[k] * x[k];
      m->y[i][r] = (float)s;
    }
  }
}

void bl_mm_rows(bl_cpu_ctx *c, int ith, const bl_mm_spec *m, int64_t r0, int64_t r1) {
  if (bl_exact(c)) {
    mm_rows_exact(c, ith, m, r0, r1);
    return;
  }
  const bl_tile_fn tile = m->lanes ? c->kern->tile_lanes[m->w->type] : c->kern->tile[m->w->type];
  const uint8_t *w0 = bl_tensor_row(m->w, m->slab, r0);
  for (int64_t t0 = 0; t0 < m->n_act; t0 += BL_TILE_A) {
    const int na = (int)(m->n_act - t0 < BL_TILE_A ? m->n_act - t0 : BL_TILE_A);
    float *yp[BL_TILE_A];
    for (int i = 0; i < na; i++) yp[i] = m->y[t0 + i] + r0;
    tile(m->w->ne[0], w0, m->w->nb1, (int)(r1 - r0), m->act + t0, na, yp);
  }
}

void bl_job_matmul(bl_cpu_ctx *c, int ith, bl_counter *ctr, const bl_mm_spec *m, int64_t rows_per_item) {
  const int64_t rows = m->w->ne[1];
  for (int64_t i; (i = bl_claim(ctr, 1)) * rows_per_item < rows;) {
    const int64_t r0 = i * rows_per_item, r1 = r0 + rows_per_item < rows ? r0 + rows_per_item : rows;
    bl_mm_rows(c, ith, m, r0, r1);
  }
}

typedef struct {
  bl_cpu_ctx *c;
  bl_mm_spec m;
  int32_t vt;
  const float *x;
  int64_t xs, n_tok, rb, rpi;
  uint8_t *dst;
  bl_counter cq, cm;
} matmul_job;

static void matmul_task(void *a, int ith, int nth) {
  matmul_job *j = a;
  (void)nth;
  if (!bl_exact(j->c)) {
    bl_job_quantize(j->c, &j->cq, j->vt, j->m.lanes, j->x, j->xs, j->n_tok, j->m.w->ne[0], j->dst, j->rb);
    bl_pool_barrier_ith(j->c->pool, ith);
  }
  bl_job_matmul(j->c, ith, &j->cm, &j->m, j->rpi);
}

int64_t bl_matmul(bl_cpu_ctx *c, const bl_tensor *w, int64_t slab, const float *x, int64_t xs,
                  int64_t n_tok, float *y, int64_t ys) {
  int64_t s = bl_check_weight(c, w, "matmul");
  if (s != BL_OK) return s;
  if (n_tok > c->p.max_tokens) return bl_fail(BL_E_INVAL, "matmul: %lld rows", (long long)n_tok);
  const int32_t vt = bl_act_type(c, (int32_t)w->type);
  const int64_t rb = bl_row_bytes(vt, w->ne[0]);
  if (rb < 0 || rb > c->qact_row) return bl_fail(BL_E_INVAL, "matmul: cannot convert activations for type %lld", (long long)w->type);
  const uint8_t **act = bl_cpu_scratch(c, (size_t)n_tok * 2 * sizeof(void *));
  if (!act) return bl_fail(BL_E_NOMEM, "matmul: out of memory");
  float **yp = (float **)(act + n_tok);
  for (int64_t t = 0; t < n_tok; t++) {
    act[t] = bl_exact(c) ? (const uint8_t *)(x + t * xs) : c->qact + t * rb;
    yp[t] = y + t * ys;
  }
  matmul_job j = {.c = c, .m = {w, slab, act, yp, n_tok, bl_lanes(c, w, n_tok)}, .vt = vt, .x = x, .xs = xs, .n_tok = n_tok, .rb = rb,
                  .rpi = bl_rows_per_item(w->ne[1], n_tok, bl_pool_active(c->pool)), .dst = c->qact};
  const int64_t t0 = c->prof ? bl_prof_now() : 0;
  bl_pool_run(c->pool, matmul_task, &j);
  bl_prof_add(c, BL_PROF_MATMUL, t0);
  return BL_OK;
}

void bl_job_rmsnorm(bl_counter *ctr, const float *x, int64_t xs, float *y, int64_t ys, int64_t n_tok, int64_t n,
                    const float *w, float eps) {
  for (int64_t t; (t = bl_claim(ctr, 1)) < n_tok;) {
    const float *xr = x + t * xs;
    float *yr = y + t * ys;
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int64_t i = 0; i < n; i++) yr[i] = xr[i] * scale * (w ? w[i] : 1.0f);
  }
}

typedef struct {
  const float *x;
  int64_t xs;
  float *y;
  int64_t ys, n;
  const float *w;
  float eps;
  int64_t n_tok;
  bl_counter ctr;
} norm_job;

static void norm_task(void *a, int ith, int nth) {
  norm_job *j = a;
  (void)ith;
  (void)nth;
  bl_job_rmsnorm(&j->ctr, j->x, j->xs, j->y, j->ys, j->n_tok, j->n, j->w, j->eps);
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
  norm_job j = {x, xs, y, ys, n, wp, eps, n_tok, {0}};
  if (n_tok == 1) norm_task(&j, 0, 1);
  else bl_pool_run(c->pool, norm_task, &j);
  return BL_OK;
}
