// bloomery CUDA library: the gated delta-net's own kernels (Qwen3-Next's and Qwen3.5 / 3.6's
// linear-attention layers; ffi/cpu/deltanet.c and delta_rule.c are the reference): the causal
// depthwise conv over each sequence's previous inputs with its SiLU, the conv state moved on (for decode
// steps both in one kernel), and the gated delta rule in its recurrent form (a warp holds 16 rows of a v
// head's state in registers and takes the sequence's tokens in order) with the gated output norm. The in-
// and out-projections are the dense products (forward.cu dn_block).
#include "common.cuh"
#include "internal.h"

namespace {

constexpr int ROWS = 16;  // state rows (v elements) a warp
constexpr int RULE_WARPS = CU_DN_MAX_HEAD / ROWS; // warps a block at most: a v head's rows

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float *slot_state(const dn_args &a, int slot) { return a.rs + (size_t)slot * a.slot_floats + a.layer_off; }

// Grid (channel blocks, token): the token's conv over its own input and the K - 1 before it in its
// sequence (its earlier tokens in the batch, else the slot's conv state, else zeros from position 0).
__global__ void __launch_bounds__(128) k_dn_conv(dn_args a) {
  BL_TR_SCOPE(25);
  cu_pdl_entry();
  const int ch = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y, C = a.C, K = a.K;
  if (ch >= C) return;
  const int2 tr = a.tok[t];
  const int4 run = a.runs[tr.x];
  const int i = tr.y; // t's place in its sequence's tokens
  const float *w = a.convw + (size_t)ch * K;
  float acc = a.raw[(size_t)t * C + ch] * w[K - 1];
  const bool fresh = a.pos[a.runs[run.x].w] == 0;
  const float *st = slot_state(a, run.z);
  for (int j = 1; j < K; j++) {
    float v;
    if (j <= i) v = a.raw[(size_t)a.runs[run.x + i - j].w * C + ch];
    else if (fresh) v = 0.0f;
    else v = st[(size_t)(K - 1 - (j - i)) * C + ch];
    acc += v * w[K - 1 - j];
  }
  a.cv[(size_t)t * C + ch] = silu_f(acc);
}

// Grid (channel blocks, sequence): the slot's conv state becomes the sequence's last K - 1 inputs
// (older ones from the state before where it has fewer tokens).
__global__ void __launch_bounds__(128) k_dn_conv_state(dn_args a) {
  BL_TR_SCOPE(26);
  cu_pdl_entry();
  const int ch = blockIdx.x * blockDim.x + threadIdx.x, C = a.C, K = a.K;
  const int4 run = a.runs[blockIdx.y];
  if (ch >= C || run.y <= 0) return;
  float *st = slot_state(a, run.z);
  const bool fresh = a.pos[a.runs[run.x].w] == 0;
  for (int k = 0; k < K - 1; k++) {
    const int m = K - 1 - k; // inputs back from the sequence's last (1: it)
    float v;
    if (m <= run.y) v = a.raw[(size_t)a.runs[run.x + run.y - m].w * C + ch];
    else v = fresh ? 0.0f : st[(size_t)(k + run.y) * C + ch];
    st[(size_t)k * C + ch] = v;
  }
}

// Grid (channel blocks, sequence), decode steps: each thread walks its channel through the sequence's
// tokens in order (the window in registers), then leaves the state - the two kernels above in one.
__global__ void __launch_bounds__(128) k_dn_conv_seq(dn_args a) {
  BL_TR_SCOPE(33);
  cu_pdl_entry();
  const int ch = blockIdx.x * blockDim.x + threadIdx.x, C = a.C, K = a.K;
  const int4 run = a.runs[blockIdx.y];
  if (ch >= C || run.y <= 0) return;
  float *st = slot_state(a, run.z);
  const bool fresh = a.pos[a.runs[run.x].w] == 0;
  float win[CU_DN_MAX_TAPS], w[CU_DN_MAX_TAPS];
  for (int k = 0; k < K; k++) w[k] = a.convw[(size_t)ch * K + k];
  for (int k = 0; k < K - 1; k++) win[k] = fresh ? 0.0f : st[(size_t)k * C + ch];
  for (int i = 0; i < run.y; i++) {
    const int t = a.runs[run.x + i].w;
    const float x = a.raw[(size_t)t * C + ch];
    float acc = x * w[K - 1];
    for (int j = 1; j < K; j++) acc += win[K - 1 - j] * w[K - 1 - j];
    for (int k = 0; k + 1 < K - 1; k++) win[k] = win[k + 1];
    if (K > 1) win[K - 2] = x;
    a.cv[(size_t)t * C + ch] = silu_f(acc);
  }
  for (int k = 0; k < K - 1; k++) st[(size_t)k * C + ch] = win[k];
}

// One step of a warp's transposed sum: lanes with bit H keep the upper H values, the others the lower,
// each adding its partner's; after H = 16, 8, 4, 2, 1 lane l holds the warp's total of value l.
template <int H>
__device__ __forceinline__ void tsum_step(float *v, int lane) {
  const bool up = (lane & H) != 0;
#pragma unroll
  for (int i = 0; i < H; i++) {
    const float send = up ? v[i] : v[i + H], keep = up ? v[i + H] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, H);
  }
}

// A token's inputs a warp reads (its lane's columns of q and k, its row's v, beta and alpha).
template <int CPL>
struct tok_in {
  float q[CPL], k[CPL], v, z, b, al;
};

template <int CPL>
__device__ __forceinline__ void load_tok(const dn_args &a, int t, int h, int kh, int r0, int lane, tok_in<CPL> &in) {
  const float *row = a.cv + (size_t)t * a.C;
  const int qk = a.nk * a.hk;
#pragma unroll
  for (int i = 0; i < CPL; i++) {
    const int col = lane + 32 * i;
    in.q[i] = col < a.hk ? row[kh * a.hk + col] : 0.0f;
    in.k[i] = col < a.hk ? row[qk + kh * a.hk + col] : 0.0f;
  }
  in.v = lane < ROWS && r0 + lane < a.hv ? row[2 * qk + h * a.hv + r0 + lane] : 0.0f;
  // the output gate of the row lane - 16 holds the output of
  in.z = lane >= ROWS && r0 + lane - ROWS < a.hv ? a.z[(size_t)t * a.nv * a.hv + (size_t)h * a.hv + r0 + lane - ROWS] : 0.0f;
  if (a.ba) {
    const int r = a.nv / a.nk;
    const float *bar = a.ba + (size_t)t * 2 * a.nv + (h / r) * 2 * r;
    in.b = bar[h % r];
    in.al = bar[r + h % r];
  } else {
    in.b = a.beta[(size_t)t * a.ldb + h];
    in.al = a.alpha[(size_t)t * a.ldb + h];
  }
}

// Grid (v head, sequence), a warp for each 16 rows r0.. of the head's state, over the sequence's tokens,
// in registers (lane l holds columns l, l + 32, ...): S = e^g S; d = beta (v - S k); o = S q + d (k . q);
// S += d k^T (the CPU's recurrent form, the o product taken before the update); then each token's o
// = rmsnorm(o) * normw * silu(z) over the head (the block's sum). Then S back.
template <int CPL>
__global__ void __launch_bounds__(RULE_WARPS * 32) k_dn_rule(dn_args a) {
  BL_TR_SCOPE(27);
  cu_pdl_entry();
  __shared__ float red[2][RULE_WARPS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int h = blockIdx.x, r0 = warp * ROWS;
  const int4 run = a.runs[blockIdx.y];
  if (run.y <= 0) return; // (the whole block)
  const int orow = r0 + lane - ROWS; // the output row of lanes 16..31
  const float nw_row = lane >= ROWS && orow < a.hv ? a.normw[orow] : 0.0f;
  const int kh = a.grouped ? h / (a.nv / a.nk) : h % a.nk;
  float *Sg = slot_state(a, run.z) + (size_t)(a.K - 1) * a.C + (size_t)h * a.hv * a.hk;
  const bool fresh = a.pos[a.runs[run.x].w] == 0;
  float S[ROWS][CPL];
#pragma unroll
  for (int rr = 0; rr < ROWS; rr++)
#pragma unroll
    for (int i = 0; i < CPL; i++) {
      const int row = r0 + rr, col = lane + 32 * i;
      S[rr][i] = !fresh && row < a.hv && col < a.hk ? Sg[(size_t)row * a.hk + col] : 0.0f;
    }
  const float qscale = 1.0f / sqrtf((float)a.hk), A = a.a[h], dt = a.dt[h];
  const int vd = a.nv * a.hv;
  tok_in<CPL> nx;
  load_tok<CPL>(a, a.runs[run.x].w, h, kh, r0, lane, nx);
  for (int tt = 0; tt < run.y; tt++) {
    const int t = a.runs[run.x + tt].w;
    const tok_in<CPL> in = nx;
    if (tt + 1 < run.y) load_tok<CPL>(a, a.runs[run.x + tt + 1].w, h, kh, r0, lane, nx); // the next token's loads in flight
    float q[CPL], k[CPL], sq = 0, sk = 0;
#pragma unroll
    for (int i = 0; i < CPL; i++) {
      sq += in.q[i] * in.q[i];
      sk += in.k[i] * in.k[i];
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    const float rq = qscale / sqrtf(sq + a.eps), rk = 1.0f / sqrtf(sk + a.eps);
    float kq = 0;
#pragma unroll
    for (int i = 0; i < CPL; i++) {
      q[i] = in.q[i] * rq;
      k[i] = in.k[i] * rk;
      kq += k[i] * q[i];
    }
    kq = warp_sum(kq);
    const float beta = 1.0f / (1.0f + expf(-in.b)), decay = expf(A * softplus_f(in.al + dt));
    float v[2 * ROWS];
#pragma unroll
    for (int rr = 0; rr < ROWS; rr++) {
      float dk = 0, dq = 0;
#pragma unroll
      for (int i = 0; i < CPL; i++) {
        S[rr][i] *= decay;
        dk += S[rr][i] * k[i];
        dq += S[rr][i] * q[i];
      }
      v[rr] = dk;
      v[ROWS + rr] = dq;
    }
    tsum_step<16>(v, lane);
    tsum_step<8>(v, lane);
    tsum_step<4>(v, lane);
    tsum_step<2>(v, lane);
    tsum_step<1>(v, lane);
    // lane l < 16: row r0 + l's S k; lane 16 + l: its S q
    const float d = beta * (in.v - v[0]);
    const float dl = __shfl_sync(0xffffffffu, d, lane & (ROWS - 1));
    const float o = lane >= ROWS && orow < a.hv ? v[0] + dl * kq : 0.0f;
    // the gated output norm over the head's rows: the warps' sums of squares, a buffer a token's parity
    const float ss = warp_sum(o * o);
    if (lane == 0) red[tt & 1][warp] = ss;
    __syncthreads();
    float tot = 0;
    for (int wi = 0; wi < nw; wi++) tot += red[tt & 1][wi];
    if (lane >= ROWS && orow < a.hv) {
      const float sc = 1.0f / sqrtf(tot / (float)a.hv + a.eps);
      a.o[(size_t)t * vd + (size_t)h * a.hv + orow] = silu_f(in.z) * (o * sc * nw_row);
    }
#pragma unroll
    for (int rr = 0; rr < ROWS; rr++) {
      const float dr = __shfl_sync(0xffffffffu, d, rr);
#pragma unroll
      for (int i = 0; i < CPL; i++) S[rr][i] += dr * k[i];
    }
  }
#pragma unroll
  for (int rr = 0; rr < ROWS; rr++)
#pragma unroll
    for (int i = 0; i < CPL; i++) {
      const int row = r0 + rr, col = lane + 32 * i;
      if (row < a.hv && col < a.hk) Sg[(size_t)row * a.hk + col] = S[rr][i];
    }
}

// A block a token: the fused qkvz row split into the conv's inputs and z.
__global__ void __launch_bounds__(256) k_dn_split_qkvz(dn_args a, const float *qkvz) {
  BL_TR_SCOPE(29);
  cu_pdl_entry();
  const int t = blockIdx.x, qk = a.nk * a.hk, vd = a.nv * a.hv, r = a.nv / a.nk, per = 2 * a.hk + 2 * r * a.hv;
  const float *row = qkvz + (size_t)t * (a.C + vd);
  float *raw = const_cast<float *>(a.raw) + (size_t)t * a.C, *z = const_cast<float *>(a.z) + (size_t)t * vd;
  for (int e = threadIdx.x; e < a.C + vd; e += blockDim.x) {
    const int kh = e / per, off = e - kh * per;
    const float v = row[e];
    if (off < a.hk) raw[kh * a.hk + off] = v;
    else if (off < 2 * a.hk) raw[qk + kh * a.hk + off - a.hk] = v;
    else if (off < 2 * a.hk + r * a.hv) raw[2 * qk + kh * r * a.hv + off - 2 * a.hk] = v;
    else z[kh * r * a.hv + off - 2 * a.hk - r * a.hv] = v;
  }
}

} // namespace

bool cu_dn_supported(int hk, int hv, int taps) { return hk >= 1 && hk <= CU_DN_MAX_HEAD && hv >= 1 && hv <= CU_DN_MAX_HEAD && taps >= 1 && taps <= CU_DN_MAX_TAPS; }

int64_t cu_dn_conv(cudaStream_t st, const dn_args &a) {
  if (a.ntok <= 0) return BL_OK;
  if (a.seq_conv) {
    CU_LAUNCH("the delta-net's conv", k_dn_conv_seq, dim3((unsigned)((a.C + 127) / 128), (unsigned)a.n_runs), dim3(128), 0, st, a);
    return BL_OK;
  }
  const dim3 grid((unsigned)((a.C + 127) / 128), (unsigned)a.ntok);
  CU_LAUNCH("the delta-net's conv", k_dn_conv, grid, dim3(128), 0, st, a);
  if (a.K > 1) CU_LAUNCH("the delta-net's conv state", k_dn_conv_state, dim3(grid.x, (unsigned)a.n_runs), dim3(128), 0, st, a);
  return BL_OK;
}

int64_t cu_dn_rule(cudaStream_t st, const dn_args &a) {
  if (a.ntok <= 0) return BL_OK;
  if (!cu_dn_supported(a.hk, a.hv, a.K)) return cu_fail(BL_E_UNSUPPORTED, "the delta rule: heads of %d x %d", a.hk, a.hv);
  const dim3 grid((unsigned)a.nv, (unsigned)a.n_runs), block((unsigned)(32 * ((a.hv + ROWS - 1) / ROWS)));
  if (a.hk <= 32) CU_LAUNCH("the delta rule", k_dn_rule<1>, grid, block, 0, st, a);
  else if (a.hk <= 64) CU_LAUNCH("the delta rule", k_dn_rule<2>, grid, block, 0, st, a);
  else CU_LAUNCH("the delta rule", k_dn_rule<4>, grid, block, 0, st, a);
  return BL_OK;
}

int64_t cu_dn_split_qkvz(cudaStream_t st, const dn_args &a, const float *qkvz) {
  if (a.ntok <= 0) return BL_OK;
  CU_LAUNCH("the delta-net's fused qkvz rows", k_dn_split_qkvz, dim3((unsigned)a.ntok), dim3(256), 0, st, a, qkvz);
  return BL_OK;
}
