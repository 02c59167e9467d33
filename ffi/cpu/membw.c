/* bloomery CPU library: a memory read-bandwidth probe (bl_membw): pinned threads each stream
 * their share of a buffer larger than the caches with wide loads, best of several rounds. */
#define _GNU_SOURCE
#include "common.h"
#include "pool.h"
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  const uint8_t *buf;
  int64_t bytes;
  uint64_t sink[64];
} bw_job;

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, int64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
  }
  a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return (uint64_t)_mm256_extract_epi64(a0, 0) ^ (uint64_t)_mm256_extract_epi64(a0, 3);
}

static uint64_t read_plain(const uint8_t *p, int64_t n) {
  uint64_t s = 0;
  for (int64_t i = 0; i + 8 <= n; i += 64) {
    uint64_t v;
    memcpy(&v, p + i, 8);
    s ^= v;
  }
  return s;
}

static int has_avx2 = 0;

static void bw_task(void *a, int ith, int nth) {
  bw_job *j = a;
  int64_t lo, hi;
  bl_split(j->bytes / 4096, ith, nth, &lo, &hi);
  const uint8_t *p = j->buf + lo * 4096;
  const int64_t n = (hi - lo) * 4096;
  j->sink[ith % 64] ^= has_avx2 ? read_avx2(p, n) : read_plain(p, n);
}

static void touch_task(void *a, int ith, int nth) {
  bw_job *j = a;
  int64_t lo, hi;
  bl_split(j->bytes / 4096, ith, nth, &lo, &hi);
  memset((uint8_t *)j->buf + lo * 4096, ith + 1, (size_t)((hi - lo) * 4096));
}

int64_t bl_membw(int64_t n_threads, int64_t bytes, int64_t reps, double *gbps) {
  if (n_threads < 1 || bytes < (1 << 20) || reps < 1 || !gbps)
    return bl_fail(BL_E_INVAL, "bl_membw: need threads >= 1, at least 1 MiB, reps >= 1 and an output");
  bytes = bytes / 4096 * 4096;
  uint8_t *buf = NULL;
  if (posix_memalign((void **)&buf, 4096, (size_t)bytes) != 0) return bl_fail(BL_E_NOMEM, "bl_membw: cannot allocate %lld bytes", (long long)bytes);
  bl_pool *p = bl_pool_new((int)n_threads);
  if (!p) {
    free(buf);
    return bl_fail(BL_E_NOMEM, "bl_membw: cannot start threads");
  }
  has_avx2 = __builtin_cpu_supports("avx2");
  bw_job j = {buf, bytes, {0}};
  bl_pool_enter(p);
  bl_pool_run(p, touch_task, &j); /* first touch by the readers (their pages, their node) */
  double best = 0;
  for (int64_t r = 0; r < reps; r++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bl_pool_run(p, bw_task, &j);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (s > 0 && bytes / s / 1e9 > best) best = bytes / s / 1e9;
  }
  bl_pool_leave(p);
  bl_pool_free(p);
  free(buf);
  *gbps = best;
  return BL_OK;
}
