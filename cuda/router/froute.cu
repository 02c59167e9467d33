// bloomery CUDA library: one token's attention output product fused with the MoE router. Each block
// computes 16 rows of x += O att (two rows a warp, copied with cp.async before the wait on the
// attention kernel, as the one-token products do), then the router's partial logits over those 16
// rows of the new x (the router's columns for them copied before the wait too): W_r[e][rows] .
// (normw * x)[rows]. The last block to finish sums the partials in block order, scales them by the
// RMS norm of the whole new x (logits = W_r (x * w) / rms, the reference's h = x / rms * w folded),
// and selects the token's experts (route_block: the picks route_core makes), writing the logits, the
// picks and their weights. The router is no kernel of its own, and the expert kernels read the
// picks instead of selecting: gate/up right after its wait, down before its wait (the picks were
// written two kernels earlier).
#include "common.cuh"
#include "internal.h"
#include "quants.cuh"
#include "route.cuh"
#include "dot8.cuh"
#include "stage.cuh"
#include "fopick.cuh"

#define FO_WARPS 8
#define FO_ROWS (2 * FO_WARPS) // rows of x a block
static_assert(FO_ROWS == FO_BLOCK_ROWS, "the context sizes the partial logits by FO_BLOCK_ROWS");
#define FO_WS 20               // floats a router column slice takes in shared memory (16 + padding: conflict-free float4 reads)

// Bytes of shared memory before the router slice: x (n floats), int8 x, the warps' two row slots.
__host__ __device__ inline size_t fo_head_bytes(int n, bool q8, int cap) {
  return (size_t)n * 4 + (q8 ? (size_t)x8_bytes(n) : 0) + (size_t)FO_WARPS * 2 * cap;
}

// The last block's work (every thread of the block calls it): the whole new x for its norm and the
// partials' sums (all loads in flight; from the accumulators with FAST_FOACC, which it then clears),
// the logits, the picks. Not inlined: the kernel's main phase is compiled without it (tg128 430.9 /
// 425.3 inlined, 440.5 / 439.7 not, call 109).
__device__ __noinline__ void fo_tail(const float *part, int ldp, int nb, const float *x, int E, int X, int K, int norm_topk, float w_scale,
                                     float eps, const float *rb, float *logits, int32_t *sel, float *selw, unsigned long long *acc, int *ovf) {
  __shared__ float red[32];
  __shared__ float slg[256];
  __shared__ __align__(16) float sbuf[4 * FO_WARPS * 32]; // float4 stores (fo_sum_part)
  __shared__ int ssel[32];
  __shared__ float sw[32], smx[1];
  __shared__ unsigned long long skey[256];
  const int tid = threadIdx.x;
  xrow rx;
  xrow_load(rx, x, E);
  const float lsum = acc ? fo_acc_sum(acc, ovf, part, ldp, nb, X, sbuf) : fo_sum_part(part, ldp, nb, X, sbuf);
  // the norm of the new x, formed as the expert kernels' staging forms it
  const float sc = xrow_rms_scale(rx, E, eps, red);
  fo_logits(lsum, X, sc, rb, slg, logits); // ends with a barrier: every thread has read the flag
  if (acc) fo_acc_reset(acc, ovf, X);
  if (X <= 128) route_block<4>(slg, X, K, norm_topk, w_scale, ssel, sw, smx, skey);
  else route_block<8>(slg, X, K, norm_topk, w_scale, ssel, sw, smx, skey);
  if (tid < K) {
    sel[tid] = ssel[tid];
    selw[tid] = sw[tid];
  }
}

template <int T, bool Q8>
__global__ void __launch_bounds__(FO_WARPS * 32, 2) k_fo(fo_args a) {
  BL_TR_SCOPE(5);
  using Q = qt<T>;
  extern __shared__ float4 dyn_smem4[];
  __shared__ float sxn[FO_ROWS], swn[FO_ROWS];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, n = a.n, E = a.E, X = a.X;
  uint8_t *base = reinterpret_cast<uint8_t *>(dyn_smem4);
  float *xs = reinterpret_cast<float *>(base);
  uint8_t *x8mem = base + (size_t)n * 4;
  uint8_t *s0 = x8mem + (Q8 ? x8_bytes(n) : 0) + (size_t)warp * 2 * a.cap, *s1 = s0 + a.cap;
  float *wr = reinterpret_cast<float *>(base + fo_head_bytes(n, Q8, a.cap));
  const int c0 = blockIdx.x * FO_ROWS, nr = E - c0 < FO_ROWS ? E - c0 : FO_ROWS;
  const int r0 = c0 + warp, r1 = r0 + FO_WARPS;
  const int rb = (n / Q::BE) * Q::BB;
  // before the wait (weights never change): both rows, the router's columns of this block's rows, the norm weights
  const uint8_t *p0 = nullptr, *p1 = nullptr;
  if (r0 < E) p0 = warp_copy_async(s0, a.o.d + (size_t)r0 * a.o.nb1, rb, lane);
  if (r1 < E) p1 = warp_copy_async(s1, a.o.d + (size_t)r1 * a.o.nb1, rb, lane);
  if (nr == FO_ROWS) {
    for (int c = tid; c < X * 4; c += blockDim.x) cp_async16(wr + (c >> 2) * FO_WS + (c & 3) * 4, a.rw + (size_t)(c >> 2) * a.ldw + c0 + (c & 3) * 4);
  } else {
    for (int i = tid; i < X * FO_ROWS; i += blockDim.x) {
      const int e = i / FO_ROWS, j = i - e * FO_ROWS;
      wr[e * FO_WS + j] = j < nr ? __ldg(a.rw + (size_t)e * a.ldw + c0 + j) : 0.0f;
    }
  }
  if (tid < FO_ROWS) swn[tid] = tid < nr ? (a.normw ? __ldg(a.normw + c0 + tid) : 1.0f) : 0.0f;
  cu_pdl_wait();
  x8v x8 = {};
  xrow_stage(a.att, xs, n, 0, nullptr, 0.0f, nullptr);
  if constexpr (Q8) x8 = quantize_x8(xs, n, x8mem);
  cp_async_wait_all(); // every thread: its row chunks and router columns
  BL_TR_MARK(1);
  __syncwarp();
  float v0 = 0.0f, v1 = 0.0f;
  if constexpr (Q8) {
    if (p0 && p1) dot8_row2<T>(p0, p1, n / Q::BE, x8, lane, v0, v1); // both rows' units in one loop
    else if (p0) v0 = dot8_row<T>(p0, n / Q::BE, x8, 0, lane);
  } else {
    if (p0) v0 = dot_window<T>(p0, n / Q::BE, xs, lane);
    if (p1) v1 = dot_window<T>(p1, n / Q::BE, xs, lane);
  }
  v0 = warp_sum(v0);
  v1 = warp_sum(v1);
  BL_TR_MARK(2);
  if (lane == 0) {
    float x0 = 0.0f, x1 = 0.0f;
    if (p0) {
      x0 = __ldcg(a.x + r0) + (a.ob ? v0 + __ldg(a.ob + r0) : v0);
      a.x[r0] = x0;
    }
    if (p1) {
      x1 = __ldcg(a.x + r1) + (a.ob ? v1 + __ldg(a.ob + r1) : v1);
      a.x[r1] = x1;
    }
    sxn[warp] = x0;
    sxn[warp + FO_WARPS] = x1;
  }
  __syncthreads(); // sxn, and the router columns copied by every thread
  // this block's partial logits: sum over its rows of W_r[e][row] * (w[row] * x[row])
  if (tid < X) {
    const float4 *w4 = reinterpret_cast<const float4 *>(wr + tid * FO_WS);
    float p = 0.0f;
#pragma unroll
    for (int q = 0; q < FO_ROWS / 4; q++) {
      const float4 w = w4[q];
      p += w.x * (swn[4 * q] * sxn[4 * q]) + w.y * (swn[4 * q + 1] * sxn[4 * q + 1]) + w.z * (swn[4 * q + 2] * sxn[4 * q + 2]) +
           w.w * (swn[4 * q + 3] * sxn[4 * q + 3]);
    }
    a.part[(size_t)blockIdx.x * a.ldp + tid] = p; // a row a block: the last block's loads coalesce
    if (a.acc) fo_acc_add(a.acc, a.ovf, tid, p, a.acc_lim);
  }
  const bool last = last_arrival(a.counter, (int)gridDim.x);
  BL_TR_MARK(3);
  if (!last) return;
  fo_tail(a.part, a.ldp, gridDim.x, a.x, E, X, a.K, a.norm_topk, a.w_scale, a.eps, a.rb, a.logits, a.sel, a.selw, a.acc, a.ovf);
  if (tid == 0) *a.counter = 0;
}

// ---- host side ----

// the types whose rows the kernel dots with int8 activations (dot8.cuh: Q4_K, Q6_K, and the
// 32-element blocks Q8_0 and MXFP4, gpt-oss's attention output)
#define FO_Q8_CASES(X) X(T_Q4_K) X(T_Q6_K) X(T_Q8_0) X(T_MXFP4)
static bool fo_q8(int t) { return d8_one(t) && (t == T_Q4_K || t == T_Q6_K || t == T_Q8_0 || t == T_MXFP4); }

static void (*fo_kernel(int t, bool q8))(fo_args) {
  if (q8) {
    switch (t) {
#define C(T) \
  case T: return k_fo<T, true>;
      FO_Q8_CASES(C)
#undef C
      default: return nullptr;
    }
  }
  switch (t) {
#define C(T) \
  case T: return k_fo<T, false>;
    CU_TYPE_CASES(C)
#undef C
    default: return nullptr;
  }
}

struct fo_plan {
  bool q8;
  int cap, blocks;
  size_t smem;
};

static bool plan_fo(const fo_args &a, int smem_limit, fo_plan &p) {
  if (!(cu_fast & FAST_ROUTE) || !(cu_fast & FAST_MOE)) return false;
  const int n = a.n, E = a.E;
  if (a.o.ne0 != n || a.o.ne1 != E || n % 4 || n > 32 * FO_WARPS * 32 || E % 4 || E > 32 * FO_WARPS * 32) return false;
  if (a.X < 1 || a.X > 256 || a.K < 1 || a.K > 32 || a.K > a.X || a.ldw % 4 || (reinterpret_cast<uintptr_t>(a.rw) & 15)) return false;
  cu_type_geom g;
  if (!cu_type_geom_of(a.o.type, &g) || n % g.be) return false;
  p.q8 = a.q8 && (cu_fast & FAST_Q8) && fo_q8(a.o.type) && n % 32 == 0;
  if (!fo_kernel(a.o.type, p.q8)) return false;
  p.cap = copy_slot_bytes((n / g.be) * g.bb);
  if (p.cap > FAST_CAP_MAX) return false;
  p.blocks = (E + FO_ROWS - 1) / FO_ROWS;
  if (a.ldp < ((a.X + 3) & ~3) || a.ldp % 4 || (reinterpret_cast<uintptr_t>(a.part) & 15)) return false;
  p.smem = fo_head_bytes(n, p.q8, p.cap) + (size_t)a.X * FO_WS * 4;
  return (int64_t)p.smem <= smem_limit;
}

bool cu_fo_fits(const fo_args &a, int smem_limit) {
  fo_plan p;
  return plan_fo(a, smem_limit, p);
}

int64_t cu_fo(cudaStream_t st, fo_args a, int smem_limit) {
  fo_plan p;
  if (!plan_fo(a, smem_limit, p)) return cu_fail(BL_E_UNSUPPORTED, "attention output with the router: a shape the fused kernel does not take");
  a.cap = p.cap;
  CU_LAUNCH("attention output with the router", fo_kernel(a.o.type, p.q8), dim3(p.blocks), dim3(FO_WARPS * 32), p.smem, st, a);
  return BL_OK;
}

int64_t cu_fo_init(int smem_optin) {
  const char *w = "configuring the fused attention output and router";
#define S(T) CU_OK(cu_allow_smem(k_fo<T, false>, smem_optin, w));
  CU_TYPE_CASES(S)
#undef S
#define S(T) CU_OK(cu_allow_smem(k_fo<T, true>, smem_optin, w));
  FO_Q8_CASES(S)
#undef S
  return BL_OK;
}
