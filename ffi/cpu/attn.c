/* bloomery CPU library: the attention block (rmsnorm, Q/K/V projections, per-head Q/K norm,
 * RoPE, f16 KV cache write, causal GQA attention over the slot's cache, output projection,
 * residual). Queries are rounded to f16 before the K dot products, as ggml does. */
#include "ctx.h"
#include "common.h"
#include "rope.h"
#include <math.h>
#include <string.h>

static inline uint16_t *kv_at(const bl_cpu_ctx *c, uint16_t *base, int64_t layer, int64_t slot, int64_t pos, int64_t dim) {
  return base + (((layer * c->p.kv_slots + slot) * c->p.kv_ctx) + pos) * dim;
}

typedef struct {
  bl_cpu_ctx *c;
  const bl_block *b;
  const bl_batch *batch;
  const float *qn, *kn; /* per-head norm weights or NULL */
  bl_rope rope;
  float eps;
} prep_job;

/* Q/K norm, RoPE, and the KV cache write for each token. */
static void prep_task(void *a, int ith, int nth) {
  prep_job *j = a;
  bl_cpu_ctx *c = j->c;
  const bl_block *b = j->b;
  int hd = (int)b->head_dim, nh = (int)b->n_head, nkv = (int)b->n_head_kv;
  const int32_t *pos = (const int32_t *)(uintptr_t)j->batch->pos;
  const int32_t *seq = (const int32_t *)(uintptr_t)j->batch->seq;
  int64_t qd = (int64_t)nh * hd, kd = (int64_t)nkv * hd;
  int64_t lo, hi;
  bl_split(j->batch->n_tokens, ith, nth, &lo, &hi);
  for (int64_t t = lo; t < hi; t++) {
    float *q = c->q + t * qd, *k = c->k + t * kd, *v = c->v + t * kd;
    for (int pass = 0; pass < 2; pass++) {
      const float *w = pass ? j->kn : j->qn;
      float *base = pass ? k : q;
      int heads = pass ? nkv : nh;
      if (!w) continue;
      for (int h = 0; h < heads; h++) {
        float *x = base + (int64_t)h * hd;
        double ss = 0;
        for (int i = 0; i < hd; i++) ss += (double)x[i] * x[i];
        float sc = 1.0f / sqrtf((float)(ss / hd) + j->eps);
        for (int i = 0; i < hd; i++) x[i] = x[i] * sc * w[i];
      }
    }
    if (j->rope.n_rot > 0) {
      bl_rope_apply(&j->rope, q, nh, hd, pos[t]);
      bl_rope_apply(&j->rope, k, nkv, hd, pos[t]);
    }
    uint16_t *kc = kv_at(c, c->kc, b->layer, seq[t], pos[t], kd);
    uint16_t *vc = kv_at(c, c->vc, b->layer, seq[t], pos[t], kd);
    for (int64_t i = 0; i < kd; i++) {
      kc[i] = bl_f32_to_fp16(k[i]);
      vc[i] = bl_f32_to_fp16(v[i]);
    }
  }
}

typedef struct {
  bl_cpu_ctx *c;
  const bl_block *b;
  const bl_batch *batch;
  float scale;
  int exact;
} attn_job;

static void attn_task(void *a, int ith, int nth) {
  attn_job *j = a;
  bl_cpu_ctx *c = j->c;
  const bl_block *b = j->b;
  int hd = (int)b->head_dim, nh = (int)b->n_head, nkv = (int)b->n_head_kv;
  int group = nh / nkv;
  int64_t kd = (int64_t)nkv * hd, qd = (int64_t)nh * hd;
  const int32_t *pos = (const int32_t *)(uintptr_t)j->batch->pos;
  const int32_t *seq = (const int32_t *)(uintptr_t)j->batch->seq;
  float *sc = c->scores + (int64_t)ith * c->p.kv_ctx;
  float qh[1024], acc[1024];
  int64_t lo, hi;
  bl_split(j->batch->n_tokens * nh, ith, nth, &lo, &hi);
  for (int64_t w = lo; w < hi; w++) {
    int64_t t = w / nh;
    int h = (int)(w % nh), g = h / group;
    const float *q = c->q + t * qd + (int64_t)h * hd;
    if (j->exact) memcpy(qh, q, sizeof(float) * hd);
    else for (int i = 0; i < hd; i++) qh[i] = bl_fp16_to_f32(bl_f32_to_fp16(q[i]));
    int64_t n = (int64_t)pos[t] + 1;
    const uint16_t *kb = kv_at(c, c->kc, b->layer, seq[t], 0, kd) + (int64_t)g * hd;
    const uint16_t *vb = kv_at(c, c->vc, b->layer, seq[t], 0, kd) + (int64_t)g * hd;
    float mx = -INFINITY;
    for (int64_t p = 0; p < n; p++) {
      const uint16_t *kr = kb + p * kd;
      float s = 0;
      for (int i = 0; i < hd; i++) s += qh[i] * bl_fp16_to_f32(kr[i]);
      s *= j->scale;
      sc[p] = s;
      if (s > mx) mx = s;
    }
    double sum = 0;
    for (int64_t p = 0; p < n; p++) {
      sc[p] = expf(sc[p] - mx);
      sum += sc[p];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < hd; i++) acc[i] = 0;
    for (int64_t p = 0; p < n; p++) {
      const uint16_t *vr = vb + p * kd;
      float pw = sc[p] * inv;
      for (int i = 0; i < hd; i++) acc[i] += pw * bl_fp16_to_f32(vr[i]);
    }
    float *o = c->att + t * qd + (int64_t)h * hd;
    memcpy(o, acc, sizeof(float) * hd);
  }
}

static int64_t add_bias(const bl_tensor *bt, float *y, int64_t n_tok, int64_t dim) {
  if (!bt->data) return BL_OK;
  float bias[16384];
  if (dim > 16384) return bl_fail(BL_E_UNSUPPORTED, "bias of %lld elements", (long long)dim);
  int64_t s = bl_weight_f32(bt, bias, dim);
  if (s != BL_OK) return s;
  for (int64_t t = 0; t < n_tok; t++)
    for (int64_t i = 0; i < dim; i++) y[t * dim + i] += bias[i];
  return BL_OK;
}

int64_t bl_attn_block(bl_cpu_ctx *c, const bl_block *b, const bl_batch *batch) {
  const int64_t n_tok = batch->n_tokens, E = c->p.n_embd;
  const int64_t hd = b->head_dim, nh = b->n_head, nkv = b->n_head_kv;
  if (hd <= 0 || hd > 1024 || nh <= 0 || nkv <= 0 || nh % nkv != 0)
    return bl_fail(BL_E_INVAL, "attention: bad heads (n_head %lld, n_head_kv %lld, head_dim %lld)", (long long)nh, (long long)nkv, (long long)hd);
  if (b->layer < 0 || b->layer >= c->p.kv_layers) return bl_fail(BL_E_INVAL, "attention: KV layer %lld out of range", (long long)b->layer);
  if (nkv * hd != c->p.kv_k_dim || nh * hd > c->p.max_q_dim) return bl_fail(BL_E_INVAL, "attention: head dims do not match the context");
  const int32_t *pos = (const int32_t *)(uintptr_t)batch->pos;
  const int32_t *seq = (const int32_t *)(uintptr_t)batch->seq;
  for (int64_t t = 0; t < n_tok; t++) {
    if (pos[t] < 0 || pos[t] >= c->p.kv_ctx) return bl_fail(BL_E_INVAL, "attention: position %d outside the context of %lld", pos[t], (long long)c->p.kv_ctx);
    if (seq[t] < 0 || seq[t] >= c->p.kv_slots) return bl_fail(BL_E_INVAL, "attention: sequence %d outside %lld slots", seq[t], (long long)c->p.kv_slots);
  }
  int64_t s;
  if ((s = bl_rmsnorm_rows(c, c->x, E, c->h, E, n_tok, E, &b->t[BL_ATTN_NORM], (float)b->eps))) return s;
  if ((s = bl_matmul(c, &b->t[BL_ATTN_Q], 0, c->h, E, n_tok, c->q, nh * hd))) return s;
  if ((s = bl_matmul(c, &b->t[BL_ATTN_K], 0, c->h, E, n_tok, c->k, nkv * hd))) return s;
  if ((s = bl_matmul(c, &b->t[BL_ATTN_V], 0, c->h, E, n_tok, c->v, nkv * hd))) return s;
  if ((s = add_bias(&b->t[BL_ATTN_BQ], c->q, n_tok, nh * hd))) return s;
  if ((s = add_bias(&b->t[BL_ATTN_BK], c->k, n_tok, nkv * hd))) return s;
  if ((s = add_bias(&b->t[BL_ATTN_BV], c->v, n_tok, nkv * hd))) return s;

  float qn[1024], kn[1024];
  prep_job pj = {c, b, batch, NULL, NULL, {0}, (float)b->eps};
  if (b->t[BL_ATTN_Q_NORM].data) { if ((s = bl_weight_f32(&b->t[BL_ATTN_Q_NORM], qn, hd))) return s; pj.qn = qn; }
  if (b->t[BL_ATTN_K_NORM].data) { if ((s = bl_weight_f32(&b->t[BL_ATTN_K_NORM], kn, hd))) return s; pj.kn = kn; }
  bl_rope_init(&pj.rope, b);
  bl_pool_run(c->pool, prep_task, &pj);

  attn_job aj = {c, b, batch, b->attn_scale > 0 ? (float)b->attn_scale : 1.0f / sqrtf((float)hd), (int)(c->p.flags & BL_CTX_EXACT)};
  bl_pool_run(c->pool, attn_task, &aj);

  /* x += Wo att */
  if ((s = bl_matmul(c, &b->t[BL_ATTN_O], 0, c->att, nh * hd, n_tok, c->h, E))) return s;
  for (int64_t i = 0; i < n_tok * E; i++) c->x[i] += c->h[i];
  return BL_OK;
}
