// bloomery CUDA library: shared declarations - the error store, CUDA call checks, ggml type ids,
// the device view of a weight matrix, and small device helpers (fp16, warp reductions).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <utility>

#include "../ffi/bloomery.h"
#include "trace.cuh"

// ---- error store (errors.cu): the message of the last failure on this thread ----
int64_t cu_fail(int64_t status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int64_t cu_fail_cuda(cudaError_t e, const char *what);

#define CU_TRY(call, what)                                   \
  do {                                                       \
    cudaError_t e_ = (call);                                 \
    if (e_ != cudaSuccess) return cu_fail_cuda(e_, (what));  \
  } while (0)
#define CU_LAUNCHED(what) CU_TRY(cudaGetLastError(), (what))
#define CU_OK(expr)                    \
  do {                                 \
    int64_t s_ = (expr);               \
    if (s_ != BL_OK) return s_;        \
  } while (0)

// The shared-memory carveout every kernel prefers (percent of the unified L1/shared memory, or
// -1: the driver picks per launch). One value for all kernels means consecutive kernels never
// make an SM change its L1/shared split. Set by bl_cuda_options.carveout (bl_cuda_weights_new) or the
// context option (process-wide: a kernel attribute).
extern int cu_carveout;
// Kernel attributes set once per (shared-memory limit, carveout): the carveout preference.
template <class K>
int64_t cu_kernel_prefs(K k, const char *what) {
  CU_TRY(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, cu_carveout), what);
  return BL_OK;
}
// Lets kernel k use up to optin bytes of shared memory in all (its static share counted).
template <class K>
int64_t cu_allow_smem(K k, int optin, const char *what) {
  cudaFuncAttributes fa;
  CU_TRY(cudaFuncGetAttributes(&fa, k), what);
  CU_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - (int)fa.sharedSizeBytes), what);
  return cu_kernel_prefs(k, what);
}
// Programmatic dependent launch (sm_90 and newer): a kernel waits for the previous kernel of its
// stream (all of its results visible), then lets the next kernel be scheduled, so launches overlap
// the tails of their predecessors. Without the launch attribute (cu_pdl off, older cards) both
// instructions are no-ops. The two apart: a kernel whose successor's early work would compete with
// its own lets it in later (k_fgu8, once its rows are in).
__device__ __forceinline__ void cu_pdl_wait_only() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  BL_TR_WAITED();
}
__device__ __forceinline__ void cu_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// Every other kernel: the wait, then the next kernel let in at once.
__device__ __forceinline__ void cu_pdl_entry() {
  cu_pdl_wait_only();
  cu_pdl_trigger();
}
// Whether launches carry the attribute: the context whose work this thread enqueues (cu_opts_scope,
// cuda/ctx.h: its bl_cuda_options.pdl, on from sm_90); off outside a context's calls.
extern thread_local int cu_pdl;

// Launches k on st (with the programmatic-serialization attribute when cu_pdl is on and st is
// not the legacy default stream).
template <typename... KArgs, typename... Args>
cudaError_t cu_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, Args &&...args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = (cu_pdl && st != nullptr) ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, k, std::forward<Args>(args)...);
}
#define CU_LAUNCH(what, ...) CU_TRY(cu_launch(__VA_ARGS__), what)

// Dynamic shared memory the launchers plan with (the static shares of the kernels are below 8 KiB).
#define CU_SMEM_RESERVE 8192

// ---- ggml type ids this library reads ----
enum {
  T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8, T_Q2_K = 10, T_Q3_K = 11,
  T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14, T_IQ2_XXS = 16, T_IQ2_XS = 17, T_IQ3_XXS = 18, T_IQ1_S = 19, T_IQ4_NL = 20,
  T_IQ3_S = 21, T_IQ2_S = 22, T_IQ4_XS = 23, T_IQ1_M = 29, T_BF16 = 30, T_MXFP4 = 39
};

// Block geometry of a stored type as the kernels walk it (float types in pseudo-blocks of 4);
// false for types without kernels.
struct cu_type_geom {
  const char *name;
  int be;  // elements per block
  int bb;  // bytes per block
  int upb; // work units per block
  int ue;  // elements per unit
};
bool cu_type_geom_of(int type, cu_type_geom *g);
const char *cu_type_name(int type);

// A weight matrix (or a stack of expert matrices) on the device.
struct dmat {
  const uint8_t *d;
  int32_t type;
  int32_t ne0, ne1, ne2;
  int64_t nb1, nb2;
};

// ---- device helpers ----
// A shared memory address as the 32-bit operand of cp.async / ldmatrix / mbarrier instructions.
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
// A release/acquire fence at GPU scope: with a relaxed atomic after it, the thread's (and, through a
// barrier, its block's) earlier writes are visible to whoever observes the atomic; after an
// atomic, what the atomic observed is visible to the thread's later reads. Not sequentially
// consistent (__threadfence is fence.sc.gpu): none of the flag and counter patterns here needs it.
__device__ __forceinline__ void fence_acq_rel_gpu() {
#if defined(__CUDA_ARCH__)
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
#endif
}
// The block's arrival at a grid-wide counter once every thread's global writes are done: true in
// every thread of the last of n blocks to arrive, which then reads every block's writes (L2
// loads). One thread fences and counts after a barrier, as a grid barrier does (the barrier
// orders the block's writes before its fence), so the block's other threads do not each wait on
// a fence. The caller resets the counter for the next launch.
__device__ __forceinline__ bool last_arrival(int *counter, int n) {
  __shared__ int s_last_arrival;
  __syncthreads();
  if (threadIdx.x == 0) {
    fence_acq_rel_gpu();
    const bool last = atomicAdd(counter, 1) == n - 1;
    if (last) fence_acq_rel_gpu();
    s_last_arrival = last;
  }
  __syncthreads();
  return s_last_arrival != 0;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Eight values' warp sums at once, each formed as warp_sum forms it (the same pairs added at the
// same steps: bit for bit), by 9 shuffles instead of 40: at each step a lane keeps half of its
// values and trades the other half with its partner. Lane l ends with the sum of value (l >> 2) & 7.
__device__ __forceinline__ float warp_sum8(const float (&a)[8]) {
  const int lane = threadIdx.x & 31;
  const bool h16 = lane & 16, h8 = lane & 8, h4 = lane & 4;
  float b[4], c[2];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float keep = h16 ? a[4 + i] : a[i], send = h16 ? a[i] : a[4 + i];
    b[i] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const float keep = h8 ? b[2 + i] : b[i], send = h8 ? b[i] : b[2 + i];
    c[i] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
  }
  const float keep = h4 ? c[1] : c[0], send = h4 ? c[0] : c[1];
  float d = keep + __shfl_xor_sync(0xffffffffu, send, 4);
  d += __shfl_xor_sync(0xffffffffu, d, 2);
  d += __shfl_xor_sync(0xffffffffu, d, 1);
  return d;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); red holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float *red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float s = lane < nw ? red[lane] : 0.0f;
  return warp_sum(s);
}
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
// The experts' activation of a gate value and an up value: SwiGLU, or gpt-oss's clamped form (the
// gate clamped above, up both ways, gate * sigmoid(alpha gate) * (up + 1)); oai: the latter.
__device__ __forceinline__ float act_glu(float gv, float uv, bool oai, float alpha, float limit) {
  if (!oai) return silu_f(gv) * uv;
  const float gc = fminf(gv, limit), uc = fminf(fmaxf(uv, -limit), limit);
  return gc / (1.0f + expf(-alpha * gc)) * (uc + 1.0f);
}
