/* bloomery CPU library: the thread pool (pool.h). Workers are pinned to the allowed cores in
 * order (worker 0, the caller, to the first); a job is published by bumping a generation
 * counter that idle workers spin on for BLOOMERY_SPIN_US microseconds (default 1000) and then
 * sleep on with a futex. BLOOMERY_PIN=0 turns pinning off. */
#define _GNU_SOURCE
#include "pool.h"
#include "../bloomery.h"
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 512
/* Pauses (~40 us on Zen 4) a worker waits in a job before it starts yielding its core: long enough
 * for a balanced barrier, short enough not to hold a core another runnable thread needs. */
#define BL_SPIN_YIELD 2000

struct bl_pool {
  int n, active, pin;
  int cpu[MAX_THREADS];
  pthread_t *threads;
  _Atomic uint32_t gen; /* futex word: job sequence (low 22 bits) and its thread count (high 10) */
  _Atomic int sleepers;
  _Atomic int pending;  /* active workers (other than 0) still running the job */
  _Atomic int stop;
  int job_nth;
  uint32_t seq;
  bl_task_fn fn;
  void *arg;
  _Atomic int bar_count;
  _Atomic uint32_t bar_gen;
  int64_t spin_ns;
  int prof;                    /* BLOOMERY_PROF: time spent waiting in jobs, per worker */
  int64_t wait_ns[MAX_THREADS];
  cpu_set_t saved;
  int saved_ok;
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val) {
  return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void relax(void) {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield" ::: "memory");
#endif
}

/* CPU quota of the cgroup (v2 cpu.max, else v1 cfs files), rounded up; 0 when unlimited. */
static int cgroup_cpus(void) {
  long long quota = -1, period = 0;
  FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
  if (f) {
    char q[32] = {0};
    if (fscanf(f, "%31s %lld", q, &period) == 2 && strcmp(q, "max") != 0) quota = atoll(q);
    fclose(f);
  } else {
    f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
    if (f) {
      if (fscanf(f, "%lld", &quota) != 1) quota = -1;
      fclose(f);
    }
    f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
    if (f) {
      if (fscanf(f, "%lld", &period) != 1) period = 0;
      fclose(f);
    }
  }
  if (quota <= 0 || period <= 0) return 0;
  return (int)((quota + period - 1) / period);
}

/* The allowed CPUs of this thread, in order, into cpus (at most max); returns the count. */
static int allowed_cpus(int *cpus, int max) {
  cpu_set_t set;
  int n = 0;
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 0; i < c && n < max; i++) cpus[n++] = i;
    return n > 0 ? n : 1;
  }
  for (int i = 0; i < CPU_SETSIZE && n < max; i++)
    if (CPU_ISSET(i, &set)) cpus[n++] = i;
  return n > 0 ? n : 1;
}

int bl_usable_cores(void) {
  int cpus[MAX_THREADS];
  int n = allowed_cpus(cpus, MAX_THREADS);
  int q = cgroup_cpus();
  return q > 0 && q < n ? q : n;
}

static void pin_self(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

typedef struct {
  bl_pool *p;
  int ith;
} worker_arg;

static void *worker(void *a) {
  worker_arg wa = *(worker_arg *)a;
  free(a);
  bl_pool *p = wa.p;
  if (p->pin) pin_self(p->cpu[wa.ith]);
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    int64_t t0 = 0;
    unsigned spins = 0;
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
      relax();
      if ((++spins & 255) != 0) continue;
      int64_t t = now_ns();
      if (t0 == 0) t0 = t;
      if (t - t0 < p->spin_ns) continue;
      atomic_fetch_add(&p->sleepers, 1);
      if (atomic_load(&p->gen) == seen) futex(&p->gen, FUTEX_WAIT_PRIVATE, seen);
      atomic_fetch_sub(&p->sleepers, 1);
      t0 = 0;
    }
    seen = g;
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
    /* the word carries the job's thread count, so a worker that wakes late for a job it is
     * not part of never reads a later job's fields */
    const int nth = (int)(g >> 22);
    if (wa.ith < nth) {
      p->fn(p->arg, wa.ith, nth);
      atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
  }
}

static void publish(bl_pool *p, int nth) {
  p->seq = (p->seq + 1) & 0x3fffffu;
  atomic_store(&p->gen, p->seq | ((uint32_t)nth << 22));
  if (atomic_load(&p->sleepers) > 0) futex(&p->gen, FUTEX_WAKE_PRIVATE, INT_MAX);
}

bl_pool *bl_pool_new(int n_threads) { return bl_pool_new_with(n_threads, NULL); }

bl_pool *bl_pool_new_with(int n_threads, const bl_cpu_options *o) {
  bl_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  int avail = allowed_cpus(p->cpu, MAX_THREADS);
  int usable = bl_usable_cores();
  if (n_threads < 1) n_threads = 1;
  if (n_threads > usable) n_threads = usable;
  if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
  p->n = n_threads;
  p->active = n_threads;
  p->pin = !(o && o->pin == 0) && avail >= n_threads;
  p->prof = o && o->profile != 0;
  p->spin_ns = (o && o->spin_us >= 0 ? o->spin_us : 1000) * 1000;
  p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
  if (!p->threads) {
    free(p);
    return NULL;
  }
  for (int i = 1; i < n_threads; i++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) {
      p->n = i;
      bl_pool_free(p);
      return NULL;
    }
    wa->p = p;
    wa->ith = i;
    if (pthread_create(&p->threads[i], NULL, worker, wa) != 0) {
      free(wa);
      p->n = i;
      bl_pool_free(p);
      return NULL;
    }
  }
  return p;
}

void bl_pool_free(bl_pool *p) {
  if (!p) return;
  atomic_store(&p->stop, 1);
  publish(p, 0);
  for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
  free(p->threads);
  free(p);
}

int bl_pool_size(const bl_pool *p) { return p->n; }

void bl_pool_set_active(bl_pool *p, int n) { p->active = n < 1 ? 1 : n > p->n ? p->n : n; }

int bl_pool_active(const bl_pool *p) { return p->active; }

void bl_pool_run(bl_pool *p, bl_task_fn fn, void *arg) {
  const int nth = p->active;
  p->job_nth = nth;
  if (nth == 1) {
    fn(arg, 0, 1);
    return;
  }
  p->fn = fn;
  p->arg = arg;
  atomic_store(&p->bar_count, 0);
  atomic_store_explicit(&p->pending, nth - 1, memory_order_release);
  publish(p, nth);
  fn(arg, 0, nth);
  const int64_t t0 = p->prof ? now_ns() : 0;
  unsigned spins = 0;
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
    if (++spins > BL_SPIN_YIELD) sched_yield();
    else relax();
  }
  if (p->prof) p->wait_ns[0] += now_ns() - t0;
}

void bl_pool_barrier_ith(bl_pool *p, int ith) {
  const int nth = p->job_nth;
  if (nth <= 1) return;
  const int64_t t0 = p->prof ? now_ns() : 0;
  const uint32_t g = atomic_load_explicit(&p->bar_gen, memory_order_acquire);
  if (atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) == nth - 1) {
    atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->bar_gen, 1, memory_order_acq_rel);
    return;
  }
  unsigned spins = 0;
  while (atomic_load_explicit(&p->bar_gen, memory_order_acquire) == g) {
    if (++spins > BL_SPIN_YIELD) sched_yield();
    else relax();
  }
  if (p->prof && ith >= 0 && ith < MAX_THREADS) p->wait_ns[ith] += now_ns() - t0;
}

void bl_pool_barrier(bl_pool *p) { bl_pool_barrier_ith(p, -1); }

void bl_pool_wait_ns(const bl_pool *p, int64_t *out, int n) {
  for (int i = 0; i < n; i++) out[i] = i < p->n ? p->wait_ns[i] : 0;
}

void bl_pool_enter(bl_pool *p) {
  p->saved_ok = 0;
  if (!p->pin || p->n < 2) return;
  if (pthread_getaffinity_np(pthread_self(), sizeof p->saved, &p->saved) == 0) {
    p->saved_ok = 1;
    pin_self(p->cpu[0]);
  }
}

void bl_pool_pin_caller(bl_pool *p) {
  if (p->pin && p->n >= 2) pin_self(p->cpu[0]);
}

void bl_pool_leave(bl_pool *p) {
  if (p->saved_ok) pthread_setaffinity_np(pthread_self(), sizeof p->saved, &p->saved);
  p->saved_ok = 0;
}
