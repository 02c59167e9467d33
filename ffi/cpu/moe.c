/* bloomery CPU library: the routed-experts block (softmax router, top-k with renormalisation,
 * SwiGLU experts grouped by expert so each expert's rows are read once per batch) and the
 * dense SwiGLU FFN block. */
#include "ctx.h"
#include "common.h"
#include <math.h>
#include <string.h>

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

/* Route each token: probabilities over experts, top-k, weights. */
static int64_t route(bl_cpu_ctx *c, const bl_block *b, int64_t n_tok) {
  const int64_t ne = b->n_expert, k = b->n_expert_used;
  for (int64_t t = 0; t < n_tok; t++) {
    float *lg = c->router + t * ne;
    float mx = -INFINITY;
    for (int64_t e = 0; e < ne; e++) mx = fmaxf(mx, lg[e]);
    double sum = 0;
    for (int64_t e = 0; e < ne; e++) { lg[e] = expf(lg[e] - mx); sum += lg[e]; }
    for (int64_t e = 0; e < ne; e++) lg[e] = (float)(lg[e] / sum);
    int32_t *sel = c->sel + t * k;
    float *w = c->selw + t * k;
    for (int64_t i = 0; i < k; i++) {
      int64_t best = -1;
      for (int64_t e = 0; e < ne; e++) {
        int taken = 0;
        for (int64_t j = 0; j < i; j++) if (sel[j] == e) { taken = 1; break; }
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
  return BL_OK;
}

typedef struct {
  float *g, *u;
  int64_t n, ff;
} swiglu_job;

static void swiglu_task(void *a, int ith, int nth) {
  swiglu_job *j = a;
  int64_t lo, hi;
  bl_split(j->n * j->ff, ith, nth, &lo, &hi);
  for (int64_t i = lo; i < hi; i++) j->g[i] = silu(j->g[i]) * j->u[i];
}

/* One expert (slab e) or a dense FFN (slab 0) for n tokens listed in idx; the input rows were
 * converted once (qin, qs). Result rows in c->ff_b (n x E). */
static int64_t ffn_rows(bl_cpu_ctx *c, const bl_tensor *gate, const bl_tensor *up, const bl_tensor *down,
                        int64_t slab, const uint8_t *qin, int64_t qs, const int32_t *idx, int64_t n) {
  const int64_t ff = gate->ne[1];
  bl_matmul_q(c, gate, slab, qin, qs, idx, n, c->ff_a, ff);
  bl_matmul_q(c, up, slab, qin, qs, idx, n, c->ff_a + n * ff, ff);
  swiglu_job sj = {c->ff_a, c->ff_a + n * ff, n, ff};
  bl_pool_run(c->pool, swiglu_task, &sj);
  return bl_matmul(c, down, slab, c->ff_a, ff, n, c->ff_b, c->p.n_embd);
}

static int64_t check_ffn(const bl_cpu_ctx *c, const bl_tensor *g, const bl_tensor *u, const bl_tensor *d, const char *what) {
  if (!g->data || !u->data || !d->data) return bl_fail(BL_E_INVAL, "%s: missing gate, up or down weights", what);
  if (g->ne[0] != c->p.n_embd || u->ne[0] != c->p.n_embd || d->ne[1] != c->p.n_embd || g->ne[1] != u->ne[1] || d->ne[0] != g->ne[1])
    return bl_fail(BL_E_INVAL, "%s: gate/up/down shapes do not agree", what);
  if (g->ne[1] > c->p.max_ff) return bl_fail(BL_E_INVAL, "%s: hidden size %lld is more than the context's %lld", what, (long long)g->ne[1], (long long)c->p.max_ff);
  if (g->type != u->type) return bl_fail(BL_E_UNSUPPORTED, "%s: gate and up weights of different types", what);
  return BL_OK;
}

int64_t bl_moe_block(bl_cpu_ctx *c, const bl_block *b, const bl_batch *batch) {
  const int64_t n_tok = batch->n_tokens, E = c->p.n_embd, ne = b->n_expert, k = b->n_expert_used;
  const bl_tensor *gate = &b->t[BL_MOE_GATE], *up = &b->t[BL_MOE_UP], *down = &b->t[BL_MOE_DOWN];
  int64_t s;
  if (ne <= 0 || k <= 0 || k > ne || ne > c->p.max_experts) return bl_fail(BL_E_INVAL, "moe: %lld experts, %lld used", (long long)ne, (long long)k);
  if ((s = check_ffn(c, gate, up, down, "moe"))) return s;
  if (gate->ne[2] != ne || b->t[BL_MOE_GATE_INP].ne[1] != ne) return bl_fail(BL_E_INVAL, "moe: expert count of the tensors is not %lld", (long long)ne);

  if ((s = bl_rmsnorm_rows(c, c->x, E, c->h, E, n_tok, E, &b->t[BL_MOE_NORM], (float)b->eps))) return s;
  if ((s = bl_matmul(c, &b->t[BL_MOE_GATE_INP], 0, c->h, E, n_tok, c->router, ne))) return s;
  route(c, b, n_tok);

  const bl_type_traits *tr = bl_traits((int32_t)gate->type);
  if (!tr || !tr->vec_dot) return bl_fail(BL_E_UNSUPPORTED, "moe: expert type %lld has no CPU dot product", (long long)gate->type);
  /* the input rows, converted once for gate and up of every expert */
  uint8_t *qin = c->qact + c->qact_row * c->p.max_tokens; /* second half of qact */
  int64_t qs = bl_quantize_rows(c, bl_act_type(c, (int32_t)gate->type), c->h, E, n_tok, E, qin);
  if (qs < 0) return bl_fail(BL_E_UNSUPPORTED, "moe: cannot convert activations for type %lld", (long long)gate->type);

  memset(c->moe_out, 0, sizeof(float) * n_tok * E);
  for (int64_t e = 0; e < ne; e++) {
    int64_t n = 0;
    for (int64_t t = 0; t < n_tok; t++)
      for (int64_t i = 0; i < k; i++)
        if (c->sel[t * k + i] == e) { c->tok_list[n] = (int32_t)t; c->slot_list[n] = (int32_t)i; n++; }
    if (n == 0) continue;
    if ((s = ffn_rows(c, gate, up, down, e, qin, qs, c->tok_list, n))) return s;
    for (int64_t r = 0; r < n; r++) {
      int64_t t = c->tok_list[r];
      float w = c->selw[t * k + c->slot_list[r]];
      float *o = c->moe_out + t * E, *y = c->ff_b + r * E;
      for (int64_t i = 0; i < E; i++) o[i] += w * y[i];
    }
  }
  for (int64_t i = 0; i < n_tok * E; i++) c->x[i] += c->moe_out[i];
  return BL_OK;
}

int64_t bl_ffn_block(bl_cpu_ctx *c, const bl_block *b, const bl_batch *batch) {
  const int64_t n_tok = batch->n_tokens, E = c->p.n_embd;
  const bl_tensor *gate = &b->t[1], *up = &b->t[2], *down = &b->t[3];
  int64_t s;
  if ((s = check_ffn(c, gate, up, down, "ffn"))) return s;
  if ((s = bl_rmsnorm_rows(c, c->x, E, c->h, E, n_tok, E, &b->t[0], (float)b->eps))) return s;
  const bl_type_traits *tr = bl_traits((int32_t)gate->type);
  if (!tr || !tr->vec_dot) return bl_fail(BL_E_UNSUPPORTED, "ffn: type %lld has no CPU dot product", (long long)gate->type);
  uint8_t *qin = c->qact + c->qact_row * c->p.max_tokens;
  int64_t qs = bl_quantize_rows(c, bl_act_type(c, (int32_t)gate->type), c->h, E, n_tok, E, qin);
  if (qs < 0) return bl_fail(BL_E_UNSUPPORTED, "ffn: cannot convert activations for type %lld", (long long)gate->type);
  if ((s = ffn_rows(c, gate, up, down, 0, qin, qs, NULL, n_tok))) return s;
  for (int64_t i = 0; i < n_tok * E; i++) c->x[i] += c->ff_b[i];
  return BL_OK;
}
