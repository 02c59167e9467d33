// bloomery CUDA library: int8 tensor-core units of the decode batches' expert products - one
// Q4_K or Q6_K block of 16 weight rows (a warp's rows g and g + 8, g = lane / 4) against up to 8
// quantized activation rows (dot8.cuh's x8 layout, a column a row) as m16n8k32 (Q4_K: a group of
// 32 a product, its scale and minimum) or m16n8k16 (Q6_K: a scale a 16) s8 products. The int32
// sums are exact; the float terms are dot8.cuh's (d * sc * dx * sum - dmin * m * sx for Q4_K; d *
// sc * dx * sum with the values centred on the card for Q6_K).
#pragma once
#include "dot8.cuh"
#include "mma.cuh"
#include "quants.cuh"

// m16n8k16 s8 x s8 -> s32 (A 16x16 row: a0 row g k 4t..4t+3, a1 row g+8; B 16x8 col: b0 k 4t..4t+3 col g).
__device__ __forceinline__ void mma_s8k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a0), "r"(a1), "r"(b0));
}

// The activation side of a unit: xb, this lane's B column (row g's x8 slot); xc[j], the rows of
// C's columns 2t and 2t + 1 (t = lane % 4); n, the rows' length.
struct mma8_x {
  const uint8_t *xb, *xc0, *xc1;
  int n;
};

// Four bytes from 4t of 16-byte chunk c (x8_pos order) of the row at xr.
__device__ __forceinline__ uint32_t x8_word(const uint8_t *xr, int c, int n, int t) { return ld32(xr + 16 * x8_pos(c, n) + 4 * t); }

// Unit c (x groups g0 + 2c, g0 + 2c + 1: the low and high nibbles of qs bytes 32c .. 32c + 31) of
// H pairs of Q4_K blocks p[h][0] (row g) / p[h][1] (row g + 8), 16-byte aligned copies, x groups of
// the block from g0: acc[h][2i + j] += row (g + 8i) of pair h against column 2t + j. The
// activations are loaded once for all H pairs.
template <int H>
__device__ __forceinline__ void mma8_q4k(const uint8_t *const (&p)[H][2], int c, const mma8_x &x, int g0, int t, float (&acc)[H][4]) {
  const int G = g0 + 2 * c;
  const uint32_t bl0 = x8_word(x.xb, 2 * G, x.n, t), bl1 = x8_word(x.xb, 2 * G + 1, x.n, t);
  const uint32_t bh0 = x8_word(x.xb, 2 * G + 2, x.n, t), bh1 = x8_word(x.xb, 2 * G + 3, x.n, t);
  const x8v X0 = x8_at(x.xc0, x.n), X1 = x8_at(x.xc1, x.n);
  const float dx[2][2] = {{X0.d[G], X1.d[G]}, {X0.d[G + 1], X1.d[G + 1]}}, sx[2][2] = {{X0.s[G], X1.s[G]}, {X0.s[G + 1], X1.s[G + 1]}};
#pragma unroll
  for (int h = 0; h < H; h++) {
    const uint32_t l0 = ld32(p[h][0] + 16 + 32 * c + 4 * t), m0 = ld32(p[h][1] + 16 + 32 * c + 4 * t);
    const uint32_t l1 = ld32(p[h][0] + 32 + 32 * c + 4 * t), m1 = ld32(p[h][1] + 32 + 32 * c + 4 * t);
    int clo[4] = {0, 0, 0, 0}, chi[4] = {0, 0, 0, 0};
    mma_s8(clo, l0 & 0x0F0F0F0Fu, m0 & 0x0F0F0F0Fu, l1 & 0x0F0F0F0Fu, m1 & 0x0F0F0F0Fu, bl0, bl1);
    mma_s8(chi, (l0 >> 4) & 0x0F0F0F0Fu, (m0 >> 4) & 0x0F0F0F0Fu, (l1 >> 4) & 0x0F0F0F0Fu, (m1 >> 4) & 0x0F0F0F0Fu, bh0, bh1);
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const uint32_t v = ld32(p[h][i]);
      const float dd = h2f((uint16_t)(v & 0xffffu)), dm = h2f((uint16_t)(v >> 16));
      int sc0, mn0, sc1, mn1;
      k4_scale_min(2 * c, p[h][i] + 4, sc0, mn0);
      k4_scale_min(2 * c + 1, p[h][i] + 4, sc1, mn1);
      const float fs0 = dd * i2f(sc0), fs1 = dd * i2f(sc1), fm0 = dm * i2f(mn0), fm1 = dm * i2f(mn1);
#pragma unroll
      for (int j = 0; j < 2; j++) acc[h][2 * i + j] += (fs0 * dx[0][j] * i2f(clo[2 * i + j]) + fs1 * dx[1][j] * i2f(chi[2 * i + j])) - (fm0 * sx[0][j] + fm1 * sx[1][j]);
    }
  }
}

// Unit u = 4hh + r (x group g0 + u) of a pair of Q6_K blocks p[0] / p[1] (2-byte aligned copies):
// element 32r + k of half hh is the low (r < 2) or high nibble of ql[64hh + 32(r % 2) + k] with
// bits 2r of qh[32hh + k] above it, minus 32; a scale a 16 (scales[8hh + 2r + k / 16]).
__device__ __forceinline__ void mma8_q6k(const uint8_t *const (&p)[2], int u, const mma8_x &x, int g0, int t, float (&acc)[4]) {
  const int hh = u >> 2, r = u & 3, G = g0 + u;
  const unsigned ls = 4u * (unsigned)(r >> 1), hs = 2u * (unsigned)r;
  uint32_t va[2], vb[2];
  float sa[2], sb[2], d[2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const uint8_t *ql = p[i] + 64 * hh + 32 * (r & 1) + 4 * t, *qh = p[i] + 128 + 32 * hh + 4 * t;
    va[i] = __vsub4(((ld32a2(ql) >> ls) & 0x0F0F0F0Fu) | (((ld32a2(qh) >> hs) & 0x03030303u) << 4), 0x20202020u);
    vb[i] = __vsub4(((ld32a2(ql + 16) >> ls) & 0x0F0F0F0Fu) | (((ld32a2(qh + 16) >> hs) & 0x03030303u) << 4), 0x20202020u);
    sa[i] = i2f((int)(int8_t)p[i][192 + 8 * hh + 2 * r]);
    sb[i] = i2f((int)(int8_t)p[i][192 + 8 * hh + 2 * r + 1]);
    d[i] = h2f(ld16(p[i] + 208));
  }
  int ca[4] = {0, 0, 0, 0}, cb[4] = {0, 0, 0, 0};
  mma_s8k16(ca, va[0], va[1], x8_word(x.xb, 2 * G, x.n, t));
  mma_s8k16(cb, vb[0], vb[1], x8_word(x.xb, 2 * G + 1, x.n, t));
  const float dx[2] = {x8_at(x.xc0, x.n).d[G], x8_at(x.xc1, x.n).d[G]};
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 2; j++) acc[2 * i + j] += d[i] * dx[j] * (sa[i] * i2f(ca[2 * i + j]) + sb[i] * i2f(cb[2 * i + j]));
}

// Units a block of type T holds (Q4_K: 4 of two groups; Q6_K: 8 of one).
template <int T>
__host__ __device__ constexpr int mma8_upb() { return T == T_Q4_K ? 4 : 8; }

// Unit u of one pair of blocks p[0] / p[1] of type T (x groups of the block from g0).
template <int T>
__device__ __forceinline__ void mma8_unit(const uint8_t *const (&p)[2], int u, const mma8_x &x, int g0, int t, float (&acc)[4]) {
  if constexpr (T == T_Q4_K) {
    mma8_q4k<1>(reinterpret_cast<const uint8_t *const(&)[1][2]>(p), u, x, g0, t, reinterpret_cast<float(&)[1][4]>(acc));
  } else {
    mma8_q6k(p, u, x, g0, t, acc);
  }
}
