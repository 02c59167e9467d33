/* bloomery CPU library: causal attention over a KV cache layer (see attn_core.h). */
#include "attn_core.h"
#include "common.h"
#include "simd_attn.h"
#include <math.h>
#include <string.h>

#define SUB BL_ATTN_SUB
#define CHUNK BL_ATTN_CHUNK

static inline int64_t n_units(const bl_attn_core *a) { return a->nkv * (a->group / a->gsub); }
static inline int64_t unit_kv(const bl_attn_core *a, int64_t u) { return u / (a->group / a->gsub); }
/* the first query head of unit u */
static inline int64_t unit_head(const bl_attn_core *a, int64_t u) {
  const int64_t nsl = a->group / a->gsub;
  return (u / nsl) * a->group + (u % nsl) * a->gsub;
}
static inline const uint16_t *slot_row(const bl_attn_core *a, const uint16_t *base, int64_t t) {
  return base + (int64_t)a->seq[t] * a->c->p.kv_ctx * a->kd;
}

/* The first position token t sees: its window's, or 0. */
static inline int64_t first_pos(const bl_attn_core *a, int64_t t) {
  const int64_t lo = a->window > 0 ? (int64_t)a->pos[t] + 1 - a->window : 0;
  return lo > 0 ? lo : 0;
}

static inline int64_t n_chunks(const bl_attn_core *a, int64_t t) { return ((int64_t)a->pos[t] + CHUNK) / CHUNK; }

/* The reference loop of the exact path: one (token, head), all positions. */
static void attn_exact(bl_attn_core *a, int ith, int64_t t, int64_t h) {
  const int64_t hd = a->hd, g = h / a->group, n = (int64_t)a->pos[t] + 1, lo = first_pos(a, t);
  float *sc = a->wk + (int64_t)ith * a->wk_stride; /* kv_ctx floats in the exact layout */
  float acc[1024];
  const float *q = a->q + t * a->qs + h * hd;
  const uint16_t *kb = slot_row(a, a->kb, t) + g * hd;
  const uint16_t *vb = slot_row(a, a->vb, t) + g * hd;
  float mx = a->sinks ? a->sinks[h] : -INFINITY;
  for (int64_t p = lo; p < n; p++) {
    const uint16_t *kr = kb + p * a->kd;
    float s = 0;
    for (int64_t i = 0; i < hd; i++) s += q[i] * bl_fp16_to_f32(kr[i]);
    s *= a->scale;
    sc[p] = s;
    if (s > mx) mx = s;
  }
  double sum = a->sinks ? expf(a->sinks[h] - mx) : 0;
  for (int64_t p = lo; p < n; p++) {
    sc[p] = expf(sc[p] - mx);
    sum += sc[p];
  }
  const float inv = (float)(1.0 / sum);
  for (int64_t i = 0; i < hd; i++) acc[i] = 0;
  for (int64_t p = lo; p < n; p++) {
    const uint16_t *vr = vb + p * a->kd;
    const float pw = sc[p] * inv;
    for (int64_t i = 0; i < hd; i++) acc[i] += pw * bl_fp16_to_f32(vr[i]);
  }
  memcpy(a->out + t * a->os + h * hd, acc, sizeof(float) * (size_t)hd);
}

/* The output row of (t, h) from the states of its n_ch chunks (stride `stride` floats between chunks). */
static void merge_head(bl_attn_core *a, int64_t t, int64_t h, const float *pp, int64_t n_ch, int64_t stride) {
  const int64_t hd = a->hd;
  const bl_kernels *kn = a->c->kern;
  float M = -INFINITY;
  for (int64_t ch = 0; ch < n_ch; ch++)
    if (pp[ch * stride + 1] > 0 && pp[ch * stride] > M) M = pp[ch * stride];
  if (a->sinks && a->sinks[h] > M) M = a->sinks[h]; /* the sink joins the denominator */
  float *o = a->out + t * a->os + h * hd;
  memset(o, 0, sizeof(float) * (size_t)hd);
  double L = 0;
  for (int64_t ch = 0; ch < n_ch; ch++) {
    const float *m = pp + ch * stride;
    if (m[1] <= 0) continue;
    const float e = expf(m[0] - M);
    L += (double)e * m[1];
    kn->axpy_f32(e, m + 2, o, hd);
  }
  if (a->sinks) L += expf(a->sinks[h] - M);
  kn->scale_f32(L > 0 ? (float)(1.0 / L) : 0.0f, o, hd);
}

/* Chunk ch (positions [ch * CHUNK, ...) up to the token's own) of token t against unit u, for each of
 * its query heads: the online-softmax state (m, l, acc[hd]) of each, written to out[hh * (hd + 2)], by
 * the path's attention sub-tiles of SUB positions. */
static void attn_chunk(bl_attn_core *a, float *wk, int64_t t, int64_t u, int64_t ch, float *out) {
  const bl_kernels *kn = a->c->kern;
  const int64_t hd = a->hd, G = a->gsub, n = (int64_t)a->pos[t] + 1, sts = hd + 2, lo = first_pos(a, t);
  const int64_t p0 = ch * CHUNK > lo ? ch * CHUNK : lo, p1 = (ch + 1) * CHUNK < n ? (ch + 1) * CHUNK : n;
  for (int64_t h = 0; h < G; h++) {
    out[h * sts] = -INFINITY;
    out[h * sts + 1] = 0;
    memset(out + h * sts + 2, 0, sizeof(float) * (size_t)hd);
  }
  const int64_t g = unit_kv(a, u);
  const uint16_t *kb = slot_row(a, a->kb, t) + g * hd;
  const uint16_t *vb = slot_row(a, a->vb, t) + g * hd;
  const float *q = a->q + t * a->qs + unit_head(a, u) * hd;
  for (int64_t b0 = p0; b0 < p1; b0 += SUB) {
    const int nb = (int)(p1 - b0 < SUB ? p1 - b0 : SUB);
    kn->attn_prep(kb + b0 * a->kd, vb + b0 * a->kd, a->kd, nb, (int)hd, wk);
    kn->attn_heads(q, hd, (int)G, kb + b0 * a->kd, vb + b0 * a->kd, a->kd, nb, (int)hd, a->scale, out, wk);
  }
}

/* Tokens [t0, t1) of one sequence against unit u: each sub-tile converted once for all of them. Per
 * token the same chunks, sub-tiles and position counts as attn_chunk, so the same bits. */
static void attn_tile(bl_attn_core *a, int ith, int64_t u, int64_t t0, int64_t t1) {
  const bl_kernels *kn = a->c->kern;
  const int64_t hd = a->hd, G = a->gsub, sts = hd + 2, per_tok = a->n_chunk * G * sts;
  float *wk = a->wk + (int64_t)ith * a->wk_stride;
  float *st = wk + bl_attn_work(hd);
  int64_t maxn = 0;
  for (int64_t t = t0; t < t1; t++)
    if (a->pos[t] + 1 > maxn) maxn = a->pos[t] + 1;
  const int64_t g = unit_kv(a, u), hb = unit_head(a, u);
  const uint16_t *kb = slot_row(a, a->kb, t0) + g * hd;
  const uint16_t *vb = slot_row(a, a->vb, t0) + g * hd;
  for (int64_t ch = 0; ch * CHUNK < maxn; ch++) {
    const int64_t cend = (ch + 1) * CHUNK;
    for (int64_t t = t0; t < t1; t++) {
      if (a->pos[t] + 1 <= ch * CHUNK) continue;
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
      kn->attn_prep(kb + b0 * a->kd, vb + b0 * a->kd, a->kd, nbm, (int)hd, wk);
      for (int64_t t = t0; t < t1; t++) {
        const int64_t n = (int64_t)a->pos[t] + 1, p1 = cend < n ? cend : n;
        if (p1 <= b0) continue;
        const int nb = (int)(p1 - b0 < SUB ? p1 - b0 : SUB);
        kn->attn_heads(a->q + t * a->qs + hb * hd, hd, (int)G, kb + b0 * a->kd, vb + b0 * a->kd, a->kd, nb, (int)hd, a->scale,
                       st + (t - t0) * per_tok + ch * G * sts, wk);
      }
    }
  }
  for (int64_t t = t0; t < t1; t++)
    for (int64_t hh = 0; hh < G; hh++) merge_head(a, t, hb + hh, st + (t - t0) * per_tok + hh * sts, n_chunks(a, t), G * sts);
}

/* A sliding-window item: token t against unit u, the chunks its window reaches (from the one holding
 * its first position), merged for each of the unit's query heads. */
static void attn_window_item(bl_attn_core *a, int ith, int64_t t, int64_t u) {
  const int64_t G = a->gsub, sts = a->hd + 2, ch0 = first_pos(a, t) / CHUNK, n_ch = n_chunks(a, t) - ch0;
  float *wk = a->wk + (int64_t)ith * a->wk_stride, *st = wk + bl_attn_work(a->hd);
  for (int64_t ch = 0; ch < n_ch; ch++) attn_chunk(a, wk, t, u, ch0 + ch, st + ch * G * sts);
  const int64_t hb = unit_head(a, u);
  for (int64_t hh = 0; hh < G; hh++) merge_head(a, t, hb + hh, st + hh * sts, n_ch, G * sts);
}

void bl_attn_core_plan(bl_attn_core *a, int64_t qtile, int64_t max_pos, int nth, size_t bytes[3]) {
  const int exact = bl_exact(a->c);
  a->qtile = qtile > 0 ? qtile : 1;
  a->n_chunk = (max_pos + CHUNK) / CHUNK;
  a->split = !exact && !a->window && a->n_chunk > 1 && a->n_tok * n_units(a) < 2 * nth;
  a->wk_stride = exact ? a->c->p.kv_ctx : bl_attn_work(a->hd) + a->qtile * a->n_chunk * a->gsub * (a->hd + 2);
  a->wk_stride = (a->wk_stride + 15) & ~(int64_t)15;
  bytes[0] = sizeof(int32_t) * (size_t)(a->n_tok + 1);
  bytes[1] = sizeof(float) * (size_t)(a->split ? a->n_tok * a->nh * a->n_chunk * (a->hd + 2) : 0);
  bytes[2] = sizeof(float) * (size_t)(nth * a->wk_stride);
}

void bl_attn_core_bind(bl_attn_core *a, void *qt, void *part, void *wk) {
  a->qt = qt;
  a->part = part;
  a->wk = wk;
  a->n_qt = 0;
  for (int64_t t = 0; t < a->n_tok;) {
    int64_t e = t + 1;
    while (e < a->n_tok && e - t < a->qtile && a->seq[e] == a->seq[t]) e++;
    a->qt[a->n_qt++] = (int32_t)t;
    t = e;
  }
  a->qt[a->n_qt] = (int32_t)a->n_tok;
  bl_counter_reset(&a->c_att);
  bl_counter_reset(&a->c_merge);
}

void bl_attn_core_run(bl_attn_core *a, int ith) {
  const int64_t nu = n_units(a);
  if (bl_exact(a->c)) {
    for (int64_t i; (i = bl_claim(&a->c_att, 1)) < a->n_tok * a->nh;) attn_exact(a, ith, i / a->nh, i % a->nh);
  } else if (a->window) {
    for (int64_t i; (i = bl_claim(&a->c_att, 1)) < a->n_tok * nu;) attn_window_item(a, ith, i / nu, i % nu);
  } else if (!a->split) {
    /* items of (unit, tile of query tokens), the tiles of the latest tokens (the longest) first */
    const int64_t items = a->n_qt * nu;
    for (int64_t i; (i = bl_claim(&a->c_att, 1)) < items;) {
      const int64_t r = items - 1 - i, q = r / nu;
      attn_tile(a, ith, r % nu, a->qt[q], a->qt[q + 1]);
    }
  } else {
    /* few tokens, long contexts: every chunk an item, the same states merged the same way */
    const int64_t G = a->gsub, sts = a->hd + 2, per_tok = nu * a->n_chunk, nsl = a->group / a->gsub;
    float *wk = a->wk + (int64_t)ith * a->wk_stride;
    for (int64_t i; (i = bl_claim(&a->c_att, 1)) < a->n_tok * per_tok;) {
      const int64_t t = i / per_tok, u = (i % per_tok) / a->n_chunk, ch = i % a->n_chunk;
      if (ch < n_chunks(a, t)) attn_chunk(a, wk, t, u, ch, a->part + ((t * nu + u) * a->n_chunk + ch) * G * sts);
    }
    bl_pool_barrier_ith(a->c->pool, ith);
    for (int64_t i; (i = bl_claim(&a->c_merge, 1)) < a->n_tok * a->nh;) {
      const int64_t t = i / a->nh, h = i % a->nh, hh = h % a->group, u = (h / a->group) * nsl + hh / G, hs = hh % G;
      merge_head(a, t, h, a->part + ((t * nu + u) * a->n_chunk) * G * sts + hs * sts, n_chunks(a, t), G * sts);
    }
  }
}
