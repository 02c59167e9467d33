/* bloomery CPU library: what the kernels keep in the CPU context (per-worker rows, growable
 * scratch), the set-up around one forward (path, -t / -tb thread count, pinning the caller), the
 * exported thread setter, and entry points that run one path's kernels alone (for tests). */
#include "ctx.h"
#include "common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *aligned(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 64, n ? n : 64) != 0) return NULL;
  return p;
}

static int64_t alloc_rows(bl_cpu_ctx *c) {
  free(c->wrow);
  c->wrow = aligned(sizeof(float) * (size_t)(bl_pool_size(c->pool) * c->widest));
  return c->wrow ? BL_OK : bl_fail(BL_E_NOMEM, "ctx: out of memory");
}

int64_t bl_prof_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The profile of a context's life (BLOOMERY_PROF): where the forward time went. */
static void prof_print(const bl_cpu_ctx *c) {
  if (!c->prof || c->prof_forwards == 0) return;
  const double tot = (double)c->prof_ns[BL_PROF_FORWARD];
  const double a = c->prof_ns[BL_PROF_ATTN], m = c->prof_ns[BL_PROF_MOE], o = c->prof_ns[BL_PROF_MATMUL];
  fprintf(stderr, "bloomery cpu profile: %lld forwards, %lld tokens, %.1f ms: attention %.1f%%, moe/ffn %.1f%%, other matmuls %.1f%%, rest %.1f%%\n",
          (long long)c->prof_forwards, (long long)c->prof_tokens, tot / 1e6, 100 * a / tot, 100 * m / tot, 100 * o / tot,
          100 * (tot - a - m - o) / tot);
  int64_t w[64];
  const int n = bl_pool_size(c->pool) < 64 ? bl_pool_size(c->pool) : 64;
  bl_pool_wait_ns(c->pool, w, n);
  for (int i = 0; i < n; i++) fprintf(stderr, "  worker %d waited %.1f%% of the forward time in barriers\n", i, 100 * (double)w[i] / tot);
}

int64_t bl_cpu_ext_init(bl_cpu_ctx *c) {
  int64_t s = bl_cpu_path_check();
  if (s != BL_OK) return s;
  c->kern = bl_kern();
  c->n_threads = c->n_threads_batch = bl_pool_size(c->pool);
  c->widest = c->p.n_embd;
  if (c->p.max_ff > c->widest) c->widest = c->p.max_ff;
  if (c->p.max_q_dim > c->widest) c->widest = c->p.max_q_dim;
  return alloc_rows(c);
}

void bl_cpu_ext_free(bl_cpu_ctx *c) {
  if (c->pool) prof_print(c);
  free(c->wrow);
  free(c->scratch);
  c->wrow = NULL;
  c->scratch = NULL;
  c->scratch_cap = 0;
}

void *bl_cpu_scratch(bl_cpu_ctx *c, size_t bytes) {
  if (bytes > c->scratch_cap) {
    free(c->scratch);
    c->scratch_cap = 0;
    c->scratch = aligned(bytes);
    if (!c->scratch) return NULL;
    c->scratch_cap = bytes;
  }
  return c->scratch;
}

int64_t bl_cpu_begin(bl_cpu_ctx *c, int64_t n_tok) {
  int64_t s = bl_cpu_path_check();
  if (s != BL_OK) return s;
  c->kern = bl_kern();
  bl_pool_set_active(c->pool, (int)(n_tok > 1 ? c->n_threads_batch : c->n_threads));
  if (!c->stay_pinned) bl_pool_enter(c->pool);
  else if (!c->pinned_set || !pthread_equal(c->pinned_thread, pthread_self())) {
    bl_pool_pin_caller(c->pool);
    c->pinned_thread = pthread_self();
    c->pinned_set = 1;
  }
  if (c->prof) {
    c->prof_t0 = bl_prof_now();
    c->prof_forwards++;
    c->prof_tokens += n_tok;
  }
  return BL_OK;
}

void bl_cpu_end(bl_cpu_ctx *c) {
  bl_prof_add(c, BL_PROF_FORWARD, c->prof_t0);
  if (!c->stay_pinned) bl_pool_leave(c->pool);
}

int64_t bl_cpu_ctx_set_threads(uint64_t h, int64_t n_threads, int64_t n_threads_batch) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  if (!c) return bl_fail(BL_E_INVAL, "set_threads: null context");
  if (n_threads < 1 || n_threads_batch < 1 || n_threads > 4096 || n_threads_batch > 4096)
    return bl_fail(BL_E_INVAL, "set_threads: thread counts %lld and %lld (each must be 1..4096)", (long long)n_threads,
                   (long long)n_threads_batch);
  const int64_t want = n_threads > n_threads_batch ? n_threads : n_threads_batch;
  const int cores = bl_usable_cores();
  const int64_t size = want < cores ? want : cores;
  if (size != bl_pool_size(c->pool)) {
    bl_pool *p = bl_pool_new_with((int)size, &c->opt);
    if (!p) return bl_fail(BL_E_NOMEM, "set_threads: cannot start %lld threads", (long long)size);
    bl_pool_free(c->pool);
    c->pool = p;
    int64_t s = alloc_rows(c);
    if (s != BL_OK) return s;
  }
  c->n_threads = n_threads < size ? n_threads : size;
  c->n_threads_batch = n_threads_batch < size ? n_threads_batch : size;
  return BL_OK;
}

int64_t bl_cpu_ctx_threads(uint64_t h, int64_t *n_threads, int64_t *n_threads_batch) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  if (!c || !n_threads || !n_threads_batch) return bl_fail(BL_E_INVAL, "ctx_threads: null argument");
  *n_threads = c->n_threads;
  *n_threads_batch = c->n_threads_batch;
  return BL_OK;
}

int64_t bl_cpu_usable_cores(void) { return bl_usable_cores(); }

/* ---- one path's kernels alone ---- */

/* A path by name; "<path>+lanes" asks for its lane-order kernels of batches (*lanes = 1). */
static const bl_kernels *path_kernels(const char *path, int *lanes) {
  *lanes = 0;
  if (!path || !*path) return bl_kern();
  char name[32];
  if (strlen(path) >= sizeof name) return NULL;
  strcpy(name, path);
  char *plus = strchr(name, '+');
  if (plus) {
    if (strcmp(plus, "+lanes") != 0) return NULL;
    *plus = 0;
    *lanes = 1;
  }
  const int p = bl_path_by_name(name);
  const bl_kernels *k = p < 0 ? NULL : bl_kern_path((bl_path)p);
  return k && *lanes && !k->act_q8k_lanes ? NULL : k;
}

static int64_t bad_path(const char *fn, const char *path) {
  return bl_fail(BL_E_UNSUPPORTED, "%s: '%s' is not a path this CPU runs (scalar, avx2, avx512, neon, dotprod, i8mm; avx512+lanes)", fn, path);
}

int64_t bl_kernel_quantize(const char *path, int64_t act_type, const float *x, void *dst, int64_t n) {
  int lanes;
  const bl_kernels *k = path_kernels(path, &lanes);
  if (!k) return bad_path("bl_kernel_quantize", path);
  const bl_type_traits *tr = bl_traits((int32_t)act_type);
  if (!tr || !k->act[act_type]) return bl_fail(BL_E_UNSUPPORTED, "bl_kernel_quantize: type %lld is not an activation type", (long long)act_type);
  if (n < 0 || n % tr->block_elems) return bl_fail(BL_E_INVAL, "bl_kernel_quantize: %s: %lld elements", tr->name, (long long)n);
  if (n && (!x || !dst)) return bl_fail(BL_E_INVAL, "bl_kernel_quantize: null buffer");
  const int lane_order = lanes && act_type == BL_Q8_K;
  if (n) (lane_order ? k->act_q8k_lanes : k->act[act_type])(x, dst, n);
#if defined(__x86_64__) /* lane-order activations are the AVX-512 path's only */
  if (lane_order) /* back to element order, to compare with the reference */
    for (int64_t b = 0; b < n / BL_QK_K; b++) {
      int8_t *qs = (int8_t *)dst + b * 292 + 4;
      int8_t tmp[256];
      bl_avx512_q8k_from_lanes(qs, tmp);
      memcpy(qs, tmp, 256);
    }
#endif
  return BL_OK;
}

int64_t bl_kernel_matmul(const char *path, int64_t type, const void *w, int64_t row_stride, int64_t rows, const float *x,
                         int64_t n_x, int64_t n, float *y) {
  int lanes;
  const bl_kernels *k = path_kernels(path, &lanes);
  if (!k) return bad_path("bl_kernel_matmul", path);
  const bl_type_traits *tr = bl_traits((int32_t)type);
  if (!tr || !tr->vec_dot || !k->tile[type]) return bl_fail(BL_E_UNSUPPORTED, "bl_kernel_matmul: type %lld has no product", (long long)type);
  const int32_t vt = tr->vec_dot_type;
  lanes = lanes && vt == BL_Q8_K && k->tile_lanes[type];
  const bl_act_fn act = lanes ? k->act_q8k_lanes : k->act[vt];
  const bl_tile_fn tile = lanes ? k->tile_lanes[type] : k->tile[type];
  const int64_t rb = bl_row_bytes(vt, n);
  if (n <= 0 || rb < 0 || bl_row_bytes((int32_t)type, n) > row_stride || rows < 0 || n_x < 0)
    return bl_fail(BL_E_INVAL, "bl_kernel_matmul: %s: bad shape (n %lld, stride %lld, rows %lld, n_x %lld)", tr->name,
                   (long long)n, (long long)row_stride, (long long)rows, (long long)n_x);
  if ((rows && !w) || (n_x && (!x || !y))) return bl_fail(BL_E_INVAL, "bl_kernel_matmul: null buffer");
  uint8_t *q = aligned((size_t)(rb * (n_x ? n_x : 1)));
  if (!q) return bl_fail(BL_E_NOMEM, "bl_kernel_matmul: out of memory");
  for (int64_t i = 0; i < n_x; i++) act(x + i * n, q + i * rb, n);
  /* odd tiles on purpose: every activation count 1..BL_TILE_A and a varying number of rows */
  for (int64_t i0 = 0, step = 1; i0 < n_x; i0 += step, step = step % BL_TILE_A + 1) {
    const int na = (int)(n_x - i0 < step ? n_x - i0 : step);
    const uint8_t *a[BL_TILE_A];
    for (int r0 = 0, nw = 1; r0 < rows; r0 += nw, nw = nw % 5 + 1) {
      const int cnt = (int)(rows - r0 < nw ? rows - r0 : nw);
      float *yp[BL_TILE_A];
      for (int r = 0; r < na; r++) {
        a[r] = q + (i0 + r) * rb;
        yp[r] = y + (i0 + r) * rows + r0;
      }
      tile(n, (const uint8_t *)w + r0 * row_stride, row_stride, cnt, a, na, yp);
    }
  }
  free(q);
  return BL_OK;
}

/* The float helpers of a path: op 0 dot_f32, 1 dot_f16, 2 axpy_f16, 3 to_f16, 4 round_f16, 5 swiglu,
 * 6 exp_sum, 7 axpy_f32, 8 scale_f32. Arguments as the helper takes them; the scalar result
 * (dot, sum) in *r. */
int64_t bl_kernel_float(const char *path, int64_t op, float a, const void *x, void *y, int64_t n, double *r) {
  int lanes;
  const bl_kernels *k = path_kernels(path, &lanes);
  if (!k) return bad_path("bl_kernel_float", path);
  if (n < 0 || (n && (!x || !y)) || !r) return bl_fail(BL_E_INVAL, "bl_kernel_float: bad arguments");
  *r = 0;
  switch (op) {
    case 0: *r = k->dot_f32(x, y, n); break;
    case 1: *r = k->dot_f16(x, y, n); break;
    case 2: k->axpy_f16(a, x, y, n); break;
    case 3: k->to_f16(x, y, n); break;
    case 4: memcpy(y, x, sizeof(float) * (size_t)n); k->round_f16(y, n); break;
    case 5: k->swiglu(y, x, n); break;
    case 6: memcpy(y, x, sizeof(float) * (size_t)n); *r = k->exp_sum(y, a, n); break;
    case 7: k->axpy_f32(a, x, y, n); break;
    case 8: memcpy(y, x, sizeof(float) * (size_t)n); k->scale_f32(a, y, n); break;
    default: return bl_fail(BL_E_INVAL, "bl_kernel_float: unknown op %lld", (long long)op);
  }
  return BL_OK;
}

/* Time one path's tile on `rows` weight rows (type, n elements, stride ws) against na activation
 * rows converted once, on n_threads pinned threads taking items of tile_rows rows from an atomic
 * counter (as matmul does): the best of `reps` passes, in ns of wall time. */
typedef struct {
  const bl_kernels *k;
  bl_tile_fn tile;
  int64_t type, n, ws, rows, na, tile_rows;
  const uint8_t *w;
  const uint8_t *const *a;
  float *y;
  bl_counter ctr;
} kbench_job;

static void kbench_task(void *arg, int ith, int nth) {
  kbench_job *j = arg;
  (void)ith;
  (void)nth;
  for (int64_t i; (i = bl_claim(&j->ctr, 1)) * j->tile_rows < j->rows;) {
    const int64_t r0 = i * j->tile_rows;
    float *yp[BL_TILE_A];
    for (int64_t r = 0; r < j->na; r++) yp[r] = j->y + r * j->rows + r0;
    j->tile(j->n, j->w + r0 * j->ws, j->ws, (int)(j->rows - r0 < j->tile_rows ? j->rows - r0 : j->tile_rows), j->a,
                        (int)j->na, yp);
  }
}

int64_t bl_kernel_bench(const char *path, int64_t type, const void *w, int64_t ws, int64_t rows, int64_t n, int64_t na,
                        int64_t tile_rows, int64_t n_threads, int64_t reps, double *best_ns) {
  int lanes;
  const bl_kernels *k = path_kernels(path, &lanes);
  if (!k) return bad_path("bl_kernel_bench", path);
  const bl_type_traits *tr = bl_traits((int32_t)type);
  if (!tr || !tr->vec_dot || !k->tile[type]) return bl_fail(BL_E_UNSUPPORTED, "bl_kernel_bench: type %lld has no product", (long long)type);
  const int32_t vt = tr->vec_dot_type;
  const int64_t rb = bl_row_bytes(vt, n);
  if (n <= 0 || rb < 0 || na < 1 || na > BL_TILE_A || rows < 1 || tile_rows < 1 || reps < 1 || n_threads < 1 || !w || !best_ns)
    return bl_fail(BL_E_INVAL, "bl_kernel_bench: bad arguments");
  uint8_t *q = aligned((size_t)(rb * na));
  float *x = aligned(sizeof(float) * (size_t)n), *y = aligned(sizeof(float) * (size_t)(rows * na));
  bl_pool *pool = bl_pool_new((int)n_threads);
  if (!q || !x || !y || !pool) {
    free(q), free(x), free(y);
    if (pool) bl_pool_free(pool);
    return bl_fail(BL_E_NOMEM, "bl_kernel_bench: out of memory");
  }
  for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
  lanes = lanes && vt == BL_Q8_K && k->tile_lanes[type];
  const uint8_t *a[BL_TILE_A];
  for (int64_t r = 0; r < na; r++) {
    (lanes ? k->act_q8k_lanes : k->act[vt])(x, q + r * rb, n);
    a[r] = q + r * rb;
  }
  kbench_job j = {k, lanes ? k->tile_lanes[type] : k->tile[type], type, n, ws, rows, na, tile_rows, w, a, y, {0}};
  double best = 1e300;
  bl_pool_enter(pool);
  for (int64_t it = 0; it < reps; it++) {
    bl_counter_reset(&j.ctr);
    const int64_t t0 = bl_prof_now();
    bl_pool_run(pool, kbench_task, &j);
    const double ns = (double)(bl_prof_now() - t0);
    if (ns < best) best = ns;
  }
  bl_pool_leave(pool);
  bl_pool_free(pool);
  free(q), free(x), free(y);
  *best_ns = best;
  return BL_OK;
}
