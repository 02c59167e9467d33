// bloomery CUDA library: fetching into L2 the bytes a later kernel of a decode step reads, by the
// blocks of an earlier one (FAST_L2KV: the one-token Q/K/V product fetches the slot's cached keys
// and values for the attention). One token's kernels are bound by chains of memory round
// trips, not by DRAM bandwidth (~18% of it in use): a kernel that can only copy its rows once it
// runs (its blocks wait for the SMs the previous kernel holds, or for the picks) finds them in
// L2 when an earlier kernel asked for them while DRAM was idle. Prefetches are hints with no
// effect on values; a block takes an equal share of every range.
#pragma once
#include "common.cuh"
#include "internal.h"
#include "window.cuh"

#define L2PF_CHUNK 4096 // bytes one bulk prefetch asks for (sm_90 on)

// Bytes [p, p + bytes) into L2 (16-byte granules; the range is widened to them).
__device__ __forceinline__ void l2pf_bytes(const void *p, size_t bytes, int tid, int nthreads) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(uintptr_t)15;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes + 15) & ~(uintptr_t)15;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  for (a += (uintptr_t)tid * L2PF_CHUNK; a < e; a += (uintptr_t)nthreads * L2PF_CHUNK) {
    const unsigned n = (unsigned)(e - a < L2PF_CHUNK ? e - a : L2PF_CHUNK);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(a), "r"(n) : "memory");
  }
#else
  for (a += (uintptr_t)tid * 32; a < e; a += (uintptr_t)nthreads * 32) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a));
#endif
}

// Block part of nparts asks for its share of [p, p + bytes) (every thread calls it).
__device__ __forceinline__ void l2pf_share(const void *p, size_t bytes, int part, int nparts) {
  if (!p || !bytes || nparts < 1) return;
  const size_t b0 = bytes * (size_t)part / (size_t)nparts, b1 = bytes * (size_t)(part + 1) / (size_t)nparts;
  if (b1 > b0) l2pf_bytes(reinterpret_cast<const uint8_t *>(p) + b0, b1 - b0, threadIdx.x, blockDim.x);
}

// Block part of nparts asks for its share of the slot's cached keys and values the attention reads
// (every thread calls it). The cache rows' count comes from the step's position (read from memory the host
// filled before the step).
__device__ __forceinline__ void l2pf_issue(const l2_pf &f, int part, int nparts) {
  if (f.kc) {
    // (a sliding window of w positions: the w - 1 rows before the token's, which the attention reads)
    const int pos = __ldg(f.pos), lo = attn_first(pos + 1, f.window);
    const size_t off = ((size_t)__ldg(f.seq) * (size_t)f.slot_stride) + (size_t)lo * f.kd, bytes = (size_t)(pos > lo ? pos - lo : 0) * (size_t)f.kd * 2;
    l2pf_share(f.kc + off, bytes, part, nparts);
    l2pf_share(f.vc + off, bytes, part, nparts);
  }
}
