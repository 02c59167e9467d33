/* bloomery CPU library: a fixed thread pool pinned to the cores the process may use (never more
 * threads than those cores, or than the cgroup's CPU quota). The caller's thread takes part as
 * worker 0 and is pinned only between bl_pool_enter and bl_pool_leave. Idle workers spin for a
 * while, then sleep on a futex. Work inside a job is claimed through atomic counters. */
#ifndef BL_POOL_H
#define BL_POOL_H
#include <stdatomic.h>
#include <stdint.h>

typedef void (*bl_task_fn)(void *arg, int ith, int nth);
typedef struct bl_pool bl_pool;

/* NULL on failure. n_threads is clamped to the usable cores. bl_pool_new: pinned, 1,000 us of
 * spinning, no profile; bl_pool_new_with: as o says (bl_cpu_options; NULL: those defaults). */
struct bl_cpu_options;
bl_pool *bl_pool_new(int n_threads);
bl_pool *bl_pool_new_with(int n_threads, const struct bl_cpu_options *o);
void bl_pool_free(bl_pool *p);
/* Threads the pool has (after clamping). */
int bl_pool_size(const bl_pool *p);
/* How many threads the following jobs run on (1..size). */
void bl_pool_set_active(bl_pool *p, int n);
int bl_pool_active(const bl_pool *p);
/* Run fn(arg, ith, nth) on each active worker and wait for all of them. */
void bl_pool_run(bl_pool *p, bl_task_fn fn, void *arg);
/* Inside a job: wait until every active worker has reached this point (ith: the caller's
 * worker index, for the profile; -1 when unknown). */
void bl_pool_barrier(bl_pool *p);
void bl_pool_barrier_ith(bl_pool *p, int ith);
/* With the profile on (bl_cpu_options.profile): ns each worker (0..n-1) spent waiting inside jobs. */
void bl_pool_wait_ns(const bl_pool *p, int64_t *out, int n);
/* Pin the calling thread to worker 0's core for a run of jobs, and restore its mask after. */
void bl_pool_enter(bl_pool *p);
void bl_pool_leave(bl_pool *p);
/* Pin the calling thread to worker 0's core for good (a thread that only ever runs this pool's jobs). */
void bl_pool_pin_caller(bl_pool *p);
/* The usable cores: allowed CPUs of this process, capped by the cgroup quota. */
int bl_usable_cores(void);

/* An atomic work counter: threads take items [i, i + step) until it passes n. */
typedef struct {
  _Atomic int64_t next;
  char pad[56];
} bl_counter;

static inline void bl_counter_reset(bl_counter *c) { atomic_store_explicit(&c->next, 0, memory_order_relaxed); }
static inline int64_t bl_claim(bl_counter *c, int64_t step) {
  return atomic_fetch_add_explicit(&c->next, step, memory_order_relaxed);
}

/* Split [0, n) evenly: the range of worker ith. */
static inline void bl_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
  int64_t per = (n + nth - 1) / nth;
  *lo = per * ith;
  *hi = *lo + per;
  if (*lo > n) *lo = n;
  if (*hi > n) *hi = n;
}
#endif
