/* bloomery CPU library: the routed-experts block and the dense SwiGLU FFN block, each one pool
 * job: rmsnorm, router (softmax, top-k, renormalisation), the input rows converted once, then
 * the (token, pick) pairs grouped by expert and computed in work items of (expert, row tile)
 * claimed from atomic counters - gate and up of an item read once for all the expert's tokens
 * and fused with SwiGLU - then down, and the picks of each token summed in ascending expert
 * order (so a token's result does not depend on the rest of the batch). With an expert store on
 * the block (expert_cache.c), the experts the batch uses are loaded into its slots first (one unit
 * an item), in rounds of at most the store's slots, and the products read them there. */
#include "ctx.h"
#include "common.h"
#include "expert_cache.h"
#include <math.h>
#include <string.h>

typedef struct {
  bl_cpu_ctx *c;
  const bl_block *b;
  int64_t n_tok, E, ff, ne, k;
  int dense;
  int given;          /* the picks are the caller's (c->sel / c->selw, k a token): no router */
  const bl_tensor *gate, *up, *down, *gate_inp;
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

/* Softmax over the experts, top-k, renormalised weights (ggml's order: softmax, then argsort). */
static void route_token(const moe_job *j, int64_t t) {
  bl_cpu_ctx *c = j->c;
  const bl_block *b = j->b;
  const int64_t ne = j->ne, k = j->k;
  float *lg = c->router + t * ne;
  float mx = -INFINITY;
  for (int64_t e = 0; e < ne; e++) mx = fmaxf(mx, lg[e]);
  double sum = 0;
  for (int64_t e = 0; e < ne; e++) {
    lg[e] = expf(lg[e] - mx);
    sum += lg[e];
  }
  for (int64_t e = 0; e < ne; e++) lg[e] = (float)(lg[e] / sum);
  int32_t *sel = c->sel + t * k;
  float *w = c->selw + t * k;
  for (int64_t i = 0; i < k; i++) {
    int64_t best = -1;
    for (int64_t e = 0; e < ne; e++) {
      int taken = 0;
      for (int64_t q = 0; q < i; q++)
        if (sel[q] == e) {
          taken = 1;
          break;
        }
      if (!taken && (best < 0 || lg[e] > lg[best])) best = e;
    }
    sel[i] = (int32_t)best;
    w[i] = lg[best];
  }
  if (b->norm_topk) {
    float s = 0;
    for (int64_t i = 0; i < k; i++) s += w[i];
    if (s < 6.103515625e-5f) s = 6.103515625e-5f;
    for (int64_t i = 0; i < k; i++) w[i] /= s;
  }
  if (b->expert_weights_scale != 0 && b->expert_weights_scale != 1)
    for (int64_t i = 0; i < k; i++) w[i] *= (float)b->expert_weights_scale;
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
  for (int64_t i = 0; i < np; i++) {
    float *g = j->ff_out + (p0 + i) * j->ff + r0;
    const float *u = tmp + i * w;
    if (exact) for (int64_t r = 0; r < w; r++) g[r] = silu(g[r]) * u[r];
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
    const float w = j->dense ? 1.0f : c->selw[t * k + slot];
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
  bl_job_rmsnorm(&j->c_norm, c->x, j->E, c->h, j->E, j->n_tok, j->E, j->normw, j->eps);
  bl_pool_barrier_ith(c->pool, ith);
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
  if (!exact) bl_job_quantize(c, &j->c_quant, j->vt, j->lanes, c->h, j->E, j->n_tok, j->E, j->qin, j->rb);
  bl_pool_barrier_ith(c->pool, ith);
  if (!j->dense && !j->given) {
    for (int64_t t; (t = bl_claim(&j->c_route, 1)) < j->n_tok;) route_token(j, t);
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

static int64_t check_ffn(const bl_cpu_ctx *c, const bl_tensor *g, const bl_tensor *u, const bl_tensor *d, const char *what) {
  if (!g->data || !u->data || !d->data) return bl_fail(BL_E_INVAL, "%s: missing gate, up or down weights", what);
  if (g->ne[0] != c->p.n_embd || u->ne[0] != c->p.n_embd || d->ne[1] != c->p.n_embd || g->ne[1] != u->ne[1] || d->ne[0] != g->ne[1])
    return bl_fail(BL_E_INVAL, "%s: gate/up/down shapes do not agree", what);
  if (g->ne[1] > c->p.max_ff) return bl_fail(BL_E_INVAL, "%s: hidden size %lld is more than the context's %lld", what, (long long)g->ne[1], (long long)c->p.max_ff);
  if (g->type != u->type) return bl_fail(BL_E_UNSUPPORTED, "%s: gate and up weights of different types", what);
  int64_t s;
  if ((s = bl_check_weight(c, g, what)) || (s = bl_check_weight(c, u, what)) || (s = bl_check_weight(c, d, what))) return s;
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

/* given > 0: a MoE block on the caller's picks, `given` a token, already in c->sel / c->selw. */
static int64_t run_ffn(bl_cpu_ctx *c, const bl_block *b, int64_t n_tok, int dense, int64_t given) {
  moe_job j;
  memset(&j, 0, sizeof j);
  j.c = c;
  j.b = b;
  j.n_tok = n_tok;
  j.given = given > 0;
  j.E = c->p.n_embd;
  j.dense = dense;
  j.eps = (float)b->eps;
  const bl_tensor *norm;
  if (dense) {
    norm = &b->t[0];
    j.gate = &b->t[1];
    j.up = &b->t[2];
    j.down = &b->t[3];
    j.ne = 1;
    j.k = 1;
  } else {
    norm = &b->t[BL_MOE_NORM];
    j.gate = &b->t[BL_MOE_GATE];
    j.up = &b->t[BL_MOE_UP];
    j.down = &b->t[BL_MOE_DOWN];
    j.gate_inp = &b->t[BL_MOE_GATE_INP];
    j.ne = b->n_expert;
    j.k = given > 0 ? given : b->n_expert_used;
    if (j.ne <= 0 || j.k <= 0 || j.k > j.ne || j.ne > c->p.max_experts || j.k > 64)
      return bl_fail(BL_E_INVAL, "moe: %lld experts, %lld used", (long long)j.ne, (long long)j.k);
  }
  const char *what = dense ? "ffn" : "moe";
  int64_t s;
  if ((s = check_ffn(c, j.gate, j.up, j.down, what))) return s;
  if (!dense) {
    if (j.gate->ne[2] != j.ne || j.up->ne[2] != j.ne || j.down->ne[2] != j.ne || j.gate_inp->ne[1] != j.ne)
      return bl_fail(BL_E_INVAL, "moe: expert count of the tensors is not %lld", (long long)j.ne);
    if ((s = bl_check_weight(c, j.gate_inp, "moe router"))) return s;
    if (j.gate_inp->type != BL_F32) return bl_fail(BL_E_UNSUPPORTED, "moe: router weights of type %lld (F32 expected)", (long long)j.gate_inp->type);
  }
  j.ff = j.gate->ne[1];
  j.vt = bl_act_type(c, (int32_t)j.gate->type);
  j.vt_d = bl_act_type(c, (int32_t)j.down->type);
  j.lanes = bl_lanes(c, j.gate, j.n_tok);
  j.lanes_d = bl_lanes(c, j.down, j.n_tok);
  j.rb = bl_row_bytes(j.vt, j.E);
  j.rb_d = bl_row_bytes(j.vt_d, j.ff);
  if (j.rb < 0 || j.rb_d < 0) return bl_fail(BL_E_UNSUPPORTED, "%s: cannot convert activations for the expert types", what);
  float normw[BL_MAX_NORM];
  if (norm->data) {
    if (j.E > BL_MAX_NORM) return bl_fail(BL_E_UNSUPPORTED, "%s: n_embd %lld", what, (long long)j.E);
    if ((s = bl_weight_f32(norm, normw, j.E))) return s;
    j.normw = normw;
  }
  const int nth = bl_pool_active(c->pool);
  const int with_store = !dense && b->expert_store != 0;
  if ((s = moe_alloc(&j, nth, with_store))) return s;
  if (with_store) {
    const int64_t slab[3] = {j.gate->nb2, j.up->nb2, j.down->nb2};
    if ((s = bl_xs_begin(b->expert_store, b->expert_layer, j.ne, slab, &j.xs))) return s;
    j.xs_layer = b->expert_layer;
  }
  if (dense) {
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

int64_t bl_moe_block(bl_cpu_ctx *c, const bl_block *b, const bl_batch *batch) { return run_ffn(c, b, batch->n_tokens, 0, 0); }

int64_t bl_ffn_block(bl_cpu_ctx *c, const bl_block *b, const bl_batch *batch) { return run_ffn(c, b, batch->n_tokens, 1, 0); }

int64_t bl_moe_picked(bl_cpu_ctx *c, const bl_block *b, int64_t n_tok, int64_t k) {
  if (k <= 0) return bl_fail(BL_E_INVAL, "moe: %lld picks a token", (long long)k);
  return run_ffn(c, b, n_tok, 0, k);
}
