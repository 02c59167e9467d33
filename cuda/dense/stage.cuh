// bloomery CUDA library: staging for the one-token decode kernels - asynchronous 16-byte copies of
// weight rows into a warp's shared buffer (cp.async, all of a row's copies in flight at once, so a
// row costs one memory round trip, and issued before the wait on the previous kernel when the
// rows do not depend on it), one activation row loaded with all of a thread's loads in flight
// (optionally RMS-normalised), and a row's dot product decoded from the shared copy.
#pragma once
#include "common.cuh"
#include "quants.cuh"
#include "dot8.cuh"

// Programmatic dependent launch (cu_pdl_entry): wait for the previous kernel's results, then let
// the next kernel be scheduled. Work before cu_pdl_wait may only read what no kernel of the step writes.
__device__ __forceinline__ void cu_pdl_wait() { cu_pdl_entry(); }

// Bulk copies by the tensor memory accelerator (sm_90+): one thread issues a whole contiguous range
// (16-byte aligned, a multiple of 16 bytes) into shared memory, counted on an mbarrier that the
// block's threads then wait on (phase 0: one use a launch). Callers take this path only on sm_90+.
__device__ __forceinline__ void mbar_init(uint64_t *m) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(m)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// The one arrival, expecting `bytes` of bulk copies.
// Shared memory the block's threads wrote or read (generic proxy) before a bulk copy writes it
// (async proxy): each thread fences, then a barrier precedes the copy's issue.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_expect(uint64_t *m, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(m)), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *m) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(smem_u32(dst)), "l"(src), "r"(bytes),
               "r"(smem_u32(m))
               : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait0(uint64_t *m) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  while (!done)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(smem_u32(m)) : "memory");
#endif
}

// A flag read with acquire semantics at GPU scope (what its writer wrote before raising it is visible).
__device__ __forceinline__ int ld_acquire_gpu(const int *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
// 16 bytes from global to shared memory, or 16 zero bytes where !full (nothing is read then).
__device__ __forceinline__ void cp_async16_or_zero(void *smem, const void *gmem, bool full) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(full ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Closes the thread's copies issued since the last commit into a group.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// bytes (a multiple of 16) of rows already quantized into dot8.cuh's x8 layout (global memory,
// 16-byte aligned, written by an earlier kernel: call after the wait) copied into dst (shared) as
// they lie, by cp.async with all of the thread's copies in flight at once; with xb > 0 the rows
// (xb bytes each) land xs bytes apart. Every thread of the block calls it; commits the copies as
// one group (the caller waits on it, then a block barrier).
__device__ __forceinline__ void x8_copy_async(uint8_t *dst, const uint8_t *src, int bytes, int xb = 0, int xs = 0) {
  const int per = xb > 0 ? xb >> 4 : bytes >> 4;
  for (int c = threadIdx.x; c < bytes >> 4; c += blockDim.x) {
    const int r = xb > 0 ? c / per : 0;
    cp_async16(dst + (size_t)r * (xb > 0 ? xs : 0) + 16 * (c - r * per), src + 16 * (size_t)c);
  }
  cp_async_commit();
}
// An int8 row of n values another kernel quantized (x8_bytes(n) bytes in dot8.cuh's layout) copied
// into mem as it lies; waits for every copy of the thread (ends with a barrier; every thread calls it).
__device__ __forceinline__ x8v x8_copy_row(uint8_t *mem, const uint8_t *src, int n) {
  x8_copy_async(mem, src, x8_bytes(n));
  cp_async_wait_all();
  __syncthreads();
  return x8_at(mem, n);
}
// Waits until at most the newest group of the thread's copies is still in flight.
__device__ __forceinline__ void cp_async_wait_group1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
// Waits until at most the newest N groups of the thread's copies are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_n() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The warp copies bytes [src, src + bytes) into buf (16-byte aligned) as the aligned 16-byte
// chunks covering them (a chunk may reach up to 15 bytes past the range, inside the tensor's
// 256-byte padded slot); returns where src's first byte lands (src's alignment mod 16 is kept).
// The copies complete at cp_async_wait_all + __syncwarp.
__device__ __forceinline__ const uint8_t *warp_copy_async(uint8_t *buf, const uint8_t *src, int bytes, int lane) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(src), a0 = a & ~(uintptr_t)15;
  const int off = (int)(a - a0);
  const int nch = (off + bytes + 15) >> 4;
  for (int c = lane; c < nch; c += 32) cp_async16(buf + 16 * c, reinterpret_cast<const void *>(a0 + 16 * (uintptr_t)c));
  return buf + off;
}
// Bytes a buffer slot needs for a copy of `bytes` at any alignment.
__host__ __device__ constexpr int copy_slot_bytes(int bytes) { return ((bytes + 15 + 15) / 16) * 16; }

// Partial dot product (this lane's units) of `nblk` blocks of a row copied at p with the staged
// activations xb (the window's first element).
template <int T>
__device__ __forceinline__ float dot_window(const uint8_t *p, int nblk, const float *xb, int lane) {
  using Q = qt<T>;
  float acc = 0.0f;
  const int nunits = nblk * Q::UPB;
#pragma unroll 2
  for (int k = lane; k < nunits; k += 32) {
    const int blk = k / Q::UPB, u = k - blk * Q::UPB;
    const float *x = xb + blk * Q::BE;
    Q::unit(p + (size_t)blk * Q::BB, u, [&](int pos, float w0, float w1, float w2, float w3) {
      const float4 xv = *reinterpret_cast<const float4 *>(x + pos);
      acc += w0 * xv.x + w1 * xv.y + w2 * xv.z + w3 * xv.w;
    });
  }
  return acc;
}

// One activation row of n floats (n % 4 == 0, n <= 4 * S * blockDim.x) held in registers, all loads
// in flight: S float4 slots a thread. The kernels take S = 2 where n <= 8 * blockDim.x (a 2,048-wide
// residual at 256 threads): eight slots, mostly unused there, held 64 registers (with the norm's
// weights) and made the one-token products spill at their 80-register cap. Slots past n are never
// read, so the sums and bits are the same for every S that holds the row.
template <int S>
struct xrow_s {
  float4 v[S];
};
using xrow = xrow_s<8>;
template <int S>
__device__ __forceinline__ void xrow_load(xrow_s<S> &r, const float *x, int n) {
  const int n4 = n >> 2;
#pragma unroll
  for (int k = 0; k < S; k++) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n4) r.v[k] = __ldcg(reinterpret_cast<const float4 *>(x) + i);
  }
}
// The scale 1/rms of the n values r holds: each thread's sum of squares in its slots' order, then
// block_sum (barriers: every thread of the block calls it). One owner for the norm that the fused
// router's logits and the experts' staging must form bit for bit alike.
template <int S>
__device__ __forceinline__ float xrow_rms_scale(const xrow_s<S> &r, int n, float eps, float *red) {
  const int n4 = n >> 2;
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < S; k++) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n4) ss += r.v[k].x * r.v[k].x + r.v[k].y * r.v[k].y + r.v[k].z * r.v[k].z + r.v[k].w * r.v[k].w;
  }
  ss = block_sum(ss, red);
  return 1.0f / sqrtf(ss / (float)n + eps);
}
// Stores r to xs, RMS-normalised with weights w (null: none) when norm (the same products as the
// CPU reference: x * (1/rms) * w). Ends with a block barrier; every thread of the block calls it.
// Returns the scale 1/rms (1 without norm).
template <int S>
__device__ __forceinline__ float xrow_store(const xrow_s<S> &r, float *xs, int n, int norm, const float *w, float eps, float *red) {
  const int n4 = n >> 2;
  float4 *xs4 = reinterpret_cast<float4 *>(xs);
  if (!norm) {
#pragma unroll
    for (int k = 0; k < S; k++) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < n4) xs4[i] = r.v[k];
    }
    __syncthreads();
    return 1.0f;
  }
  float4 wv[S];
#pragma unroll
  for (int k = 0; k < S; k++) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n4) wv[k] = w ? __ldg(reinterpret_cast<const float4 *>(w) + i) : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
  }
  const float sc = xrow_rms_scale(r, n, eps, red);
#pragma unroll
  for (int k = 0; k < S; k++) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n4) xs4[i] = make_float4(r.v[k].x * sc * wv[k].x, r.v[k].y * sc * wv[k].y, r.v[k].z * sc * wv[k].z, r.v[k].w * sc * wv[k].w);
  }
  __syncthreads();
  return sc;
}

// x (n floats, n <= 4 * S * blockDim.x) loaded into S slots a thread and stored to xs as xrow_store
// does: every thread of the block calls it; returns the scale.
template <int S>
__device__ __forceinline__ float xrow_stage_s(const float *x, float *xs, int n, int norm, const float *w, float eps, float *red) {
  xrow_s<S> r;
  xrow_load(r, x, n);
  return xrow_store(r, xs, n, norm, w, eps, red);
}
// The same in the fewest slots that hold the row (2 where n <= 8 * blockDim.x, else 8); a longer row
// without a norm (DeepSeek's attention output, 16,384 wide) copied straight to xs.
__device__ __forceinline__ float xrow_stage(const float *x, float *xs, int n, int norm, const float *w, float eps, float *red) {
  if (!norm && n > 32 * (int)blockDim.x) {
    for (int i = threadIdx.x; i < (n >> 2); i += blockDim.x) reinterpret_cast<float4 *>(xs)[i] = __ldcg(reinterpret_cast<const float4 *>(x) + i);
    __syncthreads();
    return 1.0f;
  }
  return n <= 8 * (int)blockDim.x ? xrow_stage_s<2>(x, xs, n, norm, w, eps, red) : xrow_stage_s<8>(x, xs, n, norm, w, eps, red);
}
