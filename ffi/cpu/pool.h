/* bloomery CPU library: a fixed thread pool; the caller's thread takes part as worker 0. */
#ifndef BL_POOL_H
#define BL_POOL_H
#include <stdint.h>

typedef void (*bl_task_fn)(void *arg, int ith, int nth);
typedef struct bl_pool bl_pool;

bl_pool *bl_pool_new(int n_threads); /* NULL on failure */
void bl_pool_free(bl_pool *p);
int bl_pool_size(const bl_pool *p);
/* Run fn(arg, ith, nth) on every worker and wait for all of them. */
void bl_pool_run(bl_pool *p, bl_task_fn fn, void *arg);

/* Split [0, n) evenly: the range of worker ith. */
static inline void bl_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
  int64_t per = (n + nth - 1) / nth;
  *lo = per * ith;
  *hi = *lo + per;
  if (*lo > n) *lo = n;
  if (*hi > n) *hi = n;
}
#endif
