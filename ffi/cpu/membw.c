/* bloomery CPU library: a memory read-bandwidth probe (bl_membw): pinned threads each stream
 * their share of a buffer larger than the caches with wide loads, best of several rounds. */
#define _GNU_SOURCE
#include "common.h"
#include "pool.h"
#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  const uint8_t *buf;
  int64_t bytes;
  uint64_t sink[64];
} bw_job;

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t read_wide(const uint8_t *p, int64_t n) {
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
#elif defined(__aarch64__)
/* 128-byte steps in four 32-byte pair loads (ldp q), as wide as Advanced SIMD reads */
static uint64_t read_wide(const uint8_t *p, int64_t n) {
  uint8x16_t a0 = vdupq_n_u8(0), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 128 <= n; i += 128) {
    const uint8x16x2_t x = vld1q_u8_x2(p + i), y = vld1q_u8_x2(p + i + 32), z = vld1q_u8_x2(p + i + 64), w = vld1q_u8_x2(p + i + 96);
    a0 = veorq_u8(a0, veorq_u8(x.val[0], x.val[1]));
    a1 = veorq_u8(a1, veorq_u8(y.val[0], y.val[1]));
    a2 = veorq_u8(a2, veorq_u8(z.val[0], z.val[1]));
    a3 = veorq_u8(a3, veorq_u8(w.val[0], w.val[1]));
  }
  const uint64x2_t r = vreinterpretq_u64_u8(veorq_u8(veorq_u8(a0, a1), veorq_u8(a2, a3)));
  return vgetq_lane_u64(r, 0) ^ vgetq_lane_u64(r, 1);
}
#endif

static uint64_t read_plain(const uint8_t *p, int64_t n) {
  uint64_t s = 0;
  for (int64_t i = 0; i + 8 <= n; i += 64) {
    uint64_t v;
    memcpy(&v, p + i, 8);
    s ^= v;
  }
  return s;
}

static int has_wide = 0;

static void bw_task(void *a, int ith, int nth) {
  bw_job *j = a;
  int64_t lo, hi;
  bl_split(j->bytes / 4096, ith, nth, &lo, &hi);
  const uint8_t *p = j->buf + lo * 4096;
  const int64_t n = (hi - lo) * 4096;
  #if defined(__x86_64__) || defined(__aarch64__)
  j->sink[ith % 64] ^= has_wide ? read_wide(p, n) : read_plain(p, n);
#else
  j->sink[ith % 64] ^= read_plain(p, n);
#endif
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
#if defined(__x86_64__)
  has_wide = __builtin_cpu_supports("avx2");
#elif defined(__aarch64__)
  has_wide = 1;
#endif
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
