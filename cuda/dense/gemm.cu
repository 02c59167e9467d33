// bloomery CUDA library: products of many activation rows with a weight matrix on the tensor
// cores. A block computes 128 weight rows (or, for SwiGLU, 64 gate rows and the matching 64 up
// rows) against a tile of 32 or 64 activation rows: each 128-wide slice of K is dequantized from
// the stored blocks into f16 in shared memory (the units of quants.cuh), the activations converted
// to f16 beside it, and four warps run m16n8k16 products with f32 accumulators. Grouped mode
// takes its tiles (expert, first row, count) from a list the card wrote (routed experts).
#include "common.cuh"
#include "internal.h"
#include "gemm_tile.cuh"
#include "mma.cuh"
#include "quants.cuh"
#include "stage.cuh"

#define LDK (GEMM_BK + 8)

// The raw path (FAST_GEMMRAW): each K slice's stored blocks of the block's 128 rows are copied
// into shared memory by cp.async (every copy of the slice in flight at once, 16-byte chunks, the
// first aligned down) and the activations loaded in one batch of registers before any is stored,
// then dequantized from the copy by the same units: the same halves, the same products, one
// round trip a slice instead of a chain of them. Bytes a row's copy takes (0: the type stays on
// the direct path: F32 rows, whose slices are too long).
template <int T>
__host__ __device__ constexpr int raw_row_bytes() {
  using Q = qt<T>;
  constexpr int nblk = Q::BE >= GEMM_BK ? 1 : GEMM_BK / Q::BE;
  constexpr int b = (nblk * Q::BB + 15) / 16 * 16 + 16;
  return b <= 272 ? b : 0;
}

template <int T, int BN, bool RAW>
__global__ void __launch_bounds__(128) k_gemm(gemm_args a) {
  cu_pdl_entry();
  using Q = qt<T>;
  constexpr int UPW = GEMM_BK / Q::UE; // units of a row in one K slice
  extern __shared__ __align__(16) unsigned char g_raw[];
  __half *sA = reinterpret_cast<__half *>(g_raw), *sB = sA + GEMM_BM * LDK;
  __shared__ int brow[BN];
  int e = 0, start, count;
  if (a.tiles) {
    if ((int)blockIdx.y >= *a.n_tiles) return;
    const int4 tl = a.tiles[blockIdx.y];
    e = tl.x;
    start = tl.y;
    count = tl.z;
  } else {
    start = blockIdx.y * BN;
    count = min(BN, a.ntok - start);
  }
  const bool swiglu = a.mode == EPI_SWIGLU;
  const int rows_here = swiglu ? GEMM_BM / 2 : GEMM_BM;
  int bx = blockIdx.x, jb = 0;
  while (jb + 1 < a.njobs && bx >= a.job[jb].blocks) bx -= a.job[jb++].blocks;
  const gemm_job &job = a.job[jb];
  const int r0 = bx * rows_here, nrows = job.w.ne1, K = job.w.ne0;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  for (int i = tid; i < BN; i += 128) brow[i] = i < count ? (a.b_rows ? a.b_rows[start + i] : start + i) : -1;
  const uint8_t *w1 = job.w.d + (size_t)e * job.w.nb2;
  const uint8_t *w2 = swiglu ? a.w2.d + (size_t)e * a.w2.nb2 : w1;
  float acc[2][BN / 8][4];
  tile_zero<BN>(acc);
  // weight row `row` of the tile (swiglu: gate rows, then the matching up rows); ok: inside the matrix
  auto row_ptr = [&](int row, bool &ok) -> const uint8_t * {
    int grow;
    const uint8_t *base;
    if (swiglu) {
      grow = r0 + (row & (GEMM_BM / 2 - 1));
      base = row < GEMM_BM / 2 ? w1 : w2;
    } else {
      grow = r0 + row;
      base = w1;
    }
    ok = grow < nrows;
    return base + (size_t)(ok ? grow : 0) * job.w.nb1;
  };
  constexpr int RB = RAW ? raw_row_bytes<T>() : 16, NBLK = Q::BE >= GEMM_BK ? 1 : GEMM_BK / Q::BE;
  uint8_t *sR = reinterpret_cast<uint8_t *>(sB + BN * LDK);
  // a.b16: the slice of each activation row copied as halves (zeros for rows past the tile)
  auto stage_b16 = [&](int k0) {
    for (int q = tid; q < BN * (GEMM_BK / 8); q += 128) {
      const int r = q / (GEMM_BK / 8), ch = q - r * (GEMM_BK / 8);
      const bool in = brow[r] >= 0 && k0 + 8 * ch < K;
      cp_async16_or_zero(sB + r * LDK + 8 * ch, a.b16 + (size_t)(in ? brow[r] : 0) * a.ldb + k0 + 8 * ch, in);
    }
  };
  for (int k0 = 0; k0 < K; k0 += GEMM_BK) {
    __syncthreads();
    const int blk0 = k0 / Q::BE;
    if constexpr (RAW) {
      // the slice's stored blocks of every row, all copies in flight
      for (int q = tid; q < GEMM_BM * (RB / 16); q += 128) {
        const int row = q / (RB / 16), ch = q - row * (RB / 16);
        bool ok;
        const uint8_t *rp = row_ptr(row, ok);
        const uintptr_t s0 = reinterpret_cast<uintptr_t>(rp + (size_t)blk0 * Q::BB) & ~(uintptr_t)15;
        const uintptr_t s1 = (reinterpret_cast<uintptr_t>(rp + (size_t)(blk0 + NBLK) * Q::BB) + 15) & ~(uintptr_t)15;
        if (s0 + 16 * (uintptr_t)ch < s1) cp_async16(sR + row * RB + 16 * ch, reinterpret_cast<const void *>(s0 + 16 * (uintptr_t)ch));
      }
      if (a.b16) stage_b16(k0);
      cp_async_commit();
      if (!a.b16) {
        // the activations: every load of the thread first, then the conversions
        constexpr int BPT = BN * (GEMM_BK / 4) / 128;
        float4 bv[BPT];
#pragma unroll
        for (int j = 0; j < BPT; j++) {
          const int i = tid + 128 * j, r = i / (GEMM_BK / 4), c = (i - r * (GEMM_BK / 4)) * 4;
          bv[j] = brow[r] >= 0 ? *reinterpret_cast<const float4 *>(a.b + (size_t)brow[r] * a.ldb + k0 + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int j = 0; j < BPT; j++) {
          const int i = tid + 128 * j, r = i / (GEMM_BK / 4), c = (i - r * (GEMM_BK / 4)) * 4;
          st_h4(sB + r * LDK + c, bv[j].x, bv[j].y, bv[j].z, bv[j].w);
        }
      }
      cp_async_wait_all();
      __syncthreads();
    } else if (a.b16) {
      stage_b16(k0); // waited for after the weights' dequantization below
      cp_async_commit();
    } else {
      for (int i = tid; i < BN * (GEMM_BK / 4); i += 128) {
        const int r = i / (GEMM_BK / 4), c = (i - r * (GEMM_BK / 4)) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (brow[r] >= 0 && k0 + c < K) v = *reinterpret_cast<const float4 *>(a.b + (size_t)brow[r] * a.ldb + k0 + c);
        st_h4(sB + r * LDK + c, v.x, v.y, v.z, v.w);
      }
    }
    const int kfirst = blk0 * Q::UPB + (k0 % Q::BE) / Q::UE;
    for (int q = tid; q < GEMM_BM * UPW; q += 128) {
      const int row = q / UPW, uw = q - row * UPW;
      bool ok;
      const uint8_t *rp = row_ptr(row, ok);
      const int kk = kfirst + uw, blk = kk / Q::UPB, u = kk - blk * Q::UPB;
      __half *dst = sA + row * LDK + blk * Q::BE - k0;
      // a block past the row's end (the last slice of a K that is no multiple of 128): zeros, its
      // unit decoded from the row's first block (never read past the matrix)
      const bool kin = blk * Q::BE < K;
      ok = ok && kin;
      // the block in the copy keeps its address's offset within 16 bytes (the units' loads see the same alignment)
      const uint8_t *bp = RAW ? sR + row * RB + (reinterpret_cast<uintptr_t>(rp + (size_t)blk0 * Q::BB) & 15) + (size_t)(blk - blk0) * Q::BB
                              : rp + (size_t)(kin ? blk : 0) * Q::BB;
      Q::unit(bp, u, [&](int pos, float v0, float v1, float v2, float v3) {
        if (ok) st_h4(dst + pos, v0, v1, v2, v3);
        else st_h4(dst + pos, 0.f, 0.f, 0.f, 0.f);
      });
    }
    if (!RAW && a.b16) cp_async_wait_all();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < GEMM_BK / 16; kk++) tile_k16<BN>(acc, sA, LDK, sB, LDK, kk * 16, warp, lane);
  }
  if (!swiglu) {
    tile_store<BN>(acc, r0, nrows, start, count, job.c, job.ldc, job.bias ? job.bias + (size_t)e * job.bias_e : nullptr, a.mode == EPI_ADD, warp,
                   lane);
    return;
  }
  // SwiGLU: gate rows 0..63 and up rows 64..127 meet in shared memory
  constexpr int LDC = BN + 4;
  float *sC = reinterpret_cast<float *>(g_raw);
  __syncthreads();
  tile_each<BN>(acc, warp, lane, [&](int row, int col, float v) { sC[row * LDC + col] = v; });
  __syncthreads();
  // (gpt-oss: each expert's gate and up biases, and the clamped activation)
  const float *bg = job.bias ? job.bias + (size_t)e * job.bias_e : nullptr, *bu = a.bias2 ? a.bias2 + (size_t)e * a.bias2_e : nullptr;
  const bool oai = a.act == BL_ACT_SWIGLU_OAI;
  for (int i = tid; i < (GEMM_BM / 2) * BN; i += 128) {
    const int col = i / (GEMM_BM / 2), row = i - col * (GEMM_BM / 2);
    if (col >= count || r0 + row >= nrows) continue;
    float gv = sC[row * LDC + col], uv = sC[(row + GEMM_BM / 2) * LDC + col];
    if (bg) gv += bg[r0 + row];
    if (bu) uv += bu[r0 + row];
    const float y = act_glu(gv, uv, oai, a.alpha, a.limit);
    if (a.c16) a.c16[(size_t)(start + col) * job.ldc + r0 + row] = __float2half_rn(y);
    else job.c[(size_t)(start + col) * job.ldc + r0 + row] = y;
  }
}

static size_t gemm_smem(int bn) { return (size_t)(GEMM_BM + bn) * LDK * sizeof(__half); }
template <int T>
static size_t gemm_smem_raw(int bn) { return gemm_smem(bn) + (size_t)GEMM_BM * raw_row_bytes<T>(); }
static int gemm_optin = 0; // the card's opt-in shared memory a block (cu_gemm_init)

bool cu_gemm_supported(int type, int ne0) {
  cu_type_geom g;
  return cu_type_geom_of(type, &g) && ne0 > 0 && ne0 % 32 == 0 && ne0 % g.be == 0;
}

// Whether a launch takes the raw path: the type has one, every matrix's rows and experts start on
// 16 bytes (so a row's last chunk ends inside the row), the copy fits, and FAST_GEMMRAW is on.
template <int T>
static bool raw_ok(const gemm_args &a, int bn) {
  if constexpr (raw_row_bytes<T>() == 0) return false;
  if (!(cu_fast & FAST_GEMMRAW) || gemm_smem_raw<T>(bn) > (size_t)gemm_optin) return false;
  auto aligned = [](const dmat &w) {
    return reinterpret_cast<uintptr_t>(w.d) % 16 == 0 && w.nb1 % 16 == 0 && (w.ne2 <= 1 || w.nb2 % 16 == 0);
  };
  for (int j = 0; j < a.njobs; j++)
    if (!aligned(a.job[j].w) || a.job[j].w.ne0 % GEMM_BK != 0) return false; // (the copy takes whole slices)
  return a.mode != EPI_SWIGLU || aligned(a.w2);
}

template <int T>
static cudaError_t launch_t(cudaStream_t st, const gemm_args &a, int bn, dim3 grid) {
  if constexpr (raw_row_bytes<T>() > 0) {
    if (raw_ok<T>(a, bn)) {
      if (bn == 32) return cu_launch(k_gemm<T, 32, true>, grid, dim3(128), gemm_smem_raw<T>(32), st, a);
      return cu_launch(k_gemm<T, 64, true>, grid, dim3(128), gemm_smem_raw<T>(64), st, a);
    }
  }
  if (bn == 32) return cu_launch(k_gemm<T, 32, false>, grid, dim3(128), gemm_smem(32), st, a);
  return cu_launch(k_gemm<T, 64, false>, grid, dim3(128), gemm_smem(64), st, a);
}

template <int T>
static int64_t gemm_init_t(int smem_optin) {
  const char *w = "configuring products";
  CU_TRY(cudaFuncSetAttribute(k_gemm<T, 32, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gemm_smem(32)), w);
  CU_TRY(cudaFuncSetAttribute(k_gemm<T, 64, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gemm_smem(64)), w);
  CU_OK(cu_kernel_prefs(k_gemm<T, 32, false>, w));
  CU_OK(cu_kernel_prefs(k_gemm<T, 64, false>, w));
  if constexpr (raw_row_bytes<T>() > 0) {
    if (gemm_smem_raw<T>(64) <= (size_t)smem_optin) {
      CU_TRY(cudaFuncSetAttribute(k_gemm<T, 32, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gemm_smem_raw<T>(32)), w);
      CU_TRY(cudaFuncSetAttribute(k_gemm<T, 64, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gemm_smem_raw<T>(64)), w);
      CU_OK(cu_kernel_prefs(k_gemm<T, 32, true>, w));
      CU_OK(cu_kernel_prefs(k_gemm<T, 64, true>, w));
    }
  }
  return BL_OK;
}

int64_t cu_gemm(cudaStream_t st, gemm_args a, int bn, int grid_y) {
  const int type = a.job[0].w.type;
  for (int j = 0; j < a.njobs; j++) {
    if (!cu_gemm_supported(a.job[j].w.type, a.job[j].w.ne0) || a.job[j].w.type != type)
      return cu_fail(BL_E_UNSUPPORTED, "tensor-core product: %s rows of %d elements", cu_type_name(a.job[j].w.type), a.job[j].w.ne0);
  }
  if (grid_y <= 0 || a.njobs <= 0) return BL_OK;
  const int rows_here = a.mode == EPI_SWIGLU ? GEMM_BM / 2 : GEMM_BM;
  int gx = 0;
  for (int j = 0; j < a.njobs; j++) {
    a.job[j].blocks = (a.job[j].w.ne1 + rows_here - 1) / rows_here;
    gx += a.job[j].blocks;
  }
  const dim3 grid(gx, grid_y);
  cudaError_t e = cudaErrorInvalidValue;
  switch (type) {
#define L(T) \
  case T: e = launch_t<T>(st, a, bn, grid); break;
    CU_TYPE_CASES(L)
#undef L
    default: return cu_fail(BL_E_UNSUPPORTED, "tensor-core product: %s", cu_type_name(type));
  }
  CU_TRY(e, "tensor-core product");
  return BL_OK;
}

int64_t cu_gemm_init(int smem_optin) {
#define S(T) CU_OK(gemm_init_t<T>(smem_optin));
  CU_TYPE_CASES(S)
#undef S
  gemm_optin = smem_optin; // the raw path only after its attributes are set
  return BL_OK;
}
