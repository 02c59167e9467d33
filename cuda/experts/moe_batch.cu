// bloomery CUDA library: the routed experts of decode batches of 2..MV_MAX_NT tokens grouped by
// expert - the picks and the (token, pick) pairs grouped by expert in one launch after the
// router's product (k_mb_pick, mbpick.cuh; else moe.cu's sort; one tile an expert), gate/up with SwiGLU and down with each warp's weight rows copied
// into shared slots by cp.async two items ahead and dotted with the
// rows of all the pairs routed to its expert (each weight row read once a step, not once a pair),
// one output row a pair, then each token's picks weighted and added to the residual in ascending
// expert order (moe.cu's combine). Launch shapes depend only on the token count (graph capture):
// each grid holds the blocks resident on the card at once, which split the step's (tile, row
// chunk) items read from the card. Q4_K / Q6_K rows take int8 activations and dp4a (dot8.cuh's
// numerics) when the caller and FAST_Q8 allow it; with FAST_X8 and the caller's scratch, gate/up's
// rows are quantized once a step (by spare blocks of the picks' launch, else x8rows.cu's kernel)
// and each block copies them whole. down stages a tile's SwiGLU rows itself: a group of 32 of
// them comes from rows of gate/up that other warps and blocks compute. With FAST_GUMMA /
// FAST_DNMMA gate/up and down run as int8 tensor-core products instead (k_mb_gu_mma,
// k_mb_down_mma on mma8.cuh's units: 16 weight rows x the tile's pairs a product); with FAST_DNG
// the dp4a down takes a lane group of 4 a row.
#include <stdlib.h>

#include "common.cuh"
#include "dot8.cuh"
#include "dotbatch.cuh"
#include "internal.h"
#include "mbpick.cuh"
#include "mma8.cuh"
#include "quants.cuh"
#include "route.cuh"
#include "stage.cuh"

// Work items are (tile, chunk of rows); the step's items (n_tiles of them a chunk count) are split
// in equal contiguous ranges over the grid's blocks, which the host sizes to the blocks resident
// on the card at once, so the shapes do not depend on the step's routing.
__device__ __forceinline__ void item_range(int total, int &w0, int &w1) {
  const int per = (total + (int)gridDim.x - 1) / (int)gridDim.x;
  w0 = (int)blockIdx.x * per;
  w1 = w0 + per < total ? w0 + per : total;
}

#define GU_ROWS 2 // rows of gate (and of up) a warp an item: four weight rows
// Lanes a row of down takes (G) and rows of down a warp an item. G = 32 (a whole warp a row): four
// rows where registers allow (int8 Q6_K), else two. With FAST_DNG, int8 rows of up to 48 units (a
// 768-wide Q4_K row has 12, Q6_K 24) take a group of 4 lanes each, so every lane dots 3-12 units
// where 12-24 of 32 lanes dotted one, and a row's sum is 2 shuffles: 8 rows an item a warp.
__host__ __device__ constexpr int dn_rows(int type, bool q8, int G = 32) { return G < 32 ? 32 / G : q8 && type == T_Q6_K ? 4 : 2; }
static int dn_lanes(int type, bool q8, int ff) {
  if (!q8 || !(cu_fast & FAST_DNG)) return 32;
  cu_type_geom g;
  if (!cu_type_geom_of(type, &g) || ff % g.be) return 32;
  const int units = (ff / g.be) * (type == T_Q4_K ? 4 : 8);
  return units <= 48 ? 4 : 32;
}

// Each warp copies its weight rows of an item into one of two stages of shared slots (cp.async,
// stage.cuh) while it dots the other stage's: the rows of two items in flight a warp, the first
// two items' issued before the activations are staged. Slot k of stage s: ws + (s * R + k) * slot.
__device__ __forceinline__ const uint8_t *slot_of(const uint8_t *ws, int slot, int k, const uint8_t *src) {
  return ws + (size_t)k * slot + (reinterpret_cast<uintptr_t>(src) & 15);
}

// The start both grouped kernels share: R weight rows a warp an item of (tile, chunk of per *
// MV_WARPS rows), rows of len elements. Shared memory (smem): the tokens' activations (nt int8
// slots with Q8, else nt rows of floats), then each warp's two stages of R weight slots. begin
// enters the kernel (cu_pdl_entry) and takes the block's range [w0, w1) of the step's items.
template <int T, bool Q8, int R>
struct mb_frame {
  int lane, warp, rb, slot, xb, cpt, w0, w1;
  uint8_t *act, *ws;
  // wait: enter with cu_pdl_entry here; false: the caller enters (after issuing copies whose
  // addresses were written at least two kernels earlier: the tiles, read here before the wait).
  __device__ __forceinline__ void begin(const moe_batch_args &a, void *smem, int len, int rows, int per, bool wait = true) {
    using Q = qt<T>;
    const int nt = a.ntok;
    lane = threadIdx.x & 31;
    warp = threadIdx.x >> 5;
    rb = (len / Q::BE) * Q::BB;
    slot = copy_slot_bytes(rb);
    xb = x8_bytes(len);
    act = reinterpret_cast<uint8_t *>(smem);
    ws = act + (Q8 ? (size_t)nt * xb : (size_t)nt * len * sizeof(float)) + (size_t)warp * 2 * R * slot;
    if (wait) cu_pdl_entry();
    cpt = (rows + per * MV_WARPS - 1) / (per * MV_WARPS);
    item_range(__ldcg(a.n_tiles) * cpt, w0, w1);
  }
  // Item w's weight rows (rows_of(w, src, r0); false: none) copied into stage s by cp.async; one
  // commit group either way.
  template <class RowsOf>
  __device__ __forceinline__ void issue(RowsOf rows_of, int w, int s) const {
    const uint8_t *src[R];
    int r0;
    if (w < w1 && rows_of(w, src, r0))
#pragma unroll
      for (int k = 0; k < R; k++) (void)warp_copy_async(ws + (size_t)(s * R + k) * slot, src[k], rb, lane);
    cp_async_commit();
  }
  // Where stage s holds the copy of row k (read from src).
  __device__ __forceinline__ const uint8_t *row(int s, int k, const uint8_t *src) const { return slot_of(ws + (size_t)s * R * slot, slot, k, src); }
};

// A tile's first pair and its pairs (at most MB_NT).
__device__ __forceinline__ void tile_pairs(const moe_batch_args &a, int tile, int &p0, int &cnt) {
  const int4 tl = __ldcg(a.tiles + tile);
  p0 = tl.y;
  cnt = tl.z < MB_NT ? tl.z : MB_NT;
}

// gate/up: every token's row is staged once (f32, or int8 with Q8); a tile's pairs read their
// tokens' rows. silu(gate) * up a pair.
template <int T, bool Q8>
__global__ void __launch_bounds__(MV_THREADS, 2) k_mb_gu(moe_batch_args a) {
  extern __shared__ float4 dyn_smem4[];
  constexpr int R = 2 * GU_ROWS;
  const int n = a.gate.ne0, ff = a.gate.ne1, nt = a.ntok;
  mb_frame<T, Q8, R> f;
  f.begin(a, dyn_smem4, n, ff, GU_ROWS);
  if (f.w0 >= f.w1) return; // the whole block
  const int lane = f.lane, warp = f.warp, cpt = f.cpt;
  // the item's weight rows (gate r0, up r0, gate r1, up r1; a missing r1 repeats r0)
  auto rows_of = [&](int w, const uint8_t *(&src)[R], int &r0) {
    const int tile = w / cpt;
    r0 = (w - tile * cpt) * GU_ROWS * MV_WARPS + warp;
    if (r0 >= ff) return false;
    const int e = __ldcg(&a.tiles[tile].x), r1 = r0 + MV_WARPS < ff ? r0 + MV_WARPS : r0;
    const uint8_t *g = a.gate.d + (size_t)e * a.gate.nb2, *u = a.up.d + (size_t)e * a.up.nb2;
    src[0] = g + (size_t)r0 * a.gate.nb1;
    src[1] = u + (size_t)r0 * a.up.nb1;
    src[2] = g + (size_t)r1 * a.gate.nb1;
    src[3] = u + (size_t)r1 * a.up.nb1;
    return true;
  };
  // rows quantized once for the step (a.hq): their copies first, one commit group before the items'
  if (Q8 && a.hq) x8_copy_async(f.act, a.hq, nt * f.xb);
  f.issue(rows_of, f.w0, 0);
  f.issue(rows_of, f.w0 + 1, 1);
  if constexpr (Q8) {
    if (a.hq) {
      cp_async_wait_group1(); // the rows and item w0's weights (w0 + 1's may still be in flight)
      __syncthreads();
    } else {
      stage_rows_q8(a.h, a.ldh, n, nt, [](int t) { return t; }, f.act);
    }
  } else {
    stage_rows_f(a.h, a.ldh, n, nt, [](int t) { return t; }, reinterpret_cast<float *>(f.act));
  }
  int cur = -1, p0 = 0, cnt = 0;
  uint32_t sl = 0; // the tile's rows' tokens, 3 bits each
  for (int w = f.w0, s = 0; w < f.w1; w++, s ^= 1) {
    const int tile = w / cpt;
    if (tile != cur) {
      tile_pairs(a, tile, p0, cnt);
      sl = 0;
#pragma unroll
      for (int t = 0; t < MB_NT; t++) sl |= t < cnt ? ((uint32_t)__ldcg(a.pair_tok + p0 + t) & 7u) << (3 * t) : 0u;
      cur = tile;
    }
    cp_async_wait_group1(); // item w's copies (item w + 1's may still be in flight)
    __syncwarp();
    const uint8_t *src[R];
    int r0;
    if (rows_of(w, src, r0)) {
      const int r1 = r0 + MV_WARPS;
      const uint8_t *const rp[R] = {f.row(s, 0, src[0]), f.row(s, 1, src[1]), f.row(s, 2, src[2]), f.row(s, 3, src[3])};
      float acc[R][MB_NT];
      mb_zero(acc);
      if constexpr (Q8) {
        // gate/up of one row, then of the other: all four rows' units and sums at once spilled
        // (ncu: 616,512 local-memory requests a launch at the 128-register cap); each sum is
        // accumulated in the same order, so the result is the same bits
        const uint8_t *const ra[2] = {rp[0], rp[1]}, *const rb[2] = {rp[2], rp[3]};
        float lo[2][MB_NT], hi[2][MB_NT];
        mb_zero(lo);
        mb_zero(hi);
        dot_q8<T, 2>(ra, f.act, f.xb, n, cnt, sl, lo, lane);
        dot_q8<T, 2>(rb, f.act, f.xb, n, cnt, sl, hi, lane);
#pragma unroll
        for (int t = 0; t < MB_NT; t++) {
          acc[0][t] = lo[0][t];
          acc[1][t] = lo[1][t];
          acc[2][t] = hi[0][t];
          acc[3][t] = hi[1][t];
        }
      }
      else dot_f<T, R>(rp, reinterpret_cast<const float *>(f.act), n, cnt, sl, acc, lane);
#pragma unroll
      for (int t = 0; t < MB_NT; t++) {
        if (t >= cnt) break;
        const float g0 = warp_sum(acc[0][t]), u0 = warp_sum(acc[1][t]), g1 = warp_sum(acc[2][t]), u1 = warp_sum(acc[3][t]);
        if (lane == 0) {
          float *ar = a.act + (size_t)(p0 + t) * a.ldact;
          ar[r0] = silu_f(g0) * u0;
          if (r1 < ff) ar[r1] = silu_f(g1) * u1;
        }
      }
    }
    __syncwarp(); // stage s is refilled
    f.issue(rows_of, w + 2, s);
  }
}

// gate/up on the tensor cores (FAST_GUMMA; Q4_K rows, the step's rows quantized once: a.hq). A
// block takes an item of 16 rows of gate and the same 16 of up (32 slots, copied by all warps
// together, two items in flight); warp w takes the rows' Q4_K blocks w, w + MV_WARPS, ...: for each
// group of 32 one m16n8k32 s8 product of the 16 rows' nibbles (A) and the tile's pairs' int8
// values (B, a column a pair), whose exact int32 sums take the group's scales as dot8.cuh's units
// do (d * sc * dx * sum - dmin * m * sx). The warps' sums are added in warp order through shared
// memory, then SwiGLU. A weight unit costs one mma for up to 8 pairs where dp4a took 16
// instructions a pair; the activation rows lie 16 bytes more than their size apart (distinct banks).
#define GM_ROWS 16
static_assert(MV_WARPS * 4 == 2 * GM_ROWS, "each warp copies four of an item's 32 rows");
__host__ __device__ constexpr int gm_xstride(int n) { return x8_bytes(n) + 16; }

__global__ void __launch_bounds__(MV_THREADS, 2) k_mb_gu_mma(moe_batch_args a) {
  extern __shared__ float4 dyn_smem4[];
  const int n = a.gate.ne0, ff = a.gate.ne1, nt = a.ntok, nb = n / 256;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g4 = lane >> 2, t4 = lane & 3;
  const int rb = nb * 144, slot = copy_slot_bytes(rb), xb = x8_bytes(n), xs = gm_xstride(n);
  uint8_t *act = reinterpret_cast<uint8_t *>(dyn_smem4);
  uint8_t *ws = act + (size_t)nt * xs;
  float *red = reinterpret_cast<float *>(ws + (size_t)2 * 2 * GM_ROWS * slot); // [warp][gate, up][row][pair]
  cu_pdl_entry();
  const int cpt = (ff + GM_ROWS - 1) / GM_ROWS;
  int w0, w1;
  item_range(__ldcg(a.n_tiles) * cpt, w0, w1);
  if (w0 >= w1) return; // the whole block
  // item w's rows into stage s: slot j < 16 gate row r0 + j, else up row r0 + j - 16 (past ff: the
  // last row, its sums dropped); warp w copies slots 4w .. 4w + 3; one commit group either way
  auto issue = [&](int w, int s) {
    if (w < w1) {
      const int tile = w / cpt, r0 = (w - tile * cpt) * GM_ROWS, e = __ldcg(&a.tiles[tile].x);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const int j = 4 * warp + k, r = r0 + (j & 15) < ff ? r0 + (j & 15) : ff - 1;
        const uint8_t *src = j < GM_ROWS ? a.gate.d + (size_t)e * a.gate.nb2 + (size_t)r * a.gate.nb1 : a.up.d + (size_t)e * a.up.nb2 + (size_t)r * a.up.nb1;
        (void)warp_copy_async(ws + (size_t)(s * 2 * GM_ROWS + j) * slot, src, rb, lane);
      }
    }
    cp_async_commit();
  };
  // the step's quantized rows (16-byte chunks), row t at act + t * xs
  x8_copy_async(act, a.hq, nt * xb, xb, xs);
  issue(w0, 0);
  issue(w0 + 1, 1);
  int cur = -1, p0 = 0, cnt = 0;
  const uint8_t *xbr = act, *xc[2] = {act, act}; // B: pair g4's row; C: pairs 2 * t4, 2 * t4 + 1
  for (int w = w0, s = 0; w < w1; w++, s ^= 1) {
    const int tile = w / cpt, r0 = (w - tile * cpt) * GM_ROWS;
    if (tile != cur) {
      tile_pairs(a, tile, p0, cnt);
      // pairs past cnt read row 0: their sums are dropped
      auto row_of = [&](int t) { return act + (size_t)(t < cnt ? (__ldcg(a.pair_tok + p0 + t) & 7) : 0) * xs; };
      xbr = row_of(g4);
      xc[0] = row_of(2 * t4);
      xc[1] = row_of(2 * t4 + 1);
      cur = tile;
    }
    cp_async_wait_group1(); // item w's rows (w + 1's may still be in flight)
    __syncthreads();        // every warp's copies
    const uint8_t *st = ws + (size_t)s * 2 * GM_ROWS * slot;
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const mma8_x X = {xbr, xc[0], xc[1], n};
    for (int b = warp; b < nb; b += MV_WARPS) {
      // gate (h = 0), up (h = 1): rows g4 and g4 + 8 of block b, the activations loaded once for both
      const uint8_t *const p[2][2] = {{st + (size_t)g4 * slot + (size_t)b * 144, st + (size_t)(g4 + 8) * slot + (size_t)b * 144},
                                      {st + (size_t)(GM_ROWS + g4) * slot + (size_t)b * 144, st + (size_t)(GM_ROWS + g4 + 8) * slot + (size_t)b * 144}};
#pragma unroll 2
      for (int c = 0; c < 4; c++) mma8_q4k<2>(p, c, X, 8 * b, t4, acc);
    }
    float *rw = red + (size_t)warp * 2 * GM_ROWS * 8;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int i = 0; i < 2; i++) {
        rw[(h * GM_ROWS + g4 + 8 * i) * 8 + 2 * t4] = acc[h][2 * i];
        rw[(h * GM_ROWS + g4 + 8 * i) * 8 + 2 * t4 + 1] = acc[h][2 * i + 1];
      }
    __syncthreads(); // every warp's sums; stage s is read
    issue(w + 2, s);
    if ((int)threadIdx.x < GM_ROWS * 8) {
      const int row = threadIdx.x >> 3, t = threadIdx.x & 7, r = r0 + row;
      float g = 0.0f, u = 0.0f;
#pragma unroll
      for (int v = 0; v < MV_WARPS; v++) {
        g += red[((size_t)v * 2 * GM_ROWS + row) * 8 + t];
        u += red[((size_t)v * 2 * GM_ROWS + GM_ROWS + row) * 8 + t];
      }
      if (t < cnt && r < ff) a.act[(size_t)(p0 + t) * a.ldact + r] = silu_f(g) * u;
    }
  }
}

// down on the tensor cores (FAST_DNMMA; Q4_K or Q6_K rows, int8 activations): an item is 16 *
// MV_WARPS rows of one tile's expert, a warp's 16 rows (measured: splitting a row's units across
// the warps, with a reduction through shared memory, was slower: 30 / 20 us a launch against 24 / 15) (two stages a warp, copied by the warp itself,
// the first two items' before the wait on gate/up), dotted over the whole row by mma8.cuh's units
// against the tile's pairs (staged and quantized when the block's range enters the tile, rows 16
// bytes more than their size apart); one output row a pair (ypair), no reduction across warps.
template <int T>
__global__ void __launch_bounds__(MV_THREADS, 1) k_mb_down_mma(moe_batch_args a) {
  extern __shared__ float4 dyn_smem4[];
  using Q = qt<T>;
  const int ff = a.down.ne0, n = a.down.ne1, nb = ff / Q::BE;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g4 = lane >> 2, t4 = lane & 3;
  const int rb = nb * Q::BB, slot = copy_slot_bytes(rb), xs = gm_xstride(ff);
  uint8_t *act = reinterpret_cast<uint8_t *>(dyn_smem4);
  uint8_t *ws = act + (size_t)MB_NT * xs + (size_t)warp * 2 * GM_ROWS * slot;
  const int cpt = (n + GM_ROWS * MV_WARPS - 1) / (GM_ROWS * MV_WARPS);
  // the tiles were written by the picks (or the sort) before gate/up's own wait returned
  int w0, w1;
  item_range(__ldcg(a.n_tiles) * cpt, w0, w1);
  if (w0 >= w1) return; // the whole block
  // the warp's first row in item w (its expert read once: one load, not one a row)
  auto first_of = [&](int w, int &r0) {
    const int tile = w / cpt;
    r0 = (w - tile * cpt) * GM_ROWS * MV_WARPS + GM_ROWS * warp;
    return a.down.d + (size_t)__ldcg(&a.tiles[tile].x) * a.down.nb2;
  };
  // row j of the warp's 16 from the expert's rows e (past n: the last row, its sums dropped)
  auto row_at = [&](const uint8_t *e, int r0, int j) { return e + (size_t)(r0 + j < n ? r0 + j : n - 1) * a.down.nb1; };
  auto issue = [&](int w, int s) {
    if (w < w1) {
      int r0;
      const uint8_t *e = first_of(w, r0);
      for (int j = 0; j < GM_ROWS; j++) (void)warp_copy_async(ws + (size_t)(s * GM_ROWS + j) * slot, row_at(e, r0, j), rb, lane);
    }
    cp_async_commit();
  };
  issue(w0, 0);
  issue(w0 + 1, 1);
  cu_pdl_entry(); // gate/up's activation rows
  int cur = -1, p0 = 0, cnt = 0;
  mma8_x X = {act, act, act, ff};
  for (int w = w0, s = 0; w < w1; w++, s ^= 1) {
    const int tile = w / cpt, rw = (w - tile * cpt) * GM_ROWS * MV_WARPS + GM_ROWS * warp;
    if (tile != cur) {
      tile_pairs(a, tile, p0, cnt);
      __syncthreads(); // the previous tile's rows are read
      stage_rows_q8(a.act, a.ldact, ff, cnt, [&](int t) { return p0 + t; }, act, xs);
      // columns past cnt read row 0: their sums are dropped
      X.xb = act + (size_t)(g4 < cnt ? g4 : 0) * xs;
      X.xc0 = act + (size_t)(2 * t4 < cnt ? 2 * t4 : 0) * xs;
      X.xc1 = act + (size_t)(2 * t4 + 1 < cnt ? 2 * t4 + 1 : 0) * xs;
      cur = tile;
    }
    cp_async_wait_group1(); // item w's rows (w + 1's may still be in flight)
    __syncwarp();
    int r0;
    const uint8_t *e = first_of(w, r0);
    const uint8_t *p0r = ws + (size_t)(s * GM_ROWS + g4) * slot + (reinterpret_cast<uintptr_t>(row_at(e, r0, g4)) & 15);
    const uint8_t *p1r = ws + (size_t)(s * GM_ROWS + g4 + 8) * slot + (reinterpret_cast<uintptr_t>(row_at(e, r0, g4 + 8)) & 15);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int b = 0; b < nb; b++) {
      const uint8_t *const p[2] = {p0r + (size_t)b * Q::BB, p1r + (size_t)b * Q::BB};
#pragma unroll 2
      for (int u = 0; u < mma8_upb<T>(); u++) mma8_unit<T>(p, u, X, b * (Q::BE / 32), t4, acc);
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int j = 0; j < 2; j++) {
        const int t = 2 * t4 + j, r = rw + g4 + 8 * i;
        if (t < cnt && r < n) a.ypair[(size_t)(p0 + t) * a.ldy + r] = acc[2 * i + j];
      }
    __syncwarp(); // stage s is refilled
    issue(w + 2, s);
  }
}

// down: a tile's rows staged when the block's range enters it; dn_rows weight rows a warp an
// item; one output row a pair (ypair, stored, no atomics).
template <int T, bool Q8, int G>
__global__ void __launch_bounds__(MV_THREADS, G < 32 ? 3 : 2) k_mb_down(moe_batch_args a) {
  extern __shared__ float4 dyn_smem4[];
  constexpr int R = dn_rows(T, Q8, G);
  static_assert(G == 32 || Q8, "lane groups take int8 rows");
  const int ff = a.down.ne0, n = a.down.ne1;
  mb_frame<T, Q8, R> f;
  // the tiles were written by the picks (or the sort) before gate/up's own wait returned: the
  // first two items' weight copies go out before the wait on gate/up, whose tail they overlap
  f.begin(a, dyn_smem4, ff, n, R, false);
  if (f.w0 >= f.w1) return; // the whole block
  const int lane = f.lane, warp = f.warp, cpt = f.cpt;
  // the item's rows r0 + i * MV_WARPS (missing ones repeat r0); false when r0 is past the end
  auto rows_of = [&](int w, const uint8_t *(&src)[R], int &r0) {
    const int tile = w / cpt;
    r0 = (w - tile * cpt) * R * MV_WARPS + warp;
    if (r0 >= n) return false;
    const uint8_t *dn = a.down.d + (size_t)__ldcg(&a.tiles[tile].x) * a.down.nb2;
#pragma unroll
    for (int i = 0; i < R; i++) {
      const int r = r0 + i * MV_WARPS;
      src[i] = dn + (size_t)(r < n ? r : r0) * a.down.nb1;
    }
    return true;
  };
  f.issue(rows_of, f.w0, 0);
  f.issue(rows_of, f.w0 + 1, 1);
  cu_pdl_entry(); // gate/up's activation rows
  int cur = -1, p0 = 0, cnt = 0;
  for (int w = f.w0, s = 0; w < f.w1; w++, s ^= 1) {
    const int tile = w / cpt;
    if (tile != cur) {
      tile_pairs(a, tile, p0, cnt);
      __syncthreads(); // the previous tile's rows are read
      if constexpr (Q8) stage_rows_q8(a.act, a.ldact, ff, cnt, [&](int t) { return p0 + t; }, f.act);
      else stage_rows_f(a.act, a.ldact, ff, cnt, [&](int t) { return p0 + t; }, reinterpret_cast<float *>(f.act));
      cur = tile;
    }
    cp_async_wait_group1();
    __syncwarp();
    const uint8_t *src[R];
    int r0;
    if constexpr (G < 32) {
      if (rows_of(w, src, r0)) {
        // lane group gi dots row r0 + gi * MV_WARPS (slot gi): units gl, gl + G, ... of it
        const int gi = lane / G, gl = lane % G, r = r0 + gi * MV_WARPS;
        const uint8_t *src_r = src[0] + (size_t)((r < n ? r : r0) - r0) * a.down.nb1; // rows_of's row r0 of the same expert
        const uint8_t *const rp[1] = {f.row(s, gi, src_r)};
        float acc[1][MB_NT];
        mb_zero(acc);
        dot_q8<T, 1>(rp, f.act, f.xb, ff, cnt, MB_IDENT, acc, gl, G);
#pragma unroll
        for (int t = 0; t < MB_NT; t++) {
          if (t >= cnt) break;
          float y = acc[0][t];
#pragma unroll
          for (int o = G / 2; o > 0; o >>= 1) y += __shfl_xor_sync(0xffffffffu, y, o);
          if (gl == 0 && r < n) a.ypair[(size_t)(p0 + t) * a.ldy + r] = y;
        }
      }
    } else if (rows_of(w, src, r0)) {
      const uint8_t *rp[R];
#pragma unroll
      for (int k = 0; k < R; k++) rp[k] = f.row(s, k, src[k]);
      float acc[R][MB_NT];
      mb_zero(acc);
      if constexpr (Q8) dot_q8<T, R>(rp, f.act, f.xb, ff, cnt, acc, lane);
      else dot_f<T, R>(rp, reinterpret_cast<const float *>(f.act), ff, cnt, acc, lane);
#pragma unroll
      for (int t = 0; t < MB_NT; t++) {
        if (t >= cnt) break;
        float y[R];
#pragma unroll
        for (int r = 0; r < R; r++) y[r] = warp_sum(acc[r][t]);
        if (lane == 0) {
          float *yr = a.ypair + (size_t)(p0 + t) * a.ldy;
#pragma unroll
          for (int r = 0; r < R; r++)
            if (r0 + r * MV_WARPS < n) yr[r0 + r * MV_WARPS] = y[r];
        }
      }
    }
    __syncwarp(); // stage s is refilled
    f.issue(rows_of, w + 2, s);
  }
}

// Each token's picks and the pairs grouped by expert (mbpick.cuh) by block 0; blocks 1 .. ntok
// (when hq) meanwhile quantize row blockIdx.x - 1 of h (n floats, ldh apart) into the x8 slots of
// hq for gate/up, as its blocks would stage it.
template <int XJ>
__global__ void __launch_bounds__(MV_THREADS) k_mb_pick(const float *logits, int ntok, int X, int K, int norm_topk, float w_scale, int32_t *sel,
                                                        float *selw, int32_t *pair_tok, int32_t *pair_of, int4 *tiles, int32_t *n_tiles,
                                                        const float *h, int ldh, int n, uint8_t *hq, int32_t *tile_stat) {
  cu_pdl_entry();
  if (blockIdx.x > 0) {
    const int t = (int)blockIdx.x - 1;
    stage_rows_q8(h + (size_t)t * ldh, 0, n, 1, [](int) { return 0; }, hq + (size_t)t * x8_bytes(n));
    return;
  }
  mb_pick_block<XJ>(logits, ntok, X, K, norm_topk, w_scale, sel, selw, pair_tok, pair_of, tiles, n_tiles, tile_stat);
}

// ---- host side ----

// bl_cuda_options.moe_batch 0 sends decode batches to the per-pair kernels (moe_dec.cu).
static bool mb_enabled() { return cu_opt->moe_batch != 0; }

struct mb_plan {
  bool q8_gu, q8_dn;
  bool pre_gu; // gate/up's rows quantized once (a.hq)
  int g_dn;    // lanes a row of down (dn_lanes)
  bool mma_gu; // gate/up on the tensor cores (k_mb_gu_mma)
  bool mma_dn; // down on the tensor cores (k_mb_down_mma)
  size_t smem_gu, smem_dn, smem_gm, smem_dm; // smem_gm / smem_dm: k_mb_gu_mma's / k_mb_down_mma's
};

typedef void (*mb_kernel)(moe_batch_args);
struct gu_of {
  template <int T, bool Q8>
  static mb_kernel of() { return k_mb_gu<T, Q8>; }
};
struct down_of {
  template <int T, bool Q8>
  static mb_kernel of() { return k_mb_down<T, Q8, 32>; }
};

// The kernel K::of<type, q8>: int8 activations for Q4_K / Q6_K rows, f32 for any type; or null.
template <class K>
static mb_kernel mb_kernel_of(int type, bool q8) {
  if (q8) return type == T_Q4_K ? K::template of<T_Q4_K, true>() : type == T_Q6_K ? K::template of<T_Q6_K, true>() : nullptr;
  switch (type) {
#define C(T) \
  case T: return K::template of<T, false>();
    CU_TYPE_CASES(C)
#undef C
    default: return nullptr;
  }
}

// Grouped down with G lanes a row (dn_lanes; G < 32: int8 Q4_K / Q6_K rows), or null.
static mb_kernel down_kernel(int type, bool q8, int G) {
  if (G == 4) return type == T_Q4_K ? k_mb_down<T_Q4_K, true, 4> : type == T_Q6_K ? k_mb_down<T_Q6_K, true, 4> : nullptr;
  return mb_kernel_of<down_of>(type, q8);
}

static bool plan_mb(const moe_batch_args &a, int ntok, int smem_limit, mb_plan &p) {
  if (!mb_enabled() || ntok < 2 || ntok > MB_NT) return false;
  const int n = a.gate.ne0, ff = a.gate.ne1, K = a.k, X = a.n_expert;
  if (K < 1 || K > ROUTER_MAX_K || X < 1 || !a.sel || !a.selw) return false;
  if (a.up.type != a.gate.type || a.up.ne0 != n || a.up.ne1 != ff || a.down.ne0 != ff || a.down.ne1 != n) return false;
  if (a.gate.ne2 < X || a.up.ne2 < X || a.down.ne2 < X) return false;
  if (!mb_kernel_of<gu_of>(a.gate.type, false) || !mb_kernel_of<down_of>(a.down.type, false)) return false;
  cu_type_geom gg, gd;
  if (!cu_type_geom_of(a.gate.type, &gg) || !cu_type_geom_of(a.down.type, &gd) || n % gg.be || ff % gd.be || n % 4 || ff % 4) return false;
  const int pairs = ntok * K;
  // the sort makes one tile an expert (at most ntok pairs each: a token picks an expert once)
  const int most = pairs < X + K ? pairs : X + K;
  if (most > a.max_tiles) return false;
  if (a.ldy < n || a.ldact < ff || a.ldh < n || a.ldx < n) return false;
  const bool q8 = a.q8 && (cu_fast & FAST_Q8);
  p.q8_gu = q8 && d8_type(a.gate.type) && n % 32 == 0;
  p.q8_dn = q8 && d8_type(a.down.type) && ff % 32 == 0;
  p.pre_gu = p.q8_gu && (cu_fast & FAST_X8) && a.hq && a.ldh % 4 == 0 && reinterpret_cast<uintptr_t>(a.h) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(a.hq) % 16 == 0 && (size_t)ntok * x8_bytes(n) <= a.hq_cap;
  // activations (every token's row for gate/up, a tile's for down) + two stages of weight slots a warp
  p.smem_gu = (p.q8_gu ? (size_t)ntok * x8_bytes(n) : (size_t)ntok * n * 4) + (size_t)MV_WARPS * 2 * 2 * GU_ROWS * copy_slot_bytes((n / gg.be) * gg.bb);
  p.g_dn = dn_lanes(a.down.type, p.q8_dn, ff);
  // the tensor-core gate/up: Q4_K rows 16-byte aligned (the copies land at a slot's start), the
  // rows quantized once (a.hq, taken when the picks' launch or cu_moe_batch quantize them)
  p.mma_gu = p.pre_gu && (cu_fast & FAST_GUMMA) && !a.no_mma && a.gate.type == T_Q4_K && n % 256 == 0 && a.gate.nb1 % 16 == 0 && a.up.nb1 % 16 == 0 &&
             a.gate.nb2 % 16 == 0 && a.up.nb2 % 16 == 0 && reinterpret_cast<uintptr_t>(a.gate.d) % 16 == 0 && reinterpret_cast<uintptr_t>(a.up.d) % 16 == 0;
  p.smem_gm = (size_t)ntok * gm_xstride(n) + (size_t)2 * 2 * GM_ROWS * copy_slot_bytes((n / 256) * 144) + (size_t)MV_WARPS * 2 * GM_ROWS * 8 * sizeof(float);
  p.smem_dn = (p.q8_dn ? (size_t)ntok * x8_bytes(ff) : (size_t)ntok * ff * 4) + (size_t)MV_WARPS * 2 * dn_rows(a.down.type, p.q8_dn, p.g_dn) * copy_slot_bytes((ff / gd.be) * gd.bb);
  if ((int64_t)p.smem_gm > smem_limit) p.mma_gu = false;
  // (the units read Q4_K words 4-byte aligned, Q6_K ones 2-byte aligned)
  const int dal = a.down.type == T_Q4_K ? 4 : 2;
  p.mma_dn = p.q8_dn && (cu_fast & FAST_DNMMA) && !a.no_mma && (a.down.type == T_Q4_K || a.down.type == T_Q6_K) && ff % 256 == 0 && a.down.nb1 % dal == 0 &&
             a.down.nb2 % dal == 0 && reinterpret_cast<uintptr_t>(a.down.d) % dal == 0;
  p.smem_dm = (size_t)MB_NT * gm_xstride(ff) + (size_t)MV_WARPS * 2 * GM_ROWS * copy_slot_bytes((ff / gd.be) * gd.bb);
  if ((int64_t)p.smem_dm > smem_limit) p.mma_dn = false;
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

int64_t cu_moe_batch(cudaStream_t st, const moe_batch_args &a0, int ntok, int smem_limit, bool grouped, bool hq_ready, bool *dng, bool *gumma, bool *dnmma) {
  mb_plan p;
  if (!plan_mb(a0, ntok, smem_limit, p))
    return cu_fail(BL_E_UNSUPPORTED, "experts: the grouped decode-batch kernels do not take %d tokens of %s/%s experts", ntok,
                   cu_type_name(a0.gate.type), cu_type_name(a0.down.type));
  moe_batch_args a = a0;
  a.ntok = ntok;
  // gate/up's rows quantized once: by the picks' launch (hq_ready), else by a kernel of their own below
  a.hq = (grouped ? hq_ready : p.pre_gu) ? a.hq : nullptr;
  if (!grouped) {
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
    if (a.hq) {
      bool pre = false;
      CU_OK(cu_x8_rows(st, a.h, a.ldh, a.gate.ne0, ntok, 0, nullptr, 0.0f, a.hq, a.hq_cap, &pre));
      if (!pre) a.hq = nullptr;
    }
  }
  const bool gm = p.mma_gu && a.hq;
  const size_t smem_gu = gm ? p.smem_gm : p.smem_gu;
  const mb_kernel kg = gm ? k_mb_gu_mma : mb_kernel_of<gu_of>(a.gate.type, p.q8_gu);
  const mb_kernel kd = !p.mma_dn ? down_kernel(a.down.type, p.q8_dn, p.g_dn) : a.down.type == T_Q4_K ? k_mb_down_mma<T_Q4_K> : k_mb_down_mma<T_Q6_K>;
  const size_t smem_dn = p.mma_dn ? p.smem_dm : p.smem_dn;
  if (!kg || !kd) return cu_fail(BL_E_UNSUPPORTED, "experts: %s/%s have no grouped kernel", cu_type_name(a.gate.type), cu_type_name(a.down.type));
  int grid_gu = 0, grid_dn = 0;
  CU_OK(resident_blocks(kg, smem_gu, &grid_gu));
  CU_OK(resident_blocks(kd, smem_dn, &grid_dn));
  CU_LAUNCH("grouped expert gate/up", kg, dim3(grid_gu), dim3(MV_THREADS), smem_gu, st, a);
  if (gumma) *gumma = gm;
  CU_LAUNCH("grouped expert down", kd, dim3(grid_dn), dim3(MV_THREADS), smem_dn, st, a);
  if (dng) *dng = !p.mma_dn && p.g_dn < 32;
  if (dnmma) *dnmma = p.mma_dn;
  combine_args cb = {a.ypair, a.ldy, a.pair_of, a.selw, a.k, a.x, a.ldx, a.down.ne1, ntok, 0};
  if (!a.defer) return cu_combine_flush(st, &cb);
  // FAST_COMBINE: added to x by whatever reads x next (the next layer's row quantization)
  if (a.defer->ntok) return cu_fail(BL_E_INVAL, "experts: a combine is still pending");
  cb.fused = a.defer->fused;
  *a.defer = cb;
  return BL_OK;
}

bool cu_moe_batch_pick_fits(const moe_batch_args &a, int ntok, int smem_limit) {
  return cu_moe_batch_fits(a, ntok, smem_limit) && a.n_expert <= 256 && a.k <= 32 && a.k <= a.n_expert;
}

int64_t cu_moe_batch_pick(cudaStream_t st, const moe_batch_args &a, const float *logits, int norm_topk, float w_scale, int ntok, int smem_limit,
                          bool *hq_ready) {
  *hq_ready = false;
  if (!cu_moe_batch_pick_fits(a, ntok, smem_limit))
    return cu_fail(BL_E_UNSUPPORTED, "router: no grouped pick kernel for %d tokens, %d of %d experts", ntok, a.k, a.n_expert);
  // sel / selw are written here: the caller's pointers are the context's buffers
  int32_t *sel = const_cast<int32_t *>(a.sel);
  float *selw = const_cast<float *>(a.selw);
  // gate/up's rows quantized by ntok more blocks of the launch when cu_moe_batch will read them
  mb_plan p = {};
  const bool pre = plan_mb(a, ntok, smem_limit, p) && p.pre_gu;
  const int blocks = 1 + (pre ? ntok : 0);
  if (a.n_expert <= 128)
    CU_LAUNCH("router picks and grouping", k_mb_pick<4>, dim3(blocks), dim3(MV_THREADS), 0, st, logits, ntok, a.n_expert, a.k, norm_topk, w_scale, sel,
              selw, a.pair_tok, a.pair_of, a.tiles, a.n_tiles, a.h, a.ldh, a.gate.ne0, a.hq, a.tile_stat);
  else
    CU_LAUNCH("router picks and grouping", k_mb_pick<8>, dim3(blocks), dim3(MV_THREADS), 0, st, logits, ntok, a.n_expert, a.k, norm_topk, w_scale, sel,
              selw, a.pair_tok, a.pair_of, a.tiles, a.n_tiles, a.h, a.ldh, a.gate.ne0, a.hq, a.tile_stat);
  *hq_ready = pre;
  return BL_OK;
}

int64_t cu_moe_batch_init(int smem_optin) {
  const char *w = "configuring the grouped expert kernels";
#define S(T)                                             \
  CU_OK(cu_allow_smem(k_mb_gu<T, false>, smem_optin, w)); \
  CU_OK(cu_allow_smem(k_mb_down<T, false, 32>, smem_optin, w));
  CU_TYPE_CASES(S)
#undef S
  CU_OK(cu_allow_smem(k_mb_gu<T_Q4_K, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mb_gu<T_Q6_K, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mb_gu_mma, smem_optin, w));
  CU_OK(cu_allow_smem(k_mb_down_mma<T_Q4_K>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mb_down_mma<T_Q6_K>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mb_down<T_Q4_K, true, 32>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mb_down<T_Q6_K, true, 32>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mb_down<T_Q4_K, true, 4>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mb_down<T_Q6_K, true, 4>, smem_optin, w));
  CU_OK(cu_kernel_prefs(k_mb_pick<4>, w));
  return cu_kernel_prefs(k_mb_pick<8>, w);
}
