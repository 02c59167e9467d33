/* bloomery CPU library: the ROUTER and EXPERTS ops (with a NORM fused in) and the FFN op, each one
 * pool job: rmsnorm, router (its logits and bias, then softmax-top-k, top-k-softmax or sigmoid with a
 * selection bias and groups; renormalisation, scale), the input rows converted once, then the
 * (token, pick) pairs grouped by expert and computed in work items of (expert, row tile) claimed
 * from atomic counters - gate and up of an item read once for all the expert's tokens, their biases,
 * fused with the activation (SwiGLU, or gpt-oss's clamped form) - then down and its bias, and the
 * picks of each token summed in ascending expert order (so a token's result does not depend on the
 * rest of the batch). With an expert store on the op (expert_cache.c), the experts the batch uses are
 * loaded into its slots first (one unit an item), in rounds of at most the store's slots, and the
 * products read them there. */
#include "ctx.h"
#include "common.h"
#include "expert_cache.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  bl_cpu_ctx *c;
  int64_t n_tok, E, ff, ne, k;
  int dense;
  int given;          /* the picks are the caller's (c->sel / c->selw, k a token): no router */
  int route_only;     /* a ROUTER alone: its picks are the output */
  int has_norm;       /* a NORM fused in: x normalised into h first (else h is the input) */
  int64_t layer;      /* the experts' layer (pick counts; -1: none) */
  const bl_router_params *rp;
  const bl_tensor *gate, *up, *down, *gate_inp;
  const float *rbias, *rcorr;        /* router logit bias, selection bias (F32 vectors) */
  const bl_tensor *bgate, *bup, *bdown; /* biases an expert (F32 rows), or NULL */
  const float *shgate;               /* a shared expert's scalar gate (sigmoid(h . shgate)), or NULL */
  int64_t actk;        /* BL_ACT_* */
  float alpha, limit;
  const float *normw;
  float eps;
  int32_t vt, vt_d;   /* activation types of gate/up and of down */
  int lanes, lanes_d; /* lane-order Q8_K rows for gate/up, for down (bl_lanes, by batch size) */
  int64_t rb, rb_d;   /* their row bytes */
  uint8_t *qin;       /* input rows converted (n_tok x rb) */
  /* pairs (token, pick) sorted by expert */
  int64_t n_pairs, n_valid, n_active, tiles_gu, tiles_d, rpi_gu, rpi_d; /* n_valid: pairs of picks >= 0 */
  int32_t *pair_tok, *pair_of, *exp_start, *active;
  float *ff_out;      /* n_pairs x ff: silu(gate) * up */
  uint8_t *ffq;       /* n_pairs x rb_d */
  float *dn;          /* n_pairs x E */
  float *tmp;         /* per worker: up results of an item */
  int64_t tmp_stride;
  const uint8_t **act; /* per worker: activation pointers of an item */
  float **yp;          /* per worker: output pointers of an item */
  bl_counter c_norm, c_router, c_quant, c_route, c_gu, c_qd, c_down, c_comb;
  /* the expert store (NULL: experts read from the tensors' data) */
  bl_xstore *xs;
  int64_t xs_layer;
  const uint8_t **xptr;   /* [ne * 3]: gate, up and down slabs of a pinned expert in its slot */
  bl_xs_load *loads;      /* the round's units to read */
  uint8_t *load_ok;
  int64_t n_loads, round_a0, round_a1; /* active[round_a0..round_a1) pinned */
  bl_counter c_load;
  _Atomic int err;
  char errmsg[512];
} moe_job;

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

/* The k best of score[0..ne) (ties to the lower index; entries of -inf never taken while others remain) into sel. */
static void top_k(const float *score, int64_t ne, int64_t k, int32_t *sel) {
  for (int64_t i = 0; i < k; i++) {
    int64_t best = -1;
    for (int64_t e = 0; e < ne; e++) {
      int taken = 0;
      for (int64_t q = 0; q < i; q++)
        if (sel[q] == e) {
          taken = 1;
          break;
        }
      if (!taken && (best < 0 || score[e] > score[best])) best = e;
    }
    sel[i] = (int32_t)best;
  }
}

static void norm_weights(float *w, int64_t k) {
  float s = 0;
  for (int64_t i = 0; i < k; i++) s += w[i];
  if (s < 6.103515625e-5f) s = 6.103515625e-5f;
  for (int64_t i = 0; i < k; i++) w[i] /= s;
}

/* SIGMOID's choice: scores s + corr; with groups, only the n_group_used groups whose two best
 * scores sum highest take part (the rest masked), then the k best. sc: ne floats of scratch. */
static void sigmoid_pick(const moe_job *j, const float *p, float *sc, int32_t *sel) {
  const int64_t ne = j->ne, k = j->k, ng = j->rp->n_group, gu = j->rp->n_group_used;
  for (int64_t e = 0; e < ne; e++) sc[e] = p[e] + (j->rcorr ? j->rcorr[e] : 0.0f);
  if (ng > 1 && gu > 0 && gu < ng) {
    const int64_t per = ne / ng;
    float gs[64];
    for (int64_t g = 0; g < ng; g++) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int64_t e = g * per; e < (g + 1) * per; e++) {
        if (sc[e] > b1) { b2 = b1; b1 = sc[e]; }
        else if (sc[e] > b2) b2 = sc[e];
      }
      gs[g] = per > 1 ? b1 + b2 : b1;
    }
    int32_t keep[64];
    top_k(gs, ng, gu, keep);
    for (int64_t g = 0; g < ng; g++) {
      int kept = 0;
      for (int64_t q = 0; q < gu; q++) kept |= keep[q] == g;
      if (!kept) for (int64_t e = g * per; e < (g + 1) * per; e++) sc[e] = -INFINITY;
    }
  }
  top_k(sc, ne, k, sel);
}

/* The router's picks for token t from its logits (bl_router_params's gatings; ggml's orders). */
static void route_token(const moe_job *j, int64_t t) {
  bl_cpu_ctx *c = j->c;
  const bl_router_params *rp = j->rp;
  const int64_t ne = j->ne, k = j->k;
  float *lg = c->router + t * ne;
  int32_t *sel = c->sel + t * k;
  float *w = c->selw + t * k;
  if (j->rbias) for (int64_t e = 0; e < ne; e++) lg[e] += j->rbias[e];
  if (rp->gating == BL_GATING_SOFTMAX_WEIGHT) {
    /* the k largest logits, then a softmax over those k */
    top_k(lg, ne, k, sel);
    float mx = -INFINITY;
    for (int64_t i = 0; i < k; i++) mx = fmaxf(mx, lg[sel[i]]);
    double sum = 0;
    for (int64_t i = 0; i < k; i++) sum += (w[i] = expf(lg[sel[i]] - mx));
    for (int64_t i = 0; i < k; i++) w[i] = (float)(w[i] / sum);
    if (rp->norm_topk) norm_weights(w, k);
  } else if (rp->gating == BL_GATING_SIGMOID) {
    for (int64_t e = 0; e < ne; e++) lg[e] = 1.0f / (1.0f + expf(-lg[e]));
    sigmoid_pick(j, lg, c->router_sc + t * ne, sel);
    for (int64_t i = 0; i < k; i++) w[i] = lg[sel[i]];
    if (rp->norm_topk) norm_weights(w, k);
  } else {
    /* softmax over the experts, the k most probable (ggml's order: softmax, then argsort) */
    float mx = -INFINITY;
    for (int64_t e = 0; e < ne; e++) mx = fmaxf(mx, lg[e]);
    double sum = 0;
    for (int64_t e = 0; e < ne; e++) {
      lg[e] = expf(lg[e] - mx);
      sum += lg[e];
    }
    for (int64_t e = 0; e < ne; e++) lg[e] = (float)(lg[e] / sum);
    top_k(lg, ne, k, sel);
    for (int64_t i = 0; i < k; i++) w[i] = lg[sel[i]];
    if (rp->norm_topk) norm_weights(w, k);
  }
  if (rp->scale != 0 && rp->scale != 1)
    for (int64_t i = 0; i < k; i++) w[i] *= (float)rp->scale;
}

/* Counting sort of the (token, pick) pairs by expert; the item counts of both phases. */
static void group_pairs(moe_job *j, int nth) {
  bl_cpu_ctx *c = j->c;
  const int64_t ne = j->ne, k = j->k, n = j->n_tok * k;
  int32_t *start = j->exp_start;
  memset(start, 0, sizeof(int32_t) * (size_t)(ne + 1));
  for (int64_t i = 0; i < n; i++)
    if (c->sel[i] >= 0) start[c->sel[i] + 1]++; /* a caller's pick of -1: none (bl_cpu_expert_rows) */
  for (int64_t e = 0; e < ne; e++) start[e + 1] += start[e];
  int32_t *fill = c->tok_list; /* per expert write position */
  memcpy(fill, start, sizeof(int32_t) * (size_t)ne);
  /* tokens in order within an expert; pair_of maps (token, pick) to its pair */
  for (int64_t t = 0; t < j->n_tok; t++)
    for (int64_t i = 0; i < k; i++) {
      const int32_t e = c->sel[t * k + i];
      if (e < 0) {
        j->pair_of[t * k + i] = -1;
        continue;
      }
      const int32_t p = fill[e]++;
      j->pair_tok[p] = (int32_t)t;
      j->pair_of[t * k + i] = p;
    }
  j->n_active = 0;
  for (int64_t e = 0; e < ne; e++)
    if (start[e + 1] > start[e]) j->active[j->n_active++] = (int32_t)e;
  if (!j->given && !j->dense && j->layer >= 0) bl_count_picks(c, j->layer, ne, start);
  j->n_pairs = n; /* the per-worker pointer arrays' stride */
  j->n_valid = start[ne];
  const int64_t per = j->n_valid / (j->n_active > 0 ? j->n_active : 1);
  j->rpi_gu = bl_rows_per_item(j->ff * j->n_active, per, nth);
  j->rpi_d = bl_rows_per_item(j->E * j->n_active, per, nth);
  j->tiles_gu = (j->ff + j->rpi_gu - 1) / j->rpi_gu;
  j->tiles_d = (j->E + j->rpi_d - 1) / j->rpi_d;
}

/* A view of one expert's slab at data (slab 0) with t's type, dims and row stride. */
static inline void slot_tensor(bl_tensor *dst, const bl_tensor *t, const uint8_t *data) {
  *dst = *t;
  dst->data = (uint64_t)(uintptr_t)data;
  dst->ne[2] = 1;
}

/* Gate and up rows [r0, r1) of expert e for its pairs, then SwiGLU into ff_out. */
static void gate_up_item(moe_job *j, int ith, int64_t e, int64_t r0, int64_t r1) {
  bl_cpu_ctx *c = j->c;
  const int64_t p0 = j->exp_start[e], np = j->exp_start[e + 1] - p0;
  const uint8_t **act = j->act + (int64_t)ith * j->n_pairs;
  float **yp = j->yp + (int64_t)ith * j->n_pairs;
  float *tmp = j->tmp + (int64_t)ith * j->tmp_stride;
  const int exact = bl_exact(c);
  for (int64_t i = 0; i < np; i++) {
    const int64_t t = j->pair_tok[p0 + i];
    act[i] = exact ? (const uint8_t *)(c->h + t * j->E) : j->qin + t * j->rb;
    yp[i] = j->ff_out + (p0 + i) * j->ff;
  }
  bl_mm_spec m = {j->gate, e, act, yp, np, j->lanes};
  bl_tensor gs, us; /* the expert's slabs in its store slot */
  if (j->xs) {
    slot_tensor(&gs, j->gate, j->xptr[e * 3]);
    slot_tensor(&us, j->up, j->xptr[e * 3 + 1]);
    m.w = &gs;
    m.slab = 0;
  }
  bl_mm_rows(c, ith, &m, r0, r1);
  const int64_t w = r1 - r0;
  for (int64_t i = 0; i < np; i++) yp[i] = tmp + i * w - r0;
  m.w = j->xs ? &us : j->up;
  bl_mm_rows(c, ith, &m, r0, r1);
  const float *bg = j->bgate ? (const float *)bl_tensor_row(j->bgate, 0, e) + r0 : NULL;
  const float *bu = j->bup ? (const float *)bl_tensor_row(j->bup, 0, e) + r0 : NULL;
  for (int64_t i = 0; i < np; i++) {
    float *g = j->ff_out + (p0 + i) * j->ff + r0;
    float *u = tmp + i * w;
    if (bg) for (int64_t r = 0; r < w; r++) g[r] += bg[r];
    if (bu) for (int64_t r = 0; r < w; r++) u[r] += bu[r];
    if (j->actk == BL_ACT_SWIGLU_OAI) {
      for (int64_t r = 0; r < w; r++) {
        const float x = fminf(g[r], j->limit), y = fminf(fmaxf(u[r], -j->limit), j->limit);
        g[r] = x / (1.0f + expf(-j->alpha * x)) * (y + 1.0f);
      }
    } else if (exact) for (int64_t r = 0; r < w; r++) g[r] = silu(g[r]) * u[r];
    else c->kern->swiglu(g, u, w);
  }
}

static void down_item(moe_job *j, int ith, int64_t e, int64_t r0, int64_t r1) {
  bl_cpu_ctx *c = j->c;
  const int64_t p0 = j->exp_start[e], np = j->exp_start[e + 1] - p0;
  const uint8_t **act = j->act + (int64_t)ith * j->n_pairs;
  float **yp = j->yp + (int64_t)ith * j->n_pairs;
  const int exact = bl_exact(c);
  for (int64_t i = 0; i < np; i++) {
    act[i] = exact ? (const uint8_t *)(j->ff_out + (p0 + i) * j->ff) : j->ffq + (p0 + i) * j->rb_d;
    yp[i] = j->dn + (p0 + i) * j->E;
  }
  bl_mm_spec m = {j->down, e, act, yp, np, j->lanes_d};
  bl_tensor ds;
  if (j->xs) {
    slot_tensor(&ds, j->down, j->xptr[e * 3 + 2]);
    m.w = &ds;
    m.slab = 0;
  }
  bl_mm_rows(c, ith, &m, r0, r1);
  if (j->bdown) {
    const float *bd = (const float *)bl_tensor_row(j->bdown, 0, e);
    for (int64_t i = 0; i < np; i++)
      for (int64_t r = r0; r < r1; r++) yp[i][r] += bd[r];
  }
}

/* x[t] += sum over the token's picks, in ascending expert order, of weight * down output. */
static void combine_token(moe_job *j, int64_t t) {
  bl_cpu_ctx *c = j->c;
  const int64_t k = j->k, E = j->E;
  int32_t ord[64];
  for (int64_t i = 0; i < k; i++) ord[i] = (int32_t)i;
  for (int64_t i = 1; i < k; i++)
    for (int64_t q = i; q > 0 && c->sel[t * k + ord[q]] < c->sel[t * k + ord[q - 1]]; q--) {
      int32_t s = ord[q];
      ord[q] = ord[q - 1];
      ord[q - 1] = s;
    }
  float *o = c->moe_out + t * E;
  memset(o, 0, sizeof(float) * (size_t)E);
  const int simd = !bl_exact(c);
  for (int64_t i = 0; i < k; i++) {
    const int64_t slot = ord[i];
    if (j->pair_of[t * k + slot] < 0) continue; /* a pick of -1 (sorted first) */
    float w = j->dense ? 1.0f : c->selw[t * k + slot];
    if (j->shgate) w = 1.0f / (1.0f + expf(-c->kern->dot_f32(c->h + t * E, j->shgate, E)));
    const float *y = j->dn + (int64_t)j->pair_of[t * k + slot] * E;
    if (simd) c->kern->axpy_f32(w, y, o, E);
    else for (int64_t q = 0; q < E; q++) o[q] += w * y[q];
  }
  float *x = c->x + t * E;
  for (int64_t q = 0; q < E; q++) x[q] += o[q];
}

/* Thread 0, between barriers: unpin the last round, pin the next (from active[a0]), reset the
 * round's counters. */
static void xs_round_plan(moe_job *j, int64_t a0) {
  if (j->round_a1 > j->round_a0) bl_xs_unpin(j->xs, j->xs_layer, j->active, j->round_a0, j->round_a1);
  j->round_a0 = j->round_a1 = a0;
  bl_xs_plan(j->xs, j->xs_layer, a0 == 0, j->active, j->n_active, a0, &j->round_a1, j->xptr, j->loads, &j->n_loads);
  bl_counter_reset(&j->c_gu);
  bl_counter_reset(&j->c_qd);
  bl_counter_reset(&j->c_down);
  bl_counter_reset(&j->c_load);
}

/* Every worker: read the round's missing units, one an item; the first failure is kept. */
static void xs_round_read(moe_job *j) {
  for (int64_t i; (i = bl_claim(&j->c_load, 1)) < j->n_loads;) {
    char msg[sizeof j->errmsg];
    const int64_t st = bl_xs_read(j->xs, j->xs_layer, &j->loads[i], msg, sizeof msg);
    j->load_ok[i] = st == BL_OK;
    if (st != BL_OK && atomic_exchange(&j->err, 1) == 0) memcpy(j->errmsg, msg, sizeof msg);
  }
}

/* Every worker: convert the SwiGLU rows of the round's experts for down, an expert an item. */
static void xs_round_quantize(moe_job *j, int64_t a0, int64_t a1) {
  for (int64_t i; (i = a0 + bl_claim(&j->c_qd, 1)) < a1;) {
    const int64_t e = j->active[i], p0 = j->exp_start[e], np = j->exp_start[e + 1] - p0;
    bl_counter rows = {0};
    bl_job_quantize(j->c, &rows, j->vt_d, j->lanes_d, j->ff_out + p0 * j->ff, j->ff, np, j->ff, j->ffq + p0 * j->rb_d, j->rb_d);
  }
}

static void moe_task(void *a, int ith, int nth) {
  moe_job *j = a;
  bl_cpu_ctx *c = j->c;
  const int exact = bl_exact(c);
  if (j->has_norm) {
    bl_job_rmsnorm(&j->c_norm, c->x, j->E, c->h, j->E, j->n_tok, j->E, j->normw, j->eps);
    bl_pool_barrier_ith(c->pool, ith);
  }
  if (!j->dense && !j->given) {
    /* router logits (f32 weights against f32 rows) */
    const uint8_t **act = j->act + (int64_t)ith * j->n_pairs;
    float **yp = j->yp + (int64_t)ith * j->n_pairs;
    for (int64_t t = 0; t < j->n_tok; t++) {
      act[t] = (const uint8_t *)(c->h + t * j->E);
      yp[t] = c->router + t * j->ne;
    }
    bl_mm_spec m = {j->gate_inp, 0, act, yp, j->n_tok, 0};
    bl_job_matmul(c, ith, &j->c_router, &m, 4);
  }
  if (!exact && !j->route_only) bl_job_quantize(c, &j->c_quant, j->vt, j->lanes, c->h, j->E, j->n_tok, j->E, j->qin, j->rb);
  bl_pool_barrier_ith(c->pool, ith);
  if (!j->dense && !j->given) {
    for (int64_t t; (t = bl_claim(&j->c_route, 1)) < j->n_tok;) route_token(j, t);
    if (j->route_only) return;
    bl_pool_barrier_ith(c->pool, ith);
  }
  if (ith == 0) group_pairs(j, nth);
  bl_pool_barrier_ith(c->pool, ith);
  /* one round without a store; with one, rounds of the experts its slots hold */
  for (int64_t a0 = 0, a1; a0 < j->n_active; a0 = a1) {
    a1 = j->n_active;
    if (j->xs) {
      if (ith == 0) xs_round_plan(j, a0);
      bl_pool_barrier_ith(c->pool, ith);
      xs_round_read(j);
      bl_pool_barrier_ith(c->pool, ith);
      a1 = j->round_a1;
      const int failed = atomic_load(&j->err);
      if (ith == 0) bl_xs_loaded(j->xs, j->xs_layer, j->loads, j->load_ok, j->n_loads, !failed && a1 == j->n_active);
      if (failed) return; /* every worker sees it after the same barrier; run_ffn reports it */
    }
    for (int64_t i; (i = a0 * j->tiles_gu + bl_claim(&j->c_gu, 1)) < a1 * j->tiles_gu;) {
      const int64_t e = j->active[i / j->tiles_gu], r0 = (i % j->tiles_gu) * j->rpi_gu;
      gate_up_item(j, ith, e, r0, r0 + j->rpi_gu < j->ff ? r0 + j->rpi_gu : j->ff);
    }
    bl_pool_barrier_ith(c->pool, ith);
    if (!exact) {
      if (j->xs) xs_round_quantize(j, a0, a1);
      else bl_job_quantize(c, &j->c_qd, j->vt_d, j->lanes_d, j->ff_out, j->ff, j->n_valid, j->ff, j->ffq, j->rb_d);
      bl_pool_barrier_ith(c->pool, ith);
    }
    for (int64_t i; (i = a0 * j->tiles_d + bl_claim(&j->c_down, 1)) < a1 * j->tiles_d;) {
      const int64_t e = j->active[i / j->tiles_d], r0 = (i % j->tiles_d) * j->rpi_d;
      down_item(j, ith, e, r0, r0 + j->rpi_d < j->E ? r0 + j->rpi_d : j->E);
    }
    bl_pool_barrier_ith(c->pool, ith);
  }
  for (int64_t t; (t = bl_claim(&j->c_comb, 1)) < j->n_tok;) combine_token(j, t);
}

static int64_t ffn_shapes(const bl_ctx_params *p, const bl_tensor *g, const bl_tensor *u, const bl_tensor *d, const char *what) {
  if (!g->data || !u->data || !d->data) return bl_fail(BL_E_INVAL, "%s: missing gate, up or down weights", what);
  if (g->ne[0] != p->n_embd || u->ne[0] != p->n_embd || d->ne[1] != p->n_embd || g->ne[1] != u->ne[1] || d->ne[0] != g->ne[1])
    return bl_fail(BL_E_INVAL, "%s: gate/up/down shapes do not agree", what);
  if (g->ne[1] > p->max_ff) return bl_fail(BL_E_INVAL, "%s: hidden size %lld is more than the context's %lld", what, (long long)g->ne[1], (long long)p->max_ff);
  if (g->type != u->type) return bl_fail(BL_E_UNSUPPORTED, "%s: gate and up weights of different types", what);
  return BL_OK;
}

static int64_t act_check(int64_t act, double alpha, double limit, const char *what) {
  if (act == BL_ACT_SWIGLU) return BL_OK;
  if (act == BL_ACT_SWIGLU_OAI) {
    if (!(limit > 0) || !(alpha > 0)) return bl_fail(BL_E_INVAL, "%s: clamped SwiGLU with alpha %g and limit %g", what, alpha, limit);
    return BL_OK;
  }
  return bl_fail(BL_E_UNSUPPORTED, "%s: activation %lld", what, (long long)act);
}

/* A vector (or a row per expert: rows > 1) of F32 floats of n elements, when present. */
static int64_t f32_rows(const bl_tensor *t, int64_t n, int64_t rows, const char *what) {
  if (!t->data) return BL_OK;
  if (t->type != BL_F32) return bl_fail(BL_E_UNSUPPORTED, "%s: of type %lld (F32 expected)", what, (long long)t->type);
  if (t->ne[0] != n || t->ne[1] != rows) return bl_fail(BL_E_INVAL, "%s: %lld x %lld, expected %lld x %lld", what, (long long)t->ne[0], (long long)t->ne[1], (long long)n, (long long)rows);
  return BL_OK;
}

int64_t bl_router_check(const bl_ctx_params *p, const bl_op *op) {
  const bl_router_params *rp = BL_OP_PARAMS(op, bl_router_params);
  if (!rp) return bl_fail(BL_E_INVAL, "router: no parameters");
  const int64_t ne = rp->n_expert, k = rp->n_used;
  if (ne <= 0 || k <= 0 || k > ne || ne > p->max_experts || k > 64)
    return bl_fail(BL_E_INVAL, "router: %lld experts, %lld used (the context takes %lld)", (long long)ne, (long long)k, (long long)p->max_experts);
  if (rp->gating != BL_GATING_SOFTMAX && rp->gating != BL_GATING_SOFTMAX_WEIGHT && rp->gating != BL_GATING_SIGMOID)
    return bl_fail(BL_E_UNSUPPORTED, "router: gating %lld", (long long)rp->gating);
  if (rp->n_group < 0 || rp->n_group > 64 || rp->n_group_used < 0 || rp->n_group_used > rp->n_group ||
      (rp->n_group > 1 && ne % rp->n_group != 0) || (rp->n_group > 1 && rp->gating != BL_GATING_SIGMOID))
    return bl_fail(BL_E_INVAL, "router: %lld expert groups (%lld used) of %lld experts", (long long)rp->n_group, (long long)rp->n_group_used, (long long)ne);
  const bl_tensor *w = bl_op_t(op, BL_ROUTER_W);
  if (!w->data) return bl_fail(BL_E_INVAL, "router: missing weights");
  if (w->type != BL_F32) return bl_fail(BL_E_UNSUPPORTED, "router: weights of type %lld (F32 expected)", (long long)w->type);
  if (w->ne[0] != p->n_embd || w->ne[1] != ne) return bl_fail(BL_E_INVAL, "router: weights are not %lld x %lld", (long long)p->n_embd, (long long)ne);
  int64_t s;
  if ((s = f32_rows(bl_op_t(op, BL_ROUTER_B), ne, 1, "router bias"))) return s;
  if ((s = f32_rows(bl_op_t(op, BL_ROUTER_CORR), ne, 1, "router selection bias"))) return s;
  if (bl_op_t(op, BL_ROUTER_CORR)->data && rp->gating != BL_GATING_SIGMOID)
    return bl_fail(BL_E_UNSUPPORTED, "router: a selection bias with gating %lld (sigmoid routers only)", (long long)rp->gating);
  return BL_OK;
}

int64_t bl_experts_check(const bl_ctx_params *p, const bl_op *op) {
  const bl_experts_params *xp = BL_OP_PARAMS(op, bl_experts_params);
  if (!xp) return bl_fail(BL_E_INVAL, "experts: no parameters");
  const bl_tensor *g = bl_op_t(op, BL_EXPERTS_GATE), *u = bl_op_t(op, BL_EXPERTS_UP), *d = bl_op_t(op, BL_EXPERTS_DOWN);
  int64_t s;
  if ((s = ffn_shapes(p, g, u, d, "experts"))) return s;
  const int64_t ne = xp->n_expert;
  if (ne <= 0 || xp->n_used <= 0 || xp->n_used > ne || ne > p->max_experts || xp->n_used > 64)
    return bl_fail(BL_E_INVAL, "experts: %lld experts, %lld used (the context takes %lld)", (long long)ne, (long long)xp->n_used, (long long)p->max_experts);
  if (g->ne[2] != ne || u->ne[2] != ne || d->ne[2] != ne) return bl_fail(BL_E_INVAL, "experts: expert count of the tensors is not %lld", (long long)ne);
  if ((s = act_check(xp->act, xp->alpha, xp->limit, "experts"))) return s;
  if ((s = f32_rows(bl_op_t(op, BL_EXPERTS_BGATE), g->ne[1], ne, "experts' gate bias"))) return s;
  if ((s = f32_rows(bl_op_t(op, BL_EXPERTS_BUP), g->ne[1], ne, "experts' up bias"))) return s;
  if ((s = f32_rows(bl_op_t(op, BL_EXPERTS_BDOWN), p->n_embd, ne, "experts' down bias"))) return s;
  if (xp->host == BL_HOST_EXPERTS_DISK && !xp->store)
    return bl_fail(BL_E_INVAL, "experts of layer %lld: marked as read from disk (host %d) but no expert store", (long long)xp->layer, BL_HOST_EXPERTS_DISK);
  return BL_OK;
}

int64_t bl_ffn_check(const bl_ctx_params *p, const bl_op *op) {
  const bl_ffn_params *fp = BL_OP_PARAMS(op, bl_ffn_params);
  if (!fp) return bl_fail(BL_E_INVAL, "ffn: no parameters");
  int64_t s;
  if ((s = ffn_shapes(p, bl_op_t(op, BL_FFN_GATE), bl_op_t(op, BL_FFN_UP), bl_op_t(op, BL_FFN_DOWN), "ffn"))) return s;
  if ((s = act_check(fp->act, fp->alpha, fp->limit, "ffn"))) return s;
  const bl_tensor *gi = bl_op_t(op, BL_FFN_GATE_INP);
  if (gi->data && (gi->type != BL_F32 || gi->ne[0] != p->n_embd || gi->ne[1] != 1))
    return bl_fail(BL_E_UNSUPPORTED, "ffn: a shared expert's gate must be F32 of %lld", (long long)p->n_embd);
  return BL_OK;
}

/* Lays the job's buffers out in the context's scratch. */
static int64_t moe_alloc(moe_job *j, int nth, int with_store) {
  const int64_t n = j->n_tok * j->k, ne = j->ne > 0 ? j->ne : 1;
  j->tmp_stride = j->n_tok * BL_MAX_RPI + 16; /* an item has at most BL_MAX_RPI rows for at most n_tok pairs */
  const size_t sz[] = {
      (size_t)(j->n_tok * j->rb),             /* qin */
      sizeof(int32_t) * (size_t)n,            /* pair_tok */
      sizeof(int32_t) * (size_t)n,            /* pair_of */
      sizeof(int32_t) * (size_t)(ne + 1),     /* exp_start */
      sizeof(int32_t) * (size_t)ne,           /* active */
      sizeof(float) * (size_t)(n * j->ff),    /* ff_out */
      (size_t)(n * j->rb_d),                  /* ffq */
      sizeof(float) * (size_t)(n * j->E),     /* dn */
      sizeof(float) * (size_t)(nth * j->tmp_stride), /* tmp */
      sizeof(void *) * (size_t)(nth * (n > j->n_tok ? n : j->n_tok)), /* act */
      sizeof(void *) * (size_t)(nth * (n > j->n_tok ? n : j->n_tok)), /* yp */
      with_store ? sizeof(void *) * 3 * (size_t)ne : 0, /* xptr */
      with_store ? sizeof(bl_xs_load) * (size_t)ne : 0, /* loads */
      with_store ? (size_t)ne : 0,                      /* load_ok */
  };
  enum { NB = sizeof sz / sizeof sz[0] };
  size_t total = 0;
  for (int i = 0; i < NB; i++) total += (sz[i] + 63) & ~(size_t)63;
  uint8_t *p = bl_cpu_scratch(j->c, total);
  if (!p) return bl_fail(BL_E_NOMEM, "moe: cannot allocate %zu MiB of work space", total >> 20);
  void *out[NB];
  for (int i = 0; i < NB; i++) {
    out[i] = p;
    p += (sz[i] + 63) & ~(size_t)63;
  }
  j->qin = out[0];
  j->pair_tok = out[1];
  j->pair_of = out[2];
  j->exp_start = out[3];
  j->active = out[4];
  j->ff_out = out[5];
  j->ffq = out[6];
  j->dn = out[7];
  j->tmp = out[8];
  j->act = out[9];
  j->yp = out[10];
  j->xptr = out[11];
  j->loads = out[12];
  j->load_ok = out[13];
  j->n_pairs = n > j->n_tok ? n : j->n_tok; /* pointer arrays per worker; group_pairs sets the real count */
  return BL_OK;
}

/* One FFN-like step: dense (an FFN op), or routed experts on the router's picks (router set), on
 * the caller's or the last router's picks (given > 0: k a token, in c->sel / c->selw), or the
 * router alone (route_only: experts NULL). */
static int64_t run_ffn(bl_cpu_ctx *c, const bl_op *norm, const bl_op *router, const bl_op *op, int64_t n_tok, int64_t given) {
  moe_job j;
  memset(&j, 0, sizeof j);
  j.c = c;
  j.n_tok = n_tok;
  j.given = given > 0;
  j.route_only = op == NULL;
  j.dense = op && op->kind == BL_OP_FFN;
  j.E = c->p.n_embd;
  j.layer = -1;
  j.has_norm = norm != NULL;
  j.eps = norm ? (float)BL_OP_PARAMS(norm, bl_norm_params)->eps : 0.0f;
  int64_t s;
  if (router && (s = bl_router_check(&c->p, router))) return s;
  if (j.dense) {
    if ((s = bl_ffn_check(&c->p, op))) return s;
    const bl_ffn_params *fp = BL_OP_PARAMS(op, bl_ffn_params);
    j.gate = bl_op_t(op, BL_FFN_GATE);
    j.up = bl_op_t(op, BL_FFN_UP);
    j.down = bl_op_t(op, BL_FFN_DOWN);
    j.actk = fp->act;
    j.alpha = (float)fp->alpha;
    j.limit = (float)fp->limit;
    if (bl_op_t(op, BL_FFN_GATE_INP)->data) j.shgate = (const float *)(uintptr_t)bl_op_t(op, BL_FFN_GATE_INP)->data;
    j.ne = 1;
    j.k = 1;
  } else if (op) {
    if ((s = bl_experts_check(&c->p, op))) return s;
    const bl_experts_params *xp = BL_OP_PARAMS(op, bl_experts_params);
    j.gate = bl_op_t(op, BL_EXPERTS_GATE);
    j.up = bl_op_t(op, BL_EXPERTS_UP);
    j.down = bl_op_t(op, BL_EXPERTS_DOWN);
    j.bgate = bl_op_t(op, BL_EXPERTS_BGATE)->data ? bl_op_t(op, BL_EXPERTS_BGATE) : NULL;
    j.bup = bl_op_t(op, BL_EXPERTS_BUP)->data ? bl_op_t(op, BL_EXPERTS_BUP) : NULL;
    j.bdown = bl_op_t(op, BL_EXPERTS_BDOWN)->data ? bl_op_t(op, BL_EXPERTS_BDOWN) : NULL;
    j.actk = xp->act;
    j.alpha = (float)xp->alpha;
    j.limit = (float)xp->limit;
    j.layer = xp->layer;
    j.ne = xp->n_expert;
    j.k = given > 0 ? given : xp->n_used;
    if (router) {
      const bl_router_params *rp = BL_OP_PARAMS(router, bl_router_params);
      if (rp->n_expert != xp->n_expert || rp->n_used != xp->n_used)
        return bl_fail(BL_E_INVAL, "experts of layer %lld: %lld experts, %lld used, but the router picks %lld of %lld", (long long)xp->layer,
                       (long long)xp->n_expert, (long long)xp->n_used, (long long)rp->n_used, (long long)rp->n_expert);
    }
    if (j.k > 64) return bl_fail(BL_E_INVAL, "moe: %lld picks a token", (long long)j.k);
  } else {
    const bl_router_params *rp = BL_OP_PARAMS(router, bl_router_params);
    j.ne = rp->n_expert;
    j.k = rp->n_used;
  }
  if (router) {
    j.rp = BL_OP_PARAMS(router, bl_router_params);
    j.gate_inp = bl_op_t(router, BL_ROUTER_W);
    if (bl_op_t(router, BL_ROUTER_B)->data) j.rbias = (const float *)(uintptr_t)bl_op_t(router, BL_ROUTER_B)->data;
    if (bl_op_t(router, BL_ROUTER_CORR)->data) j.rcorr = (const float *)(uintptr_t)bl_op_t(router, BL_ROUTER_CORR)->data;
    if ((s = bl_check_weight(c, j.gate_inp, "moe router"))) return s;
  } else if (!j.dense) {
    j.given = 1; /* the picks are in c->sel / c->selw */
  }
  const char *what = j.dense ? "ffn" : "moe";
  if (op) {
    if ((s = bl_check_weight(c, j.gate, what)) || (s = bl_check_weight(c, j.up, what)) || (s = bl_check_weight(c, j.down, what))) return s;
    j.ff = j.gate->ne[1];
    j.vt = bl_act_type(c, (int32_t)j.gate->type);
    j.vt_d = bl_act_type(c, (int32_t)j.down->type);
    j.lanes = bl_lanes(c, j.gate, j.n_tok);
    j.lanes_d = bl_lanes(c, j.down, j.n_tok);
    j.rb = bl_row_bytes(j.vt, j.E);
    j.rb_d = bl_row_bytes(j.vt_d, j.ff);
    if (j.rb < 0 || j.rb_d < 0) return bl_fail(BL_E_UNSUPPORTED, "%s: cannot convert activations for the expert types", what);
  }
  float normw[BL_MAX_NORM];
  const bl_tensor *nw = norm ? bl_op_t(norm, BL_NORM_WEIGHT) : &bl_no_tensor;
  if (nw->data) {
    if (j.E > BL_MAX_NORM) return bl_fail(BL_E_UNSUPPORTED, "%s: n_embd %lld", what, (long long)j.E);
    if ((s = bl_weight_f32(nw, normw, j.E))) return s;
    j.normw = normw;
  }
  const int nth = bl_pool_active(c->pool);
  const bl_experts_params *xp = op && !j.dense ? BL_OP_PARAMS(op, bl_experts_params) : NULL;
  const int with_store = xp && xp->store != 0;
  if ((s = moe_alloc(&j, nth, with_store))) return s;
  if (with_store) {
    const int64_t slab[3] = {j.gate->nb2, j.up->nb2, j.down->nb2};
    if ((s = bl_xs_begin(xp->store, xp->store_layer, j.ne, slab, &j.xs))) return s;
    j.xs_layer = xp->store_layer;
  }
  if (j.dense) {
    for (int64_t t = 0; t < j.n_tok; t++) c->sel[t] = 0;
  }
  const int64_t t0 = c->prof ? bl_prof_now() : 0;
  bl_pool_run(c->pool, moe_task, &j);
  bl_prof_add(c, BL_PROF_MOE, t0);
  if (j.xs) {
    if (j.round_a1 > j.round_a0) bl_xs_unpin(j.xs, j.xs_layer, j.active, j.round_a0, j.round_a1);
    bl_xs_end(j.xs);
    if (atomic_load(&j.err)) return bl_fail(BL_E_IO, "%s", j.errmsg);
  }
  return BL_OK;
}

int64_t bl_moe_op(bl_cpu_ctx *c, const bl_op *norm, const bl_op *router, const bl_op *experts, int64_t n_tok) {
  if (!router && !experts) return bl_fail(BL_E_INVAL, "moe: neither a router nor experts");
  return run_ffn(c, norm, router, experts, n_tok, 0);
}

int64_t bl_ffn_op(bl_cpu_ctx *c, const bl_op *norm, const bl_op *ffn, int64_t n_tok) { return run_ffn(c, norm, NULL, ffn, n_tok, 0); }

int64_t bl_moe_picked(bl_cpu_ctx *c, const bl_op *norm, const bl_op *experts, int64_t n_tok, int64_t k) {
  if (k <= 0) return bl_fail(BL_E_INVAL, "moe: %lld picks a token", (long long)k);
  return run_ffn(c, norm, NULL, experts, n_tok, k);
}

void bl_count_picks(bl_cpu_ctx *c, int64_t layer, int64_t n_expert, const int32_t *start) {
  const int64_t w = c->p.max_experts;
  if (layer < 0 || layer > 65535 || n_expert > w) return;
  if (layer >= c->picks_layers) {
    const int64_t n = layer + 1;
    int64_t *p = realloc(c->picks, sizeof(int64_t) * (size_t)(n * w));
    if (!p) return; /* counting is best effort: the forward goes on */
    memset(p + c->picks_layers * w, 0, sizeof(int64_t) * (size_t)((n - c->picks_layers) * w));
    c->picks = p;
    c->picks_layers = n;
  }
  for (int64_t e = 0; e < n_expert; e++) c->picks[layer * w + e] += start[e + 1] - start[e];
}

int64_t bl_cpu_expert_picks(uint64_t h, int64_t n_layers, int64_t n_expert, int64_t *out, int64_t reset) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  if (!c || !out || n_layers < 0 || n_expert < 0) return bl_fail(BL_E_INVAL, "expert_picks: bad arguments");
  const int64_t w = c->p.max_experts;
  for (int64_t l = 0; l < n_layers; l++)
    for (int64_t e = 0; e < n_expert; e++) out[l * n_expert + e] = l < c->picks_layers && e < w ? c->picks[l * w + e] : 0;
  if (reset && c->picks) memset(c->picks, 0, sizeof(int64_t) * (size_t)(c->picks_layers * w));
  return BL_OK;
}
