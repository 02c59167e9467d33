/* bloomery CPU library: the MLA op (multi-head latent attention, DeepSeek V2/V3 and Kimi K2; bloomery.h's
 * bl_mla_params) with a NORM fused in, as one pool job in its absorbed form: rmsnorm; the input converted
 * once per activation type for q (or q's LoRA down-projection q_a) and kv_a, both one item space; per
 * token q_a's norm, the latent's norm and the shared key part's RoPE, the cache row [latent | k_rope]
 * written in f16; q_b; each query head's rope part rotated and its nope part times k_b's head (items of
 * (head, row tile)) giving the latent query [q_latent | q_rope]; the attention of attn_core.c as MQA (one
 * KV head for every query head, the values the latent: the first kv_lora dims of the cache row), each item
 * a slice of the heads so a one-token step spreads over the threads; each head's softmax-weighted latent
 * times v_b's head; the output projection and the residual. The same form for prompts and decode: a
 * prompt's tokens of one sequence share each converted sub-tile of the cache across every head (tiles of
 * up to 128 query rows), a step's heads are split across the threads. Queries are rounded to f16 before
 * the products with the cache, as ggml's flash attention does; the exact path keeps f32 throughout. */
#include "attn_core.h"
#include "common.h"
#include "rope.h"
#include <math.h>
#include <string.h>

typedef struct {
  bl_cpu_ctx *c;
  int64_t n_tok, E, nh, nope, nr, kvl, vd, ql, qh, dq, dk;
  int64_t layer;
  const int32_t *pos, *seq;
  const float *normw, *qanw, *kvnw;
  int has_norm;
  float norm_eps, eps;
  bl_rope rope;
  const bl_tensor *w_in[2]; /* q (or q_a) and kv_a */
  const bl_tensor *qb, *kb, *vb, *o;
  /* the input's activation types (q or q_a, kv_a) */
  int32_t vt[2];
  int64_t rb[2];
  int lanes[2], n_vt, which[2];
  uint8_t *qin[2];
  int64_t rows_in[2], rpi_in, tiles_in[2];
  /* q_b, k_b, v_b, o */
  int32_t vt_qb, vt_kb, vt_vb, vt_o;
  int64_t rb_qb, rb_kb, rb_vb, rb_o;
  int lanes_qb, lanes_kb, lanes_vb, lanes_o;
  int64_t rpi_qb, rpi_kb, rpi_vb, rpi_o, tiles_kb, tiles_vb;
  float *qa;            /* n_tok x ql: q_a's rows, normalised in place */
  uint8_t *qaq;         /* their conversion for q_b */
  float *qo;            /* n_tok x dq: the query heads [nope | rope] */
  float *kv;            /* n_tok x dk: [latent | k_rope] */
  uint8_t *qnq;         /* n_tok x nh rows: each head's nope part converted for k_b */
  float *Q;             /* n_tok x nh x dk: the latent queries */
  float *L;             /* n_tok x nh x dk: the attention's latent outputs (the first kvl of each head) */
  uint8_t *lq;          /* n_tok x nh rows: the latents converted for v_b */
  float *V;             /* n_tok x nh x vd: the heads' values */
  uint8_t *vq;          /* n_tok rows: V converted for o */
  const uint8_t **act;  /* per worker pointer arrays of n_tok */
  float **yp;
  bl_attn_core core;
  bl_counter c_norm, c_q[2], c_in, c_prep, c_qaq, c_qb, c_rope, c_kbm, c_round, c_lq, c_vbm, c_vq, c_o, c_res;
} mla_job;

/* q_a's norm, the latent's norm, the key part's RoPE, and the cache row. */
static void prep_token(mla_job *j, int64_t t) {
  bl_cpu_ctx *c = j->c;
  if (j->ql) {
    float *q = j->qa + t * j->ql;
    double ss = 0;
    for (int64_t i = 0; i < j->ql; i++) ss += (double)q[i] * q[i];
    const float sc = 1.0f / sqrtf((float)(ss / j->ql) + j->eps);
    for (int64_t i = 0; i < j->ql; i++) q[i] = q[i] * sc * (j->qanw ? j->qanw[i] : 1.0f);
  }
  float *kv = j->kv + t * j->dk;
  double ss = 0;
  for (int64_t i = 0; i < j->kvl; i++) ss += (double)kv[i] * kv[i];
  const float sc = 1.0f / sqrtf((float)(ss / j->kvl) + j->eps);
  for (int64_t i = 0; i < j->kvl; i++) kv[i] = kv[i] * sc * (j->kvnw ? j->kvnw[i] : 1.0f);
  bl_rope_apply(&j->rope, kv + j->kvl, 1, (int)j->nr, j->pos[t]);
  uint16_t *row = c->kc + ((((size_t)j->layer * c->p.kv_slots + (size_t)j->seq[t]) * c->p.kv_ctx) + (size_t)j->pos[t]) * (size_t)j->dk;
  c->kern->to_f16(kv, row, j->dk);
}

/* The query heads' rope parts rotated, copied into the latent queries; the nope parts converted for k_b. */
static void rope_token(mla_job *j, int64_t t) {
  bl_cpu_ctx *c = j->c;
  float *q = j->qo + t * j->dq;
  bl_rope_apply(&j->rope, q + j->nope, (int)j->nh, (int)j->qh, j->pos[t]);
  for (int64_t h = 0; h < j->nh; h++) {
    memcpy(j->Q + (t * j->nh + h) * j->dk + j->kvl, q + h * j->qh + j->nope, sizeof(float) * (size_t)j->nr);
    if (!bl_exact(c)) {
      const bl_act_fn f = j->lanes_kb ? c->kern->act_q8k_lanes : c->kern->act[j->vt_kb];
      f(q + h * j->qh, j->qnq + (t * j->nh + h) * j->rb_kb, j->nope);
    }
  }
}

/* Per-head products: rows of slab h of w for every token (items of (head, row tile)). */
static void head_products(mla_job *j, int ith, bl_counter *ctr, const bl_tensor *w, int64_t rows, int64_t rpi, int64_t tiles, int lanes,
                          const float *xf, int64_t xs_head, const uint8_t *xq, int64_t rb, float *y, int64_t ys_tok, int64_t ys_head) {
  bl_cpu_ctx *c = j->c;
  const uint8_t **act = j->act + (int64_t)ith * j->n_tok;
  float **yp = j->yp + (int64_t)ith * j->n_tok;
  const int exact = bl_exact(c);
  int64_t cur = -1;
  bl_mm_spec m = {0};
  for (int64_t i; (i = bl_claim(ctr, 1)) < j->nh * tiles;) {
    const int64_t h = i / tiles, r0 = (i % tiles) * rpi, r1 = r0 + rpi < rows ? r0 + rpi : rows;
    if (h != cur) {
      cur = h;
      for (int64_t t = 0; t < j->n_tok; t++) {
        act[t] = exact ? (const uint8_t *)(xf + (t * j->nh + h) * xs_head) : xq + (t * j->nh + h) * rb;
        yp[t] = y + t * ys_tok + h * ys_head;
      }
      m = (bl_mm_spec){w, h, act, yp, j->n_tok, lanes};
    }
    bl_mm_rows(c, ith, &m, r0, r1);
  }
}

static void mla_task(void *arg, int ith, int nth) {
  mla_job *j = arg;
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
  /* q (or q_a) and kv_a as one item space */
  float *outs[2] = {j->ql ? j->qa : j->qo, j->kv};
  const int64_t strides[2] = {j->ql ? j->ql : j->dq, j->dk};
  int cur = -1;
  bl_mm_spec m = {0};
  for (int64_t i; (i = bl_claim(&j->c_in, 1)) < j->tiles_in[0] + j->tiles_in[1];) {
    const int mi = i >= j->tiles_in[0];
    const int64_t tile = mi ? i - j->tiles_in[0] : i;
    if (mi != cur) {
      cur = mi;
      for (int64_t t = 0; t < j->n_tok; t++) {
        act[t] = exact ? (const uint8_t *)(c->h + t * j->E) : j->qin[j->which[mi]] + t * j->rb[j->which[mi]];
        yp[t] = outs[mi] + t * strides[mi];
      }
      m = (bl_mm_spec){j->w_in[mi], 0, act, yp, j->n_tok, j->lanes[j->which[mi]]};
    }
    const int64_t r0 = tile * j->rpi_in, r1 = r0 + j->rpi_in < j->rows_in[mi] ? r0 + j->rpi_in : j->rows_in[mi];
    bl_mm_rows(c, ith, &m, r0, r1);
  }
  bl_pool_barrier_ith(c->pool, ith);
  for (int64_t t; (t = bl_claim(&j->c_prep, 1)) < j->n_tok;) prep_token(j, t);
  bl_pool_barrier_ith(c->pool, ith);
  if (j->ql) {
    if (!exact) {
      bl_job_quantize(c, &j->c_qaq, j->vt_qb, j->lanes_qb, j->qa, j->ql, j->n_tok, j->ql, j->qaq, j->rb_qb);
      bl_pool_barrier_ith(c->pool, ith);
    }
    for (int64_t t = 0; t < j->n_tok; t++) {
      act[t] = exact ? (const uint8_t *)(j->qa + t * j->ql) : j->qaq + t * j->rb_qb;
      yp[t] = j->qo + t * j->dq;
    }
    const bl_mm_spec mq = {j->qb, 0, act, yp, j->n_tok, j->lanes_qb};
    bl_job_matmul(c, ith, &j->c_qb, &mq, j->rpi_qb);
    bl_pool_barrier_ith(c->pool, ith);
  }
  for (int64_t t; (t = bl_claim(&j->c_rope, 1)) < j->n_tok;) rope_token(j, t);
  bl_pool_barrier_ith(c->pool, ith);
  /* the latent queries: q_nope of head h times k_b's slab h (kvl rows of nope) */
  head_products(j, ith, &j->c_kbm, j->kb, j->kvl, j->rpi_kb, j->tiles_kb, j->lanes_kb, j->qo, j->qh, j->qnq, j->rb_kb, j->Q,
                j->nh * j->dk, j->dk);
  bl_pool_barrier_ith(c->pool, ith);
  if (!exact) {
    for (int64_t t; (t = bl_claim(&j->c_round, 1)) < j->n_tok;) c->kern->round_f16(j->Q + t * j->nh * j->dk, j->nh * j->dk);
    bl_pool_barrier_ith(c->pool, ith);
  }
  bl_attn_core_run(&j->core, ith);
  bl_pool_barrier_ith(c->pool, ith);
  /* each head's value: its latent times v_b's slab h (vd rows of kvl) */
  if (!exact) {
    bl_job_quantize(c, &j->c_lq, j->vt_vb, j->lanes_vb, j->L, j->dk, j->n_tok * j->nh, j->kvl, j->lq, j->rb_vb);
    bl_pool_barrier_ith(c->pool, ith);
  }
  head_products(j, ith, &j->c_vbm, j->vb, j->vd, j->rpi_vb, j->tiles_vb, j->lanes_vb, j->L, j->dk, j->lq, j->rb_vb, j->V,
                j->nh * j->vd, j->vd);
  bl_pool_barrier_ith(c->pool, ith);
  if (!exact) {
    bl_job_quantize(c, &j->c_vq, j->vt_o, j->lanes_o, j->V, j->nh * j->vd, j->n_tok, j->nh * j->vd, j->vq, j->rb_o);
    bl_pool_barrier_ith(c->pool, ith);
  }
  for (int64_t t = 0; t < j->n_tok; t++) {
    act[t] = exact ? (const uint8_t *)(j->V + t * j->nh * j->vd) : j->vq + t * j->rb_o;
    yp[t] = c->ff_b + t * j->E; /* h stays the NORM's rows */
  }
  const bl_mm_spec mo = {j->o, 0, act, yp, j->n_tok, j->lanes_o};
  bl_job_matmul(c, ith, &j->c_o, &mo, j->rpi_o);
  bl_pool_barrier_ith(c->pool, ith);
  for (int64_t t; (t = bl_claim(&j->c_res, 1)) < j->n_tok;) {
    float *x = c->x + t * j->E;
    const float *y = c->ff_b + t * j->E;
    for (int64_t i = 0; i < j->E; i++) x[i] += y[i];
  }
}

static int64_t vec_ok(const bl_tensor *t, int64_t n, const char *what) {
  if (!t->data) return bl_fail(BL_E_INVAL, "latent attention: %s: missing", what);
  if (t->type != BL_F32 && t->type != BL_F16 && t->type != BL_BF16)
    return bl_fail(BL_E_UNSUPPORTED, "latent attention: %s: a vector of type %lld (F32, F16 or BF16)", what, (long long)t->type);
  if (t->ne[0] != n) return bl_fail(BL_E_INVAL, "latent attention: %s: %lld elements, %lld expected", what, (long long)t->ne[0], (long long)n);
  return BL_OK;
}

static int64_t mat_ok(const bl_tensor *t, int64_t ne0, int64_t ne1, int64_t ne2, const char *what) {
  if (!t->data) return bl_fail(BL_E_INVAL, "latent attention: %s: missing", what);
  if (t->ne[0] != ne0 || t->ne[1] != ne1 || (ne2 > 1 && t->ne[2] != ne2))
    return bl_fail(BL_E_INVAL, "latent attention: %s is %lld x %lld x %lld, %lld x %lld x %lld expected", what, (long long)t->ne[0],
                   (long long)t->ne[1], (long long)t->ne[2], (long long)ne0, (long long)ne1, (long long)ne2);
  return BL_OK;
}

int64_t bl_mla_check(const bl_ctx_params *p, const bl_op *op) {
  const bl_mla_params *b = BL_OP_PARAMS(op, bl_mla_params);
  if (!b) return bl_fail(BL_E_INVAL, "latent attention: no parameters");
  const int64_t nh = b->n_head, nope = b->nope, nr = b->rope.n_rot, kvl = b->kv_lora, vd = b->v_dim, E = p->n_embd;
  if (nh <= 0 || nope <= 0 || kvl <= 0 || vd <= 0 || nr <= 0 || nr % 2 || kvl + nr > 1024 || nope + nr > 1024)
    return bl_fail(BL_E_INVAL, "latent attention: bad sizes (n_head %lld, nope %lld, rope %lld, kv_lora %lld, v %lld)", (long long)nh,
                   (long long)nope, (long long)nr, (long long)kvl, (long long)vd);
  if (b->rope.type != BL_ROPE_NORMAL && b->rope.type != BL_ROPE_NEOX)
    return bl_fail(BL_E_UNSUPPORTED, "latent attention: RoPE type %lld", (long long)b->rope.type);
  if (b->kv_layer < 0 || b->kv_layer >= p->kv_layers) return bl_fail(BL_E_INVAL, "latent attention: KV layer %lld out of range", (long long)b->kv_layer);
  if (p->kv_k_dim != kvl + nr)
    return bl_fail(BL_E_INVAL, "latent attention: the context's KV rows hold %lld values, kv_lora + rope is %lld", (long long)p->kv_k_dim,
                   (long long)(kvl + nr));
  if (nh * vd > p->max_q_dim) return bl_fail(BL_E_INVAL, "latent attention: %lld x %lld values a token is more than the context's %lld", (long long)nh, (long long)vd, (long long)p->max_q_dim);
  const int64_t dq = nh * (nope + nr);
  int64_t s;
  const bl_tensor *q = bl_op_t(op, BL_MLA_Q), *qa = bl_op_t(op, BL_MLA_Q_A);
  if (q->data && qa->data) return bl_fail(BL_E_INVAL, "latent attention: both a plain q and q's LoRA");
  if (q->data) {
    if ((s = mat_ok(q, E, dq, 1, "q"))) return s;
    if (bl_op_t(op, BL_MLA_Q_B)->data || bl_op_t(op, BL_MLA_Q_A_NORM)->data) return bl_fail(BL_E_INVAL, "latent attention: q_b or q_a_norm without q_a");
  } else {
    const int64_t ql = qa->ne[1];
    if ((s = mat_ok(qa, E, ql, 1, "q_a")) || (s = vec_ok(bl_op_t(op, BL_MLA_Q_A_NORM), ql, "q_a norm")) ||
        (s = mat_ok(bl_op_t(op, BL_MLA_Q_B), ql, dq, 1, "q_b")))
      return s;
  }
  if ((s = mat_ok(bl_op_t(op, BL_MLA_KV_A), E, kvl + nr, 1, "kv_a")) || (s = vec_ok(bl_op_t(op, BL_MLA_KV_A_NORM), kvl, "kv_a norm")) ||
      (s = mat_ok(bl_op_t(op, BL_MLA_K_B), nope, kvl, nh, "k_b")) || (s = mat_ok(bl_op_t(op, BL_MLA_V_B), kvl, vd, nh, "v_b")) ||
      (s = mat_ok(bl_op_t(op, BL_MLA_O), nh * vd, E, 1, "output")))
    return s;
  return BL_OK;
}

static int64_t opt_vec(const bl_tensor *t, float *dst, int64_t n, const float **out) {
  *out = NULL;
  if (!t->data) return BL_OK;
  const int64_t s = bl_weight_f32(t, dst, n);
  if (s == BL_OK) *out = dst;
  return s;
}

/* The smallest divisor of n that is at least want (n itself when none is smaller). */
static int64_t divisor_at_least(int64_t n, int64_t want) {
  for (int64_t d = want < 1 ? 1 : want; d < n; d++)
    if (n % d == 0) return d;
  return n;
}

int64_t bl_mla_op(bl_cpu_ctx *c, const bl_op *norm, const bl_op *op, const bl_batch *batch) {
  int64_t s;
  if ((s = bl_mla_check(&c->p, op))) return s;
  const bl_mla_params *b = BL_OP_PARAMS(op, bl_mla_params);
  const int64_t n_tok = batch->n_tokens, E = c->p.n_embd;
  const int32_t *pos = (const int32_t *)(uintptr_t)batch->pos;
  const int32_t *seq = (const int32_t *)(uintptr_t)batch->seq;
  int64_t max_pos = 0;
  for (int64_t t = 0; t < n_tok; t++) {
    if (pos[t] < 0 || pos[t] >= c->p.kv_ctx) return bl_fail(BL_E_INVAL, "latent attention: position %d outside the context of %lld", pos[t], (long long)c->p.kv_ctx);
    if (seq[t] < 0 || seq[t] >= c->p.kv_slots) return bl_fail(BL_E_INVAL, "latent attention: sequence %d outside %lld slots", seq[t], (long long)c->p.kv_slots);
    if (pos[t] > max_pos) max_pos = pos[t];
  }
  mla_job j;
  memset(&j, 0, sizeof j);
  j.c = c;
  j.n_tok = n_tok;
  j.E = E;
  j.nh = b->n_head;
  j.nope = b->nope;
  j.nr = b->rope.n_rot;
  j.kvl = b->kv_lora;
  j.vd = b->v_dim;
  j.qh = j.nope + j.nr;
  j.dq = j.nh * j.qh;
  j.dk = j.kvl + j.nr;
  j.layer = b->kv_layer;
  j.pos = pos;
  j.seq = seq;
  j.eps = (float)b->eps;
  j.has_norm = norm != NULL;
  if (norm) j.norm_eps = (float)BL_OP_PARAMS(norm, bl_norm_params)->eps;
  bl_rope_init(&j.rope, &b->rope);
  const bl_tensor *qa = bl_op_t(op, BL_MLA_Q_A);
  j.ql = qa->data ? qa->ne[1] : 0;
  j.w_in[0] = j.ql ? qa : bl_op_t(op, BL_MLA_Q);
  j.w_in[1] = bl_op_t(op, BL_MLA_KV_A);
  j.qb = bl_op_t(op, BL_MLA_Q_B);
  j.kb = bl_op_t(op, BL_MLA_K_B);
  j.vb = bl_op_t(op, BL_MLA_V_B);
  j.o = bl_op_t(op, BL_MLA_O);
  if ((s = bl_check_weight(c, j.w_in[0], j.ql ? "latent attention q_a" : "latent attention q")) ||
      (s = bl_check_weight(c, j.w_in[1], "latent attention kv_a")) || (j.ql && (s = bl_check_weight(c, j.qb, "latent attention q_b"))) ||
      (s = bl_check_weight(c, j.kb, "latent attention k_b")) || (s = bl_check_weight(c, j.vb, "latent attention v_b")) ||
      (s = bl_check_weight(c, j.o, "latent attention output")))
    return s;
  const int nth = bl_pool_active(c->pool);
  /* the input's activation types */
  for (int mi = 0; mi < 2; mi++) {
    const int32_t vt = bl_act_type(c, (int32_t)j.w_in[mi]->type);
    int f = -1;
    for (int i = 0; i < j.n_vt; i++)
      if (j.vt[i] == vt) f = i;
    if (f < 0) {
      f = j.n_vt++;
      j.vt[f] = vt;
      j.rb[f] = bl_row_bytes(vt, E);
    }
    j.which[mi] = f;
    j.rows_in[mi] = j.w_in[mi]->ne[1];
  }
  for (int i = 0; i < j.n_vt; i++) {
    j.lanes[i] = 1;
    for (int mi = 0; mi < 2; mi++)
      if (j.which[mi] == i && !bl_lanes(c, j.w_in[mi], n_tok)) j.lanes[i] = 0;
  }
  j.rpi_in = bl_rows_per_item(j.rows_in[0] + j.rows_in[1], n_tok, nth);
  for (int mi = 0; mi < 2; mi++) j.tiles_in[mi] = (j.rows_in[mi] + j.rpi_in - 1) / j.rpi_in;
#define ACT(w, n, vt, rb, lanes, na)                                                      \
  do {                                                                                    \
    vt = bl_act_type(c, (int32_t)(w)->type);                                              \
    rb = bl_row_bytes(vt, n);                                                             \
    lanes = bl_lanes(c, w, na);                                                           \
    if (rb < 0) return bl_fail(BL_E_UNSUPPORTED, "latent attention: cannot convert rows of %lld for weight type %lld", (long long)(n), (long long)(w)->type); \
  } while (0)
  if (j.ql) ACT(j.qb, j.ql, j.vt_qb, j.rb_qb, j.lanes_qb, n_tok);
  ACT(j.kb, j.nope, j.vt_kb, j.rb_kb, j.lanes_kb, n_tok);
  ACT(j.vb, j.kvl, j.vt_vb, j.rb_vb, j.lanes_vb, n_tok);
  ACT(j.o, j.nh * j.vd, j.vt_o, j.rb_o, j.lanes_o, n_tok);
#undef ACT
  j.rpi_qb = bl_rows_per_item(j.dq, n_tok, nth);
  j.rpi_kb = bl_rows_per_item(j.kvl * j.nh, n_tok, nth);
  j.rpi_vb = bl_rows_per_item(j.vd * j.nh, n_tok, nth);
  j.rpi_o = bl_rows_per_item(E, n_tok, nth);
  j.tiles_kb = (j.kvl + j.rpi_kb - 1) / j.rpi_kb;
  j.tiles_vb = (j.vd + j.rpi_vb - 1) / j.rpi_vb;
  /* the attention: MQA over the latent rows; a one-token step's heads in slices for the threads (at
   * least 8 heads a slice), a prompt's in tiles of up to 128 query rows */
  bl_attn_core *ac = &j.core;
  ac->c = c;
  ac->n_tok = n_tok;
  ac->hd = j.dk;
  ac->nh = j.nh;
  ac->nkv = 1;
  ac->group = j.nh;
  const int64_t want = (2 * nth + n_tok - 1) / n_tok, most = j.nh >= 8 ? j.nh / 8 : 1;
  ac->gsub = j.nh / divisor_at_least(j.nh, want < most ? want : most);
  ac->qs = ac->os = j.nh * j.dk;
  ac->kd = j.dk;
  ac->kb = ac->vb = c->kc + (size_t)j.layer * (size_t)c->p.kv_slots * (size_t)c->p.kv_ctx * (size_t)j.dk;
  ac->pos = pos;
  ac->seq = seq;
  ac->scale = b->scale > 0 ? (float)b->scale : 1.0f / sqrtf((float)j.qh);
  size_t core_sz[3];
  const int64_t qtile = 128 / ac->gsub;
  bl_attn_core_plan(ac, qtile < 1 ? 1 : qtile > BL_ATTN_QTILE ? BL_ATTN_QTILE : qtile, max_pos, nth, core_sz);
  const int exact = bl_exact(c);
  const size_t F = sizeof(float), T = (size_t)n_tok, H = (size_t)j.nh;
  const size_t sz[] = {
      exact ? 0 : (size_t)j.rb[0] * T,
      exact || j.n_vt < 2 ? 0 : (size_t)j.rb[1] * T,
      F * T * (size_t)j.ql,
      exact || !j.ql ? 0 : (size_t)j.rb_qb * T,
      F * T * (size_t)j.dq,
      F * T * (size_t)j.dk,
      exact ? 0 : (size_t)j.rb_kb * T * H,
      F * T * H * (size_t)j.dk,
      F * T * H * (size_t)j.dk,
      exact ? 0 : (size_t)j.rb_vb * T * H,
      F * T * H * (size_t)j.vd,
      exact ? 0 : (size_t)j.rb_o * T,
      sizeof(void *) * (size_t)nth * T,
      sizeof(void *) * (size_t)nth * T,
      F * (size_t)(E + j.ql + j.kvl),
      core_sz[0], core_sz[1], core_sz[2],
  };
  enum { NB = sizeof sz / sizeof sz[0] };
  size_t total = 0;
  for (int i = 0; i < NB; i++) total += (sz[i] + 63) & ~(size_t)63;
  uint8_t *p = bl_cpu_scratch(c, total);
  if (!p) return bl_fail(BL_E_NOMEM, "latent attention: cannot allocate %zu MiB of work space", total >> 20);
  void *out[NB];
  for (int i = 0; i < NB; i++) {
    out[i] = p;
    p += (sz[i] + 63) & ~(size_t)63;
  }
  j.qin[0] = out[0];
  j.qin[1] = out[1];
  j.qa = out[2];
  j.qaq = out[3];
  j.qo = out[4];
  j.kv = out[5];
  j.qnq = out[6];
  j.Q = out[7];
  j.L = out[8];
  j.lq = out[9];
  j.V = out[10];
  j.vq = out[11];
  j.act = out[12];
  j.yp = out[13];
  float *vec = out[14];
  ac->q = j.Q;
  ac->out = j.L;
  bl_attn_core_bind(ac, out[15], out[16], out[17]);
  if (norm && (s = opt_vec(bl_op_t(norm, BL_NORM_WEIGHT), vec, E, &j.normw))) return s;
  if (j.ql && (s = opt_vec(bl_op_t(op, BL_MLA_Q_A_NORM), vec + E, j.ql, &j.qanw))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_MLA_KV_A_NORM), vec + E + j.ql, j.kvl, &j.kvnw))) return s;
  const int64_t t0 = c->prof ? bl_prof_now() : 0;
  bl_pool_run(c->pool, mla_task, &j);
  bl_prof_add(c, BL_PROF_ATTN, t0);
  return BL_OK;
}
