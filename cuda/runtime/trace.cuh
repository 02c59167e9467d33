// bloomery CUDA library: the kernel timeline tracer, compiled in only with -DBL_TRACE (a
// measurement build: `bun scripts/build-native.ts --trace`). Thread 0 of every block of a
// traced kernel stamps the global timer when the block starts, when it passes the wait on the
// previous kernel (cu_pdl_wait / cu_pdl_entry) and when it leaves, and appends one record; the
// host writes the records to BLOOMERY_CUDA_TRACE's file when a context is freed
// (scripts/trace-report.ts reads them). Without BL_TRACE every hook is empty.
#pragma once
#include <stdint.h>

struct tr_rec {
  uint32_t tag;  // the kernel (BL_TR_SCOPE's number)
  uint32_t grid; // blocks in the launch
  uint64_t t0, tw, te; // ns: start, past the wait (0: thread 0 did not wait), end
  uint64_t m1, m2, m3; // ns: BL_TR_MARK(1) / (2) / (3) in thread 0, where the kernel has them (else 0)
  uint64_t pad;
};

#ifdef BL_TRACE
// Each translation unit has its own copy of these (no relocatable device code): every unit
// registers a setter at load time, and the host installs the buffer in all of them.
static __device__ tr_rec *g_tr_buf;
static __device__ unsigned *g_tr_n;
static __device__ unsigned g_tr_cap_dev;
int cu_trace_register(void (*set)(tr_rec *, unsigned *, unsigned));
static void tr_set_unit(tr_rec *b, unsigned *n, unsigned cap) {
  cudaMemcpyToSymbol(g_tr_buf, &b, sizeof b);
  cudaMemcpyToSymbol(g_tr_n, &n, sizeof n);
  cudaMemcpyToSymbol(g_tr_cap_dev, &cap, sizeof cap);
}
static int g_tr_registered = cu_trace_register(tr_set_unit);

__device__ __forceinline__ uint64_t tr_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// The block's stamps (thread 0 writes and reads them): 0 the wait, 1-3 the marks.
__device__ __forceinline__ uint64_t *tr_slots() {
  __shared__ uint64_t w[4];
  return w;
}
struct tr_scope {
  uint32_t tag;
  uint64_t t0;
  __device__ __forceinline__ explicit tr_scope(uint32_t t) : tag(t), t0(0) {
    if (threadIdx.x == 0) {
      t0 = tr_now();
      tr_slots()[0] = tr_slots()[1] = tr_slots()[2] = tr_slots()[3] = 0;
    }
  }
  __device__ __forceinline__ ~tr_scope() {
    if (threadIdx.x != 0 || !g_tr_buf) return;
    const uint64_t te = tr_now();
    const unsigned i = atomicAdd(g_tr_n, 1u);
    if (i >= g_tr_cap_dev) return;
    tr_rec r;
    r.tag = tag;
    r.grid = gridDim.x * gridDim.y * gridDim.z;
    r.t0 = t0;
    r.tw = tr_slots()[0];
    r.te = te;
    r.m1 = tr_slots()[1];
    r.m2 = tr_slots()[2];
    r.m3 = tr_slots()[3];
    r.pad = 0;
    g_tr_buf[i] = r;
  }
};
#define BL_TR_SCOPE(tag) tr_scope bl_tr_scope_(tag)
#define BL_TR_WAITED()                                  \
  do {                                                  \
    if (threadIdx.x == 0) tr_slots()[0] = tr_now();     \
  } while (0)
#define BL_TR_MARK(i)                                   \
  do {                                                  \
    if (threadIdx.x == 0) tr_slots()[i] = tr_now();     \
  } while (0)
#else
#define BL_TR_MARK(i) ((void)0)
#define BL_TR_SCOPE(tag) ((void)0)
#define BL_TR_WAITED() ((void)0)
#endif
