// bloomery CUDA library: latent attention for prompts on the tensor cores (the absorbed form, as
// mla.cu's k_mla_attn computes it): a block takes 32 query rows - 32 consecutive tokens of one
// slot (half a prefill tile), one query head - and streams tiles of 32 cached rows [latent | rope]
// (f16) through shared memory, each tile both the keys and, its first kvl dims, the values. Eight
// warps: row group rg (16 rows) times column quarter cq. S = Q K^T splits its k16 steps over the
// four quarters (step kk to quarter kk % 4, Q's fragments in registers) and the partial scores are
// summed through shared memory; each quarter then takes the online softmax of its rows (the same
// in all four) and O += P V for its kvl / 4 value columns. Queries are f16 with the scale (base 2)
// folded in, as the prefill attention of the other families (fa.cu) forms them.
#include <math.h>

#include "common.cuh"
#include "internal.h"
#include "mma.cuh"

namespace {

constexpr int MR = 32;      // query rows a block
constexpr int TPOS = 32;    // cached rows a tile
constexpr int MAX_QF = CU_MLA_MAX_ROW / 16 / 4; // k16 steps a quarter holds (rows of up to 640)

__host__ __device__ constexpr int lds(int dk) { return dk + 8; } // halves a staged row (ldmatrix without bank conflicts)
constexpr int smem_bytes(int dk) { return MR * lds(dk) * 2 + 8 * 16 * 32 * 4; }
bool mma_fits = false;

// VQ: n8 tiles of values a quarter (kvl / 32)
template <int VQ>
__global__ void __launch_bounds__(256) k_mla_mma(mla_args a, const int4 *tiles, int t_base) {
  cu_pdl_entry();
  extern __shared__ __align__(16) unsigned char mla_raw[];
  const int dk = a.kvl + a.nr, LDS = lds(dk), KS = dk / 16;
  __half *sK = reinterpret_cast<__half *>(mla_raw);
  float *sS = reinterpret_cast<float *>(mla_raw + MR * LDS * 2); // [warp][16][lane]
  const int4 tile = tiles[blockIdx.x];
  const int h = blockIdx.y, half = blockIdx.z;
  const int tok0 = tile.x + half * MR, cnt = min(MR, tile.y - half * MR);
  if (cnt <= 0) return;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
  const int rg = warp & 1, cq = warp >> 1;
  int maxp = 0;
  for (int r = 0; r < cnt; r++) maxp = max(maxp, a.pos[tok0 + r]);
  // Q rows (scaled, f16) staged in the tile buffer, then each warp's fragments of its quarter's steps
  const float sc = a.scale * 1.4426950408889634f;
  for (int i = tid; i < MR * dk / 4; i += 256) {
    const int r = i / (dk / 4), c = (i - r * (dk / 4)) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < cnt) v = *reinterpret_cast<const float4 *>(a.ql + ((size_t)(tok0 - t_base + r) * a.nh + h) * dk + c);
    st_h4(sK + r * LDS + c, v.x * sc, v.y * sc, v.z * sc, v.w * sc);
  }
  __syncthreads();
  uint32_t qf[MAX_QF][4];
#pragma unroll
  for (int j = 0; j < MAX_QF; j++) {
    const int kk = 4 * j + cq;
    if (kk < KS) ldsm_x4(qf[j], sK + (16 * rg + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8);
  }
  const int r0 = 16 * rg + gid, r1 = r0 + 8;
  const int qp0 = r0 < cnt ? a.pos[tok0 + r0] : -1, qp1 = r1 < cnt ? a.pos[tok0 + r1] : -1;
  float o[VQ][4];
#pragma unroll
  for (int i = 0; i < VQ; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  const __half *kc = a.kc + (size_t)tile.z * a.slot_stride;
  const int units = dk / 8, vcol = cq * VQ * 8;
  for (int kb = 0; kb <= maxp; kb += TPOS) {
    __syncthreads(); // the previous tile (and the Q rows) are read, the partial scores summed
    for (int i = tid; i < TPOS * units; i += 256) {
      const int r = i / units, u = i - r * units, p = kb + r;
      const uint4 v = p <= maxp ? reinterpret_cast<const uint4 *>(kc + (size_t)p * dk)[u] : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4 *>(sK + r * LDS + u * 8) = v;
    }
    __syncthreads();
    float s[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int j = 0; j < MAX_QF; j++) {
      const int kk = 4 * j + cq;
      if (kk >= KS) break;
#pragma unroll
      for (int np = 0; np < 2; np++) {
        uint32_t b[4];
        ldsm_x4(b, sK + (16 * np + (lane & 7) + ((lane >> 4) << 3)) * LDS + kk * 16 + ((lane >> 3) & 1) * 8);
        mma16816(s[2 * np], qf[j], b[0], b[1]);
        mma16816(s[2 * np + 1], qf[j], b[2], b[3]);
      }
    }
    float *mine = sS + warp * 16 * 32;
#pragma unroll
    for (int i = 0; i < 16; i++) mine[i * 32 + lane] = s[i >> 2][i & 3];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 16; i++) {
      float v = 0.0f;
#pragma unroll
      for (int q = 0; q < 4; q++) v += sS[(rg + 2 * q) * 16 * 32 + i * 32 + lane];
      s[i >> 2][i & 3] = v;
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 4; nt++) {
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int kp = kb + 8 * nt + 2 * tig + e;
        if (kp > qp0) s[nt][e] = -INFINITY;
        if (kp > qp1) s[nt][2 + e] = -INFINITY;
        mx0 = fmaxf(mx0, s[nt][e]);
        mx1 = fmaxf(mx1, s[nt][2 + e]);
      }
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);
    m0 = mn0;
    m1 = mn1;
    l0 *= al0;
    l1 *= al1;
#pragma unroll
    for (int i = 0; i < VQ; i++) {
      o[i][0] *= al0;
      o[i][1] *= al0;
      o[i][2] *= al1;
      o[i][3] *= al1;
    }
#pragma unroll
    for (int nt = 0; nt < 4; nt++) {
      s[nt][0] = exp2f(s[nt][0] - mu0);
      s[nt][1] = exp2f(s[nt][1] - mu0);
      s[nt][2] = exp2f(s[nt][2] - mu1);
      s[nt][3] = exp2f(s[nt][3] - mu1);
      l0 += s[nt][0] + s[nt][1];
      l1 += s[nt][2] + s[nt][3];
    }
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const uint32_t pa[4] = {pack_h2(s[2 * j][0], s[2 * j][1]), pack_h2(s[2 * j][2], s[2 * j][3]),
                              pack_h2(s[2 * j + 1][0], s[2 * j + 1][1]), pack_h2(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
      for (int np = 0; np < VQ / 2; np++) {
        uint32_t b[4];
        ldsm_x4_t(b, sK + (16 * j + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + vcol + 16 * np + (lane >> 4) * 8);
        mma16816(o[2 * np], pa, b[0], b[1]);
        mma16816(o[2 * np + 1], pa, b[2], b[3]);
      }
    }
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  float *o0 = a.lat + ((size_t)(tok0 - t_base + r0) * a.nh + h) * a.kvl + vcol, *o1 = a.lat + ((size_t)(tok0 - t_base + r1) * a.nh + h) * a.kvl + vcol;
#pragma unroll
  for (int nt = 0; nt < VQ; nt++) {
    const int d = 8 * nt + 2 * tig;
    if (r0 < cnt) {
      o0[d] = o[nt][0] * i0;
      o0[d + 1] = o[nt][1] * i0;
    }
    if (r1 < cnt) {
      o1[d] = o[nt][2] * i1;
      o1[d + 1] = o[nt][3] * i1;
    }
  }
}

// A prompt chunk's per-head products on the tensor cores: y[t][h][r] = w16_h[r] . x[t][h] (w16: every
// head's slab of rows x K dequantized to f16 first, slab apart). Grid (row tiles of 64, token tiles
// of 64, heads), four warps: warp w rows 16w .. 16w + 15 of the tile against its 64 tokens, K in
// steps of 32 (x converted to f16 as staged).
__global__ void __launch_bounds__(128) k_head_mma(const __half *w16, int rows, int K, int64_t slab, const float *x, int ldx, int xh,
                                                  float *y, int ldy, int yh, int ntok) {
  cu_pdl_entry();
  __shared__ __align__(16) __half sW[64][40];
  __shared__ __align__(16) __half sX[64][40];
  const int h = blockIdx.z, r0 = blockIdx.x * 64, t0 = blockIdx.y * 64;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
  const __half *wh = w16 + (size_t)h * slab;
  float acc[8][4];
#pragma unroll
  for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += 32) {
    __syncthreads();
    for (int i = tid; i < 64 * 4; i += 128) {
      const int r = i >> 2, c = (i & 3) * 8;
      *reinterpret_cast<uint4 *>(&sW[r][c]) = r0 + r < rows ? *reinterpret_cast<const uint4 *>(wh + (size_t)(r0 + r) * K + k0 + c) : make_uint4(0, 0, 0, 0);
    }
    for (int i = tid; i < 64 * 8; i += 128) {
      const int t = i >> 3, c = (i & 7) * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (t0 + t < ntok) v = *reinterpret_cast<const float4 *>(x + (size_t)(t0 + t) * ldx + (size_t)h * xh + k0 + c);
      st_h4(&sX[t][c], v.x, v.y, v.z, v.w);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
      uint32_t a[4];
      ldsm_x4(a, &sW[16 * warp + (lane & 15)][kk * 16 + (lane >> 4) * 8]);
#pragma unroll
      for (int np = 0; np < 4; np++) {
        uint32_t b[4];
        ldsm_x4(b, &sX[16 * np + (lane & 7) + ((lane >> 4) << 3)][kk * 16 + ((lane >> 3) & 1) * 8]);
        mma16816(acc[2 * np], a, b[0], b[1]);
        mma16816(acc[2 * np + 1], a, b[2], b[3]);
      }
    }
  }
  const int ra = r0 + 16 * warp + gid, rb = ra + 8;
#pragma unroll
  for (int nt = 0; nt < 8; nt++) {
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int t = t0 + 8 * nt + 2 * tig + e;
      if (t >= ntok) continue;
      float *yt = y + (size_t)t * ldy + (size_t)h * yh;
      if (ra < rows) yt[ra] = acc[nt][e];
      if (rb < rows) yt[rb] = acc[nt][2 + e];
    }
  }
}

} // namespace

bool cu_mla_mma_supported(int kvl, int dk) {
  return mma_fits && (kvl == 128 || kvl == 256 || kvl == 512) && dk % 16 == 0 && dk <= CU_MLA_MAX_ROW;
}

int64_t cu_mla_prefill(cudaStream_t st, const mla_args &a, const int4 *tiles, int n_tiles, int t_base) {
  if (n_tiles <= 0) return BL_OK;
  const int dk = a.kvl + a.nr;
  if (!cu_mla_mma_supported(a.kvl, dk)) return cu_fail(BL_E_UNSUPPORTED, "latent attention for prompts: a latent of %d in rows of %d", a.kvl, dk);
  const dim3 grid(n_tiles, a.nh, 2);
  const size_t smem = (size_t)smem_bytes(dk);
  if (a.kvl == 512) CU_LAUNCH("latent attention (prompts)", k_mla_mma<16>, grid, dim3(256), smem, st, a, tiles, t_base);
  else if (a.kvl == 256) CU_LAUNCH("latent attention (prompts)", k_mla_mma<8>, grid, dim3(256), smem, st, a, tiles, t_base);
  else CU_LAUNCH("latent attention (prompts)", k_mla_mma<4>, grid, dim3(256), smem, st, a, tiles, t_base);
  return BL_OK;
}

bool cu_head_mma_supported(const dmat &w, int nh, size_t w16_elems) {
  return w.ne0 % 32 == 0 && w.nb2 == w.nb1 * w.ne1 && (size_t)w.ne0 * w.ne1 * nh <= w16_elems && cu_gemm_supported(w.type, w.ne0);
}

int64_t cu_head_mma(cudaStream_t st, const head_rows_args &a, int ntok, __half *w16, size_t w16_elems) {
  if (ntok <= 0) return BL_OK;
  const dmat &w = a.w;
  if (!cu_head_mma_supported(w, a.nh, w16_elems) || a.ldx % 4 || a.xh % 4)
    return cu_fail(BL_E_UNSUPPORTED, "per-head products on the tensor cores: %s slabs of %d x %d", cu_type_name(w.type), w.ne1, w.ne0);
  dmat all = w; // every head's slab as one matrix of nh x ne1 rows
  all.ne1 = w.ne1 * a.nh;
  all.ne2 = 1;
  all.nb2 = all.nb1 * all.ne1;
  CU_OK(cu_deq16(st, all, w16));
  const dim3 grid((w.ne1 + 63) / 64, (ntok + 63) / 64, a.nh);
  CU_LAUNCH("per-head products (tensor cores)", k_head_mma, grid, dim3(128), 0, st, w16, w.ne1, w.ne0, (int64_t)w.ne0 * w.ne1, a.x, a.ldx, a.xh, a.y,
            a.ldy, a.yh, ntok);
  return BL_OK;
}

int64_t cu_mla_init(int smem_optin) {
  mma_fits = smem_optin >= smem_bytes(CU_MLA_MAX_ROW);
  if (!mma_fits) return BL_OK;
  CU_TRY(cudaFuncSetAttribute(k_mla_mma<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes(CU_MLA_MAX_ROW)), "configuring latent attention");
  CU_TRY(cudaFuncSetAttribute(k_mla_mma<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes(CU_MLA_MAX_ROW)), "configuring latent attention");
  CU_TRY(cudaFuncSetAttribute(k_mla_mma<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes(CU_MLA_MAX_ROW)), "configuring latent attention");
  CU_OK(cu_kernel_prefs(k_mla_mma<16>, "configuring latent attention"));
  CU_OK(cu_kernel_prefs(k_mla_mma<8>, "configuring latent attention"));
  return cu_kernel_prefs(k_mla_mma<4>, "configuring latent attention");
}
