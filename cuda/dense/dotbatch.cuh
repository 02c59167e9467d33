// bloomery CUDA library: a weight row's units dotted with up to MB_NT staged activation rows at once
// (the decode batches' products: each weight unit loaded once for all of the rows) - float rows, or
// int8 rows in dot8.cuh's layout dotted by dp4a (Q4_K, Q6_K, Q8_0). Shared by moe_batch.cu and mv_batch.cu.
#pragma once
#include <stdlib.h>

#include "common.cuh"
#include "dot8.cuh"
#include "internal.h"
#include "quants.cuh"
#include "stage.cuh"

#define MB_NT MV_MAX_NT // most pairs a tile holds (one per token of the step)

// Which staged row a tile's row t reads: 3 bits a row in sl (MB_IDENT: row t in slot t).
static_assert(MB_NT <= 10, "three bits a row in 32");
__host__ __device__ constexpr uint32_t mb_ident_slots(int t = 0) { return t >= MB_NT ? 0u : ((uint32_t)t << (3 * t)) | mb_ident_slots(t + 1); }
#define MB_IDENT mb_ident_slots()
__device__ __forceinline__ int mb_slot(uint32_t sl, int t) { return (int)((sl >> (3 * t)) & 7u); }

// R rows' sums against the tile's rows set to zero.
template <int R>
__device__ __forceinline__ void mb_zero(float (&acc)[R][MB_NT]) {
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int t = 0; t < MB_NT; t++) acc[r][t] = 0.0f;
}

// ---- float activations: R weight rows (one type) against the tile's cnt staged rows ----
// xs: staged rows of n floats; acc[r][t]: row r against staged row sl[t] (t < cnt). F32 rows
// (the router) unroll four units a lane so their loads are in flight together.
template <int T, int R>
__device__ __forceinline__ void dot_f(const uint8_t *const (&rp)[R], const float *xs, int n, int cnt, uint32_t sl, float (&acc)[R][MB_NT], int lane) {
  using Q = qt<T>;
  const int nunits = (n / Q::BE) * Q::UPB;
#pragma unroll(T == T_F32 ? 4 : 1)
  for (int k = lane; k < nunits; k += 32) {
    const int blk = k / Q::UPB, u = k - blk * Q::UPB;
    const float *xb = xs + blk * Q::BE;
#pragma unroll
    for (int r = 0; r < R; r++)
      Q::unit(rp[r] + (size_t)blk * Q::BB, u, [&](int pos, float w0, float w1, float w2, float w3) {
#pragma unroll
        for (int t = 0; t < MB_NT; t++)
          if (t < cnt) {
            const float4 xv = *reinterpret_cast<const float4 *>(xb + (size_t)mb_slot(sl, t) * n + pos);
            acc[r][t] += w0 * xv.x + w1 * xv.y + w2 * xv.z + w3 * xv.w;
          }
      });
  }
}

template <int T, int R>
__device__ __forceinline__ void dot_f(const uint8_t *const (&rp)[R], const float *xs, int n, int cnt, float (&acc)[R][MB_NT], int lane) {
  dot_f<T, R>(rp, xs, n, cnt, MB_IDENT, acc, lane);
}

// ---- int8 activations: the quantized rows of a tile lie xb bytes apart, each q | d | s | h ----
__device__ __forceinline__ x8v x8_row(const uint8_t *base, int xb, int n, int t) { return x8_at(base + (size_t)t * xb, n); }
// Chunk c (16 int8 values) of a staged row (dot8.cuh's x8_pos order).
__device__ __forceinline__ int4 x8_chunk(const x8v &x, int c, int n) { return reinterpret_cast<const int4 *>(x.q)[x8_pos(c, n)]; }

// Unit u of R weight rows' blocks (each loaded once) against the tile's cnt quantized rows, whose
// activations are read once for all R rows (dot8.cuh's layouts and per-unit arithmetic).
template <int T>
struct mb8;

template <>
struct mb8<T_Q4_K> {
  static constexpr int UPB = 4;
  template <int R>
  __device__ static void units(const uint8_t *const (&p)[R], int c, const uint8_t *xq, int xb, int n, int g0, int cnt, uint32_t sl, float (&acc)[R][MB_NT]) {
    float d[R], dmin[R], fs0[R], fm0[R], fs1[R], fm1[R];
    uint32_t q[R][8];
#pragma unroll
    for (int r = 0; r < R; r++) {
      const uint32_t dm = ld32(p[r]);
      d[r] = h2f((uint16_t)(dm & 0xffffu));
      dmin[r] = h2f((uint16_t)(dm >> 16));
      int sc0, m0, sc1, m1;
      k4_scale_min(2 * c, p[r] + 4, sc0, m0);
      k4_scale_min(2 * c + 1, p[r] + 4, sc1, m1);
      fs0[r] = i2f(sc0);
      fm0[r] = i2f(m0);
      fs1[r] = i2f(sc1);
      fm1[r] = i2f(m1);
      const uint4 qa = *reinterpret_cast<const uint4 *>(p[r] + 16 + 32 * c), qb = *reinterpret_cast<const uint4 *>(p[r] + 32 + 32 * c);
      q[r][0] = qa.x; q[r][1] = qa.y; q[r][2] = qa.z; q[r][3] = qa.w;
      q[r][4] = qb.x; q[r][5] = qb.y; q[r][6] = qb.z; q[r][7] = qb.w;
    }
    const int ga = g0 + 2 * c, gb = ga + 1;
#pragma unroll
    for (int t = 0; t < MB_NT; t++) {
      if (t >= cnt) break;
      const x8v x = x8_row(xq, xb, n, mb_slot(sl, t));
      const int4 a0 = x8_chunk(x, 2 * ga, n), a1 = x8_chunk(x, 2 * ga + 1, n), b0 = x8_chunk(x, 2 * gb, n), b1 = x8_chunk(x, 2 * gb + 1, n);
      const int xl[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w}, xh[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
      const float da = x.d[ga], db = x.d[gb], sa = x.s[ga], sb = x.s[gb];
#pragma unroll
      for (int r = 0; r < R; r++) {
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
          s0 = __dp4a((int)(q[r][i] & 0x0F0F0F0Fu), xl[i], s0);
          s1 = __dp4a((int)((q[r][i] >> 4) & 0x0F0F0F0Fu), xh[i], s1);
        }
        acc[r][t] += d[r] * (fs0[r] * da * i2f(s0) + fs1[r] * db * i2f(s1)) - dmin[r] * (fm0[r] * sa + fm1[r] * sb);
      }
    }
  }
};

template <>
struct mb8<T_Q6_K> {
  static constexpr int UPB = 8;
  template <int R>
  __device__ static void units(const uint8_t *const (&p)[R], int u, const uint8_t *xq, int xb, int n, int g0, int cnt, uint32_t sl, float (&acc)[R][MB_NT]) {
    const int hh = u >> 2, rr = u & 3, g = g0 + u;
    const unsigned ls = 4u * (unsigned)(rr >> 1), hs = 2u * (unsigned)rr;
    float d[R], fa[R], fb[R];
    uint32_t v[R][8];
#pragma unroll
    for (int r = 0; r < R; r++) {
      d[r] = h2f(ld16(p[r] + 208));
      uint32_t ql[8], qh[8];
      ld8_a2(p[r] + 64 * hh + 32 * (rr & 1), ql);
      ld8_a2(p[r] + 128 + 32 * hh, qh);
      fa[r] = i2f((int)(int8_t)p[r][192 + 8 * hh + 2 * rr]);
      fb[r] = i2f((int)(int8_t)p[r][192 + 8 * hh + 2 * rr + 1]);
#pragma unroll
      for (int i = 0; i < 8; i++) v[r][i] = ((ql[i] >> ls) & 0x0F0F0F0Fu) | (((qh[i] >> hs) & 0x03030303u) << 4);
    }
#pragma unroll
    for (int t = 0; t < MB_NT; t++) {
      if (t >= cnt) break;
      const x8v x = x8_row(xq, xb, n, mb_slot(sl, t));
      const int4 x0 = x8_chunk(x, 2 * g, n), x1 = x8_chunk(x, 2 * g + 1, n);
      const int xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
      const float dx = x.d[g];
      const int h0 = 32 * x.h[2 * g], h1 = 32 * x.h[2 * g + 1];
#pragma unroll
      for (int r = 0; r < R; r++) {
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
          s0 = __dp4a((int)v[r][i], xw[i], s0);
          s1 = __dp4a((int)v[r][i + 4], xw[i + 4], s1);
        }
        s0 -= h0;
        s1 -= h1;
        acc[r][t] += d[r] * dx * (fa[r] * i2f(s0) + fb[r] * i2f(s1));
      }
    }
  }
};

// Q8_0: one unit a block (one x group): y = d * q.
template <>
struct mb8<T_Q8_0> {
  static constexpr int UPB = 1;
  template <int R>
  __device__ static void units(const uint8_t *const (&p)[R], int, const uint8_t *xq, int xb, int n, int g0, int cnt, uint32_t sl, float (&acc)[R][MB_NT]) {
    float d[R];
    uint32_t q[R][8];
#pragma unroll
    for (int r = 0; r < R; r++) {
      d[r] = h2f(ld16(p[r]));
      ld8_a2(p[r] + 2, q[r]);
    }
#pragma unroll
    for (int t = 0; t < MB_NT; t++) {
      if (t >= cnt) break;
      const x8v x = x8_row(xq, xb, n, mb_slot(sl, t));
      const int4 x0 = x8_chunk(x, 2 * g0, n), x1 = x8_chunk(x, 2 * g0 + 1, n);
      const int xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
      const float dx = x.d[g0];
#pragma unroll
      for (int r = 0; r < R; r++) {
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = __dp4a((int)q[r][i], xw[i], s);
        acc[r][t] += d[r] * dx * i2f(s);
      }
    }
  }
};

// The rows' units against staged rows sl[0 .. cnt) (x8 slots xb bytes apart from xq).
// lane: this lane's first unit; stride: lanes sharing the rows (32: a warp; fewer: a lane group).
template <int T, int R>
__device__ __forceinline__ void dot_q8(const uint8_t *const (&rp)[R], const uint8_t *xq, int xb, int n, int cnt, uint32_t sl, float (&acc)[R][MB_NT], int lane,
                                       int stride = 32) {
  using Q = qt<T>;
  using D = mb8<T>;
  const int nunits = (n / Q::BE) * D::UPB;
  for (int k = lane; k < nunits; k += stride) {
    const int b = k / D::UPB, u = k - b * D::UPB, g0 = b * (Q::BE / 32);
    const uint8_t *p[R];
#pragma unroll
    for (int r = 0; r < R; r++) p[r] = rp[r] + (size_t)b * Q::BB;
    D::template units<R>(p, u, xq, xb, n, g0, cnt, sl, acc);
  }
}

template <int T, int R>
__device__ __forceinline__ void dot_q8(const uint8_t *const (&rp)[R], const uint8_t *xq, int xb, int n, int cnt, float (&acc)[R][MB_NT], int lane) {
  dot_q8<T, R>(rp, xq, xb, n, cnt, MB_IDENT, acc, lane);
}

// ---- staging of activation rows, every load of a thread's batch in flight together ----
#define MB_STAGE_BATCH 4

// The sum of squares of four elements as the RMS scales add them (one expression for every
// kernel that computes them, so their contractions into fma agree).
__device__ __forceinline__ float sq4(float4 v) { return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; }

// cnt rows (src + row_of(t) * ld, written by an earlier kernel) quantized into the x8 slots
// xq + t * x8_bytes(n) (int8 values in x8_pos order), four threads a group, MB_STAGE_BATCH groups' loads a thread in flight at
// once. Every thread of the block calls it; ends with a block barrier.
// xs: bytes from a slot to the next (0: x8_bytes(n), packed).
template <class RowOf>
__device__ __forceinline__ void stage_rows_q8(const float *src, int ld, int n, int cnt, RowOf row_of, uint8_t *xq, int xs = 0) {
  const int ng = n / 32, total = cnt * ng, step = blockDim.x >> 2, part = threadIdx.x & 3, xb = xs > 0 ? xs : x8_bytes(n);
  for (int base = 0; base < total; base += MB_STAGE_BATCH * step) {
    float4 va[MB_STAGE_BATCH], vb[MB_STAGE_BATCH];
#pragma unroll
    for (int i = 0; i < MB_STAGE_BATCH; i++) {
      const int gi = base + i * step + (threadIdx.x >> 2);
      va[i] = vb[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (gi < total) {
        const int t = gi / ng, g = gi - t * ng;
        const float4 *s = reinterpret_cast<const float4 *>(src + (size_t)row_of(t) * ld + 32 * g + 8 * part);
        va[i] = __ldcg(s);
        vb[i] = __ldcg(s + 1);
      }
    }
#pragma unroll
    for (int i = 0; i < MB_STAGE_BATCH; i++) {
      const int gi = base + i * step + (threadIdx.x >> 2);
      const int t = gi < total ? gi / ng : 0, g = gi - t * ng;
      q8_group(va[i], vb[i], gi < total, xq + (size_t)t * xb, n, g, part);
    }
  }
  __syncthreads();
}

// cnt rows as floats into xs + t * n, MB_STAGE_BATCH float4 loads a thread in flight at once.
// Every thread of the block calls it; ends with a block barrier.
template <class RowOf>
__device__ __forceinline__ void stage_rows_f(const float *src, int ld, int n, int cnt, RowOf row_of, float *xs) {
  const int n4 = n >> 2, total = cnt * n4;
  for (int base = 0; base < total; base += MB_STAGE_BATCH * (int)blockDim.x) {
    float4 v[MB_STAGE_BATCH];
#pragma unroll
    for (int i = 0; i < MB_STAGE_BATCH; i++) {
      const int idx = base + i * (int)blockDim.x + (int)threadIdx.x;
      if (idx < total) {
        const int t = idx / n4, k = idx - t * n4;
        v[i] = __ldcg(reinterpret_cast<const float4 *>(src + (size_t)row_of(t) * ld) + k);
      }
    }
#pragma unroll
    for (int i = 0; i < MB_STAGE_BATCH; i++) {
      const int idx = base + i * (int)blockDim.x + (int)threadIdx.x;
      if (idx < total) reinterpret_cast<float4 *>(xs)[idx] = v[i];
    }
  }
  __syncthreads();
}
