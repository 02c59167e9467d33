// bloomery CUDA library: one-token products on int8 activations - the activation row quantized per
// 32-element group (scale amax / 127, exact f32 group sums kept for the K-quants' minimum terms,
// sums of the int8 values per 16 for Q6_K's -32 offset), and Q4_K / Q6_K rows dotted with it by
// dp4a (four products an instruction, no int-to-float conversion an element). The integer sums are
// exact; only the activation rounding differs from the f32 kernels (as ggml's q8_1 activations).
#pragma once
#include "quants.cuh"

// A quantized activation row (shared memory): q[n] int8 in x8_pos's order, d[n/32] scales, s[n/32]
// f32 sums, h[n/16] int8 sums per 16; pc: the 16-byte chunks x8_pos permutes (the full runs of 128).
struct x8v {
  const int8_t *q;
  const float *d, *s;
  const int *h;
  int pc;
};

// Where 16-byte chunk c of an x8 row's int8 values lies (every kernel's staged rows): within each
// full run of 128 chunks (2,048 values) chunk c sits at (c % 4) * 32 + c / 4, so the 32 lanes of a
// warp, each reading the 4 (Q4_K) or 2 (Q6_K, Q8_0) consecutive chunks of its unit, hit distinct
// banks (in order they conflicted 4-way: lane k's chunks were 64 bytes from lane k + 1's); the rest
// of the row in order.
__host__ __device__ __forceinline__ int x8_slot(int c) { return (c & ~127) | ((c & 3) << 5) | ((c & 127) >> 2); } // inside a full run
__host__ __device__ __forceinline__ int x8_pos(int c, int n) { return c < (n >> 11) << 7 ? x8_slot(c) : c; }

// Chunk c (even) of x's int8 values and the one after it: the second sits 32 chunks on in a full run.
__device__ __forceinline__ const int4 *x8_chunk_at(const x8v &x, int c, int &step) {
  const bool in = c < x.pc;
  step = in ? 32 : 1;
  return reinterpret_cast<const int4 *>(x.q) + (in ? x8_slot(c) : c);
}

// Whether rows of type t have an int8-activation dot in every int8 kernel (the decode-batch and
// grouped kernels too: d8<t>::ok).
__host__ __device__ constexpr bool d8_type(int t) { return t == T_Q4_K || t == T_Q6_K; }
// Whether the one-token kernels (fastdec.cu) take int8 activations for rows of type t: the above,
// the 32-element types whose block is one activation group (Q8_0, MXFP4), and the grid types
// (dot8_iq.cuh: a unit is one group of 32).
__host__ __device__ constexpr bool d8_one(int t) { return d8_type(t) || t == T_Q8_0 || t == T_MXFP4 || cu_iq_type(t); }

// Bytes the quantized form of n elements takes (n % 32 == 0), 16-byte multiple.
__host__ __device__ constexpr int x8_bytes(int n) { return ((n + (n / 32) * 8 + (n / 16) * 4) + 15) / 16 * 16; }

template <int T>
struct d8 {
  static constexpr bool ok = false;
};

// Q4_K: unit u = chunk c of block b: qs bytes 32c .. 32c + 31, low nibbles are group 2c (elements
// 64c + j), high nibbles group 2c + 1 (64c + 32 + j); y = d*sc*q - dmin*m per group.
// A unit's activations (xl, xh: groups 2c and 2c + 1's int8 values; their scales and sums) are read
// once by xload; rows of the same column block share them (dot), unit = dot(xload).
template <>
struct d8<T_Q4_K> {
  static constexpr bool ok = true;
  static constexpr int UPB = 4;
  struct xu {
    int4 a0, a1, b0, b1;
    float da, db, sa, sb;
  };
  // g0: the x group of the block's first element
  __device__ static xu xload(int c, const x8v &x, int g0) {
    const int ga = g0 + 2 * c, gb = ga + 1;
    int st;
    const int4 *xa = x8_chunk_at(x, 2 * ga, st); // chunks 2ga .. 2ga + 3 (2ga % 4 == 0)
    return xu{xa[0], xa[st], xa[2 * st], xa[3 * st], x.d[ga], x.d[gb], x.s[ga], x.s[gb]};
  }
  // p: the block (16-byte aligned copy)
  __device__ static float dot(const uint8_t *p, int c, const xu &v) {
    const uint4 hd = *reinterpret_cast<const uint4 *>(p); // d and dmin, the 12 scale bytes: one load
    const float d = h2f((uint16_t)(hd.x & 0xffffu)), dmin = h2f((uint16_t)(hd.x >> 16));
    int sc0, m0, sc1, m1;
    k4_scale_min2(c, hd.y, hd.z, hd.w, sc0, m0, sc1, m1);
    const uint4 qa = *reinterpret_cast<const uint4 *>(p + 16 + 32 * c), qb = *reinterpret_cast<const uint4 *>(p + 32 + 32 * c);
    const uint32_t q[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
    const int xl[8] = {v.a0.x, v.a0.y, v.a0.z, v.a0.w, v.a1.x, v.a1.y, v.a1.z, v.a1.w};
    const int xh[8] = {v.b0.x, v.b0.y, v.b0.z, v.b0.w, v.b1.x, v.b1.y, v.b1.z, v.b1.w};
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
      s0 = __dp4a((int)(q[i] & 0x0F0F0F0Fu), xl[i], s0);
      s1 = __dp4a((int)((q[i] >> 4) & 0x0F0F0F0Fu), xh[i], s1);
    }
    return d * (i2f(sc0) * v.da * i2f(s0) + i2f(sc1) * v.db * i2f(s1)) - dmin * (i2f(m0) * v.sa + i2f(m1) * v.sb);
  }
  __device__ static float unit(const uint8_t *p, int c, const x8v &x, int g0) { return dot(p, c, xload(c, x, g0)); }
};

// 8 words from a 2-byte aligned address (aligned loads joined by funnel shifts; reads one word more).
// The aligned base is formed by pointer arithmetic (not through an integer), so that a shared
// memory copy keeps its address space: ld.shared, not generic loads (38 of them in k_fdown<Q6_K>).
__device__ __forceinline__ void ld8_a2(const uint8_t *p, uint32_t (&w)[8]) {
  const unsigned mis = (unsigned)(reinterpret_cast<uintptr_t>(p) & 3);
  const uint32_t *b = reinterpret_cast<const uint32_t *>(p - mis);
  const unsigned sh = mis * 8u;
  uint32_t r[9];
#pragma unroll
  for (int i = 0; i < 9; i++) r[i] = b[i];
#pragma unroll
  for (int i = 0; i < 8; i++) w[i] = __funnelshift_r(r[i], r[i + 1], sh);
}

// Q6_K: unit u = 4hh + r of block b is x group 8b + u: element 128hh + 32r + l (l < 32) is the low
// (r < 2) or high nibble of ql[64hh + 32(r % 2) + l] with bits 2r of qh[32hh + l] above it, minus
// 32; scale scales[8hh + 2r + l/16]; y = d * scale * (q - 32). xload / dot as Q4_K's.
template <>
struct d8<T_Q6_K> {
  static constexpr bool ok = true;
  static constexpr int UPB = 8;
  struct xu {
    int4 x0, x1;
    int h0, h1;
    float d;
  };
  __device__ static xu xload(int u, const x8v &x, int g0) {
    const int g = g0 + u;
    int st;
    const int4 *xg = x8_chunk_at(x, 2 * g, st);
    return xu{xg[0], xg[st], x.h[2 * g], x.h[2 * g + 1], x.d[g]};
  }
  __device__ static float dot(const uint8_t *p, int u, const xu &v) {
    const int hh = u >> 2, r = u & 3;
    const float d = h2f(ld16(p + 208));
    uint32_t ql[8], qh[8];
    ld8_a2(p + 64 * hh + 32 * (r & 1), ql);
    ld8_a2(p + 128 + 32 * hh, qh);
    const int sa = (int)(int8_t)p[192 + 8 * hh + 2 * r], sb = (int)(int8_t)p[192 + 8 * hh + 2 * r + 1];
    const int xw[8] = {v.x0.x, v.x0.y, v.x0.z, v.x0.w, v.x1.x, v.x1.y, v.x1.z, v.x1.w};
    const unsigned ls = 4u * (unsigned)(r >> 1), hs = 2u * (unsigned)r;
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const uint32_t w = ((ql[i] >> ls) & 0x0F0F0F0Fu) | (((qh[i] >> hs) & 0x03030303u) << 4);
      if (i < 4) s0 = __dp4a((int)w, xw[i], s0);
      else s1 = __dp4a((int)w, xw[i], s1);
    }
    s0 -= 32 * v.h0;
    s1 -= 32 * v.h1;
    return d * v.d * (i2f(sa) * i2f(s0) + i2f(sb) * i2f(s1));
  }
  __device__ static float unit(const uint8_t *p, int u, const x8v &x, int g0) { return dot(p, u, xload(u, x, g0)); }
};

// N words at any byte address by aligned loads joined with funnel shifts; the word after them is
// read only when misaligned (then it holds wanted bytes), so a block that ends a row never reads
// past the row's last aligned word.
template <int N>
__device__ __forceinline__ void ldw_a1(const uint8_t *p, uint32_t (&w)[N]) {
  const unsigned mis = (unsigned)(reinterpret_cast<uintptr_t>(p) & 3);
  const uint32_t *b = reinterpret_cast<const uint32_t *>(p - mis);
  const unsigned sh = mis * 8u;
  uint32_t r[N + 1];
#pragma unroll
  for (int i = 0; i < N; i++) r[i] = b[i];
  r[N] = mis ? b[N] : 0u;
#pragma unroll
  for (int i = 0; i < N; i++) w[i] = __funnelshift_r(r[i], r[i + 1], sh);
}

// The 32-element types: a block is one activation group (unit 0, UPB 1); xload takes its two
// chunks and scale.
struct x8g {
  int4 x0, x1;
  float d;
};
__device__ __forceinline__ x8g x8g_load(const x8v &x, int g) {
  int st;
  const int4 *xg = x8_chunk_at(x, 2 * g, st);
  return x8g{xg[0], xg[st], x.d[g]};
}

// Q8_0: y = d * q (34-byte blocks: d, then 32 int8 values; 2-byte aligned).
template <>
struct d8<T_Q8_0> {
  static constexpr bool ok = true;
  static constexpr int UPB = 1;
  using xu = x8g;
  __device__ static xu xload(int, const x8v &x, int g0) { return x8g_load(x, g0); }
  __device__ static float dot(const uint8_t *p, int, const xu &v) {
    uint32_t q[8];
    ldw_a1<8>(p + 2, q);
    const int xw[8] = {v.x0.x, v.x0.y, v.x0.z, v.x0.w, v.x1.x, v.x1.y, v.x1.z, v.x1.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) s = __dp4a((int)q[i], xw[i], s);
    return h2f(ld16(p)) * v.d * i2f(s);
  }
  __device__ static float unit(const uint8_t *p, int u, const x8v &x, int g0) { return dot(p, u, xload(u, x, g0)); }
};

// Four E2M1 codes (a byte each, 0..15) as their doubled values (int8: 0 1 2 3 4 6 8 12, bit 3 the
// sign) by two byte permutes over the magnitudes and their negations, the sign bit choosing.
__device__ __forceinline__ int e2m1x2_4(uint32_t c) {
  const uint32_t s3 = c & 0x07070707u, t = s3 | (s3 >> 4);
  const uint32_t sel = (t & 0xFFu) | ((t >> 8) & 0xFF00u);
  const uint32_t pos = __byte_perm(pack4(0, 1, 2, 3), pack4(4, 6, 8, 12), sel);
  const uint32_t neg = __byte_perm(pack4(0, -1, -2, -3), pack4(-4, -6, -8, -12), sel);
  const uint32_t m = ((c >> 3) & 0x01010101u) * 0xFFu;
  return (int)((pos & ~m) | (neg & m));
}

// MXFP4: 17-byte blocks (an E8M0 exponent e, then 16 bytes: byte j's low nibble is element j, its
// high nibble element j + 16); y = e2m1[q] * 2^(e-127) = (2 e2m1[q]) * 2^(e-128): the doubled
// codes dotted in int8, times e8m0_half(e) (any byte alignment).
template <>
struct d8<T_MXFP4> {
  static constexpr bool ok = true;
  static constexpr int UPB = 1;
  using xu = x8g;
  __device__ static xu xload(int, const x8v &x, int g0) { return x8g_load(x, g0); }
  __device__ static float dot(const uint8_t *p, int, const xu &v) {
    uint32_t q[4];
    ldw_a1<4>(p + 1, q);
    const int xl[4] = {v.x0.x, v.x0.y, v.x0.z, v.x0.w}, xh[4] = {v.x1.x, v.x1.y, v.x1.z, v.x1.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      s = __dp4a(e2m1x2_4(q[i] & 0x0F0F0F0Fu), xl[i], s);
      s = __dp4a(e2m1x2_4((q[i] >> 4) & 0x0F0F0F0Fu), xh[i], s);
    }
    return e8m0_half(p[0]) * v.d * i2f(s);
  }
  __device__ static float unit(const uint8_t *p, int u, const x8v &x, int g0) { return dot(p, u, xload(u, x, g0)); }
};

// Lane partial of a row of nblk blocks at p (a shared copy) against x groups from g0.
template <int T>
__device__ __forceinline__ float dot8_row(const uint8_t *p, int nblk, const x8v &x, int g0, int lane) {
  using Q = qt<T>;
  using D = d8<T>;
  float acc = 0.0f;
  const int nunits = nblk * D::UPB;
  for (int k = lane; k < nunits; k += 32) {
    const int b = k / D::UPB, u = k - b * D::UPB;
    acc += D::unit(p + (size_t)b * Q::BB, u, x, g0 + b * (Q::BE / 32));
  }
  return acc;
}

// Two rows' lane partials in one loop (each row's units in k order, as dot8_row: the same sums
// bit for bit), so that the two rows' units overlap instead of running one loop after the other.
template <int T>
__device__ __forceinline__ void dot8_row2(const uint8_t *p0, const uint8_t *p1, int nblk, const x8v &x, int lane, float &v0, float &v1) {
  using Q = qt<T>;
  using D = d8<T>;
  float a0 = 0.0f, a1 = 0.0f;
  const int nunits = nblk * D::UPB;
  for (int k = lane; k < nunits; k += 32) {
    const int b = k / D::UPB, u = k - b * D::UPB, g = b * (Q::BE / 32);
    const typename D::xu v = D::xload(u, x, g); // read once for both rows
    a0 += D::dot(p0 + (size_t)b * Q::BB, u, v);
    a1 += D::dot(p1 + (size_t)b * Q::BB, u, v);
  }
  v0 = a0;
  v1 = a1;
}

// The quantized row at p (n elements): q | d | s | h.
__device__ __forceinline__ x8v x8_at(const uint8_t *p, int n) {
  x8v x;
  x.q = reinterpret_cast<const int8_t *>(p);
  x.d = reinterpret_cast<const float *>(p + n);
  x.s = x.d + n / 32;
  x.h = reinterpret_cast<const int *>(x.s + n / 32);
  x.pc = (n >> 11) << 7;
  return x;
}

// One group of 32 (four threads, part = threadIdx.x & 3, eight values each) quantized into the
// x8 row at dst (scale amax / 127, the f32 group sum, int8 sums per 16); every lane of the warp
// calls it (shuffles), ok: whether this group exists; the int8 values in x8_pos's order.
__device__ __forceinline__ void q8_group(float4 va, float4 vb, bool ok, uint8_t *dst, int n, int g, int part) {
  const int ng = n / 32;
  float amax = fmaxf(fmaxf(fmaxf(fabsf(va.x), fabsf(va.y)), fmaxf(fabsf(va.z), fabsf(va.w))), fmaxf(fmaxf(fabsf(vb.x), fabsf(vb.y)), fmaxf(fabsf(vb.z), fabsf(vb.w))));
  float sum = ((va.x + va.y) + (va.z + va.w)) + ((vb.x + vb.y) + (vb.z + vb.w));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const int v0 = __float2int_rn(va.x * inv), v1 = __float2int_rn(va.y * inv), v2 = __float2int_rn(va.z * inv), v3 = __float2int_rn(va.w * inv);
  const int v4 = __float2int_rn(vb.x * inv), v5 = __float2int_rn(vb.y * inv), v6 = __float2int_rn(vb.z * inv), v7 = __float2int_rn(vb.w * inv);
  int hs = v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7;
  hs += __shfl_xor_sync(0xffffffffu, hs, 1); // parts 0+1: the first 16, parts 2+3: the second
  if (!ok) return;
  int8_t *q = reinterpret_cast<int8_t *>(dst);
  float *d = reinterpret_cast<float *>(dst + n), *s = d + ng;
  int *h = reinterpret_cast<int *>(s + ng);
  const uint32_t w0 = (uint32_t)(v0 & 255) | ((uint32_t)(v1 & 255) << 8) | ((uint32_t)(v2 & 255) << 16) | ((uint32_t)(v3 & 255) << 24);
  const uint32_t w1 = (uint32_t)(v4 & 255) | ((uint32_t)(v5 & 255) << 8) | ((uint32_t)(v6 & 255) << 16) | ((uint32_t)(v7 & 255) << 24);
  const int at = 16 * x8_pos(2 * g + (part >> 1), n) + 8 * (part & 1);
  reinterpret_cast<uint2 *>(q + at)[0] = make_uint2(w0, w1);
  if (part == 0) {
    d[g] = amax / 127.0f;
    s[g] = sum;
  }
  if ((part & 1) == 0) h[2 * g + (part >> 1)] = hs;
}

// Quantizes n floats of xs (shared, n % 32 == 0) into the x8 layout at dst (q | d | s | h). Every
// thread of the block calls it (warp shuffles over groups of 4 lanes); ends with a block barrier.
__device__ __forceinline__ x8v quantize_x8(const float *xs, int n, uint8_t *dst) {
  const int ng = n / 32;
  const int part = threadIdx.x & 3;
  for (int base = 0; base < ng; base += blockDim.x >> 2) {
    const int g = base + (threadIdx.x >> 2);
    const bool ok = g < ng;
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
    if (ok) {
      a = reinterpret_cast<const float4 *>(xs + 32 * g + 8 * part)[0];
      b = reinterpret_cast<const float4 *>(xs + 32 * g + 8 * part)[1];
    }
    q8_group(a, b, ok, dst, n, g, part);
  }
  __syncthreads();
  return x8_at(dst, n);
}

#include "dot8_iq.cuh"
