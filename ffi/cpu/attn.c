/* bloomery CPU library: the ATTN op (with a NORM fused in) as one pool job - rmsnorm, Q/K/V projections (the
 * input converted once per activation type, the three matrices one item space), biases,
 * per-head Q/K norm, RoPE, the f16 KV cache write, causal GQA attention over the slot's cache
 * (items of (KV head, tile of up to 16 query tokens of one sequence): each sub-tile of 64
 * positions converted once for the tile's tokens and the query heads sharing the KV head; online
 * softmax over chunks of 512 positions merged in a fixed order - for few tokens and long contexts
 * the chunks are items of their own - so results never depend on the batch or the threads),
 * output projection (and its bias) and residual. Sliding-window layers take items of (token, KV head)
 * over the chunks their window reaches; attention sinks (a logit per head) join every softmax's
 * denominator in the merge. Queries are rounded to f16 before the K products, as ggml does. The exact path
 * keeps the reference loops (one pass, double sums of the softmax). */
#include "ctx.h"
#include "common.h"
#include "rope.h"
#include "simd_attn.h"
#include <math.h>
#include <string.h>

#define SUB BL_ATTN_SUB /* positions per sub-tile of a chunk */
#define CHUNK 512  /* positions per chunk: the unit of the softmax merge, whatever the batch or threads */
#define QTILE 16   /* query tokens of one sequence that share each converted sub-tile */

static inline uint16_t *kv_at(const bl_cpu_ctx *c, uint16_t *base, int64_t layer, int64_t slot, int64_t pos, int64_t dim) {
  return base + (((layer * c->p.kv_slots + slot) * c->p.kv_ctx) + pos) * dim;
}

typedef struct {
  bl_cpu_ctx *c;
  const bl_batch *batch;
  int64_t n_tok, E, hd, nh, nkv, qd, kd, group;
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
  /* attention */
  int64_t n_chunk;        /* chunks of the longest context in the batch */
  int split;              /* chunks are items of their own (few tokens), merged in a phase after */
  int64_t n_qt;           /* tiles of query tokens (runs of one sequence) sharing each sub-tile */
  int32_t *qt;            /* their first tokens, and n_tok at the end */
  float *part;            /* split: n_tok x nkv x n_chunk x group x (hd + 2): m, l, acc */
  float *wk;              /* per worker: the sub-tile's work space, then n_chunk x group x (hd + 2) states */
  int64_t wk_stride;
  /* output projection */
  int32_t vt_o;
  int64_t rb_o, rpi_o;
  uint8_t *qo;
  const uint8_t **act;  /* per worker pointer arrays */
  float **yp;
  bl_counter c_norm, c_q[3], c_mm, c_prep, c_att, c_merge, c_qo, c_o, c_res;
} attn_job;

static void prep_token(attn_job *j, int64_t t) {
  bl_cpu_ctx *c = j->c;
  const int64_t hd = j->hd;
  float *q = c->q + t * j->qd, *k = c->k + t * j->kd, *v = c->v + t * j->kd;
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

/* The first position token t sees: its window's, or 0. */
static inline int64_t first_pos(const attn_job *j, int64_t t) {
  const int64_t lo = j->window > 0 ? (int64_t)j->pos[t] + 1 - j->window : 0;
  return lo > 0 ? lo : 0;
}

/* The reference loop of the exact path: one (token, head), all positions. */
static void attn_exact(attn_job *j, int ith, int64_t t, int64_t h) {
  bl_cpu_ctx *c = j->c;
  const int64_t hd = j->hd, g = h / j->group, n = (int64_t)j->pos[t] + 1, lo = first_pos(j, t);
  float *sc = j->wk + (int64_t)ith * j->wk_stride; /* kv_ctx floats in the exact layout */
  float acc[1024];
  const float *q = c->q + t * j->qd + h * hd;
  const uint16_t *kb = kv_at(c, c->kc, j->layer, j->seq[t], 0, j->kd) + g * hd;
  const uint16_t *vb = kv_at(c, c->vc, j->layer, j->seq[t], 0, j->kd) + g * hd;
  float mx = j->sinks ? j->sinks[h] : -INFINITY;
  for (int64_t p = lo; p < n; p++) {
    const uint16_t *kr = kb + p * j->kd;
    float s = 0;
    for (int64_t i = 0; i < hd; i++) s += q[i] * bl_fp16_to_f32(kr[i]);
    s *= j->scale;
    sc[p] = s;
    if (s > mx) mx = s;
  }
  double sum = j->sinks ? expf(j->sinks[h] - mx) : 0;
  for (int64_t p = lo; p < n; p++) {
    sc[p] = expf(sc[p] - mx);
    sum += sc[p];
  }
  const float inv = (float)(1.0 / sum);
  for (int64_t i = 0; i < hd; i++) acc[i] = 0;
  for (int64_t p = lo; p < n; p++) {
    const uint16_t *vr = vb + p * j->kd;
    const float pw = sc[p] * inv;
    for (int64_t i = 0; i < hd; i++) acc[i] += pw * bl_fp16_to_f32(vr[i]);
  }
  memcpy(c->att + t * j->qd + h * hd, acc, sizeof(float) * (size_t)hd);
}

static void merge_head(attn_job *j, int64_t t, int64_t h, const float *pp, int64_t n_ch, int64_t stride);
static inline int64_t n_chunks(const attn_job *j, int64_t t);


/* Chunk ch (positions [ch * CHUNK, ...) up to the token's own) of token t against KV head g, for
 * every query head of the group: the online-softmax state (m, l, acc[hd]) of each head, written
 * to out[hh * (hd + 2)], by the path's attention sub-tiles of SUB positions. */
static void attn_chunk(attn_job *j, float *wk, int64_t t, int64_t g, int64_t ch, float *out) {
  bl_cpu_ctx *c = j->c;
  const int64_t hd = j->hd, G = j->group, n = (int64_t)j->pos[t] + 1, sts = hd + 2, lo = first_pos(j, t);
  const int64_t p0 = ch * CHUNK > lo ? ch * CHUNK : lo, p1 = (ch + 1) * CHUNK < n ? (ch + 1) * CHUNK : n;
  for (int64_t h = 0; h < G; h++) {
    out[h * sts] = -INFINITY;
    out[h * sts + 1] = 0;
    memset(out + h * sts + 2, 0, sizeof(float) * (size_t)hd);
  }
  const uint16_t *kb = kv_at(c, c->kc, j->layer, j->seq[t], 0, j->kd) + g * hd;
  const uint16_t *vb = kv_at(c, c->vc, j->layer, j->seq[t], 0, j->kd) + g * hd;
  const float *q = c->q + t * j->qd + g * G * hd;
  for (int64_t b0 = p0; b0 < p1; b0 += SUB) {
    const int nb = (int)(p1 - b0 < SUB ? p1 - b0 : SUB);
    c->kern->attn_prep(kb + b0 * j->kd, vb + b0 * j->kd, j->kd, nb, (int)hd, wk);
    c->kern->attn_heads(q, hd, (int)G, kb + b0 * j->kd, vb + b0 * j->kd, j->kd, nb, (int)hd, j->scale, out, wk);
  }
}

/* Tokens [t0, t1) of one sequence against KV head g: each sub-tile converted once for all of
 * them. Per token the same chunks, sub-tiles and position counts as attn_chunk, so the same bits. */
static void attn_tile(attn_job *j, int ith, int64_t g, int64_t t0, int64_t t1) {
  bl_cpu_ctx *c = j->c;
  const bl_kernels *kn = c->kern;
  const int64_t hd = j->hd, G = j->group, sts = hd + 2, per_tok = j->n_chunk * G * sts;
  float *wk = j->wk + (int64_t)ith * j->wk_stride;
  float *st = wk + bl_attn_work(hd);
  int64_t maxn = 0;
  for (int64_t t = t0; t < t1; t++)
    if (j->pos[t] + 1 > maxn) maxn = j->pos[t] + 1;
  const uint16_t *kb = kv_at(c, c->kc, j->layer, j->seq[t0], 0, j->kd) + g * hd;
  const uint16_t *vb = kv_at(c, c->vc, j->layer, j->seq[t0], 0, j->kd) + g * hd;
  for (int64_t ch = 0; ch * CHUNK < maxn; ch++) {
    const int64_t cend = (ch + 1) * CHUNK;
    for (int64_t t = t0; t < t1; t++) {
      if (j->pos[t] + 1 <= ch * CHUNK) continue;
      float *o = st + (t - t0) * per_tok + ch * G * sts;
      for (int64_t h = 0; h < G; h++) {
        o[h * sts] = -INFINITY;
        o[h * sts + 1] = 0;
        memset(o + h * sts + 2, 0, sizeof(float) * (size_t)hd);
      }
    }
    for (int64_t b0 = ch * CHUNK; b0 < cend && b0 < maxn; b0 += SUB) {
      const int64_t lim = cend < maxn ? cend : maxn;
      const int nbm = (int)(lim - b0 < SUB ? lim - b0 : SUB);
      kn->attn_prep(kb + b0 * j->kd, vb + b0 * j->kd, j->kd, nbm, (int)hd, wk);
      for (int64_t t = t0; t < t1; t++) {
        const int64_t n = (int64_t)j->pos[t] + 1, p1 = cend < n ? cend : n;
        if (p1 <= b0) continue;
        const int nb = (int)(p1 - b0 < SUB ? p1 - b0 : SUB);
        kn->attn_heads(c->q + t * j->qd + g * G * hd, hd, (int)G, kb + b0 * j->kd, vb + b0 * j->kd, j->kd, nb, (int)hd, j->scale,
                       st + (t - t0) * per_tok + ch * G * sts, wk);
      }
    }
  }
  for (int64_t t = t0; t < t1; t++)
    for (int64_t hh = 0; hh < G; hh++)
      merge_head(j, t, g * G + hh, st + (t - t0) * per_tok + hh * sts, n_chunks(j, t), G * sts);
}

/* att row of (t, h) from the states of its n_ch chunks (stride `stride` floats between chunks). */
static void merge_head(attn_job *j, int64_t t, int64_t h, const float *pp, int64_t n_ch, int64_t stride) {
  const int64_t hd = j->hd;
  float M = -INFINITY;
  for (int64_t ch = 0; ch < n_ch; ch++)
    if (pp[ch * stride + 1] > 0 && pp[ch * stride] > M) M = pp[ch * stride];
  if (j->sinks && j->sinks[h] > M) M = j->sinks[h]; /* the sink joins the denominator */
  float *o = j->c->att + t * j->qd + h * hd;
  memset(o, 0, sizeof(float) * (size_t)hd);
  double L = 0;
  for (int64_t ch = 0; ch < n_ch; ch++) {
    const float *m = pp + ch * stride;
    if (m[1] <= 0) continue;
    const float a = expf(m[0] - M);
    L += (double)a * m[1];
    j->c->kern->axpy_f32(a, m + 2, o, hd);
  }
  if (j->sinks) L += expf(j->sinks[h] - M);
  j->c->kern->scale_f32(L > 0 ? (float)(1.0 / L) : 0.0f, o, hd);
}

static inline int64_t n_chunks(const attn_job *j, int64_t t) { return ((int64_t)j->pos[t] + CHUNK) / CHUNK; }

/* A sliding-window item: token t against KV head g, the chunks its window reaches (from the one
 * holding its first position), merged for each query head of the group. */
static void attn_window_item(attn_job *j, int ith, int64_t t, int64_t g) {
  const int64_t G = j->group, sts = j->hd + 2, ch0 = first_pos(j, t) / CHUNK, n_ch = n_chunks(j, t) - ch0;
  float *wk = j->wk + (int64_t)ith * j->wk_stride, *st = wk + bl_attn_work(j->hd);
  for (int64_t ch = 0; ch < n_ch; ch++) attn_chunk(j, wk, t, g, ch0 + ch, st + ch * G * sts);
  for (int64_t hh = 0; hh < G; hh++) merge_head(j, t, g * G + hh, st + hh * sts, n_ch, G * sts);
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
  const int64_t dims[3] = {j->qd, j->kd, j->kd};
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
  if (exact) {
    for (int64_t i; (i = bl_claim(&j->c_att, 1)) < j->n_tok * j->nh;) attn_exact(j, ith, i / j->nh, i % j->nh);
  } else if (j->window) {
    for (int64_t i; (i = bl_claim(&j->c_att, 1)) < j->n_tok * j->nkv;) attn_window_item(j, ith, i / j->nkv, i % j->nkv);
  } else if (!j->split) {
    /* items of (KV head, tile of query tokens), the tiles of the latest tokens (the longest) first */
    const int64_t items = j->n_qt * j->nkv;
    for (int64_t i; (i = bl_claim(&j->c_att, 1)) < items;) {
      const int64_t r = items - 1 - i, q = r / j->nkv;
      attn_tile(j, ith, r % j->nkv, j->qt[q], j->qt[q + 1]);
    }
  } else {
    /* few tokens, long contexts: every chunk an item, the same states merged the same way */
    const int64_t G = j->group, sts = j->hd + 2, per_tok = j->nkv * j->n_chunk;
    float *wk = j->wk + (int64_t)ith * j->wk_stride;
    for (int64_t i; (i = bl_claim(&j->c_att, 1)) < j->n_tok * per_tok;) {
      const int64_t t = i / per_tok, g = (i % per_tok) / j->n_chunk, ch = i % j->n_chunk;
      if (ch < n_chunks(j, t)) attn_chunk(j, wk, t, g, ch, j->part + ((t * j->nkv + g) * j->n_chunk + ch) * G * sts);
    }
    bl_pool_barrier_ith(c->pool, ith);
    for (int64_t i; (i = bl_claim(&j->c_merge, 1)) < j->n_tok * j->nh;) {
      const int64_t t = i / j->nh, h = i % j->nh, g = h / G, hh = h % G;
      merge_head(j, t, h, j->part + ((t * j->nkv + g) * j->n_chunk) * G * sts + hh * sts, n_chunks(j, t), G * sts);
    }
  }
  bl_pool_barrier_ith(c->pool, ith);
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
  if (nkv * hd != p->kv_k_dim || nh * hd > p->max_q_dim) return bl_fail(BL_E_INVAL, "attention: head dims do not match the context");
  if (b->window < 0) return bl_fail(BL_E_INVAL, "attention: sliding window %lld", (long long)b->window);
  if (b->rope.type != BL_ROPE_NONE && b->rope.type != BL_ROPE_NORMAL && b->rope.type != BL_ROPE_NEOX)
    return bl_fail(BL_E_UNSUPPORTED, "attention: RoPE type %lld", (long long)b->rope.type);
  if (b->rope.type != BL_ROPE_NONE && (b->rope.n_rot <= 0 || b->rope.n_rot > hd || b->rope.n_rot % 2))
    return bl_fail(BL_E_INVAL, "attention: %lld rotated dims of %lld", (long long)b->rope.n_rot, (long long)hd);
  const int64_t rows[3] = {nh * hd, nkv * hd, nkv * hd};
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
  j.pos = pos;
  j.seq = seq;
  j.eps = (float)b->eps;
  j.scale = b->scale > 0 ? (float)b->scale : 1.0f / sqrtf((float)hd);
  const bl_tensor *ws[3] = {bl_op_t(op, BL_ATTN_Q), bl_op_t(op, BL_ATTN_K), bl_op_t(op, BL_ATTN_V)};
  const char *names[3] = {"attention q", "attention k", "attention v"};
  const int64_t rows[3] = {j.qd, j.kd, j.kd};
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
  j.rpi = bl_rows_per_item(j.qd + 2 * j.kd, n_tok, nth);
  for (int mi = 0; mi < 3; mi++) j.tiles[mi] = (rows[mi] + j.rpi - 1) / j.rpi;
  j.vt_o = bl_act_type(c, (int32_t)j.o->type);
  j.rb_o = bl_row_bytes(j.vt_o, j.qd);
  j.lanes_o = bl_lanes(c, j.o, n_tok);
  j.rpi_o = bl_rows_per_item(E, n_tok, nth);
  /* chunks of CHUNK positions; few (token, KV head) items for the threads: chunks become items */
  j.n_chunk = (max_pos + CHUNK) / CHUNK;
  j.split = !bl_exact(c) && !j.window && j.n_chunk > 1 && n_tok * nkv < 2 * nth;
  j.wk_stride = bl_exact(c) ? c->p.kv_ctx : bl_attn_work(hd) + QTILE * j.n_chunk * j.group * (hd + 2);
  j.wk_stride = (j.wk_stride + 15) & ~(int64_t)15;
  const size_t sz[] = {
      (size_t)(j.n_vt > 0 ? j.rb[0] * n_tok : 0), (size_t)(j.n_vt > 1 ? j.rb[1] * n_tok : 0),
      (size_t)(j.n_vt > 2 ? j.rb[2] * n_tok : 0), (size_t)(j.rb_o * n_tok),
      sizeof(float) * (size_t)(j.split ? n_tok * nh * j.n_chunk * (hd + 2) : 0),
      sizeof(float) * (size_t)(nth * j.wk_stride), sizeof(void *) * (size_t)(nth * n_tok),
      sizeof(void *) * (size_t)(nth * n_tok),
      sizeof(float) * (size_t)(2 * E + 2 * hd + j.qd + 2 * j.kd + nh), /* norm, q/k norm, bias and sink vectors */
      sizeof(int32_t) * (size_t)(n_tok + 1),                 /* query tiles */
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
  j.part = out[4];
  j.wk = out[5];
  j.act = out[6];
  j.yp = out[7];
  float *vec = out[8];
  j.qt = out[9];
  j.n_qt = 0;
  for (int64_t t = 0; t < n_tok;) {
    int64_t e = t + 1;
    while (e < n_tok && e - t < QTILE && seq[e] == seq[t]) e++;
    j.qt[j.n_qt++] = (int32_t)t;
    t = e;
  }
  j.qt[j.n_qt] = (int32_t)n_tok;
  if (norm && (s = opt_vec(bl_op_t(norm, BL_NORM_WEIGHT), vec, E, &j.normw))) return s;
  float *v = vec + E;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_Q_NORM), v, hd, &j.qn))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_K_NORM), v += hd, hd, &j.kn))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_BQ), v += hd, j.qd, &j.bq))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_BK), v += j.qd, j.kd, &j.bk))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_BV), v += j.kd, j.kd, &j.bv))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_BO), v += j.kd, E, &j.bo))) return s;
  if ((s = opt_vec(bl_op_t(op, BL_ATTN_SINKS), v += E, nh, &j.sinks))) return s;
  const int64_t t0 = c->prof ? bl_prof_now() : 0;
  bl_pool_run(c->pool, attn_task, &j);
  bl_prof_add(c, BL_PROF_ATTN, t0);
  return BL_OK;
}
