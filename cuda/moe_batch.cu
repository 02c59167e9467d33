// bloomery CUDA library: the routed experts of decode batches of 2..MV_MAX_NT tokens grouped by
// expert - the (token, pick) pairs sorted by expert on the card (moe.cu's sort, one tile an
// expert), gate/up with SwiGLU and down with one warp a weight row dotted with the rows of all the
// pairs routed to its expert (each weight row read once a step, not once a pair), one output row
// a pair, then each token's picks weighted and added to the residual in ascending expert order
// (moe.cu's combine). Launch shapes depend only on the token count (graph capture): each grid
// holds the blocks resident on the card at once, which split the step's (tile, row chunk) items
// read from the card. Q4_K / Q6_K rows take int8 activations and dp4a (dot8.cuh's numerics) when
// the caller and FAST_Q8 allow it.
#include <stdlib.h>

#include "common.cuh"
#include "dot8.cuh"
#include "dotbatch.cuh"
#include "internal.h"
#include "quants.cuh"

// The tile's rows staged: float rows (xs, cnt * n floats) or, with Q8, each row through xs (n
// floats) quantized into its x8 slot (xq + t * x8_bytes(n)). Rows are src + row_of(t) * ld.
// Every thread of the block calls it; ends with a block barrier.
template <bool Q8, class RowOf>
__device__ __forceinline__ void stage_tile(float *xs, uint8_t *xq, const float *src, int ld, int n, int cnt, RowOf row_of) {
  const int n4 = n >> 2;
  for (int t = 0; t < cnt; t++) {
    const float4 *s = reinterpret_cast<const float4 *>(src + (size_t)row_of(t) * ld);
    float4 *dst = reinterpret_cast<float4 *>(Q8 ? xs : xs + (size_t)t * n);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) dst[i] = __ldcg(s + i);
    __syncthreads();
    if constexpr (Q8) (void)quantize_x8(xs, n, xq + (size_t)t * x8_bytes(n)); // ends with a barrier
  }
}

// Work items are (tile, chunk of 2 * MV_WARPS rows); the step's items (n_tiles of them a chunk
// count) are split in equal contiguous ranges over the grid's blocks, which the host sizes to the
// blocks resident on the card at once, so the shapes do not depend on the step's routing. A block
// restages its activations when its range enters a new tile. Each warp takes two rows an item.
__device__ __forceinline__ void item_range(int total, int &w0, int &w1) {
  const int per = (total + (int)gridDim.x - 1) / (int)gridDim.x;
  w0 = (int)blockIdx.x * per;
  w1 = w0 + per < total ? w0 + per : total;
}

// gate/up: four weight rows in flight a warp (gate and up of both rows); silu(gate) * up a pair.
template <int T, bool Q8>
__global__ void __launch_bounds__(MV_THREADS, 2) k_mb_gu(moe_batch_args a) {
  cu_pdl_entry();
  extern __shared__ float4 dyn_smem4[];
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  const int n = a.gate.ne0, ff = a.gate.ne1;
  uint8_t *xq = reinterpret_cast<uint8_t *>(xs + n);
  const int cpt = (ff + 2 * MV_WARPS - 1) / (2 * MV_WARPS);
  int w0, w1;
  item_range(*a.n_tiles * cpt, w0, w1);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int cur = -1, e = 0, p0 = 0, cnt = 0;
  for (int w = w0; w < w1; w++) {
    const int tile = w / cpt, chunk = w - tile * cpt;
    if (tile != cur) {
      const int4 tl = a.tiles[tile];
      e = tl.x;
      p0 = tl.y;
      cnt = tl.z < MB_NT ? tl.z : MB_NT;
      __syncthreads(); // the previous tile's rows are read
      stage_tile<Q8>(xs, xq, a.h, a.ldh, n, cnt, [&](int t) { return a.pair_tok[p0 + t]; });
      cur = tile;
    }
    const int r0 = chunk * 2 * MV_WARPS + warp, r1 = r0 + MV_WARPS;
    if (r0 >= ff) continue;
    const bool has1 = r1 < ff;
    const int rr1 = has1 ? r1 : r0; // a missing second row repeats the first (result dropped)
    const uint8_t *g = a.gate.d + (size_t)e * a.gate.nb2, *u = a.up.d + (size_t)e * a.up.nb2;
    const uint8_t *const rp[4] = {g + (size_t)r0 * a.gate.nb1, u + (size_t)r0 * a.up.nb1, g + (size_t)rr1 * a.gate.nb1, u + (size_t)rr1 * a.up.nb1};
    float acc[4][MB_NT];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int t = 0; t < MB_NT; t++) acc[r][t] = 0.0f;
    if constexpr (Q8) dot_q8<T, 4>(rp, xq, x8_bytes(n), n, cnt, acc, lane);
    else dot_f<T, 4>(rp, xs, n, cnt, acc, lane);
#pragma unroll
    for (int t = 0; t < MB_NT; t++) {
      if (t >= cnt) break;
      const float g0 = warp_sum(acc[0][t]), u0 = warp_sum(acc[1][t]), g1 = warp_sum(acc[2][t]), u1 = warp_sum(acc[3][t]);
      if (lane == 0) {
        float *ar = a.act + (size_t)(p0 + t) * a.ldact;
        ar[r0] = silu_f(g0) * u0;
        if (has1) ar[r1] = silu_f(g1) * u1;
      }
    }
  }
}

// down: two weight rows in flight a warp; one output row a pair (ypair, stored, no atomics).
template <int T, bool Q8>
__global__ void __launch_bounds__(MV_THREADS, 2) k_mb_down(moe_batch_args a) {
  cu_pdl_entry();
  extern __shared__ float4 dyn_smem4[];
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  const int ff = a.down.ne0, n = a.down.ne1;
  uint8_t *xq = reinterpret_cast<uint8_t *>(xs + ff);
  const int cpt = (n + 2 * MV_WARPS - 1) / (2 * MV_WARPS);
  int w0, w1;
  item_range(*a.n_tiles * cpt, w0, w1);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int cur = -1, e = 0, p0 = 0, cnt = 0;
  for (int w = w0; w < w1; w++) {
    const int tile = w / cpt, chunk = w - tile * cpt;
    if (tile != cur) {
      const int4 tl = a.tiles[tile];
      e = tl.x;
      p0 = tl.y;
      cnt = tl.z < MB_NT ? tl.z : MB_NT;
      __syncthreads();
      stage_tile<Q8>(xs, xq, a.act, a.ldact, ff, cnt, [&](int t) { return p0 + t; });
      cur = tile;
    }
    const int r0 = chunk * 2 * MV_WARPS + warp, r1 = r0 + MV_WARPS;
    if (r0 >= n) continue;
    const bool has1 = r1 < n;
    const uint8_t *dn = a.down.d + (size_t)e * a.down.nb2;
    const uint8_t *const rp[2] = {dn + (size_t)r0 * a.down.nb1, dn + (size_t)(has1 ? r1 : r0) * a.down.nb1};
    float acc[2][MB_NT];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
      for (int t = 0; t < MB_NT; t++) acc[r][t] = 0.0f;
    if constexpr (Q8) dot_q8<T, 2>(rp, xq, x8_bytes(ff), ff, cnt, acc, lane);
    else dot_f<T, 2>(rp, xs, ff, cnt, acc, lane);
#pragma unroll
    for (int t = 0; t < MB_NT; t++) {
      if (t >= cnt) break;
      const float y0 = warp_sum(acc[0][t]), y1 = warp_sum(acc[1][t]);
      if (lane == 0) {
        float *yr = a.ypair + (size_t)(p0 + t) * a.ldy;
        yr[r0] = y0;
        if (has1) yr[r1] = y1;
      }
    }
  }
}

// ---- host side ----

static bool mb_d8(int t) { return t == T_Q4_K || t == T_Q6_K; }

static bool mb_has_kernel(int t) {
  switch (t) {
#define C(T) \
  case T: return true;
    CU_TYPE_CASES(C)
#undef C
    default: return false;
  }
}

// BLOOMERY_CUDA_MOE_BATCH=0 sends decode batches to the per-pair kernels (moe_dec.cu).
static bool mb_enabled() {
  static int on = -1;
  if (on < 0) {
    const char *v = getenv("BLOOMERY_CUDA_MOE_BATCH");
    on = (v && v[0] == '0') ? 0 : 1;
  }
  return on == 1;
}

struct mb_plan {
  bool q8_gu, q8_dn;
  size_t smem_gu, smem_dn;
};

static void (*gu_kernel(int type, bool q8))(moe_batch_args) {
  if (q8) return type == T_Q4_K ? k_mb_gu<T_Q4_K, true> : type == T_Q6_K ? k_mb_gu<T_Q6_K, true> : nullptr;
  switch (type) {
#define C(T) \
  case T: return k_mb_gu<T, false>;
    CU_TYPE_CASES(C)
#undef C
    default: return nullptr;
  }
}

static void (*down_kernel(int type, bool q8))(moe_batch_args) {
  if (q8) return type == T_Q4_K ? k_mb_down<T_Q4_K, true> : type == T_Q6_K ? k_mb_down<T_Q6_K, true> : nullptr;
  switch (type) {
#define C(T) \
  case T: return k_mb_down<T, false>;
    CU_TYPE_CASES(C)
#undef C
    default: return nullptr;
  }
}

static bool plan_mb(const moe_batch_args &a, int ntok, int smem_limit, mb_plan &p) {
  if (!mb_enabled() || ntok < 2 || ntok > MB_NT) return false;
  const int n = a.gate.ne0, ff = a.gate.ne1, K = a.k, X = a.n_expert;
  if (K < 1 || K > ROUTER_MAX_K || X < 1 || !a.sel || !a.selw) return false;
  if (a.up.type != a.gate.type || a.up.ne0 != n || a.up.ne1 != ff || a.down.ne0 != ff || a.down.ne1 != n) return false;
  if (a.gate.ne2 < X || a.up.ne2 < X || a.down.ne2 < X) return false;
  if (!mb_has_kernel(a.gate.type) || !mb_has_kernel(a.down.type)) return false;
  cu_type_geom gg, gd;
  if (!cu_type_geom_of(a.gate.type, &gg) || !cu_type_geom_of(a.down.type, &gd) || n % gg.be || ff % gd.be || n % 4 || ff % 4) return false;
  const int pairs = ntok * K;
  // the sort makes one tile an expert (at most ntok pairs each: a token picks an expert once)
  const int most = pairs < X + K ? pairs : X + K;
  if (most > a.max_tiles) return false;
  if (a.ldy < n || a.ldact < ff || a.ldh < n || a.ldx < n) return false;
  const bool q8 = a.q8 && (cu_fast & FAST_Q8);
  p.q8_gu = q8 && mb_d8(a.gate.type) && n % 32 == 0;
  p.q8_dn = q8 && mb_d8(a.down.type) && ff % 32 == 0;
  p.smem_gu = p.q8_gu ? (size_t)n * 4 + (size_t)ntok * x8_bytes(n) : (size_t)ntok * n * 4;
  p.smem_dn = p.q8_dn ? (size_t)ff * 4 + (size_t)ntok * x8_bytes(ff) : (size_t)ntok * ff * 4;
  return (int64_t)p.smem_gu <= smem_limit && (int64_t)p.smem_dn <= smem_limit;
}

// Blocks of k resident on the card at once with smem bytes each (at least one an SM).
static int64_t resident_blocks(void (*k)(moe_batch_args), size_t smem, int *grid) {
  int per_sm = 0;
  CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, MV_THREADS, smem), "sizing the grouped expert kernels");
  *grid = (per_sm > 0 ? per_sm : 1) * (cu_sms > 0 ? cu_sms : 1);
  return BL_OK;
}

bool cu_moe_batch_fits(const moe_batch_args &a, int ntok, int smem_limit) {
  mb_plan p;
  return plan_mb(a, ntok, smem_limit, p);
}

int64_t cu_moe_batch(cudaStream_t st, const moe_batch_args &a, int ntok, int smem_limit) {
  mb_plan p;
  if (!plan_mb(a, ntok, smem_limit, p))
    return cu_fail(BL_E_UNSUPPORTED, "experts: the grouped decode-batch kernels do not take %d tokens of %s/%s experts", ntok,
                   cu_type_name(a.gate.type), cu_type_name(a.down.type));
  sort_args s;
  s.sel = a.sel;
  s.n_pairs = ntok * a.k;
  s.k = a.k;
  s.n_expert = a.n_expert;
  s.bn = ntok;
  s.pair_tok = a.pair_tok;
  s.pair_of = a.pair_of;
  s.tiles = a.tiles;
  s.n_tiles = a.n_tiles;
  CU_OK(cu_moe_sort(st, s));
  void (*kg)(moe_batch_args) = gu_kernel(a.gate.type, p.q8_gu), (*kd)(moe_batch_args) = down_kernel(a.down.type, p.q8_dn);
  if (!kg || !kd) return cu_fail(BL_E_UNSUPPORTED, "experts: %s/%s have no grouped kernel", cu_type_name(a.gate.type), cu_type_name(a.down.type));
  int grid_gu = 0, grid_dn = 0;
  CU_OK(resident_blocks(kg, p.smem_gu, &grid_gu));
  CU_OK(resident_blocks(kd, p.smem_dn, &grid_dn));
  CU_LAUNCH("grouped expert gate/up", kg, dim3(grid_gu), dim3(MV_THREADS), p.smem_gu, st, a);
  CU_LAUNCH("grouped expert down", kd, dim3(grid_dn), dim3(MV_THREADS), p.smem_dn, st, a);
  return cu_moe_combine(st, a.ypair, a.ldy, a.pair_of, a.selw, a.k, a.x, a.ldx, a.down.ne1, ntok);
}

int64_t cu_moe_batch_init(int smem_optin) {
  const char *w = "configuring the grouped expert kernels";
#define S(T)                                             \
  CU_OK(cu_allow_smem(k_mb_gu<T, false>, smem_optin, w)); \
  CU_OK(cu_allow_smem(k_mb_down<T, false>, smem_optin, w));
  CU_TYPE_CASES(S)
#undef S
  CU_OK(cu_allow_smem(k_mb_gu<T_Q4_K, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mb_gu<T_Q6_K, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mb_down<T_Q4_K, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mb_down<T_Q6_K, true>, smem_optin, w));
  return BL_OK;
}
