// bloomery CUDA library: a forward step (ffi/bloomery.h bl_cuda_forward, _topk): the batch checked and
// copied in (tokens, positions, slots, output rows; the prefill attention's tiles and, for delta-net
// layers, the tokens by sequence), the blocks enqueued (forward.cu cu_enqueue), captured once per
// (tokens, output rows, top-k, attention class) as a CUDA graph the second time such a decode step
// runs (the first runs on the stream) and replayed with the new inputs copied in before. One host
// synchronisation per step (the outputs' copy back).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>

#include "ctx.h"

// A decode batch's choice of expert kernels (cu_graph.nomma): the last decode batch's counts (its
// step is complete: every step ends in a sync) folded into each layer's pairs an expert, then the
// layers under the threshold (10% hysteresis) take the dp4a kernels.
static void mb_choose(cu_ctx *c, int ntok) {
  if (c->mb_ntok_last > 0) {
    const float pairs = (float)c->mb_ntok_last * (float)c->dm.K;
    for (int l = 0; l < MB_LAYER_BITS; l++) {
      const int t = c->mb_tiles_h[l];
      if (t <= 0) continue;
      const float v = pairs / (float)t;
      c->mb_ppt[l] = c->mb_ppt[l] > 0 ? 0.5f * (c->mb_ppt[l] + v) : v;
    }
  }
  const float lo = 0.9f * c->mb_pairs_min / 1000.0f, hi = 1.1f * c->mb_pairs_min / 1000.0f;
  uint64_t m = 0;
  for (int l = 0; l < MB_LAYER_BITS; l++) {
    const float v = c->mb_ppt[l];
    const bool was = (c->mb_nomma >> l) & 1;
    if (v > 0 && (v < lo || (was && v < hi))) m |= 1ull << l;
  }
  c->mb_nomma = c->mb_pairs_min > 0 ? m : 0;
  c->mb_ntok_last = ntok;
}

// Tiles of at most 64 consecutive tokens of one slot for prefill attention: {first, count, slot, largest position}.
static int fa_tiles(const int32_t *pos, const int32_t *seq, int n, int4 *out, int64_t cap) {
  int nt = 0;
  for (int i = 0; i < n;) {
    int j = i, mx = pos[i];
    while (j < n && seq[j] == seq[i] && j - i < 64) {
      if (pos[j] > mx) mx = pos[j];
      j++;
    }
    if (nt < cap) out[nt] = make_int4(i, j - i, seq[i], mx);
    nt++;
    i = j;
  }
  return nt;
}

// A model with delta-net layers: the batch's tokens by sequence (dn_args.runs, .tok; the CPU's groups:
// sequences in the order they first come, a sequence's tokens in batch order), entries of none after
// the sequences up to ntok.
static void seq_runs(cu_ctx *c, const int32_t *seq, int ntok) {
  int4 *r = host_runs(c);
  int2 *tk = host_tokrun(c);
  std::vector<int> of((size_t)c->p.kv_slots, -1), count;
  int n = 0;
  for (int t = 0; t < ntok; t++) {
    int &g = of[(size_t)seq[t]];
    if (g < 0) {
      g = n++;
      count.push_back(0);
    }
    tk[t] = make_int2(g, count[(size_t)g]++);
  }
  for (int g = 0, off = 0; g < ntok; g++) {
    const int k = g < n ? count[(size_t)g] : 0;
    r[g] = make_int4(off, k, 0, 0);
    off += k;
  }
  for (int t = 0; t < ntok; t++) {
    int4 &e = r[r[tk[t].x].x + tk[t].y];
    e.w = t;
    r[tk[t].x].z = seq[t];
  }
  c->n_runs = n;
}

static int64_t run_step(cu_ctx *c, int ntok, int nout, int topk) {
  const bool graph = c->use_graphs && !c->profile && ntok < c->prefill_min;
  int n_fa = 0;
  if (ntok >= 2 && ntok <= MV_MAX_NT) mb_choose(c, ntok);
  const int32_t *pos = c->h_in + c->dm.maxT, *seq = c->h_in + 2 * c->dm.maxT;
  if (!graph) {
    n_fa = fa_tiles(pos, seq, ntok, reinterpret_cast<int4 *>(c->h_in + 4 * c->dm.maxT), c->fa_cap);
    if (n_fa > c->fa_cap) return cu_fail(BL_E_INVAL, "forward: %d attention tiles, room for %lld", n_fa, (long long)c->fa_cap);
  }
  // decode steps: the attention's context class (attn2.cu; of the batch's last position) is part of what a graph captures
  int maxpos = 0;
  for (int i = 0; ntok <= MV_MAX_NT && i < ntok; i++) maxpos = std::max(maxpos, (int)pos[i]);
  c->acls = ntok <= MV_MAX_NT ? cu_attn2_class(maxpos + 1) : 0;
  // a decode batch's attention by the one-token kernel reads every row but the ntok - 1 below a
  // token's own before its wait on cu_qk_prep: a slot's other tokens must lie there (a prompt
  // chunk's do); else class ATTN_GENERAL, the general kernel
  bool distinct = true;
  for (int i = 0; ntok > 1 && ntok <= MV_MAX_NT && i < ntok; i++)
    for (int j = 0; j < ntok; j++) {
      if (seq[j] == seq[i] && pos[j] <= pos[i] - ntok) c->acls = ATTN_GENERAL;
      if (j != i && seq[j] == seq[i]) distinct = false;
    }
  // a decode batch of distinct slots: the attention does each token's Q/K norm, RoPE and cache
  // write itself (no cu_qk_prep; FAST_QKA), its graph apart from a batch with a slot's tokens together
  if (ntok > 1 && ntok <= MV_MAX_NT && distinct && c->acls != ATTN_GENERAL && (cu_fast & FAST_QKA)) c->acls |= ATTN_QKA;
  const size_t in_bytes = 4 * c->dm.maxT * sizeof(int32_t) + (size_t)n_fa * sizeof(int4);
  CU_TRY(cudaMemcpyAsync(c->d_in, c->h_in, in_bytes, cudaMemcpyHostToDevice, c->st), "copying the batch");
  if (c->dm.n_dn) {
    seq_runs(c, seq, ntok);
    CU_TRY(cudaMemcpyAsync(in_runs(c), host_runs(c), (size_t)ntok * sizeof(int4), cudaMemcpyHostToDevice, c->st), "copying the batch");
    CU_TRY(cudaMemcpyAsync(in_tokrun(c), host_tokrun(c), (size_t)ntok * sizeof(int2), cudaMemcpyHostToDevice, c->st), "copying the batch");
  }
  c->steps++;
  CU_OK(cu_hybrid_begin(c, ntok, graph, nout == 0));
  if (!graph) return cu_enqueue(c, ntok, nout, topk, n_fa);
  for (const cu_graph &g : c->graphs)
    if (g.ntok == ntok && g.nout == nout && g.topk == topk && g.acls == c->acls && g.nomma == c->mb_nomma) {
      CU_TRY(cudaGraphLaunch(g.exec, c->st), "replaying the decode graph");
      c->graph_steps++;
      return BL_OK;
    }
  // a shape met for the first time runs on the stream: capturing and instantiating a step costs
  // several milliseconds on a 48-layer model, worth it only for shapes that come back (a prompt's
  // last pieces after a cache restore, a rare batch size, are often met once)
  bool seen = false;
  for (const cu_graph &g : c->graph_seen) seen = seen || (g.ntok == ntok && g.nout == nout && g.topk == topk && g.acls == c->acls && g.nomma == c->mb_nomma);
  if (!seen) {
    c->graph_seen.push_back({ntok, nout, topk, c->acls, c->mb_nomma, nullptr});
    return cu_enqueue(c, ntok, nout, topk, 0);
  }
  cudaGraph_t gr = nullptr;
  CU_TRY(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal), "capturing the decode graph");
  const int64_t s = cu_enqueue(c, ntok, nout, topk, 0);
  const cudaError_t e = cudaStreamEndCapture(c->st, &gr);
  if (s != BL_OK) {
    if (gr) (void)cudaGraphDestroy(gr);
    (void)cudaGetLastError();
    return s;
  }
  if (e != cudaSuccess) return cu_fail_cuda(e, "capturing the decode graph");
  cu_graph g = {ntok, nout, topk, c->acls, c->mb_nomma, nullptr};
  const cudaError_t ei = cudaGraphInstantiate(&g.exec, gr, 0);
  (void)cudaGraphDestroy(gr);
  if (ei != cudaSuccess) return cu_fail_cuda(ei, "instantiating the decode graph");
  c->graphs.push_back(g);
  CU_TRY(cudaGraphLaunch(g.exec, c->st), "replaying the decode graph");
  c->graph_steps++;
  return BL_OK;
}

static int64_t forward(uint64_t h, const bl_batch *batch, int topk, int32_t *ids, float *vals) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  if (!c || !batch) return cu_fail(BL_E_INVAL, "forward: null argument");
  const int64_t n = batch->n_tokens, nout = batch->n_out;
  if (n <= 0 || n > c->dm.maxT) return cu_fail(BL_E_INVAL, "forward: batch of %lld tokens (the context takes 1..%lld)", (long long)n, (long long)c->dm.maxT);
  if (nout < 0 || nout > n) return cu_fail(BL_E_INVAL, "forward: %lld output rows", (long long)nout);
  if (batch->hidden_in || batch->hidden_out)
    return cu_fail(BL_E_UNSUPPORTED, "forward: hidden-state rows in or out of a batch (speculative decoding's draft-mtp) are not implemented on the card yet");
  const int32_t *tok = reinterpret_cast<const int32_t *>(batch->tokens), *pos = reinterpret_cast<const int32_t *>(batch->pos);
  const int32_t *seq = reinterpret_cast<const int32_t *>(batch->seq), *rows = reinterpret_cast<const int32_t *>(batch->out_rows);
  if (!tok || !pos || !seq || (nout > 0 && !rows)) return cu_fail(BL_E_INVAL, "forward: missing batch arrays");
  if (nout > 0 && topk == 0 && !batch->logits) return cu_fail(BL_E_INVAL, "forward: logits buffer missing");
  for (int64_t i = 0; i < n; i++) {
    if (tok[i] < 0 || tok[i] >= c->dm.V) return cu_fail(BL_E_INVAL, "forward: token id %d outside the vocabulary of %lld", tok[i], (long long)c->dm.V);
    if (pos[i] < 0 || pos[i] >= c->p.kv_ctx) return cu_fail(BL_E_INVAL, "forward: position %d outside the context of %lld", pos[i], (long long)c->p.kv_ctx);
    if (seq[i] < 0 || seq[i] >= c->p.kv_slots) return cu_fail(BL_E_INVAL, "forward: sequence %d outside %lld slots", seq[i], (long long)c->p.kv_slots);
  }
  for (int64_t i = 0; i < nout; i++)
    if (rows[i] < 0 || rows[i] >= n) return cu_fail(BL_E_INVAL, "forward: output row %d outside the batch", rows[i]);
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  CU_OK(cu_ensure_logits(c, nout));
  const int64_t T = c->dm.maxT;
  memcpy(c->h_in, tok, (size_t)n * 4);
  memcpy(c->h_in + T, pos, (size_t)n * 4);
  memcpy(c->h_in + 2 * T, seq, (size_t)n * 4);
  if (nout > 0) memcpy(c->h_in + 3 * T, rows, (size_t)nout * 4);
  CU_OK(run_step(c, (int)n, (int)nout, topk));
  if (nout > 0) {
    if (topk > 0) {
      float *hv = c->h_out;
      int32_t *hi = reinterpret_cast<int32_t *>(c->h_out + nout * topk);
      CU_TRY(cudaMemcpyAsync(hv, c->topv, (size_t)nout * topk * 4, cudaMemcpyDeviceToHost, c->st), "copying candidates");
      CU_TRY(cudaMemcpyAsync(hi, c->topi, (size_t)nout * topk * 4, cudaMemcpyDeviceToHost, c->st), "copying candidates");
      CU_OK(cu_hybrid_wait(c, "running the step"));
      memcpy(vals, hv, (size_t)nout * topk * 4);
      memcpy(ids, hi, (size_t)nout * topk * 4);
    } else {
      const size_t bytes = (size_t)nout * c->dm.V * sizeof(float);
      float *dst = reinterpret_cast<float *>(batch->logits);
      if ((int64_t)bytes <= c->h_out_bytes) {
        CU_TRY(cudaMemcpyAsync(c->h_out, c->logits, bytes, cudaMemcpyDeviceToHost, c->st), "copying logits");
        CU_OK(cu_hybrid_wait(c, "running the step"));
        memcpy(dst, c->h_out, bytes);
      } else {
        CU_OK(cu_hybrid_wait(c, "running the step"));
        CU_TRY(cudaMemcpy(dst, c->logits, bytes, cudaMemcpyDeviceToHost), "copying logits");
      }
    }
  } else {
    CU_OK(cu_hybrid_wait(c, "running the step"));
  }
  cu_profile_collect(c, n < c->prefill_min);
  return BL_OK;
}

// A forward pass with the context's options (cu_opts_scope): its fast bits, none in the
// batch-invariant mode; the thread's bits before are restored after it.
static int64_t forward_mode(uint64_t h, const bl_batch *batch, int topk, int32_t *ids, float *vals) {
  const cu_ctx *c = reinterpret_cast<const cu_ctx *>(h);
  if (!c) return forward(h, batch, topk, ids, vals);
  const cu_opts_scope scope(c);
  return forward(h, batch, topk, ids, vals);
}

extern "C" int64_t bl_cuda_forward(uint64_t ctx, const bl_batch *batch) { return forward_mode(ctx, batch, 0, nullptr, nullptr); }

extern "C" int64_t bl_cuda_forward_topk(uint64_t ctx, const bl_batch *batch, int64_t k, int32_t *ids, float *vals) {
  if (k < 1 || k > TOPK_MAX) return cu_fail(BL_E_INVAL, "forward_topk: k = %lld (1..%d)", (long long)k, TOPK_MAX);
  if (!ids || !vals) return cu_fail(BL_E_INVAL, "forward_topk: null output arrays");
  return forward_mode(ctx, batch, (int)k, ids, vals);
}

// Replays the context's first captured decode graph n times (the same tokens and positions
// again; the KV rows it writes are rewritten with the same values): out[0] GPU microseconds a
// replay back to back (events), out[1] host microseconds a cudaGraphLaunch call takes, out[2]
// microseconds a replay with a host synchronisation after each (the step latency without copies).
extern "C" int64_t bl_cuda_test_replay(uint64_t h, int64_t n, double *out) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  if (!c || !out || n < 1 || n > 100000) return cu_fail(BL_E_INVAL, "test_replay: bad arguments");
  if (c->graphs.empty()) return cu_fail(BL_E_INVAL, "test_replay: no decode graph captured yet (a shape is captured the second time it runs: run a decode step twice first)");
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  cudaGraphExec_t g = c->graphs[0].exec;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  CU_TRY(cudaEventCreate(&e0), "test_replay: events");
  if (cudaEventCreate(&e1) != cudaSuccess) {
    (void)cudaEventDestroy(e0);
    return cu_fail(BL_E_DEVICE, "test_replay: events");
  }
  int64_t s = BL_OK;
  do {
    if (cudaGraphLaunch(g, c->st) != cudaSuccess || cudaStreamSynchronize(c->st) != cudaSuccess) { s = cu_fail(BL_E_DEVICE, "test_replay: warm-up"); break; }
    float ms = 0;
    (void)cudaEventRecord(e0, c->st);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; i++) (void)cudaGraphLaunch(g, c->st);
    const auto t1 = std::chrono::steady_clock::now();
    (void)cudaEventRecord(e1, c->st);
    if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) { s = cu_fail(BL_E_DEVICE, "test_replay: replays"); break; }
    out[0] = 1000.0 * ms / (double)n;
    out[1] = std::chrono::duration<double, std::micro>(t1 - t0).count() / (double)n;
    const auto t2 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; i++) {
      (void)cudaGraphLaunch(g, c->st);
      (void)cudaStreamSynchronize(c->st);
    }
    const auto t3 = std::chrono::steady_clock::now();
    out[2] = std::chrono::duration<double, std::micro>(t3 - t2).count() / (double)n;
    const cudaError_t el = cudaGetLastError();
    if (el != cudaSuccess) s = cu_fail_cuda(el, "test_replay");
  } while (0);
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  return s;
}
