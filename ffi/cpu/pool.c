/* bloomery CPU library: thread pool. Workers spin briefly on a generation counter, then
 * sleep on a condition variable; the caller runs worker 0's share itself. */
#define _GNU_SOURCE
#include "pool.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sched.h>

struct bl_pool {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  _Atomic uint64_t gen;     /* bumped for each job */
  _Atomic int pending;      /* workers still running the current job */
  _Atomic int stop;
  bl_task_fn fn;
  void *arg;
};

typedef struct { bl_pool *p; int ith; } worker_arg;

static void *worker(void *a) {
  worker_arg wa = *(worker_arg *)a;
  free(a);
  bl_pool *p = wa.p;
  uint64_t seen = 0;
  for (;;) {
    uint64_t g;
    int spins = 0;
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->stop)) {
      if (++spins < 20000) {
        __builtin_ia32_pause();
        continue;
      }
      pthread_mutex_lock(&p->mu);
      while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = g;
    p->fn(p->arg, wa.ith, p->n);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
  }
}

bl_pool *bl_pool_new(int n_threads) {
  if (n_threads < 1) n_threads = 1;
  bl_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n_threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
  if (!p->threads) { free(p); return NULL; }
  for (int i = 1; i < n_threads; i++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) { p->n = i; bl_pool_free(p); return NULL; }
    wa->p = p;
    wa->ith = i;
    if (pthread_create(&p->threads[i], NULL, worker, wa) != 0) { free(wa); p->n = i; bl_pool_free(p); return NULL; }
  }
  return p;
}

void bl_pool_free(bl_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->threads);
  free(p);
}

int bl_pool_size(const bl_pool *p) { return p->n; }

void bl_pool_run(bl_pool *p, bl_task_fn fn, void *arg) {
  if (p->n == 1) { fn(arg, 0, 1); return; }
  p->fn = fn;
  p->arg = arg;
  atomic_store_explicit(&p->pending, p->n - 1, memory_order_release);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  fn(arg, 0, p->n);
  int spins = 0;
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
    if (++spins > 1000) sched_yield(); else __builtin_ia32_pause();
  }
}
