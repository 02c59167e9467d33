// bloomery CUDA library: the card's share of a token's host experts pulled into card memory before
// the card computes them (one-token steps beside host experts, hybrid.cu). The one-token expert
// kernels reading host memory in place keep few bytes in flight (about 24 GB/s over PCIe); a
// kernel that only copies - every thread with several 16-byte loads of the picked experts' gate,
// up and down slabs in flight - keeps the link busy, then the same kernels read the copies from
// card memory. The picks are read on the card (after the wait), so the copy sits inside the graph.
// A block with biases (gpt-oss) has its picked experts' bias rows copied into bias slots with them
// (card to card), since the kernels index the biases by the same picks as the weights.
// BLOOMERY_HYBRID_PULL=0 reads the experts in place instead.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <new>

#include "ctx.h"
#include "stage.cuh"

#define PULL_UNROLL 8
#define PULL_THREADS 256
#define PULL_MAX_K 32

struct pull_args {
  const int32_t *sel; // the card's picks (k of them)
  int k, n_expert;
  const uint8_t *src[3]; // gate, up, down of expert 0 as the card addresses host memory
  uint8_t *dst[3];       // slot 0 of each role in card memory (slots bytes[r] apart)
  int chunks[3];         // 16-byte chunks of one expert's slab of each role
  const float *bsrc[3];  // the experts' bias rows of each role in card memory (null: none), ld[r] floats apart
  float *bdst[3];        // their slots (slot j at j * ld[r])
  int ld[3], blen[3];    // floats apart, floats a row copies
};

__global__ void __launch_bounds__(PULL_THREADS) k_pull(pull_args a) {
  __shared__ int e[PULL_MAX_K];
  cu_pdl_wait();
  if ((int)threadIdx.x < a.k) {
    const int v = __ldcg(a.sel + threadIdx.x);
    e[threadIdx.x] = v < 0 ? 0 : v >= a.n_expert ? a.n_expert - 1 : v;
  }
  __syncthreads();
  const int per = a.chunks[0] + a.chunks[1] + a.chunks[2], total = per * a.k;
  const int stride = (int)(gridDim.x * blockDim.x);
  for (int base = (int)(blockIdx.x * blockDim.x + threadIdx.x); base < total; base += stride * PULL_UNROLL) {
    int4 v[PULL_UNROLL];
    int4 *to[PULL_UNROLL];
#pragma unroll
    for (int u = 0; u < PULL_UNROLL; u++) {
      const int idx = base + u * stride;
      to[u] = nullptr;
      if (idx >= total) continue;
      const int j = idx / per;
      int c = idx - j * per, r = 0;
      if (c >= a.chunks[0]) {
        c -= a.chunks[0];
        r = 1;
        if (c >= a.chunks[1]) {
          c -= a.chunks[1];
          r = 2;
        }
      }
      const int4 *s = reinterpret_cast<const int4 *>(a.src[r]) + (size_t)e[j] * a.chunks[r] + c;
      to[u] = reinterpret_cast<int4 *>(a.dst[r]) + (size_t)j * a.chunks[r] + c;
      v[u] = __ldcg(s);
    }
#pragma unroll
    for (int u = 0; u < PULL_UNROLL; u++)
      if (to[u]) *to[u] = v[u];
  }
  // the bias rows (card memory: a few KiB an expert)
  for (int r = 0; r < 3; r++) {
    if (!a.bsrc[r]) continue;
    const int n = a.blen[r] * a.k;
    for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += stride) {
      const int j = i / a.blen[r], f = i - j * a.blen[r];
      a.bdst[r][(size_t)j * a.ld[r] + f] = a.bsrc[r][(size_t)e[j] * a.ld[r] + f];
    }
  }
}

// Slots in card memory for the most picks a token of any host layer read in memory (not on disk),
// and the slot numbers 0..K-1 the expert kernels then take as picks. Off (nothing allocated) with
// bl_cuda_options.pull 0 or when a host layer's slabs are not 16-byte multiples.
int64_t cu_pull_init(cu_ctx *c) {
  c->hy->pull_on = 0;
  if (c->o.pull == 0) return BL_OK;
  size_t slab[3] = {0, 0, 0}, bld[3] = {0, 0, 0};
  int K = 0;
  for (const cu_blk &b : c->w->blocks) {
    if (!b.host || cu_host_on_disk(b)) continue;
    for (int k = 0; k < 3; k++) {
      const dmat &m = b.t[CU_MOE_GATE + k];
      const uintptr_t at = reinterpret_cast<uintptr_t>(b.hxd[k]);
      if (!b.hxd[k] || m.nb2 % 16 || at % 16) return BL_OK;
      slab[k] = std::max(slab[k], (size_t)m.nb2);
      const dmat &bias = b.t[CU_MOE_BGATE + k];
      if (b.general && bias.d) bld[k] = std::max(bld[k], (size_t)(bias.nb1 / 4));
    }
    K = std::max(K, b.n_used);
  }
  if (K == 0 || K > PULL_MAX_K) return BL_OK;
  size_t bytes = 0;
  for (int k = 0; k < 3; k++) bytes += cu_align256(slab[k] * K) + cu_align256(bld[k] * K * sizeof(float));
  // the plan does not count these slots: a card without room for them reads the share in place
  if (cudaMalloc(&c->hy->pull_buf, bytes) != cudaSuccess || cudaMalloc(&c->hy->pull_ids, PULL_MAX_K * sizeof(int32_t)) != cudaSuccess) {
    (void)cudaGetLastError();
    fprintf(stderr, "bloomery: no card memory for the card's share of host experts (%.1f MiB); it reads them in place\n", (double)bytes / 1048576.0);
    cu_pull_free(c);
    return BL_OK;
  }
  int32_t ids[PULL_MAX_K];
  for (int i = 0; i < PULL_MAX_K; i++) ids[i] = i;
  CU_TRY(cudaMemcpy(c->hy->pull_ids, ids, sizeof ids, cudaMemcpyHostToDevice), "setting the card's slots");
  uint8_t *p = static_cast<uint8_t *>(c->hy->pull_buf);
  for (int k = 0; k < 3; k++) {
    c->hy->pull_dst[k] = p;
    p += cu_align256(slab[k] * K);
  }
  for (int k = 0; k < 3; k++) {
    c->hy->pull_bias[k] = bld[k] ? reinterpret_cast<float *>(p) : nullptr;
    c->hy->pull_bias_ld[k] = (int)bld[k];
    p += cu_align256(bld[k] * K * sizeof(float));
  }
  c->hy->pull_on = 1;
  return BL_OK;
}

void cu_pull_free(cu_ctx *c) {
  if (c->hy->pull_buf) (void)cudaFree(c->hy->pull_buf);
  if (c->hy->pull_ids) (void)cudaFree(c->hy->pull_ids);
  c->hy->pull_buf = nullptr;
  c->hy->pull_ids = nullptr;
  for (int k = 0; k < 3; k++) {
    c->hy->pull_dst[k] = nullptr;
    c->hy->pull_bias[k] = nullptr;
    c->hy->pull_bias_ld[k] = 0;
  }
  c->hy->pull_on = 0;
  c->hy->cpu_fixed_us = c->hy->cpu_pick_us = c->hy->card_pick_us = 0;
}

// Copies the experts fm's k picks name (fm.sel) of block b from host memory into the slots, on the
// step's stream, and points fm at the slots (picks 0..k-1 of the same strides; its biases' rows
// too). False: not pulled (off, more picks than slots, or biases wider than their slots) - fm is
// left reading host memory.
int64_t cu_pull(cu_ctx *c, const cu_blk &b, fmoe_args &fm, bool *pulled) {
  *pulled = false;
  if (!c->hy->pull_on || fm.k > b.n_used || fm.k > PULL_MAX_K || fm.k <= 0) return BL_OK;
  const float *bias[3] = {fm.bg, fm.bu, fm.bd};
  const int bias_ld[3] = {fm.ldbg, fm.ldbu, fm.ldbd};
  // a row's floats: gate/up's the experts' rows (gate.ne1), down's the output's (down.ne1)
  const int blen[3] = {(int)fm.gate.ne1, (int)fm.up.ne1, (int)fm.down.ne1};
  for (int k = 0; k < 3; k++)
    if (bias[k] && (!c->hy->pull_bias[k] || bias_ld[k] != c->hy->pull_bias_ld[k] || blen[k] > bias_ld[k])) return BL_OK;
  pull_args a;
  memset(&a, 0, sizeof a);
  a.sel = fm.sel;
  a.k = fm.k;
  a.n_expert = b.n_expert;
  const dmat *m[3] = {&fm.gate, &fm.up, &fm.down};
  for (int k = 0; k < 3; k++) {
    a.src[k] = m[k]->d;
    a.dst[k] = c->hy->pull_dst[k];
    a.chunks[k] = (int)(m[k]->nb2 / 16);
    if (bias[k]) {
      a.bsrc[k] = bias[k];
      a.bdst[k] = c->hy->pull_bias[k];
      a.ld[k] = bias_ld[k];
      a.blen[k] = blen[k];
    }
  }
  int blocks = 2 * c->sm_count;
  const int total = (a.chunks[0] + a.chunks[1] + a.chunks[2]) * a.k;
  const int need = (total + PULL_THREADS * PULL_UNROLL - 1) / (PULL_THREADS * PULL_UNROLL);
  if (need < blocks) blocks = need;
  if (blocks < 1) blocks = 1;
  CU_LAUNCH("pulling the card's share of host experts", k_pull, dim3(blocks), dim3(PULL_THREADS), 0, c->st, a);
  fm.gate.d = c->hy->pull_dst[0];
  fm.up.d = c->hy->pull_dst[1];
  fm.down.d = c->hy->pull_dst[2];
  fm.sel = c->hy->pull_ids;
  if (bias[0]) fm.bg = c->hy->pull_bias[0];
  if (bias[1]) fm.bu = c->hy->pull_bias[1];
  if (bias[2]) fm.bd = c->hy->pull_bias[2];
  *pulled = true;
  return BL_OK;
}

// The card's share of a token's picks sized by measurement (BLOOMERY_HYBRID_CARD_SHARE=auto, the copy
// on). Opt-in: on the H200 it chose 2 where 3 was 10-15% faster (the step's contention differs). The
// card's copy of K experts of the first host layer in memory and, at the same time (in a step both
// read host memory at once), the CPU's expert hook on one token with K picks, then with K / 2; the
// best of three rounds each. The CPU's time is a fixed part plus a part a pick (the two sizes; in
// steps of the H200's host: about 42 us + 49 us a pick), the card's a part a pick plus
// CARD_PICK_FIXED_US of compute; *share: the S of 1..K-1 whose slower side is fastest.
#define CARD_PICK_FIXED_US 10.0
int64_t cu_pull_size_share(cu_ctx *c, int *share, double *cpu_fixed_us, double *cpu_pick_us, double *card_pick_us) {
  const cu_blk *b = cu_first_host_block_in_ram(c);
  const int K = b ? b->n_used : 0;
  if (!b || !c->hy->pull_on || !c->hy->expert_fn || K < 2 || K > PULL_MAX_K) return BL_OK;
  fmoe_args fm;
  (void)cu_routed_experts(c, *b, fm);
  fm.gate.d = b->hxd[0];
  fm.up.d = b->hxd[1];
  fm.down.d = b->hxd[2];
  fm.sel = c->hy->pull_ids; // experts 0..K-1
  fm.k = K;
  const int E = (int)c->dm.E;
  float *out = new (std::nothrow) float[(size_t)E];
  if (!out) return cu_fail(BL_E_NOMEM, "measuring the card's share: out of memory");
  int32_t sel[PULL_MAX_K];
  float w[PULL_MAX_K];
  for (int j = 0; j < K; j++) {
    sel[j] = (int)(((int64_t)(j + K) * 37 + 5) % b->n_expert); // other experts than the card's
    w[j] = 1.0f / (float)K;
  }
  for (int i = 0; i < E; i++) c->hy->hx[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
    if (e0) (void)cudaEventDestroy(e0);
    delete[] out;
    return cu_fail(BL_E_DEVICE, "measuring the card's share");
  }
  double card = 1e30, cpu_full = 1e30, cpu_half = 1e30;
  const int half = K / 2;
  int64_t s = BL_OK;
  char msg[256];
  msg[0] = 0;
  for (int rep = 0; rep < 8 && s == BL_OK; rep++) {
    const int n = rep % 2 ? half : K; // rounds 0 and 1 warm both sizes
    fmoe_args f = fm;
    bool pulled = false;
    (void)cudaEventRecord(e0, c->st);
    s = cu_pull(c, *b, f, &pulled);
    (void)cudaEventRecord(e1, c->st);
    if (s != BL_OK) break;
    const auto t0 = std::chrono::steady_clock::now();
    s = c->hy->expert_fn(c->hy->host_cpu, b->src->ops, b->src->n_ops, 1, c->hy->hx, sel, w, n, out, msg, sizeof msg);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    float ms = 0;
    const cudaError_t e = cudaEventSynchronize(e1);
    if (s != BL_OK) {
      s = cu_fail(s, "host experts: %s", msg);
      break;
    }
    if (e != cudaSuccess) {
      s = cu_fail_cuda(e, "measuring the card's share");
      break;
    }
    if (rep < 2 || !pulled || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) continue;
    card = std::min(card, 1000.0 * ms / K);
    if (n == K) cpu_full = std::min(cpu_full, us);
    else cpu_half = std::min(cpu_half, us);
  }
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  delete[] out;
  if (s != BL_OK) return s;
  if (card >= 1e29 || cpu_full >= 1e29 || cpu_half >= 1e29 || half < 1 || half >= K) return BL_OK;
  // the CPU: fixed + per pick, from the two sizes (a slower smaller call is noise: no fixed part)
  const double per = std::max(0.0, (cpu_full - cpu_half) / (K - half)), fixed = per > 0 ? std::max(0.0, cpu_full - per * K) : 0.0;
  const double cpu = per > 0 ? per : cpu_full / K;
  int best = *share;
  double best_t = 1e30;
  for (int S = 1; S < K; S++) {
    const double t = std::max(fixed + cpu * (K - S), card * S + CARD_PICK_FIXED_US);
    if (t < best_t) {
      best_t = t;
      best = S;
    }
  }
  *share = best;
  *cpu_pick_us = cpu;
  *cpu_fixed_us = fixed;
  *card_pick_us = card;
  return BL_OK;
}
