/* bloomery CPU library: the vocabulary-wide part of a sampling step (bl_sample_candidates,
 * bl_sample_argmax). Follows llama.cpp's src/llama-sampler.cpp for the stages that act on the
 * whole row: logit bias, repetition penalties (repeat / frequency / presence), top-n-sigma;
 * then the top k candidates in (logit desc, id asc) order and softmax statistics of the whole
 * adjusted row, so that the sampling chain in TypeScript touches only candidates. The row is
 * never copied or written: sparse changes are kept as patches, masks as a threshold. */
#include "common.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HEAP_MAX 4096 /* above this many candidates a radix sort of the whole row is cheaper */

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline int v4_any(v4i m) {
  uint64_t q[2];
  memcpy(q, &m, sizeof q);
  return (q[0] | q[1]) != 0;
}

/* Whether any of the 16 values at p is above t or NaN (the scans' rare case). */
static inline int any16_above_or_nan(const float *p, float t) {
  v4f a, b, c, d;
  memcpy(&a, p, 16);
  memcpy(&b, p + 4, 16);
  memcpy(&c, p + 8, 16);
  memcpy(&d, p + 12, 16);
  const v4i m = (a > t) | (b > t) | (c > t) | (d > t) | (a != a) | (b != b) | (c != c) | (d != d);
  return v4_any(m);
}

/* ---- thread-local work buffers (one row is sampled by one thread at a time) ---- */

typedef struct {
  void *p;
  size_t cap;
} tbuf;

static _Thread_local tbuf tb_pid, tb_pcur, tb_pstamp, tb_heap_v, tb_heap_i, tb_rad_a, tb_rad_b;

static void *tbuf_get(tbuf *b, size_t bytes) {
  if (bytes == 0) bytes = 8;
  if (b->cap < bytes) {
    void *q = realloc(b->p, bytes);
    if (!q) return NULL;
    b->p = q;
    b->cap = bytes;
  }
  return b->p;
}

/* ---- patches: the ids some op touches, with their current values ---- */

typedef struct {
  int32_t *id;   /* sorted, unique */
  float *cur;    /* current adjusted value */
  int32_t *stamp;
  int64_t n;
} patches;

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static int64_t patch_find(const patches *p, int32_t id) {
  int64_t lo = 0, hi = p->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (p->id[mid] < id) lo = mid + 1;
    else hi = mid;
  }
  return lo < p->n && p->id[lo] == id ? lo : -1;
}

static int op_is_sparse(int64_t kind) {
  return kind == BL_SAMPLE_OP_ADD || kind == BL_SAMPLE_OP_BAN || kind == BL_SAMPLE_OP_PENALTY;
}

static int64_t check_ops(const bl_sample_op *ops, int64_t n_ops, int64_t n_vocab, int64_t *total) {
  int64_t t = 0;
  for (int64_t o = 0; o < n_ops; o++) {
    const bl_sample_op *op = &ops[o];
    if (op->kind != BL_SAMPLE_OP_ADD && op->kind != BL_SAMPLE_OP_BAN && op->kind != BL_SAMPLE_OP_PENALTY &&
        op->kind != BL_SAMPLE_OP_NSIGMA)
      return bl_fail(BL_E_INVAL, "sample op %lld: unknown kind %lld", (long long)o, (long long)op->kind);
    if (op->kind == BL_SAMPLE_OP_NSIGMA) {
      if (!isfinite(op->a)) return bl_fail(BL_E_INVAL, "sample op %lld: top-n-sigma n is not finite", (long long)o);
      continue;
    }
    if (op->n < 0 || op->n > n_vocab * 64)
      return bl_fail(BL_E_INVAL, "sample op %lld: bad entry count %lld", (long long)o, (long long)op->n);
    if (op->n > 0 && !op->ids) return bl_fail(BL_E_INVAL, "sample op %lld: null ids", (long long)o);
    if (op->n > 0 && op->kind != BL_SAMPLE_OP_BAN && !op->values)
      return bl_fail(BL_E_INVAL, "sample op %lld: null values", (long long)o);
    if (op->kind == BL_SAMPLE_OP_PENALTY) {
      double r = op->a;
      if (!isfinite(r) || r <= 0 || !isfinite(1.0 / r))
        return bl_fail(BL_E_INVAL, "sample op %lld: repeat penalty %g must be finite and greater than 0", (long long)o, r);
      if (!isfinite(op->b) || !isfinite(op->c))
        return bl_fail(BL_E_INVAL, "sample op %lld: frequency and presence penalties must be finite", (long long)o);
    }
    const int32_t *ids = (const int32_t *)(uintptr_t)op->ids;
    const float *vals = (const float *)(uintptr_t)op->values;
    for (int64_t e = 0; e < op->n; e++) {
      if (ids[e] < 0 || ids[e] >= n_vocab)
        return bl_fail(BL_E_INVAL, "sample op %lld: token id %d outside the vocabulary (%lld)", (long long)o, ids[e],
                       (long long)n_vocab);
      if (op->kind == BL_SAMPLE_OP_ADD && (isnan(vals[e]) || vals[e] == INFINITY))
        return bl_fail(BL_E_INVAL, "sample op %lld: bias of token %d is %g", (long long)o, ids[e], (double)vals[e]);
      if (op->kind == BL_SAMPLE_OP_PENALTY && !(vals[e] >= 0 && vals[e] <= 1e9f))
        return bl_fail(BL_E_INVAL, "sample op %lld: count of token %d is %g", (long long)o, ids[e], (double)vals[e]);
    }
    t += op->n;
  }
  *total = t;
  return BL_OK;
}

static int64_t build_patches(const float *row, const bl_sample_op *ops, int64_t n_ops, int64_t total, patches *p) {
  p->id = tbuf_get(&tb_pid, (size_t)total * sizeof(int32_t));
  p->cur = tbuf_get(&tb_pcur, (size_t)total * sizeof(float));
  p->stamp = tbuf_get(&tb_pstamp, (size_t)total * sizeof(int32_t));
  if (!p->id || !p->cur || !p->stamp) return bl_fail(BL_E_NOMEM, "sampling: out of memory for %lld patches", (long long)total);
  int64_t m = 0;
  for (int64_t o = 0; o < n_ops; o++) {
    if (!op_is_sparse(ops[o].kind)) continue;
    memcpy(p->id + m, (const int32_t *)(uintptr_t)ops[o].ids, (size_t)ops[o].n * sizeof(int32_t));
    m += ops[o].n;
  }
  qsort(p->id, (size_t)m, sizeof(int32_t), cmp_i32);
  int64_t u = 0;
  for (int64_t i = 0; i < m; i++)
    if (u == 0 || p->id[u - 1] != p->id[i]) p->id[u++] = p->id[i];
  p->n = u;
  for (int64_t j = 0; j < u; j++) {
    p->cur[j] = row[p->id[j]];
    p->stamp[j] = -1;
  }
  return BL_OK;
}

/* ---- the effective row: unpatched values masked by a threshold, patched values as they are ---- */

typedef struct {
  const float *row;
  int64_t n;
  const patches *p;
  float teff; /* unpatched values below this are masked (-inf) */
} eff_row;

/* Statistics of the finite effective values, in two passes as llama's top-n-sigma takes them. */
static void nsigma_stats(const eff_row *r, float *out_max, double *out_mean, double *out_std, int64_t *out_count) {
  float mx = -INFINITY;
  double sum = 0;
  int64_t cnt = 0;
  int64_t start = 0;
  for (int64_t j = 0; j <= r->p->n; j++) {
    int64_t end = j < r->p->n ? r->p->id[j] : r->n;
    for (int64_t i = start; i < end; i++) {
      float x = r->row[i];
      if (x == -INFINITY || x < r->teff) continue;
      if (x > mx) mx = x;
      sum += x;
      cnt++;
    }
    if (j < r->p->n) {
      float x = r->p->cur[j];
      if (x != -INFINITY) {
        if (x > mx) mx = x;
        sum += x;
        cnt++;
      }
    }
    start = end + 1;
  }
  double mean = cnt > 0 ? sum / (double)cnt : 0;
  double acc = 0;
  start = 0;
  for (int64_t j = 0; j <= r->p->n; j++) {
    int64_t end = j < r->p->n ? r->p->id[j] : r->n;
    for (int64_t i = start; i < end; i++) {
      float x = r->row[i];
      if (x == -INFINITY || x < r->teff) continue;
      acc += ((double)x - mean) * ((double)x - mean);
    }
    if (j < r->p->n && r->p->cur[j] != -INFINITY) acc += ((double)r->p->cur[j] - mean) * ((double)r->p->cur[j] - mean);
    start = end + 1;
  }
  *out_max = mx;
  *out_mean = mean;
  *out_std = cnt > 0 ? sqrt(acc / (double)cnt) : 0;
  *out_count = cnt;
}

static int64_t run_ops(const bl_sample_op *ops, int64_t n_ops, eff_row *r, patches *p) {
  for (int64_t o = 0; o < n_ops; o++) {
    const bl_sample_op *op = &ops[o];
    const int32_t *ids = (const int32_t *)(uintptr_t)op->ids;
    const float *vals = (const float *)(uintptr_t)op->values;
    switch (op->kind) {
    case BL_SAMPLE_OP_ADD:
      for (int64_t e = 0; e < op->n; e++) p->cur[patch_find(p, ids[e])] += vals[e];
      break;
    case BL_SAMPLE_OP_BAN:
      for (int64_t e = 0; e < op->n; e++) p->cur[patch_find(p, ids[e])] = -INFINITY;
      break;
    case BL_SAMPLE_OP_PENALTY: {
      const float rep = (float)op->a, freq = (float)op->b, pres = (float)op->c;
      for (int64_t e = 0; e < op->n; e++) {
        int64_t j = patch_find(p, ids[e]);
        if (p->stamp[j] == (int32_t)o)
          return bl_fail(BL_E_INVAL, "sample op %lld: token %d is listed twice in one penalty op", (long long)o, ids[e]);
        p->stamp[j] = (int32_t)o;
        const float count = vals[e];
        if (!(count > 0)) continue;
        float x = p->cur[j];
        /* llama: a repeated token's logit is divided by the penalty when positive and multiplied
         * when not, then count * frequency + presence is subtracted. */
        if (x <= 0) x *= rep;
        else x /= rep;
        x -= count * freq + 1.0f * pres;
        p->cur[j] = x;
      }
      break;
    }
    case BL_SAMPLE_OP_NSIGMA: {
      if (op->a <= 0 || r->n <= 1) break;
      float mx;
      double mean, sd;
      int64_t cnt;
      nsigma_stats(r, &mx, &mean, &sd, &cnt);
      (void)mean;
      if (cnt == 0) break;
      const float thr = mx - (float)op->a * (float)sd;
      for (int64_t j = 0; j < p->n; j++)
        if (p->cur[j] < thr) p->cur[j] = -INFINITY;
      if (thr > r->teff) r->teff = thr;
      break;
    }
    default:
      break;
    }
  }
  return BL_OK;
}

/* ---- top-k by a heap whose root is the worst kept candidate ---- */

static inline int worse(float va, int32_t ia, float vb, int32_t ib) { return va < vb || (va == vb && ia > ib); }

typedef struct {
  float *v;
  int32_t *id;
  int64_t size, cap;
} heap_t;

static void heap_sift_down(heap_t *h, int64_t i) {
  for (;;) {
    int64_t l = 2 * i + 1, r = l + 1, w = i;
    if (l < h->size && worse(h->v[l], h->id[l], h->v[w], h->id[w])) w = l;
    if (r < h->size && worse(h->v[r], h->id[r], h->v[w], h->id[w])) w = r;
    if (w == i) return;
    float tv = h->v[i];
    int32_t ti = h->id[i];
    h->v[i] = h->v[w];
    h->id[i] = h->id[w];
    h->v[w] = tv;
    h->id[w] = ti;
    i = w;
  }
}

static void heap_push(heap_t *h, float v, int32_t id) {
  if (h->size < h->cap) {
    int64_t i = h->size++;
    while (i > 0) {
      int64_t up = (i - 1) / 2;
      if (!worse(v, id, h->v[up], h->id[up])) break;
      h->v[i] = h->v[up];
      h->id[i] = h->id[up];
      i = up;
    }
    h->v[i] = v;
    h->id[i] = id;
    return;
  }
  if (!worse(h->v[0], h->id[0], v, id)) return;
  h->v[0] = v;
  h->id[0] = id;
  heap_sift_down(h, 0);
}

/* Scans the effective row in id order; returns the number of NaN / +inf raw values seen. */
static int64_t heap_scan(const eff_row *r, heap_t *h, int64_t *first_bad) {
  int64_t bad = 0;
  int64_t start = 0;
  const float teff = r->teff;
  for (int64_t j = 0; j <= r->p->n; j++) {
    int64_t end = j < r->p->n ? r->p->id[j] : r->n;
    int64_t i = start;
    for (; i < end && h->size < h->cap; i++) {
      float x = r->row[i];
      if (!(x <= FLT_MAX) && x != -INFINITY) {
        if (!bad++) *first_bad = i;
        continue;
      }
      heap_push(h, x < teff ? -INFINITY : x, (int32_t)i);
    }
    float root = h->size ? h->v[0] : INFINITY;
    while (i < end) {
      if (end - i >= 16 && !any16_above_or_nan(r->row + i, root)) {
        i += 16;
        continue;
      }
      const int64_t stop = end - i >= 16 ? i + 16 : end;
      for (; i < stop; i++) {
        float x = r->row[i];
        if (x > root) {
          if (x > FLT_MAX) {
            if (!bad++) *first_bad = i;
            continue;
          }
          if (x < teff) continue; /* masked: -inf never beats a full heap's root */
          heap_push(h, x, (int32_t)i);
          root = h->v[0];
        } else if (x != x) {
          if (!bad++) *first_bad = i;
        }
      }
    }
    if (j < r->p->n) heap_push(h, r->p->cur[j], r->p->id[j]);
    start = end + 1;
  }
  return bad;
}

/* Pops the heap into out (best first). */
static void heap_drain(heap_t *h, int32_t *out_ids, float *out_v) {
  while (h->size > 0) {
    int64_t last = --h->size;
    out_ids[last] = h->id[0];
    out_v[last] = h->v[0];
    h->v[0] = h->v[last];
    h->id[0] = h->id[last];
    heap_sift_down(h, 0);
  }
}

/* ---- full order by LSD radix sort of (logit desc) keys over id-ordered input ---- */

static inline uint32_t key_desc(float v) {
  v += 0.0f; /* -0 sorts with +0, as float comparison has them */
  uint32_t u;
  memcpy(&u, &v, 4);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with the float */
  return ~u;
}

static inline float key_value(uint32_t k) {
  uint32_t u = ~k;
  u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
  float v;
  memcpy(&v, &u, 4);
  return v;
}

static int64_t radix_select(const eff_row *r, int64_t k, int32_t *out_ids, float *out_v, int64_t *first_bad, int64_t *n_bad) {
  const int64_t n = r->n;
  uint64_t *a = tbuf_get(&tb_rad_a, (size_t)n * 8), *b = tbuf_get(&tb_rad_b, (size_t)n * 8);
  if (!a || !b) return bl_fail(BL_E_NOMEM, "sampling: out of memory sorting %lld logits", (long long)n);
  int64_t bad = 0, start = 0;
  for (int64_t j = 0; j <= r->p->n; j++) {
    int64_t end = j < r->p->n ? r->p->id[j] : n;
    for (int64_t i = start; i < end; i++) {
      float x = r->row[i];
      if (!(x <= FLT_MAX) && x != -INFINITY) {
        if (!bad++) *first_bad = i;
        x = -INFINITY;
      }
      if (x < r->teff) x = -INFINITY;
      a[i] = ((uint64_t)key_desc(x) << 32) | (uint32_t)i;
    }
    if (j < r->p->n) a[end] = ((uint64_t)key_desc(r->p->cur[j]) << 32) | (uint32_t)end;
    start = end + 1;
  }
  *n_bad = bad;
  if (bad) return BL_OK;
  static const int shifts[3] = {32, 43, 54};
  static const int widths[3] = {11, 11, 10};
  uint32_t count[2048];
  for (int pass = 0; pass < 3; pass++) {
    const int sh = shifts[pass];
    const uint64_t mask = (1u << widths[pass]) - 1;
    memset(count, 0, sizeof count);
    for (int64_t i = 0; i < n; i++) count[(a[i] >> sh) & mask]++;
    if (count[(a[0] >> sh) & mask] == (uint32_t)n) continue; /* one digit everywhere: order unchanged */
    uint32_t sum = 0;
    for (uint64_t d = 0; d <= mask; d++) {
      uint32_t c = count[d];
      count[d] = sum;
      sum += c;
    }
    for (int64_t i = 0; i < n; i++) b[count[(a[i] >> sh) & mask]++] = a[i];
    uint64_t *t = a;
    a = b;
    b = t;
  }
  for (int64_t i = 0; i < k; i++) {
    out_ids[i] = (int32_t)(uint32_t)a[i];
    out_v[i] = key_value((uint32_t)(a[i] >> 32));
  }
  return BL_OK;
}

/* ---- softmax statistics ----
 * exp by 2^t = 2^n * 2^f (n = round(t), |f| <= 1/2) with the degree-7 Taylor polynomial of
 * 2^f (relative error below 1e-7, float rounding included). The bulk runs as GCC vector code,
 * 4 lanes (8 lanes with AVX2 where the CPU has it); sums go to double every 16 vectors.
 * Values with t below -126 count as 0. */

#define EXP_C1 0.6931471805599453f
#define EXP_C2 0.2402265069591007f
#define EXP_C3 0.05550410866482158f
#define EXP_C4 0.009618129107628477f
#define EXP_C5 0.0013333558146428443f
#define EXP_C6 0.00015403530393381606f
#define EXP_C7 1.525273380405984e-05f
#define LOG2E_F 1.4426950408889634f
#define ROUND_MAGIC 12582912.0f /* 1.5 * 2^23: adding and subtracting it rounds to an integer */

static inline float exp_nonpos(float x) { /* e^x for -200 <= x <= 0 */
  float t = x * LOG2E_F;
  if (t < -126.0f) return 0.0f;
  float nf = (t + ROUND_MAGIC) - ROUND_MAGIC;
  float f = t - nf;
  float q = 1.0f + f * (EXP_C1 + f * (EXP_C2 + f * (EXP_C3 + f * (EXP_C4 + f * (EXP_C5 + f * (EXP_C6 + f * EXP_C7))))));
  int32_t bits;
  memcpy(&bits, &q, 4);
  bits += (int32_t)((uint32_t)(int32_t)nf << 23);
  memcpy(&q, &bits, 4);
  return q;
}

/* out = e^x lane-wise for vectors x in [-200, 0] (VF float lanes, VI int lanes). */
#define VEXP_NONPOS(VF, VI, x, out)                                                  \
  do {                                                                               \
    const VF t0_ = (x) * LOG2E_F;                                                    \
    const VI keep_ = t0_ >= -126.0f;                                                 \
    const VF t_ = (VF)((keep_ & (VI)t0_) | (~keep_ & (VI)((VF){0} - 126.0f)));       \
    const VF nf_ = (t_ + ROUND_MAGIC) - ROUND_MAGIC;                                 \
    const VF f_ = t_ - nf_;                                                          \
    VF q_ = f_ * EXP_C7 + EXP_C6;                                                    \
    q_ = q_ * f_ + EXP_C5;                                                           \
    q_ = q_ * f_ + EXP_C4;                                                           \
    q_ = q_ * f_ + EXP_C3;                                                           \
    q_ = q_ * f_ + EXP_C2;                                                           \
    q_ = q_ * f_ + EXP_C1;                                                           \
    q_ = q_ * f_ + 1.0f;                                                             \
    const VI n_ = __builtin_convertvector(nf_, VI);                                  \
    (out) = (VF)(keep_ & ((VI)q_ + (n_ << 23)));                                     \
  } while (0)

/* d clamped below at -200 (so -inf becomes a value whose exp is 0) */
#define VCLAMP200(VF, VI, d)                                                         \
  do {                                                                               \
    const VI ok_ = (d) >= -200.0f;                                                   \
    (d) = (VF)((ok_ & (VI)(d)) | (~ok_ & (VI)((VF){0} - 200.0f)));                   \
  } while (0)

typedef struct {
  double z1, s1, zs, ss;
  int64_t finite;
} smx_acc;

/* Whole blocks of 16 vectors of row[i, b); returns where it stopped. */
#define SMX_BLOCKS(VF, VI, W)                                                        \
  while (b - i >= 16 * (W)) {                                                        \
    VF z1 = {0}, s1 = {0}, zs = {0}, ss = {0}, cnt = {0};                            \
    for (int blk = 0; blk < 16; blk++, i += (W)) {                                   \
      VF x;                                                                          \
      memcpy(&x, row + i, sizeof x);                                                 \
      const VI valid = (x >= teff) & (x > -INFINITY);                                \
      VF d = x - mx;                                                                 \
      VCLAMP200(VF, VI, d);                                                          \
      VF e1;                                                                         \
      VEXP_NONPOS(VF, VI, d, e1);                                                    \
      e1 = (VF)(valid & (VI)e1);                                                     \
      z1 += e1;                                                                      \
      s1 += e1 * d;                                                                  \
      cnt += (VF)(valid & (VI)((VF){0} + 1.0f));                                     \
      if (two) {                                                                     \
        VF ds = d * scale;                                                           \
        VCLAMP200(VF, VI, ds);                                                       \
        VF es;                                                                       \
        VEXP_NONPOS(VF, VI, ds, es);                                                 \
        es = (VF)(valid & (VI)es);                                                   \
        zs += es;                                                                    \
        ss += es * ds;                                                               \
      }                                                                              \
    }                                                                                \
    for (int l = 0; l < (W); l++) {                                                  \
      acc->z1 += z1[l];                                                              \
      acc->s1 += s1[l];                                                              \
      acc->zs += zs[l];                                                              \
      acc->ss += ss[l];                                                              \
      acc->finite += (int64_t)cnt[l];                                                \
    }                                                                                \
  }                                                                                  \
  return i

static int64_t smx_blocks_v4(smx_acc *acc, const float *row, int64_t i, int64_t b, float teff, float mx, float scale, int two) {
  SMX_BLOCKS(v4f, v4i, 4);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(BL_SAMPLE_NO_AVX2)
#define SMX_HAVE_AVX2 1
__attribute__((target("avx2,fma"))) static int64_t smx_blocks_v8(smx_acc *acc, const float *row, int64_t i, int64_t b, float teff,
                                                                 float mx, float scale, int two) {
  typedef float v8f __attribute__((vector_size(32)));
  typedef int32_t v8i __attribute__((vector_size(32)));
  SMX_BLOCKS(v8f, v8i, 8);
}

static int cpu_avx2(void) {
  static int have = -1; /* every thread that races here computes the same value */
  int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
  if (h < 0) {
    __builtin_cpu_init();
    h = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    __atomic_store_n(&have, h, __ATOMIC_RELAXED);
  }
  return h;
}
#endif

static inline void smx_add(smx_acc *a, float x, float mx, float scale, int two) {
  if (x == -INFINITY) return;
  float d = x - mx;
  if (d < -200.0f) d = -200.0f;
  float e1 = exp_nonpos(d);
  a->z1 += e1;
  a->s1 += (double)e1 * d;
  if (two) {
    float ds = d * scale;
    if (ds < -200.0f) ds = -200.0f;
    float es = exp_nonpos(ds);
    a->zs += es;
    a->ss += (double)es * ds;
  }
  a->finite++;
}

/* Unpatched values row[a, b), masked below teff. */
static void smx_range(smx_acc *acc, const float *row, int64_t a, int64_t b, float teff, float mx, float scale, int two) {
  int64_t i = a;
#ifdef SMX_HAVE_AVX2
  if (cpu_avx2()) i = smx_blocks_v8(acc, row, i, b, teff, mx, scale, two);
#endif
  i = smx_blocks_v4(acc, row, i, b, teff, mx, scale, two);
  for (; i < b; i++) {
    float x = row[i];
    if (x < teff) continue;
    smx_add(acc, x, mx, scale, two);
  }
}

static void softmax_stats(const eff_row *r, float mx, float scale, smx_acc *acc) {
  memset(acc, 0, sizeof *acc);
  if (mx == -INFINITY) return;
  const int two = scale != 1.0f;
  int64_t start = 0;
  for (int64_t j = 0; j <= r->p->n; j++) {
    int64_t end = j < r->p->n ? r->p->id[j] : r->n;
    smx_range(acc, r->row, start, end, r->teff, mx, scale, two);
    if (j < r->p->n) smx_add(acc, r->p->cur[j], mx, scale, two);
    start = end + 1;
  }
  if (!two) {
    acc->zs = acc->z1;
    acc->ss = acc->s1;
  }
}

/* ---- entry points ---- */

int64_t bl_sample_candidates(bl_sample_args *a) {
  if (!a) return bl_fail(BL_E_INVAL, "bl_sample_candidates: null arguments");
  a->n_out = 0;
  for (int i = 0; i < 6; i++) a->stats[i] = 0;
  const float *row = (const float *)(uintptr_t)a->logits;
  const int64_t n = a->n_vocab;
  if (!row) return bl_fail(BL_E_INVAL, "bl_sample_candidates: null logits");
  if (n <= 0 || n > INT32_MAX) return bl_fail(BL_E_INVAL, "bl_sample_candidates: bad vocabulary size %lld", (long long)n);
  if (a->n_ops < 0 || (a->n_ops > 0 && !a->ops))
    return bl_fail(BL_E_INVAL, "bl_sample_candidates: bad op list (%lld ops)", (long long)a->n_ops);
  if (a->k < 0) return bl_fail(BL_E_INVAL, "bl_sample_candidates: negative k %lld", (long long)a->k);
  const int64_t k = a->k < n ? a->k : n;
  if (k > 0 && (!a->out_ids || !a->out_logits)) return bl_fail(BL_E_INVAL, "bl_sample_candidates: null output buffers");
  if (a->want_stats && !(isfinite(a->scale) && a->scale > 0))
    return bl_fail(BL_E_INVAL, "bl_sample_candidates: stats scale %g must be finite and greater than 0", a->scale);

  const bl_sample_op *ops = (const bl_sample_op *)(uintptr_t)a->ops;
  int64_t total = 0, st = check_ops(ops, a->n_ops, n, &total);
  if (st != BL_OK) return st;
  patches p;
  st = build_patches(row, ops, a->n_ops, total, &p);
  if (st != BL_OK) return st;
  for (int64_t j = 0; j < p.n; j++)
    if (!(p.cur[j] <= FLT_MAX) && p.cur[j] != -INFINITY)
      return bl_fail(BL_E_INVAL, "sampling: logit of token %d is %g", p.id[j], (double)p.cur[j]);
  eff_row r = {row, n, &p, -INFINITY};
  st = run_ops(ops, a->n_ops, &r, &p);
  if (st != BL_OK) return st;
  for (int64_t j = 0; j < p.n; j++)
    if (!(p.cur[j] <= FLT_MAX) && p.cur[j] != -INFINITY)
      return bl_fail(BL_E_INVAL, "sampling: adjusted logit of token %d overflows to %g", p.id[j], (double)p.cur[j]);

  /* The candidates (at least the best one, for the statistics' maximum). */
  const int64_t kk = k > 0 ? k : 1;
  int32_t one_id;
  float one_v;
  int32_t *oid = k > 0 ? (int32_t *)(uintptr_t)a->out_ids : &one_id;
  float *ov = k > 0 ? (float *)(uintptr_t)a->out_logits : &one_v;
  int64_t bad = 0, first_bad = -1;
  if (kk <= HEAP_MAX && kk * 8 <= n) {
    heap_t h = {tbuf_get(&tb_heap_v, (size_t)kk * sizeof(float)), tbuf_get(&tb_heap_i, (size_t)kk * sizeof(int32_t)), 0, kk};
    if (!h.v || !h.id) return bl_fail(BL_E_NOMEM, "sampling: out of memory for %lld candidates", (long long)kk);
    bad = heap_scan(&r, &h, &first_bad);
    if (!bad) heap_drain(&h, oid, ov);
  } else {
    st = radix_select(&r, kk, oid, ov, &first_bad, &bad);
    if (st != BL_OK) return st;
  }
  if (bad)
    return bl_fail(BL_E_INVAL, "sampling: the logits row has %lld NaN or +inf values (first at token %lld)", (long long)bad,
                   (long long)first_bad);
  a->n_out = k;

  if (a->want_stats) {
    smx_acc acc;
    softmax_stats(&r, ov[0], (float)a->scale, &acc);
    a->stats[0] = ov[0];
    a->stats[1] = (double)acc.finite;
    a->stats[2] = acc.z1;
    a->stats[3] = acc.s1;
    a->stats[4] = acc.zs;
    a->stats[5] = acc.ss;
  }
  return BL_OK;
}

int64_t bl_sample_argmax(const float *logits, int64_t n_vocab, int64_t *out_id) {
  if (!logits || !out_id) return bl_fail(BL_E_INVAL, "bl_sample_argmax: null argument");
  if (n_vocab <= 0 || n_vocab > INT32_MAX) return bl_fail(BL_E_INVAL, "bl_sample_argmax: bad vocabulary size %lld", (long long)n_vocab);
  int64_t best = 0, bad = 0, first_bad = -1;
  float bv = -INFINITY;
  for (int64_t i = 0; i < n_vocab; i++) {
    if (n_vocab - i >= 16 && !any16_above_or_nan(logits + i, bv)) {
      i += 15;
      continue;
    }
    float x = logits[i];
    if (x > bv) {
      if (x > FLT_MAX) {
        if (!bad++) first_bad = i;
        continue;
      }
      bv = x;
      best = i;
    } else if (x != x) {
      if (!bad++) first_bad = i;
    }
  }
  if (bad)
    return bl_fail(BL_E_INVAL, "bl_sample_argmax: the logits row has %lld NaN or +inf values (first at token %lld)", (long long)bad,
                   (long long)first_bad);
  *out_id = best;
  return BL_OK;
}
