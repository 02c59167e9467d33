/* bloomery CPU library: the ATTN op (with a NORM fused in) as one pool job - rmsnorm, Q/K/V projections (the
 * input converted once per activation type, the three matrices one item space), biases, per-head Q/K
 * norm, RoPE, the f16 KV cache write, causal GQA attention over the slot's cache (attn_core.c: items of
 * (KV head, tile of up to 16 query tokens of one sequence), chunks merged in a fixed order, so results
 * never depend on the batch or the threads; sliding windows and sinks), output projection (and its bias)
 * and residual. Queries are rounded to f16 before the K products, as ggml does. */
#include "attn_core.h"
#include "common.h"
#include "rope.h"
#include "simd_attn.h"
#include <math.h>
#include <string.h>

static inline uint16_t *kv_at(const bl_cpu_ctx *c, uint16_t *base, int64_t layer, int64_t slot, int64_t pos, int64_t dim) {
  return base + (((layer * c->p.kv_slots + slot) * c->p.kv_ctx) + pos) * dim;
}

typedef struct {
  bl_cpu_ctx *c;
  const bl_batch *batch;
  int64_t n_tok, E, hd, nh, nkv, qd, kd, group;
  int gate;               /* q's rows hold each head's query then its output gate */
  int64_t qrow;           /* floats between q rows (2 qd with a gate) */
  float *gates;           /* with a gate: n_tok rows of qd, the gates taken out of q */
  int64_t layer;          /* the KV cache layer */
  int64_t window;         /* sliding window (0: every position) */
  const bl_tensor *o;     /* the output projection */
  const int32_t *pos, *seq;
  const float *normw, *qn, *kn, *bq, *bk, *bv, *bo, *sinks;
  int has_norm;           /* a NORM fused in: x normalised into h first; else h is the input */
  bl_rope rope;
  float eps, norm_eps, scale;
  /* projections: up to three activation types among Q, K, V */
  int32_t vt[3];
  int64_t rb[3];
  uint8_t *qin[3];
  int n_vt, which[3]; /* which[m]: index into vt of matrix m (0 Q, 1 K, 2 V) */
  int lanes[3];       /* per activation type: lane-order Q8_K (every matrix using it has the kernels) */
  int lanes_o;
  const bl_tensor *w[3];
  int64_t rpi, tiles[3];
  bl_attn_core core;      /* the attention over the cache */
  /* output projection */
  int32_t vt_o;
  int64_t rb_o, rpi_o;
  uint8_t *qo;
  const uint8_t **act;  /* per worker pointer arrays */
  float **yp;
  bl_counter c_norm, c_q[3], c_mm, c_prep, c_gate, c_qo, c_o, c_res;
} attn_job;

static void prep_token(attn_job *j, int64_t t) {
  bl_cpu_ctx *c = j->c;
  const int64_t hd = j->hd;
  float *q = c->q + t * j->qrow, *k = c->k + t * j->kd, *v = c->v + t * j->kd;
  if (j->gate) {
    /* [q0 g0 q1 g1 ...] -> gates out, queries packed at the row's start */
    float *g = j->gates + t * j->qd;
    for (int64_t h = 0; h < j->nh; h++) {
      memcpy(g + h * hd, q + (2 * h + 1) * hd, sizeof(float) * (size_t)hd);
      if (h) memmove(q + h * hd, q + 2 * h * hd, sizeof(float) * (size_t)hd);
    }
  }
  if (j->bq) for (int64_t i = 0; i < j->qd; i++) q[i] += j->bq[i];
  if (j->bk) for (int64_t i = 0; i < j->kd; i++) k[i] += j->bk[i];
  if (j->bv) for (int64_t i = 0; i < j->kd; i++) v[i] += j->bv[i];
  for (int pass = 0; pass < 2; pass++) {
    const float *w = pass ? j->kn : j->qn;
    float *base = pass ? k : q;
    const int64_t heads = pass ? j->nkv : j->nh;
    if (!w) continue;
    for (int64_t h = 0; h < heads; h++) {
      float *x = base + h * hd;
      double ss = 0;
      for (int64_t i = 0; i < hd; i++) ss += (double)x[i] * x[i];
      const float sc = 1.0f / sqrtf((float)(ss / hd) + j->eps);
      for (int64_t i = 0; i < hd; i++) x[i] = x[i] * sc * w[i];
    }
  }
  if (j->rope.n_rot > 0) {
    bl_rope_apply(&j->rope, q, (int)j->nh, (int)hd, j->pos[t]);
    bl_rope_apply(&j->rope, k, (int)j->nkv, (int)hd, j->pos[t]);
  }
  const bl_kernels *kn = c->kern;
  kn->to_f16(k, kv_at(c, c->kc, j->layer, j->seq[t], j->pos[t], j->kd), j->kd);
  kn->to_f16(v, kv_at(c, c->vc, j->layer, j->seq[t], j->pos[t], j->kd), j->kd);
  if (!bl_exact(c)) kn->round_f16(q, j->qd);
}

static void attn_task(void *a, int ith, int nth) {
  attn_job *j = a;
  bl_cpu_ctx *c = j->c;
  const int exact = bl_exact(c);
  (void)nth;
  const uint8_t **act = j->act + (int64_t)ith * j->n_tok;
  float **yp = j->yp + (int64_t)ith * j->n_tok;
  if (j->has_norm) {
    bl_job_rmsnorm(&j->c_norm, c->x, j->E, c->h, j->E, j->n_tok, j->E, j->normw, j->norm_eps);
    bl_pool_barrier_ith(c->pool, ith);
  }
  if (!exact) {
    for (int i = 0; i < j->n_vt; i++) bl_job_quantize(c, &j->c_q[i], j->vt[i], j->lanes[i], c->h, j->E, j->n_tok, j->E, j->qin[i], j->rb[i]);
    bl_pool_barrier_ith(c->pool, ith);
  }
  /* Q, K and V rows as one item space */
  float *outs[3] = {c->q, c->k, c->v};
  const int64_t dims[3] = {j->qrow, j->kd, j->kd};
  const int64_t total = j->tiles[0] + j->tiles[1] + j->tiles[2];
  int cur = -1;
  bl_mm_spec m = {0};
  for (int64_t i; (i = bl_claim(&j->c_mm, 1)) < total;) {
    int mi = 0;
    int64_t tile = i;
    while (tile >= j->tiles[mi]) tile -= j->tiles[mi++];
    if (mi != cur) {
      cur = mi;
      for (int64_t t = 0; t < j->n_tok; t++) {
        act[t] = exact ? (const uint8_t *)(c->h + t * j->E) : j->qin[j->which[mi]] + t * j->rb[j->which[mi]];
        yp[t] = outs[mi] + t * dims[mi];
      }
      m = (bl_mm_spec){j->w[mi], 0, act, yp, j->n_tok, j->lanes[j->which[mi]]};
    }
    const int64_t r0 = tile * j->rpi, r1 = r0 + j->rpi < dims[mi] ? r0 + j->rpi : dims[mi];
    bl_mm_rows(c, ith, &m, r0, r1);
  }
  bl_pool_barrier_ith(c->pool, ith);
  for (int64_t t; (t = bl_claim(&j->c_prep, 1)) < j->n_tok;) prep_token(j, t);
  bl_pool_barrier_ith(c->pool, ith);
  bl_attn_core_run(&j->core, ith);
  bl_pool_barrier_ith(c->pool, ith);
  if (j->gate) {
    for (int64_t t; (t = bl_claim(&j->c_gate, 1)) < j->n_tok;) {
      float *o = c->att + t * j->qd;
      const float *g = j->gates + t * j->qd;
      for (int64_t i = 0; i < j->qd; i++) o[i] *= 1.0f / (1.0f + expf(-g[i]));
    }
    bl_pool_barrier_ith(c->pool, ith);
  }
  if (!exact) {
    bl_job_quantize(c, &j->c_qo, j->vt_o, j->lanes_o, c->att, j->qd, j->n_tok, j->qd, j->qo, j->rb_o);
    bl_pool_barrier_ith(c->pool, ith);
  }
  for (int64_t t = 0; t < j->n_tok; t++) {
    act[t] = exact ? (const uint8_t *)(c->att + t * j->qd) : j->qo + t * j->rb_o;
    yp[t] = c->ff_b + t * j->E; /* h stays the NORM's rows */
  }
  const bl_mm_spec mo = {j->o, 0, act, yp, j->n_tok, j->lanes_o};
  bl_job_matmul(c, ith, &j->c_o, &mo, j->rpi_o);
  bl_pool_barrier_ith(c->pool, ith);
  for (int64_t t; (t = bl_claim(&j->c_res, 1)) < j->n_tok;) {
    float *x = c->x + t * j->E;
    const float *y = c->ff_b + t * j->E;
    if (j->bo) for (int64_t i = 0; i < j->E; i++) x[i] += y[i] + j->bo[i];
    else for (int64_t i = 0; i < j->E; i++) x[i] += y[i];
  }
}

/* Float copy of an optional vector weight (bias or norm) into dst; *out = dst or NULL. */
static int64_t opt_vec(const bl_tensor *t, float *dst, int64_t n, const float **out) {
  *out = NULL;
  if (!t->data) return BL_OK;
  int64_t s = bl_weight_f32(t, dst, n);
  if (s == BL_OK) *out = dst;
  return s;
}

/* Shapes and options of an ATTN op against a context's sizes (and a NORM fused in: its weight). */
int64_t bl_attn_check(const bl_ctx_params *p, const bl_op *op) {
  const bl_attn_params *b = BL_OP_PARAMS(op, bl_attn_params);
  if (!b) return bl_fail(BL_E_INVAL, "attention: no parameters");
  const int64_t hd = b->head_dim, nh = b->n_head, nkv = b->n_head_kv, E = p->n_embd;
  if (hd <= 0 || hd > 1024 || nh <= 0 || nkv <= 0 || nh % nkv != 0)
    return bl_fail(BL_E_INVAL, "attention: bad heads (n_head %lld, n_head_kv %lld, head_dim %lld)", (long long)nh, (long long)nkv, (long long)hd);
  if (b->kv_layer < 0 || b->kv_layer >= p->kv_layers) return bl_fail(BL_E_INVAL, "attention: KV layer %lld out of range", (long long)b->kv_layer);
  if (b->gate != 0 && b->gate != 1) return bl_fail(BL_E_UNSUPPORTED, "attention: output gate %lld", (long long)b->gate);
  const int64_t qrows = (b->gate ? 2 : 1) * nh * hd;
  if (nkv * hd != p->kv_k_dim || nkv * hd != p->kv_v_dim || qrows > p->max_q_dim) return bl_fail(BL_E_INVAL, "attention: head dims do not match the context");
  if (b->gate && bl_op_t(op, BL_ATTN_BQ)->data) return bl_fail(BL_E_UNSUPPORTED, "attention: a q bias with an output gate");
  if (b->window < 0) return bl_fail(BL_E_INVAL, "attention: sliding window %lld", (long long)b->window);
  if (b->rope.type != BL_ROPE_NONE && b->rope.type != BL_ROPE_NORMAL && b->rope.type != BL_ROPE_NEOX)
    return bl_fail(BL_E_UNSUPPORTED, "attention: RoPE type %lld", (long long)b->rope.type);
  if (b->rope.type != BL_ROPE_NONE && (b->rope.n_rot <= 0 || b->rope.n_rot > hd || b->rope.n_rot % 2))
    return bl_fail(BL_E_INVAL, "attention: %lld rotated dims of %lld", (long long)b->rope.n_rot, (long long)hd);
  const int64_t rows[3] = {qrows, nkv * hd, nkv * hd};
  const char *names[3] = {"attention q", "attention k", "attention v"};
  for (int mi = 0; mi < 3; mi++) {
    const bl_tensor *w = bl_op_t(op, BL_ATTN_Q + mi);
    if (!w->data) return bl_fail(BL_E_INVAL, "%s: missing", names[mi]);
    if (w->ne[0] != E || w->ne[1] != rows[mi]) return bl_fail(BL_E_INVAL, "%s: shape does not match the heads", names[mi]);
  }
  const bl_tensor *o = bl_op_t(op, BL_ATTN_O);
  if (!o->data) return bl_fail(BL_E_INVAL, "attention output: missing");
  if (o->ne[0] != nh * hd || o->ne[1] != E) return bl_fail(BL_E_INVAL, "attention output: shape does not match");
  const int64_t vlen[] = {[BL_ATTN_Q_NORM] = hd, [BL_ATTN_K_NORM] = hd, [BL_ATTN_BQ] = nh * hd, [BL_ATTN_BK] = nkv * hd,
                          [BL_ATTN_BV] = nkv * hd, [BL_ATTN_BO] = E, [BL_ATTN_SINKS] = nh};
  for (int r = BL_ATTN_Q_NORM; r <= BL_ATTN_SINKS; r++) {
    const bl_tensor *v = bl_op_t(op, r);
    if (v->data && v->ne[0] != vlen[r]) return bl_fail(BL_E_INVAL, "attention: vector %d has %lld elements, %lld expected", r, (long long)v->ne[0], (long long)vlen[r]);
  }
  return BL_OK;
}

int64_t bl_attn_op(bl_cpu_ctx *c, const bl_op *norm, const bl_op *op, const bl_batch *batch) {
  int64_t s;
  if ((s = bl_attn_check(&c->p, op))) return s;
  const bl_attn_params *b = BL_OP_PARAMS(op, bl_attn_params);
  const int64_t n_tok = batch->n_tokens, E = c->p.n_embd;
  const int64_t hd = b->head_dim, nh = b->n_head, nkv = b->n_head_kv;
  const int32_t *pos = (const int32_t *)(uintptr_t)batch->pos;
  const int32_t *seq = (const int32_t *)(uintptr_t)batch->seq;
  int64_t max_pos = 0;
  for (int64_t t = 0; t < n_tok; t++) {
    if (pos[t] < 0 || pos[t] >= c->p.kv_ctx) return bl_fail(BL_E_INVAL, "attention: position %d outside the context of %lld", pos[t], (long long)c->p.kv_ctx);
    if (seq[t] < 0 || seq[t] >= c->p.kv_slots) return bl_fail(BL_E_INVAL, "attention: sequence %d outside %lld slots", seq[t], (long long)c->p.kv_slots);
    if (pos[t] > max_pos) max_pos = pos[t];
  }
  attn_job j;
  memset(&j, 0, sizeof j);
  j.c = c;
  j.batch = batch;
  j.layer = b->kv_layer;
  j.window = b->window;
  j.o = bl_op_t(op, BL_ATTN_O);
  j.n_tok = n_tok;
  j.E = E;
  j.hd = hd;
  j.nh = nh;
  j.nkv = nkv;
  j.qd = nh * hd;
  j.kd = nkv * hd;
  j.group = nh / nkv;
  j.gate = b->gate != 0;
  j.qrow = (j.gate ? 2 : 1) * j.qd;
  j.pos = pos;
  j.seq = seq;
  j.eps = (float)b->eps;
  j.scale = b->scale > 0 ? (float)b->scale : 1.0f / sqrtf((float)hd);
  const bl_tensor *ws[3] = {bl_op_t(op, BL_ATTN_Q), bl_op_t(op, BL_ATTN_K), bl_op_t(op, BL_ATTN_V)};
  const char *names[3] = {"attention q", "attention k", "attention v"};
  const int64_t rows[3] = {j.qrow, j.kd, j.kd};
  for (int mi = 0; mi < 3; mi++)
    if ((s = bl_check_weight(c, ws[mi], names[mi]))) return s;
  if ((s = bl_check_weight(c, j.o, "attention output"))) return s;
  j.has_norm = norm != NULL;
  if (norm) j.norm_eps = (float)BL_OP_PARAMS(norm, bl_norm_params)->eps;

  bl_rope_init(&j.rope, &b->rope);

  const int nth = bl_pool_active(c->pool);
  /* distinct activation types of Q, K, V */
  for (int mi = 0; mi < 3; mi++) {
    const int32_t vt = bl_act_type(c, (int32_t)ws[mi]->type);
    int f = -1;
    for (int i = 0; i < j.n_vt; i++)
      if (j.vt[i] == vt) f = i;
    if (f < 0) {
      f = j.n_vt++;
      j.vt[f] = vt;
      j.rb[f] = bl_row_bytes(vt, E);
    }
    j.which[mi] = f;
    j.w[mi] = ws[mi];
  }
  for (int i = 0; i < j.n_vt; i++) {
    j.lanes[i] = 1;
    for (int mi = 0; mi < 3; mi++)
      if (j.which[mi] == i && !bl_lanes(c, ws[mi], n_tok)) j.lanes[i] = 0;
  }
  j.rpi = bl_rows_per_item(j.qrow + 2 * j.kd, n_tok, nth);
  for (int mi = 0; mi < 3; mi++) j.tiles[mi] = (rows[mi] + j.rpi - 1) / j.rpi;
  j.vt_o = bl_act_type(c, (int32_t)j.o->type);
  j.rb_o = bl_row_bytes(j.vt_o, j.qd);
  j.lanes_o = bl_lanes(c, j.o, n_tok);
  j.rpi_o = bl_rows_per_item(E, n_tok, nth);
  /* the attention over the cache: units of a KV head and its query heads */
  bl_attn_core *ac = &j.core;
  ac->c = c;
  ac->n_tok = n_tok;
  ac->hd = hd;
  ac->nh = nh;
  ac->nkv = nkv;
  ac->group = ac->gsub = j.group;
  ac->qs = j.qrow;
  ac->os = j.qd;
  ac->kd = j.kd;
  ac->q = c->q;
  ac->out = c->att;
  ac->kb = c->kc + (size_t)j.layer * (size_t)c->p.kv_slots * (size_t)c->p.kv_ctx * (size_t)j.kd;
  ac->vb = c->vc + (size_t)j.layer * (size_t)c->p.kv_slots * (size_t)c->p.kv_ctx * (size_t)j.kd;
  ac->window = j.window;
  ac->pos = pos;
  ac->seq = seq;
  ac->scale = j.scale;
  size_t core_sz[3];
  bl_attn_core_plan(ac, BL_ATTN_QTILE, max_pos, nth, core_sz);
  const size_t sz[] = {
      (size_t)(j.n_vt > 0 ? j.rb[0] * n_tok : 0), (size_t)(j.n_vt > 1 ? j.rb[1] * n_tok : 0),
      (size_t)(j.n_vt > 2 ? j.rb[2] * n_tok : 0), (size_t)(j.rb_o * n_tok),
      core_sz[1], core_sz[2], sizeof(void *) * (size_t)(nth * n_tok),
      sizeof(void *) * (size_t)(nth * n_tok),
      sizeof(float) * (size_t)(2 * E + 2 * hd + j.qd + 2 * j.kd + nh), /* norm, q/k norm, bias and sink vectors */
      core_sz[0],                                             /* query tiles */
      j.gate ? sizeof(float) * (size_t)(n_tok * j.qd) : 0,    /* the output gates */
  };
  enum { NB = sizeof sz / sizeof sz[0] };
  size_t total = 0;
  for (int i = 0; i < NB; i++) total += (sz[i] + 63) & ~(size_t)63;
  uint8_t *p = bl_cpu_scratch(c, total);
  if (!p) return bl_fail(BL_E_NOMEM, "attention: cannot allocate %zu MiB of work space", total >> 20);
  void *out[NB];
  for (int i = 0; i < NB; i++) {
    out[i] = p;
    p += (sz[i] + 63) & ~(size_t)63;
  }
  for (int i = 0; i < 3; i++) j.qin[i] = out[i];
  j.qo = out[3];
  j.act = out[6];
  j.yp = out[7];
  float *vec = out[8];
  bl_attn_core_bind(ac, out[9], out[4], out[5]);
  j.gates = out[10];
  if (norm && (s = opt_vec(bl_op_t(norm, BL_NORM_WEIGHT), vec, E, &j.normw))) return s;
  float *v = vec + E;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_Q_NORM), v, hd, &j.qn))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_K_NORM), v += hd, hd, &j.kn))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_BQ), v += hd, j.qd, &j.bq))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_BK), v += j.qd, j.kd, &j.bk))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_BV), v += j.kd, j.kd, &j.bv))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_BO), v += j.kd, E, &j.bo))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_SINKS), v += E, nh, &j.sinks))) return s;
  ac->sinks = j.sinks;
  const int64_t t0 = c->prof ? bl_prof_now() : 0;
  bl_pool_run(c->pool, attn_task, &j);
  bl_prof_add(c, BL_PROF_ATTN, t0);
  return BL_OK;
}
