/* bloomery CPU library: the DELTANET op (bloomery.h's bl_deltanet_params: Qwen3-Next's and Qwen3.5's gated
 * delta-net linear attention) with a NORM fused in: the in-projections (qkv, z, beta / alpha), the causal
 * conv1d over each sequence's conv state, the q / k L2 norms, the gated delta rule over each sequence's
 * recurrent state (delta_rule.c: a sequence's run of BL_DR_CHUNK_MIN or more tokens in the batch, a prompt,
 * in the chunked form; shorter runs, decode, a token at a time; tokens of one sequence come in position
 * order), the gated RMSNorm and the out projection, residual added. The conv runs over channel ranges and
 * the rule over v heads on the pool's workers; a head's tokens of one sequence are taken by one worker, so
 * results never depend on the threads, nor on the other sequences in the batch (only on how a sequence's
 * tokens are split into batches, which moves the chunks' edges). */
#include "ctx.h"
#include "common.h"
#include "delta_rule.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  bl_cpu_ctx *c;
  int64_t n_tok, C, nk, nv, hk, hv, K, qk, vd;
  int grouped;
  const int32_t *pos, *seq;
  float *qkv, *z, *beta, *alpha, *ba, *o;
  const float *convt, *dt, *a, *normw; /* convt: the conv's weights tap-major, [K][C] */
  float eps;
  int64_t layer_off; /* floats into a slot's state where this layer's starts */
  const int32_t *grp_rows, *grp_off; /* the batch's tokens by sequence (batch order within one): group i's are rows [off[i], off[i+1]) */
  int64_t n_grp;
  float *work;      /* a worker's work space: work + ith * work_per */
  size_t work_per;
  bl_counter c_conv, c_l2, c_head;
} dn_job;

static inline float *slot_state(const dn_job *j, int64_t slot) {
  const bl_cpu_ctx *c = j->c;
  return c->rs + (size_t)slot * (size_t)(c->p.rs_layers * c->p.rs_dim) + (size_t)j->layer_off;
}

static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* The conv of channels [c0, c0 + w) (w <= 64) over every token in batch order, its SiLU in place of the input:
 * the taps across the channels (the weights transposed, tap-major), each channel's products added in tap order. */
static inline __attribute__((always_inline)) void conv_block(const dn_job *j, int64_t c0, const int64_t w) {
  const int64_t K = j->K, C = j->C;
  float acc[64], ones[64];
  for (int64_t e = 0; e < w; e++) ones[e] = 1.0f;
  const float *wl = j->convt + (K - 1) * C + c0;
  for (int64_t t = 0; t < j->n_tok; t++) {
    float *cs = slot_state(j, j->seq[t]) + c0; /* [K - 1][C]: the previous inputs, oldest first */
    float *x = j->qkv + t * C + c0;
    for (int64_t e = 0; e < w; e++) acc[e] = x[e] * wl[e];
    for (int64_t i = 0; i < K - 1; i++) {
      const float *si = cs + i * C, *wi = j->convt + i * C + c0;
      for (int64_t e = 0; e < w; e++) acc[e] += si[e] * wi[e];
    }
    for (int64_t i = 0; i + 1 < K - 1; i++) memcpy(cs + i * C, cs + (i + 1) * C, sizeof(float) * (size_t)w);
    if (K > 1) memcpy(cs + (K - 2) * C, x, sizeof(float) * (size_t)w);
    j->c->kern->swiglu(acc, ones, w); /* silu(acc) * 1 */
    memcpy(x, acc, sizeof(float) * (size_t)w);
  }
}

static void conv_channels(const dn_job *j, int64_t c0, int64_t c1) {
  if (c1 - c0 == 64) conv_block(j, c0, 64);
  else conv_block(j, c0, c1 - c0);
}

static void l2norm(float *x, int64_t n, float eps, float scale) {
  double ss = 0;
  for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
  const float r = scale / sqrtf((float)ss + eps);
  for (int64_t i = 0; i < n; i++) x[i] *= r;
}

/* The delta rule of v head h over each sequence's tokens in the batch, then its gated output norm. */
static void head_rule(const dn_job *j, int64_t h, float *w) {
  const int64_t hk = j->hk, hv = j->hv, nv = j->nv, nk = j->nk, r = nv / nk;
  const int64_t kh = j->grouped ? h / r : h % nk;
  const int64_t conv_floats = (j->K - 1) * j->C;
  float *g = w, *beta = g + j->n_tok, *cw = w + ((2 * j->n_tok + 15) & ~(int64_t)15);
  for (int64_t gi = 0; gi < j->n_grp; gi++) {
    const int32_t *rows = j->grp_rows + j->grp_off[gi];
    const int64_t n = j->grp_off[gi + 1] - j->grp_off[gi];
    for (int64_t i = 0; i < n; i++) {
      const int64_t t = rows[i];
      float b, al;
      if (j->ba) {
        const float *row = j->ba + t * 2 * nv + (h / r) * 2 * r;
        b = row[h % r];
        al = row[r + h % r];
      } else {
        b = j->beta[t * nv + h];
        al = j->alpha[t * nv + h];
      }
      beta[i] = 1.0f / (1.0f + expf(-b));
      g[i] = j->a[h] * softplus(al + j->dt[h]);
    }
    const bl_dr_in in = {
        .n = n, .hk = hk, .hv = hv, .rows = rows,
        .q = j->qkv + kh * hk, .k = j->qkv + j->qk + kh * hk, .v = j->qkv + 2 * j->qk + h * hv, .qk_stride = j->C, .v_stride = j->C,
        .g = g, .beta = beta, .o = j->o + h * hv, .o_stride = j->vd,
    };
    float *S = slot_state(j, j->seq[rows[0]]) + conv_floats + h * hv * hk;
    if (n >= BL_DR_CHUNK_MIN) bl_delta_rule_chunked(j->c->kern, S, &in, cw);
    else bl_delta_rule_recurrent(j->c->kern, S, &in);
  }
  /* o = rmsnorm(o) * norm * silu(z) (the SiLU by the path's swiglu, into z: this head's alone) */
  for (int64_t t = 0; t < j->n_tok; t++) {
    float *o = j->o + t * j->vd + h * hv, *z = j->z + t * j->vd + h * hv;
    double ss = 0;
    for (int64_t i = 0; i < hv; i++) ss += (double)o[i] * o[i];
    const float sc = 1.0f / sqrtf((float)(ss / hv) + j->eps);
    for (int64_t i = 0; i < hv; i++) o[i] = o[i] * sc * j->normw[i];
    j->c->kern->swiglu(z, o, hv);
    memcpy(o, z, sizeof(float) * (size_t)hv);
  }
}

static void dn_task(void *arg, int ith, int nth) {
  dn_job *j = arg;
  (void)nth;
  const int64_t CH = 64;
  for (int64_t c0; (c0 = bl_claim(&j->c_conv, CH)) < j->C;) conv_channels(j, c0, c0 + CH < j->C ? c0 + CH : j->C);
  bl_pool_barrier_ith(j->c->pool, ith);
  const float qscale = 1.0f / sqrtf((float)j->hk);
  for (int64_t t; (t = bl_claim(&j->c_l2, 1)) < j->n_tok;) {
    float *x = j->qkv + t * j->C;
    for (int64_t h = 0; h < j->nk; h++) {
      l2norm(x + h * j->hk, j->hk, j->eps, qscale);
      l2norm(x + j->qk + h * j->hk, j->hk, j->eps, 1.0f);
    }
  }
  bl_pool_barrier_ith(j->c->pool, ith);
  for (int64_t h; (h = bl_claim(&j->c_head, 1)) < j->nv;) head_rule(j, h, j->work + (size_t)ith * j->work_per);
}

static int64_t vec_of(const bl_tensor *t, int64_t n, const char *what) {
  if (!t->data) return bl_fail(BL_E_INVAL, "delta-net %s: missing", what);
  if (t->type != BL_F32 && t->type != BL_F16 && t->type != BL_BF16)
    return bl_fail(BL_E_UNSUPPORTED, "delta-net %s: a vector of type %lld (F32, F16 or BF16)", what, (long long)t->type);
  if (t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] != n)
    return bl_fail(BL_E_INVAL, "delta-net %s: %lld elements, %lld expected", what, (long long)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]), (long long)n);
  return BL_OK;
}

static int64_t mat_of(const bl_tensor *t, int64_t rows, int64_t cols, const char *what) {
  if (!t->data) return bl_fail(BL_E_INVAL, "delta-net %s: missing", what);
  if (t->ne[0] != rows || t->ne[1] != cols || t->ne[2] != 1)
    return bl_fail(BL_E_INVAL, "delta-net %s: shape [%lld, %lld], [%lld, %lld] expected", what, (long long)t->ne[0], (long long)t->ne[1],
                   (long long)rows, (long long)cols);
  return bl_weight_type_check(t, what);
}

int64_t bl_deltanet_check(const bl_ctx_params *p, const bl_op *op) {
  const bl_deltanet_params *d = BL_OP_PARAMS(op, bl_deltanet_params);
  if (!d) return bl_fail(BL_E_INVAL, "delta-net: no parameters");
  const int64_t nk = d->n_k_heads, nv = d->n_v_heads, hk = d->head_k, hv = d->head_v, K = d->conv_kernel, E = p->n_embd;
  if (nk <= 0 || nv <= 0 || nv % nk || hk <= 0 || hv <= 0 || hk > 1024 || hv > 1024)
    return bl_fail(BL_E_INVAL, "delta-net: bad heads (%lld k heads of %lld, %lld v heads of %lld)", (long long)nk, (long long)hk, (long long)nv, (long long)hv);
  if (K < 1 || K > 16) return bl_fail(BL_E_INVAL, "delta-net: a conv of %lld taps (1..16)", (long long)K);
  if (d->head_map != BL_DN_TILED && d->head_map != BL_DN_GROUPED) return bl_fail(BL_E_UNSUPPORTED, "delta-net: head map %lld", (long long)d->head_map);
  if (!(d->eps > 0)) return bl_fail(BL_E_INVAL, "delta-net: epsilon %g", d->eps);
  const int64_t C = 2 * nk * hk + nv * hv, vd = nv * hv;
  const int64_t need = (K - 1) * C + nv * hv * hk;
  if (d->rs_layer < 0 || d->rs_layer >= p->rs_layers)
    return bl_fail(BL_E_INVAL, "delta-net: recurrent state layer %lld of the context's %lld", (long long)d->rs_layer, (long long)p->rs_layers);
  if (need > p->rs_dim) return bl_fail(BL_E_INVAL, "delta-net: a state of %lld floats, the context keeps %lld a layer", (long long)need, (long long)p->rs_dim);
  if (vd > p->max_q_dim && vd > E) return bl_fail(BL_E_INVAL, "delta-net: out's rows of %lld past the context's widest row %lld", (long long)vd, (long long)p->max_q_dim);
  int64_t s;
  if (bl_op_t(op, BL_DN_QKVZ)->data) {
    if (bl_op_t(op, BL_DN_QKV)->data || bl_op_t(op, BL_DN_GATE)->data) return bl_fail(BL_E_INVAL, "delta-net: both qkvz and qkv / gate");
    if ((s = mat_of(bl_op_t(op, BL_DN_QKVZ), E, C + vd, "qkvz"))) return s;
  } else if ((s = mat_of(bl_op_t(op, BL_DN_QKV), E, C, "qkv")) || (s = mat_of(bl_op_t(op, BL_DN_GATE), E, vd, "gate"))) {
    return s;
  }
  if ((s = mat_of(bl_op_t(op, BL_DN_OUT), vd, E, "out"))) return s;
  if (bl_op_t(op, BL_DN_BA)->data) {
    if (bl_op_t(op, BL_DN_BETA)->data || bl_op_t(op, BL_DN_ALPHA)->data) return bl_fail(BL_E_INVAL, "delta-net: both ba and beta / alpha");
    if ((s = mat_of(bl_op_t(op, BL_DN_BA), E, 2 * nv, "ba"))) return s;
  } else if ((s = mat_of(bl_op_t(op, BL_DN_BETA), E, nv, "beta")) || (s = mat_of(bl_op_t(op, BL_DN_ALPHA), E, nv, "alpha"))) {
    return s;
  }
  const bl_tensor *cw = bl_op_t(op, BL_DN_CONV);
  if ((s = vec_of(cw, K * C, "conv"))) return s;
  if (cw->ne[0] != K || cw->nb1 != K * (cw->type == BL_F32 ? 4 : 2)) return bl_fail(BL_E_INVAL, "delta-net conv: rows of %lld taps, stored contiguous", (long long)K);
  if ((s = vec_of(bl_op_t(op, BL_DN_DT), nv, "dt")) || (s = vec_of(bl_op_t(op, BL_DN_A), nv, "a")) || (s = vec_of(bl_op_t(op, BL_DN_NORM), hv, "norm")))
    return s;
  return BL_OK;
}

static int64_t floats_of(const bl_tensor *t, float *dst, int64_t n) {
  const bl_type_traits *tr = bl_traits((int32_t)t->type);
  if (!tr || !tr->to_float) return bl_fail(BL_E_UNSUPPORTED, "delta-net: a vector of type %lld", (long long)t->type);
  tr->to_float((const void *)(uintptr_t)t->data, dst, n);
  return BL_OK;
}

int64_t bl_deltanet_op(bl_cpu_ctx *c, const bl_op *norm, const bl_op *op, const bl_batch *batch) {
  int64_t s;
  if ((s = bl_deltanet_check(&c->p, op))) return s;
  const bl_deltanet_params *d = BL_OP_PARAMS(op, bl_deltanet_params);
  const int64_t n = batch->n_tokens, E = c->p.n_embd;
  dn_job j;
  memset(&j, 0, sizeof j);
  j.c = c;
  j.n_tok = n;
  j.nk = d->n_k_heads;
  j.nv = d->n_v_heads;
  j.hk = d->head_k;
  j.hv = d->head_v;
  j.K = d->conv_kernel;
  j.qk = j.nk * j.hk;
  j.vd = j.nv * j.hv;
  j.C = 2 * j.qk + j.vd;
  j.grouped = d->head_map == BL_DN_GROUPED;
  j.eps = (float)d->eps;
  j.pos = (const int32_t *)(uintptr_t)batch->pos;
  j.seq = (const int32_t *)(uintptr_t)batch->seq;
  j.layer_off = d->rs_layer * c->p.rs_dim;
  for (int64_t t = 0; t < n; t++)
    if (j.seq[t] < 0 || j.seq[t] >= c->p.kv_slots) return bl_fail(BL_E_INVAL, "delta-net: sequence %d outside %lld slots", j.seq[t], (long long)c->p.kv_slots);
  const int ba = bl_op_t(op, BL_DN_BA)->data != 0;
  const int qkvz = bl_op_t(op, BL_DN_QKVZ)->data != 0;
  /* the work buffers: each worker's (the rule's g and beta, its chunks' space), qkv, z, beta + alpha (or ba), o,
   * y (with qkvz: its rows, as wide as qkv and z); then the vectors (the conv's weights twice: as stored, and
   * tap-major); then the groups (int32) */
  const int64_t yw = qkvz && j.C + j.vd > E ? j.C + j.vd : E;
  const int nth = bl_pool_size(c->pool);
  j.work_per = (size_t)((2 * n + 15) & ~(int64_t)15) + bl_delta_rule_work(j.hk, j.hv);
  const size_t groups = (size_t)(2 * n + 1 + c->p.kv_slots);
  const size_t need = (size_t)nth * j.work_per + (size_t)n * (size_t)(j.C + 2 * j.vd + 2 * j.nv + yw) + (size_t)(2 * j.K * j.C + 2 * j.nv + j.hv) + groups;
  if (need > c->dn_cap) {
    free(c->dn);
    c->work_bytes -= c->dn_cap * sizeof(float);
    c->dn_cap = 0;
    if (posix_memalign((void **)&c->dn, 64, need * sizeof(float)) != 0) {
      c->dn = NULL;
      return bl_fail(BL_E_NOMEM, "delta-net: cannot allocate %zu MiB of work space", need * 4 >> 20);
    }
    c->dn_cap = need;
    c->work_bytes += need * sizeof(float);
  }
  float *p = c->dn;
  j.work = p, p += (size_t)nth * j.work_per;
  j.qkv = p, p += n * j.C;
  j.z = p, p += n * j.vd;
  float *bb = p;
  p += n * 2 * j.nv;
  j.o = p, p += n * j.vd;
  float *y = p;
  p += n * yw;
  float *convw = p, *convt = convw + j.K * j.C, *dt = convt + j.K * j.C, *a = dt + j.nv, *nw = a + j.nv;
  /* the groups: a sequence's tokens in batch order, sequences in the order they first come */
  int32_t *gof = (int32_t *)(void *)(nw + j.hv), *grows = gof + n + 1, *gslot = grows + n;
  for (int64_t s2 = 0; s2 < c->p.kv_slots; s2++) gslot[s2] = -1;
  j.n_grp = 0;
  for (int64_t t = 0; t < n; t++)
    if (gslot[j.seq[t]] < 0) gslot[j.seq[t]] = (int32_t)j.n_grp++;
  for (int64_t i = 0; i <= j.n_grp; i++) gof[i] = 0;
  for (int64_t t = 0; t < n; t++) gof[gslot[j.seq[t]] + 1]++;
  for (int64_t i = 0; i < j.n_grp; i++) gof[i + 1] += gof[i];
  for (int64_t t = 0; t < n; t++) grows[gof[gslot[j.seq[t]]]++] = (int32_t)t;
  for (int64_t i = j.n_grp; i > 0; i--) gof[i] = gof[i - 1];
  gof[0] = 0;
  j.grp_off = gof;
  j.grp_rows = grows;
  if ((s = floats_of(bl_op_t(op, BL_DN_CONV), convw, j.K * j.C)) || (s = floats_of(bl_op_t(op, BL_DN_DT), dt, j.nv)) ||
      (s = floats_of(bl_op_t(op, BL_DN_A), a, j.nv)) || (s = floats_of(bl_op_t(op, BL_DN_NORM), nw, j.hv)))
    return s;
  for (int64_t ch = 0; ch < j.C; ch++)
    for (int64_t i = 0; i < j.K; i++) convt[i * j.C + ch] = convw[ch * j.K + i];
  j.convt = convt;
  j.dt = dt;
  j.a = a;
  j.normw = nw;
  if (norm && (s = bl_norm_op(c, norm, n))) return s;
  if (qkvz) {
    /* the fused rows in y's room (yw floats a row), then split into qkv and z */
    float *fz = y;
    const int64_t W = j.C + j.vd, r = j.nv / j.nk, per = 2 * j.hk + 2 * r * j.hv;
    if ((s = bl_matmul(c, bl_op_t(op, BL_DN_QKVZ), 0, c->h, E, n, fz, W))) return s;
    for (int64_t t = 0; t < n; t++) {
      const float *row = fz + t * W;
      float *q = j.qkv + t * j.C, *z = j.z + t * j.vd;
      for (int64_t kh = 0; kh < j.nk; kh++) {
        const float *g = row + kh * per;
        memcpy(q + kh * j.hk, g, sizeof(float) * (size_t)j.hk);
        memcpy(q + j.qk + kh * j.hk, g + j.hk, sizeof(float) * (size_t)j.hk);
        memcpy(q + 2 * j.qk + kh * r * j.hv, g + 2 * j.hk, sizeof(float) * (size_t)(r * j.hv));
        memcpy(z + kh * r * j.hv, g + 2 * j.hk + r * j.hv, sizeof(float) * (size_t)(r * j.hv));
      }
    }
  } else {
    if ((s = bl_matmul(c, bl_op_t(op, BL_DN_QKV), 0, c->h, E, n, j.qkv, j.C))) return s;
    if ((s = bl_matmul(c, bl_op_t(op, BL_DN_GATE), 0, c->h, E, n, j.z, j.vd))) return s;
  }
  if (ba) {
    j.ba = bb;
    if ((s = bl_matmul(c, bl_op_t(op, BL_DN_BA), 0, c->h, E, n, j.ba, 2 * j.nv))) return s;
  } else {
    j.beta = bb;
    j.alpha = bb + n * j.nv;
    if ((s = bl_matmul(c, bl_op_t(op, BL_DN_BETA), 0, c->h, E, n, j.beta, j.nv))) return s;
    if ((s = bl_matmul(c, bl_op_t(op, BL_DN_ALPHA), 0, c->h, E, n, j.alpha, j.nv))) return s;
  }
  /* a sequence's first token starts from zeros: its conv inputs before position 0 and its state */
  const size_t layer_floats = (size_t)((j.K - 1) * j.C + j.nv * j.hv * j.hk);
  for (int64_t t = 0; t < n; t++)
    if (j.pos[t] == 0) memset(slot_state(&j, j.seq[t]), 0, layer_floats * sizeof(float));
  const int64_t t0 = c->prof ? bl_prof_now() : 0;
  bl_pool_run(c->pool, dn_task, &j);
  bl_prof_add(c, BL_PROF_ATTN, t0);
  if ((s = bl_matmul(c, bl_op_t(op, BL_DN_OUT), 0, j.o, j.vd, n, y, E))) return s;
  for (int64_t t = 0; t < n; t++) {
    float *x = c->x + t * E;
    const float *yr = y + t * E;
    for (int64_t i = 0; i < E; i++) x[i] += yr[i];
  }
  return BL_OK;
}

/* ---- a slot's recurrent state (bloomery.h's bl_cpu_rs_*) ---- */
static int64_t rs_slot(const bl_cpu_ctx *c, int64_t slot) {
  if (!c) return bl_fail(BL_E_INVAL, "rs: null context");
  if (slot < 0 || slot >= c->p.kv_slots) return bl_fail(BL_E_INVAL, "rs: slot %lld out of range", (long long)slot);
  return BL_OK;
}

static size_t rs_slot_floats(const bl_cpu_ctx *c) { return (size_t)(c->p.rs_layers * c->p.rs_dim); }

int64_t bl_cpu_rs_bytes(uint64_t h) {
  const bl_cpu_ctx *c = (const bl_cpu_ctx *)(uintptr_t)h;
  return c ? (int64_t)(rs_slot_floats(c) * sizeof(float)) : 0;
}

int64_t bl_cpu_rs_save(uint64_t h, int64_t slot, void *dst) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = rs_slot(c, slot);
  if (s) return s;
  if (!dst && rs_slot_floats(c)) return bl_fail(BL_E_INVAL, "rs_save: null buffer");
  if (rs_slot_floats(c)) memcpy(dst, c->rs + (size_t)slot * rs_slot_floats(c), rs_slot_floats(c) * sizeof(float));
  return BL_OK;
}

int64_t bl_cpu_rs_load(uint64_t h, int64_t slot, const void *src) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = rs_slot(c, slot);
  if (s) return s;
  if (!src && rs_slot_floats(c)) return bl_fail(BL_E_INVAL, "rs_load: null buffer");
  if (rs_slot_floats(c)) memcpy(c->rs + (size_t)slot * rs_slot_floats(c), src, rs_slot_floats(c) * sizeof(float));
  return BL_OK;
}

int64_t bl_cpu_rs_copy(uint64_t h, int64_t src, int64_t dst) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = rs_slot(c, src);
  if (s || (s = rs_slot(c, dst))) return s;
  if (src != dst && rs_slot_floats(c))
    memcpy(c->rs + (size_t)dst * rs_slot_floats(c), c->rs + (size_t)src * rs_slot_floats(c), rs_slot_floats(c) * sizeof(float));
  return BL_OK;
}

int64_t bl_cpu_rs_clear(uint64_t h, int64_t slot) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = rs_slot(c, slot);
  if (s) return s;
  if (rs_slot_floats(c)) memset(c->rs + (size_t)slot * rs_slot_floats(c), 0, rs_slot_floats(c) * sizeof(float));
  return BL_OK;
}

/* ---- a slot's snapshot (bloomery.h's bl_cpu_rs_snap_*: speculative decoding's rollback) ---- */
int64_t bl_cpu_rs_snap_reserve(uint64_t h) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  if (!c) return bl_fail(BL_E_INVAL, "rs_snap: null context");
  if (c->rs_snap || !rs_slot_floats(c)) return BL_OK;
  const size_t n = (size_t)c->p.kv_slots * rs_slot_floats(c);
  c->rs_snap = malloc(n * sizeof(float));
  c->rs_snap_ok = calloc((size_t)c->p.kv_slots, 1);
  if (!c->rs_snap || !c->rs_snap_ok) {
    free(c->rs_snap);
    free(c->rs_snap_ok);
    c->rs_snap = NULL;
    c->rs_snap_ok = NULL;
    return bl_fail(BL_E_NOMEM, "rs_snap: cannot allocate %zu MiB for the slots' recurrent state snapshots", n * sizeof(float) >> 20);
  }
  /* its pages touched now, not by a step's first snapshot (a copy: malloc and a zero memset would make a lazy calloc) */
  memcpy(c->rs_snap, c->rs, n * sizeof(float));
  return BL_OK;
}

static int64_t snap_slot(const bl_cpu_ctx *c, int64_t slot) {
  int64_t s = rs_slot(c, slot);
  if (s) return s;
  if (!rs_slot_floats(c)) return bl_fail(BL_E_INVAL, "rs_snap: this model keeps no recurrent state");
  if (!c->rs_snap) return bl_fail(BL_E_INVAL, "rs_snap: no room reserved (bl_cpu_rs_snap_reserve)");
  return BL_OK;
}

int64_t bl_cpu_rs_snap_take(uint64_t h, int64_t slot) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = snap_slot(c, slot);
  if (s) return s;
  const size_t n = rs_slot_floats(c);
  memcpy(c->rs_snap + (size_t)slot * n, c->rs + (size_t)slot * n, n * sizeof(float));
  c->rs_snap_ok[slot] = 1;
  return BL_OK;
}

int64_t bl_cpu_rs_snap_back(uint64_t h, int64_t slot) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = snap_slot(c, slot);
  if (s) return s;
  if (!c->rs_snap_ok[slot]) return bl_fail(BL_E_INVAL, "rs_snap_back: slot %lld took no snapshot", (long long)slot);
  const size_t n = rs_slot_floats(c);
  memcpy(c->rs + (size_t)slot * n, c->rs_snap + (size_t)slot * n, n * sizeof(float));
  return BL_OK;
}
