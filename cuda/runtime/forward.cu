// bloomery CUDA library: one forward pass of the program's blocks for a batch, enqueued (cu_enqueue;
// the step around it, its inputs and graphs, is step.cu). Batches of up to MV_MAX_NT tokens take the
// decode kernels; larger batches take the tensor-core products, grouped experts and flash attention.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx.h"
#include "dot8.cuh"


static const char *const SECTION_NAMES[CU_SECTIONS] = {"embed", "qkv", "qk-norm-rope", "attention", "attn-out", "router", "experts", "output", "topk", "end"};

void cu_mark(cu_ctx *c, int section) {
  if (!c->profile) return;
  if ((size_t)c->n_marks >= c->ev.size()) {
    cudaEvent_t e;
    if (cudaEventCreate(&e) != cudaSuccess) return;
    c->ev.push_back(e);
    c->ev_sec.push_back(0);
  }
  c->ev_sec[c->n_marks] = section;
  (void)cudaEventRecord(c->ev[c->n_marks], c->st);
  c->n_marks++;
}

void cu_profile_collect(cu_ctx *c, bool decode) {
  if (!c->profile) return;
  for (int i = 0; i + 1 < c->n_marks; i++) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, c->ev[i], c->ev[i + 1]) == cudaSuccess) c->prof_ms[decode ? 0 : 1][c->ev_sec[i]] += ms;
  }
  c->n_marks = 0;
  c->prof_steps[decode ? 0 : 1]++;
}

void cu_profile_print(cu_ctx *c) {
  if (!c->profile) return;
  for (int k = 0; k < 2; k++) {
    if (!c->prof_steps[k]) continue;
    double tot = 0;
    for (int s = 0; s < S_END; s++) tot += c->prof_ms[k][s];
    fprintf(stderr, "cuda profile (%s, %lld steps): %.1f us/step:", k ? "batches" : "decode", (long long)c->prof_steps[k], 1000.0 * tot / c->prof_steps[k]);
    for (int s = 0; s < S_END; s++)
      if (c->prof_ms[k][s] > 0) fprintf(stderr, " %s %.1f", SECTION_NAMES[s], 1000.0 * c->prof_ms[k][s] / c->prof_steps[k]);
    fprintf(stderr, "\n");
  }
  for (cudaEvent_t e : c->ev) (void)cudaEventDestroy(e);
  c->ev.clear();
}

void cu_drop_graphs(cu_ctx *c) {
  for (cu_graph &g : c->graphs) (void)cudaGraphExecDestroy(g.exec);
  c->graphs.clear();
}

int64_t cu_ensure_logits(cu_ctx *c, int64_t rows) {
  if (rows <= c->logits_rows) return BL_OK;
  if (c->logits) {
    CU_TRY(cudaStreamSynchronize(c->st), "growing the logits buffer");
    cu_drop_graphs(c); // they point at the old buffer
    CU_TRY(cudaFree(c->logits), "growing the logits buffer");
    c->logits = nullptr;
    c->logits_rows = 0;
  }
  CU_TRY(cudaMalloc(&c->logits, (size_t)rows * c->dm.V * sizeof(float)), "allocating the logits buffer");
  c->logits_rows = rows;
  return BL_OK;
}

static mv_job job(const dmat &m, const float *bias, float *y, int ldy, int epi) {
  mv_job j;
  memset(&j, 0, sizeof j);
  j.m = m;
  j.bias = bias;
  j.y = y;
  j.ldy = ldy;
  j.epi = epi;
  return j;
}

static gemm_job gjob(const dmat &w, float *c, int ldc, const float *bias) {
  gemm_job j;
  memset(&j, 0, sizeof j);
  j.w = w;
  j.c = c;
  j.ldc = ldc;
  j.bias = bias;
  return j;
}

// The decode product's arguments for one dense job on rows b (ldb apart).
static mv_args dense_mv(cu_ctx *c, const gemm_job &gj, const float *b, int ldb, int epi) {
  mv_args a;
  memset(&a, 0, sizeof a);
  a.job[0] = job(gj.w, gj.bias, gj.c, gj.ldc, epi);
  a.njobs = 1;
  a.x = b;
  a.ldx = ldb;
  a.n = gj.w.ne0;
  a.q8 = 1;
  a.xq = c->xq;
  a.xq_cap = c->xq_bytes;
  a.pre = &c->attx8; // rows the attention quantized already (FAST_ATTX8), taken only where they match exactly
  return a;
}

// Dense products of the same activation rows (ldb) with up to 3 matrices: tensor cores when the
// shapes allow (one launch for matrices of one type), else the decode product.
// Activation rows a dense prompt product's tile takes (both tensor-core paths): 32 where tiles of
// 64 would leave the card under two blocks an SM, else 64.
static int prompt_tile_rows(const cu_ctx *c, int row_blocks, int ntok) { return row_blocks * ((ntok + 63) / 64) < 2 * c->sm_count ? 32 : 64; }

// FAST_GEMM16: a prompt batch's dense products from f16 copies (gemm16.cu): each job's weights
// decoded once into c->w16 (F16 rows read in place), the rows converted once into c->b16, every
// job in one pipelined launch; bit for bit gemm.cu's result. *done false: not this batch.
static int64_t dense_f16(cu_ctx *c, const gemm_job *jobs, int n, const float *b, int ldb, int ntok, int epi, bool *done) {
  *done = false;
  if (!(cu_fast & FAST_GEMM16) || ntok < GEMM16_MIN_TOK || n < 1 || n > 3 || !cu_gemm16_fits(c->smem_limit)) return BL_OK;
  const int K = jobs[0].w.ne0;
  auto in_place = [](const dmat &w) {
    return w.type == T_F16 && w.nb1 == 2 * (int64_t)w.ne0 && reinterpret_cast<uintptr_t>(w.d) % 16 == 0;
  };
  size_t need = 0;
  for (int j = 0; j < n; j++) {
    if (jobs[j].w.ne0 != K || !cu_gemm_supported(jobs[j].w.type, K)) return BL_OK;
    if (!in_place(jobs[j].w)) need += (size_t)jobs[j].w.ne1 * K;
  }
  if (need > c->w16_elems || (size_t)ntok * K > c->b16_elems) return BL_OK;
  gemm16_args g;
  memset(&g, 0, sizeof g);
  size_t off = 0;
  int row_blocks = 0;
  for (int j = 0; j < n; j++) {
    const dmat &w = jobs[j].w;
    if (in_place(w)) {
      g.job[j].w = reinterpret_cast<const __half *>(w.d);
    } else {
      CU_OK(cu_deq16(c->st, w, c->w16 + off));
      g.job[j].w = c->w16 + off;
      off += (size_t)w.ne1 * K;
    }
    g.job[j].rows = w.ne1;
    g.job[j].c = jobs[j].c;
    g.job[j].ldc = jobs[j].ldc;
    g.job[j].bias = jobs[j].bias;
    row_blocks += (w.ne1 + GEMM_BM - 1) / GEMM_BM;
  }
  g.njobs = n;
  CU_OK(cu_f16_rows(c->st, b, ldb, K, ntok, c->b16, K));
  g.b = c->b16;
  g.ldb = K;
  g.K = K;
  g.ntok = ntok;
  g.mode = epi;
  CU_OK(cu_gemm16(c->st, g, prompt_tile_rows(c, row_blocks, ntok)));
  c->n_gemm16++;
  *done = true;
  return BL_OK;
}

static int64_t dense_products(cu_ctx *c, const gemm_job *jobs, int n, const float *b, int ldb, int ntok, int epi, bool big) {
  if (big) {
    bool f16 = false;
    CU_OK(dense_f16(c, jobs, n, b, ldb, ntok, epi, &f16));
    if (f16) return BL_OK;
  }
  bool done[3] = {false, false, false};
  for (int j = 0; j < n; j++) {
    if (done[j]) continue;
    if (big && cu_gemm_supported(jobs[j].w.type, jobs[j].w.ne0)) {
      gemm_args g;
      memset(&g, 0, sizeof g);
      for (int q = j; q < n; q++)
        if (!done[q] && jobs[q].w.type == jobs[j].w.type && cu_gemm_supported(jobs[q].w.type, jobs[q].w.ne0)) {
          g.job[g.njobs++] = jobs[q];
          done[q] = true;
        }
      g.b = b;
      g.ldb = ldb;
      g.ntok = ntok;
      g.mode = epi;
      int row_blocks = 0;
      for (int q = 0; q < g.njobs; q++) row_blocks += (g.job[q].w.ne1 + GEMM_BM - 1) / GEMM_BM;
      const int bn = prompt_tile_rows(c, row_blocks, ntok);
      CU_OK(cu_gemm(c->st, g, bn, (ntok + bn - 1) / bn));
      continue;
    }
    const mv_args a = dense_mv(c, jobs[j], b, ldb, epi);
    done[j] = true;
    bool batched = false; // 2..MV_MAX_NT rows: each weight row once for all of them (mv_batch.cu)
    CU_OK(cu_mv_batch(c->st, a, ntok, nullptr, 0, c->smem_limit, &batched));
    if (!batched) CU_OK(cu_matvec(c->st, a, ntok, c->smem_limit));
  }
  return BL_OK;
}

// y rows (ldc) = W x rows (ldb) for ntok rows.
static int64_t dense_product(cu_ctx *c, const dmat &w, const float *bias, const float *b, int ldb, int ntok, float *y, int ldc, int epi,
                             bool big) {
  const gemm_job j = gjob(w, y, ldc, bias);
  return dense_products(c, &j, 1, b, ldb, ntok, epi, big);
}

// The one-token experts kernels' arguments for MoE block b reading the picks the fused router
// wrote (froute.cu): gate/up normalise x themselves. False when the shapes do not take them.
bool cu_routed_experts(const cu_ctx *c, const cu_blk &b, fmoe_args &fm) {
  memset(&fm, 0, sizeof fm);
  const int rg = CU_MOE_GATE;
  fm.gate = b.t[rg];
  fm.up = b.t[rg + 1];
  fm.down = b.t[rg + 2];
  fm.sel = c->sel;
  fm.selw = c->selw;
  fm.n_expert = b.n_expert;
  fm.k = b.n_used;
  fm.norm_topk = b.norm_topk;
  fm.w_scale = b.w_scale;
  fm.h = c->x;
  fm.hnorm = 1;
  fm.normw = b.vec[CU_MOE_NORM];
  fm.eps = b.eps;
  fm.act = c->act;
  fm.x = c->x;
  fm.q8 = 1;
  return cu_fmoe_fits(fm, c->smem_limit);
}

// cu_routed_experts for a MoE block whose experts are all on the card: gate/up may quantize down's
// rows (FAST_ACT8).
static bool card_experts(const cu_ctx *c, const cu_blk &b, fmoe_args &fm) {
  if (!cu_routed_experts(c, b, fm)) return false;
  fm.act8 = c->act8;
  fm.act8_cap = c->act8_bytes;
  return true;
}

// The fused attention output + router arguments for attention block a followed by MoE block m;
// false when that path does not take them (then the output product and the router run apart).
// The output product o of rows att (n floats, bias ob or null): an attention's, or a delta-net's out.
static bool fused_router(const cu_ctx *c, const dmat &o, const float *att, int n, const float *ob, const cu_blk &m, fo_args &f) {
  memset(&f, 0, sizeof f);
  // gpt-oss's blocks (general): the output product's bias and the router's are this kernel's (ob,
  // rb); its sinks and sliding window are the attention kernel's, before it; the experts take their
  // biases and activation from the block (cu_expert_options)
  const dmat &r = m.t[CU_MOE_GATE_INP];
  if (!r.d || r.type != T_F32 || r.ne0 != (int)c->dm.E || r.ne1 != m.n_expert || r.nb1 % 16) return false;
  if (m.gating == BL_GATING_SIGMOID) return false; // its picks are router/sigmoid.cu's
  f.o = o;
  f.att = att;
  f.x = c->x;
  f.n = n;
  f.E = (int)c->dm.E;
  f.rw = reinterpret_cast<const float *>(r.d);
  f.ldw = (int)(r.nb1 / 4);
  f.X = m.n_expert;
  f.K = m.n_used;
  f.norm_topk = m.norm_topk;
  f.w_scale = m.w_scale;
  f.normw = m.vec[CU_MOE_NORM];
  f.eps = m.eps;
  f.part = c->rpart;
  f.ldp = c->rpart_ld;
  f.counter = c->cnt_fo;
  f.logits = c->router;
  f.sel = c->sel;
  f.selw = c->selw;
  f.q8 = 1;
  f.ob = ob;
  f.rb = m.vec[CU_MOE_RBIAS];
  fmoe_args fm;
  if (f.X > c->dm.X || !cu_fo_fits(f, c->smem_limit) || !cu_routed_experts(c, m, fm)) return false;
  if (!m.general) return true;
  cu_expert_options(fm, m);
  return cu_fmoe_fits(fm, c->smem_limit);
}

static bool fused_router(const cu_ctx *c, const cu_blk &a, const cu_blk &m, fo_args &f) {
  return fused_router(c, a.t[CU_ATTN_O], c->att, a.n_head * a.head_dim, a.vec[CU_ATTN_BO], m, f);
}

// The fused attention output + router (froute.cu) on f; its picks are the next MoE block's (*routed).
static int64_t fused_out_router(cu_ctx *c, fo_args &f, bool *routed) {
  *routed = true;
  // FAST_FOACC: the partials summed as integers on arrival (the flag is cnt_fo's fourth int)
  if (cu_fast & FAST_FOACC) {
    f.acc = c->fo_acc;
    f.ovf = c->cnt_fo + 3;
    f.acc_lim = c->foacc_lim;
    c->n_foacc++;
  }
  return cu_fo(c->st, f, c->smem_limit);
}

// One token's slot's cached keys and values (the rows before its position) as an L2 prefetch (FAST_L2KV).
static l2_pf cache_prefetch(const qk_args &q, int window) {
  l2_pf f;
  memset(&f, 0, sizeof f);
  f.kc = q.kc;
  f.vc = q.vc;
  f.slot_stride = q.slot_stride;
  f.kd = q.kd;
  f.pos = q.pos;
  f.seq = q.seq;
  f.window = window;
  return f;
}

// Products of the residual rows RMS-normalised on the way in (normw, eps); jobs and the rest zero.
static mv_args normed_products(const cu_ctx *c, const float *normw, float eps) {
  const int E = (int)c->dm.E;
  mv_args a;
  memset(&a, 0, sizeof a);
  a.x = c->x;
  a.ldx = E;
  a.n = E;
  a.norm = 1;
  a.normw = normw;
  a.eps = eps;
  a.xq = c->xq;
  a.xq_cap = c->xq_bytes;
  return a;
}

// The one-token attention kernels' arguments both decode paths share (attn1.cu, attn2.cu): the
// layer's cache, the step's positions and slots, the heads, the split scratch; q in c->q.
static void one_token_attn(const cu_ctx *c, const cu_blk &b, const qk_args &qa, attn1_args &a1) {
  memset(&a1, 0, sizeof a1);
  a1.q = c->q;
  a1.kc = qa.kc;
  a1.vc = qa.vc;
  a1.slot_stride = qa.slot_stride;
  a1.kd = qa.kd;
  a1.pos = in_pos(c);
  a1.seq = in_seq(c);
  a1.scale = b.attn_scale;
  a1.nh = b.n_head;
  a1.nkv = b.n_head_kv;
  a1.G = b.n_head / b.n_head_kv;
  a1.part = c->part;
  a1.counters = c->cnt_attn;
  a1.max_splits = c->max_splits;
  a1.min_chunk = c->min_chunk;
  a1.out = c->att;
  a1.window = b.window;              // (attn2.cu alone takes these: attn1 runs plain blocks only)
  a1.sinks = b.vec[CU_ATTN_SINKS];
}

// The attention's own Q/K norm, RoPE and cache write (one token, or a decode batch of distinct
// slots, FAST_QKA): the raw projections and what forming Q/K takes.
static void attn_forms_qk(const cu_ctx *c, const cu_blk &b, const qk_args &qa, attn1_args &a1) {
  a1.k = c->k;
  a1.v = c->v;
  a1.qn = qa.qn;
  a1.kn = qa.kn;
  a1.eps = b.eps;
  a1.rope = b.rope;
}

// FAST_ATTX8: a decode batch's attention (attn2.cu) also quantizes its output rows into the x8
// slots where the output product would quantize exactly those rows itself; c->attx8 then tells
// the product they are there (it skips its k_x8_rows launch). Otherwise nothing changes.
static void attn_x8(cu_ctx *c, const cu_blk &b, int ntok, attn1_args &a1) {
  c->attx8.nt = 0;
  a1.x8 = nullptr;
  if (!(cu_fast & FAST_ATTX8) || b.gated) return; // a gated block's rows are gated before the product
  const int qd = b.n_head * b.head_dim;
  const mv_args a = dense_mv(c, gjob(b.t[CU_ATTN_O], c->x, (int)c->dm.E, nullptr), c->att, qd, EPI_ADD);
  if (a.n != qd || a1.out != c->att || a1.ldq != qd || !cu_mv_batch_x8_fits(a, ntok, c->smem_limit)) return;
  a1.x8 = c->xq;
  c->attx8.x = c->att;
  c->attx8.ldx = qd;
  c->attx8.n = qd;
  c->attx8.nt = ntok;
  c->attx8.xq = c->xq;
}

// A gated attention's output times sigmoid(gate) (the gates cu_attn_gate_split kept beside the queries).
static float *gate_rows(const cu_ctx *c, const cu_blk &b) { return c->q + (size_t)c->dm.maxT * b.n_head * b.head_dim; }
static int64_t gate_out(cu_ctx *c, const cu_blk &b, int ntok) {
  return b.gated ? cu_attn_gate_apply(c->st, c->att, gate_rows(c, b), b.n_head * b.head_dim, ntok) : BL_OK;
}

// The decode batches' attention output product; the attention's x8 rows (attn_x8) are for it alone.
static int64_t attn_out_batch(cu_ctx *c, const cu_blk &b, int ntok) {
  const int qd = b.n_head * b.head_dim;
  CU_OK(gate_out(c, b, ntok));
  const int64_t rc = dense_product(c, b.t[CU_ATTN_O], b.vec[CU_ATTN_BO], c->att, qd, ntok, c->x, (int)c->dm.E, EPI_ADD, false);
  c->attx8.nt = 0;
  return rc;
}

// One token's attention by head groups (or a decode batch's, a block column a token), counting
// the launches that take the tensor-core window and those merged by a kernel of their own.
static int64_t attn2(cu_ctx *c, const attn1_args &a1, int hd) {
  bool mma = false, sep = false;
  CU_OK(cu_attn2(c->st, a1, hd, c->acls & 3, &mma, &sep));
  c->n_attmma += mma;
  c->n_a2merge += sep;
  c->n_a2gen += a1.window > 0 || a1.sinks;
  return BL_OK;
}

// moe: the MoE block that follows (or null); *routed: its router ran fused into the output product.
static int64_t attn_block(cu_ctx *c, const cu_blk &b, int ntok, bool big, int n_fa_tiles, const cu_blk *moe, bool *routed) {
  *routed = false;
  const int E = (int)c->dm.E, nh = b.n_head, nkv = b.n_head_kv, hd = b.head_dim, qd = nh * hd, kd = nkv * hd;
  if (big) CU_OK(cu_combine_flush(c->st, &c->pend));
  const size_t layer = (size_t)b.layer * kv_layer_elems(c);
  qk_args qa;
  memset(&qa, 0, sizeof qa);
  qa.q = c->q;
  qa.k = c->k;
  qa.v = c->v;
  qa.ldq = qd;
  qa.ldk = kd;
  qa.ldv = kd;
  qa.qn = b.vec[CU_ATTN_Q_NORM];
  qa.kn = b.vec[CU_ATTN_K_NORM];
  qa.eps = b.eps;
  qa.kc = c->kc + layer;
  qa.vc = c->vc + layer;
  qa.slot_stride = (int64_t)c->p.kv_ctx * c->p.kv_k_dim;
  qa.kd = kd;
  qa.pos = in_pos(c);
  qa.seq = in_seq(c);
  qa.nh = nh;
  qa.nkv = nkv;
  qa.hd = hd;
  qa.rope = b.rope;
  cu_mark(c, S_QKV);
  if (!big) {
    mv_args a = normed_products(c, b.vec[CU_ATTN_NORM], b.eps);
    a.job[0] = b.gated ? job(b.t[CU_ATTN_Q], nullptr, c->att, 2 * qd, EPI_STORE) : job(b.t[CU_ATTN_Q], b.vec[CU_ATTN_BQ], c->q, qd, EPI_STORE);
    a.job[1] = job(b.t[CU_ATTN_K], b.vec[CU_ATTN_BK], c->k, kd, EPI_STORE);
    a.job[2] = job(b.t[CU_ATTN_V], b.vec[CU_ATTN_BV], c->v, kd, EPI_STORE);
    a.njobs = 3;
    a.q8 = 1;
    // one token: the slot's cached keys and values fetched into L2 for the attention (FAST_L2KV)
    l2_pf kv;
    if (ntok == 1 && (cu_fast & FAST_L2KV)) {
      kv = cache_prefetch(qa, b.window);
      a.pf = &kv;
      c->n_l2pf++;
    }
    // the previous MoE block's pending combine (FAST_COMBINE): fused into the rows' quantization
    // where that launch takes it, else launched before anything reads x
    a.comb = &c->pend;
    bool batched = false; // 2..MV_MAX_NT rows: Q, K and V in one launch, each weight row read once (mv_batch.cu)
    CU_OK(cu_mv_batch(c->st, a, ntok, nullptr, 0, c->smem_limit, &batched));
    if (!batched) {
      CU_OK(cu_combine_flush(c->st, &c->pend));
      CU_OK(cu_matvec(c->st, a, ntok, c->smem_limit));
    }
  } else {
    CU_OK(cu_rmsnorm(c->st, c->x, E, nullptr, E, b.vec[CU_ATTN_NORM], b.eps, c->h, E, ntok));
    const gemm_job qkv[3] = {b.gated ? gjob(b.t[CU_ATTN_Q], c->att, 2 * qd, nullptr) : gjob(b.t[CU_ATTN_Q], c->q, qd, b.vec[CU_ATTN_BQ]),
                             gjob(b.t[CU_ATTN_K], c->k, kd, b.vec[CU_ATTN_BK]),
                             gjob(b.t[CU_ATTN_V], c->v, kd, b.vec[CU_ATTN_BV])};
    CU_OK(dense_products(c, qkv, 3, c->h, E, ntok, EPI_STORE, true));
  }
  if (c->pend.ntok) return cu_fail(BL_E_INVAL, "forward: the experts' combine was left pending past the Q/K/V products");
  // a gated block: q's rows (each head's query, then its gate) split into the queries and the gates
  if (b.gated) CU_OK(cu_attn_gate_split(c->st, c->att, c->q, gate_rows(c, b), nh, hd, ntok));
  // sinks, a sliding window, an output bias (b.general, gpt-oss): the head-group kernel (attn2.cu,
  // which takes the window and the sinks) or else the general decode kernel (cu_attn_decode)
  const bool plain = !b.general;
  const bool a2ok = !big && nh % nkv == 0 && cu_attn2_supported(hd, nh / nkv, b.rope.n_rot);
  const bool a2 = ntok == 1 && a2ok;
  if (a2 || (plain && ntok == 1 && !big && nh % nkv == 0 && cu_attn1_supported(hd, nh / nkv, b.rope.n_rot))) {
    // one token: Q/K norm, RoPE, the cache write and attention in one kernel
    cu_mark(c, S_ATTN);
    attn1_args a1;
    one_token_attn(c, b, qa, a1);
    attn_forms_qk(c, b, qa, a1);
    fo_args f;
    const bool fused = moe && fused_router(c, b, *moe, f);
    if (a2) CU_OK(attn2(c, a1, hd));
    else CU_OK(cu_attn1(c->st, a1, hd));
    cu_mark(c, S_O);
    CU_OK(gate_out(c, b, ntok));
    if (fused) return fused_out_router(c, f, routed);
    return dense_product(c, b.t[CU_ATTN_O], b.vec[CU_ATTN_BO], c->att, qd, ntok, c->x, E, EPI_ADD, big);
  }
  if (a2ok && ntok >= 2 && ntok <= MV_MAX_NT && (c->acls & ATTN_QKA)) {
    // a decode batch of distinct slots: as one token's attention, a block column a token
    cu_mark(c, S_ATTN);
    attn1_args a1;
    one_token_attn(c, b, qa, a1);
    attn_forms_qk(c, b, qa, a1);
    a1.ldk = kd;
    a1.ntok = ntok;
    a1.ldq = qd;
    attn_x8(c, b, ntok, a1);
    CU_OK(attn2(c, a1, hd));
    cu_mark(c, S_O);
    return attn_out_batch(c, b, ntok);
  }
  cu_mark(c, S_QK);
  bool qk_tok = false;
  CU_OK(cu_qk_prep(c->st, qa, ntok, &qk_tok));
  if (qk_tok) c->n_qktok++;
  cu_mark(c, S_ATTN);
  if (big && cu_flash_supported(hd)) {
    // (a sliding window and sinks too: gpt-oss's prompts)
    fa_args f;
    memset(&f, 0, sizeof f);
    f.window = b.window;
    f.sinks = b.vec[CU_ATTN_SINKS];
    f.q = c->q;
    f.ldq = qd;
    f.kc = c->kc + layer;
    f.vc = c->vc + layer;
    f.slot_stride = qa.slot_stride;
    f.kd = kd;
    f.pos = in_pos(c);
    f.tiles = in_tiles(c);
    f.nh = nh;
    f.G = nh / nkv;
    f.scale_log2 = b.attn_scale * 1.4426950408889634f;
    f.out = c->att;
    f.ldo = qd;
    bool fa2 = false;
    CU_OK(cu_flash_prefill(c->st, f, hd, n_fa_tiles, &fa2));
    if (fa2) c->n_fa2++;
  } else if (a2ok && ntok <= MV_MAX_NT && c->acls != ATTN_GENERAL) {
    // a decode batch (any slots, Q/K prepared above): the one-token kernel, a block column a token
    attn1_args a1;
    one_token_attn(c, b, qa, a1);
    a1.ntok = ntok;
    a1.ldq = qd;
    a1.prepped = 1;
    attn_x8(c, b, ntok, a1);
    CU_OK(attn2(c, a1, hd));
    cu_mark(c, S_O);
    return attn_out_batch(c, b, ntok);
  } else {
    for (int t0 = 0; t0 < ntok; t0 += MV_MAX_NT) {
      const int nt = ntok - t0 < MV_MAX_NT ? ntok - t0 : MV_MAX_NT;
      attn_args a;
      memset(&a, 0, sizeof a);
      a.q = c->q + (size_t)t0 * qd;
      a.ldq = qd;
      a.kc = c->kc + layer;
      a.vc = c->vc + layer;
      a.slot_stride = qa.slot_stride;
      a.kd = kd;
      a.pos = in_pos(c) + t0;
      a.seq = in_seq(c) + t0;
      a.scale = b.attn_scale;
      a.nh = nh;
      a.nkv = nkv;
      a.hd = hd;
      a.G = nh / nkv;
      a.part = c->part;
      a.counters = c->cnt_attn;
      a.max_splits = c->max_splits;
      a.min_chunk = c->min_chunk;
      a.out = c->att + (size_t)t0 * qd;
      a.ldo = qd;
      a.window = b.window;
      a.sinks = b.vec[CU_ATTN_SINKS];
      CU_OK(cu_attn_decode(c->st, a, nt));
    }
  }
  cu_mark(c, S_O);
  CU_OK(gate_out(c, b, ntok));
  if (moe && ntok == 1 && !big) {
    // one token of a block on the general attention (gpt-oss's sinks and windows): its output
    // product still takes the next MoE block's router
    fo_args f;
    if (fused_router(c, b, *moe, f)) return fused_out_router(c, f, routed);
  }
  return dense_product(c, b.t[CU_ATTN_O], b.vec[CU_ATTN_BO], c->att, qd, ntok, c->x, E, EPI_ADD, big);
}

// k_b's and v_b's per-head products: prompts on the tensor cores from an f16 copy of the slabs (the
// dense products' c->w16, where it is sized and the type takes it), decode rows on the stored blocks.
static int64_t head_products(cu_ctx *c, const head_rows_args &a, int ntok, bool big) {
  if (big && cu_head_mma_supported(a.w, a.nh, c->w16_elems)) return cu_head_mma(c->st, a, ntok, c->w16, c->w16_elems);
  return cu_head_rows(c->st, a, ntok, c->smem_limit);
}

// Multi-head latent attention (DeepSeek V2/V3, Kimi K2) in its absorbed form, as ffi/cpu/mla.c forms
// it: the norm; q (or q_a, normalised, then q_b) and kv_a; the latent normalised, the key part rotated
// and the cache rows written (mla.cu); then MLA_CHUNK tokens at a time the latent queries (each
// head's nope part times k_b's head, its rotated part after), the attention over the cache rows and
// each head's value out of its latent (v_b); the output product added to x. Borrowed buffers: q the
// query heads, k the [latent | rope] rows, v q_a's rows, att the value heads.
static int64_t mla_block(cu_ctx *c, const cu_blk &b, int ntok, bool big, int n_fa) {
  const int E = (int)c->dm.E, nh = b.n_head, kvl = b.kvl, nr = b.rope.n_rot, dk = kvl + nr, qh = b.nope + nr, ql = b.q_lora;
  cu_mark(c, S_QKV);
  CU_OK(cu_rmsnorm(c->st, c->x, E, nullptr, E, b.vec[CU_MLA_NORM], b.eps, c->h, E, ntok));
  const gemm_job in[2] = {ql ? gjob(b.t[CU_MLA_Q_A], c->v, ql, nullptr) : gjob(b.t[CU_MLA_Q], c->q, nh * qh, nullptr), gjob(b.t[CU_MLA_KV_A], c->k, dk, nullptr)};
  CU_OK(dense_products(c, in, 2, c->h, E, ntok, EPI_STORE, big));
  if (ql) {
    CU_OK(cu_rmsnorm(c->st, c->v, ql, nullptr, ql, b.vec[CU_MLA_Q_A_NORM], b.mla_eps, c->v, ql, ntok));
    CU_OK(dense_product(c, b.t[CU_MLA_Q_B], nullptr, c->v, ql, ntok, c->q, nh * qh, EPI_STORE, big));
  }
  CU_OK(cu_rmsnorm(c->st, c->k, dk, nullptr, kvl, b.vec[CU_MLA_KV_A_NORM], b.mla_eps, c->k, dk, ntok));
  mla_args a;
  memset(&a, 0, sizeof a);
  a.kv = c->k;
  a.ldkv = dk;
  a.q = c->q;
  a.ldq = nh * qh;
  a.ql = c->mla_ql;
  a.lat = c->mla_lat;
  a.part = c->mla_part;
  a.kc = c->kc + (size_t)b.layer * kv_layer_elems(c);
  a.slot_stride = (int64_t)c->p.kv_ctx * c->p.kv_k_dim;
  a.pos = in_pos(c);
  a.seq = in_seq(c);
  a.nh = nh;
  a.kvl = kvl;
  a.nr = nr;
  a.nope = b.nope;
  a.scale = b.attn_scale;
  a.rope = b.rope;
  CU_OK(cu_mla_cache(c->st, a, ntok));
  cu_mark(c, S_ATTN);
  // a chunk of tokens t0 .. t0 + nt: the latent queries, the attention (tiles g0 .. g1 of the prefill
  // tiles on the tensor cores, or else the general kernel), each head's value
  const bool mma = big && n_fa > 0 && cu_mla_mma_supported(kvl, dk);
  const int4 *ht = host_tiles(c);
  for (int t0 = 0, g0 = 0; t0 < ntok;) {
    int nt = ntok - t0 < MLA_CHUNK ? ntok - t0 : MLA_CHUNK, g1 = g0;
    if (mma) { // whole tiles (each at most 64 tokens)
      while (g1 < n_fa && ht[g1].x + ht[g1].y - t0 <= MLA_CHUNK) g1++;
      nt = ht[g1 - 1].x + ht[g1 - 1].y - t0;
    }
    mla_args ch = a;
    ch.q = c->q + (size_t)t0 * nh * qh;
    ch.pos = a.pos + t0;
    ch.seq = a.seq + t0;
    const head_rows_args kb = {b.t[CU_MLA_K_B], ch.q, nh * qh, qh, c->mla_ql, nh * dk, dk, nh};
    CU_OK(head_products(c, kb, nt, big));
    CU_OK(cu_mla_qrope(c->st, ch, nt));
    if (mma) CU_OK(cu_mla_prefill(c->st, a, in_tiles(c) + g0, g1 - g0, t0));
    else CU_OK(cu_mla_attn(c->st, ch, nt));
    const head_rows_args vb = {b.t[CU_MLA_V_B], c->mla_lat, nh * kvl, kvl, c->att + (size_t)t0 * nh * b.vd, nh * b.vd, b.vd, nh};
    CU_OK(head_products(c, vb, nt, big));
    t0 += nt;
    g0 = g1;
  }
  cu_mark(c, S_O);
  return dense_product(c, b.t[CU_MLA_O], nullptr, c->att, nh * b.vd, ntok, c->x, E, EPI_ADD, big);
}

// The arguments both decode-batch expert paths take (moe_batch_args, moe_dec_args; the rest
// zero): the weights, the normalised rows in h, the picks, act rows of gate.ne1, the residual.
template <class A>
static void expert_rows(A &m, const cu_ctx *c, const dmat &gate, const dmat &up, const dmat &down, const int32_t *sel, const float *selw, int k) {
  const int E = (int)c->dm.E;
  memset(&m, 0, sizeof m);
  m.gate = gate;
  m.up = up;
  m.down = down;
  m.h = c->h;
  m.ldh = E;
  m.sel = sel;
  m.selw = selw;
  m.k = k;
  m.act = c->act;
  m.ldact = gate.ne1;
  m.x = c->x;
  m.ldx = E;
}

// The grouped decode-batch experts' arguments for MoE block b (moe_batch.cu; picks in c->sel).
static moe_batch_args batch_experts(const cu_ctx *c, const cu_blk &b, const dmat &gate, const dmat &up, const dmat &down) {
  moe_batch_args mb;
  expert_rows(mb, c, gate, up, down, c->sel, c->selw, b.n_used);
  mb.n_expert = b.n_expert;
  mb.pair_tok = c->pair_tok;
  mb.pair_of = c->pair_of;
  mb.tiles = c->tiles;
  mb.n_tiles = c->n_tiles;
  mb.max_tiles = c->max_tiles;
  mb.ypair = c->ypair;
  mb.ldy = (int)c->dm.E;
  mb.q8 = 1;
  mb.hq = c->xq;
  mb.hq_cap = c->xq_bytes;
  const int bit = b.layer < MB_LAYER_BITS ? b.layer : MB_LAYER_BITS - 1;
  mb.no_mma = (c->mb_nomma >> bit) & 1;
  mb.tile_stat = c->mb_tiles_d + bit;
  return mb;
}

// Pairs an expert (on average) from which prompt batches group them in tiles of 64 rather than 32
// (bl_cuda_options.expert_bn64; 20 by default). The tiles are bound by decoding the
// weights, not by the products: with tiles of 32 an expert of 33-40 pairs was decoded twice. 64
// from 16 pairs (512-token batches, ~32 pairs an expert) measured pp512 9,389 -> 11,152 (H200).
static int expert_bn64_min() { return cu_opt->expert_bn64 > 0 ? (int)cu_opt->expert_bn64 : 20; }

// A MoE block's expert options into either expert kernels' arguments (fmoe_args, moe_dec_args):
// gpt-oss's gate, up and down biases (null where absent) and its activation.
template <class A>
static void expert_options(A &m, const cu_blk &b) {
  const dmat *bias[3] = {&b.t[CU_MOE_BGATE], &b.t[CU_MOE_BUP], &b.t[CU_MOE_BDOWN]};
  const float **dst[3] = {&m.bg, &m.bu, &m.bd};
  int *ld[3] = {&m.ldbg, &m.ldbu, &m.ldbd};
  for (int k = 0; k < 3; k++) {
    *dst[k] = reinterpret_cast<const float *>(bias[k]->d);
    *ld[k] = (int)(bias[k]->nb1 / 4);
  }
  m.act_kind = b.act;
  m.alpha = b.alpha;
  m.limit = b.limit;
}

void cu_expert_options(fmoe_args &fm, const cu_blk &b) { expert_options(fm, b); }

// The one-token expert kernels' arguments (fastdec.cu) both one-token paths share: the weights,
// the normalised row in h, the act scratch, the residual; the picks are each path's own.
static fmoe_args one_token_experts(const cu_ctx *c, const cu_blk &b, const dmat &gate, const dmat &up, const dmat &down, int k) {
  fmoe_args fm;
  memset(&fm, 0, sizeof fm);
  fm.gate = gate;
  fm.up = up;
  fm.down = down;
  fm.k = k;
  fm.norm_topk = b.norm_topk;
  fm.w_scale = b.w_scale;
  fm.h = c->h;
  fm.act = c->act;
  fm.x = c->x;
  fm.q8 = 1;
  return fm;
}

// One token's router on a block with a router bias (gpt-oss), whose fused routers do not take it:
// the normalised row into h, the router's product (its bias in the epilogue) by cu_matvec, then the
// picks into c->sel / c->selw (measured tg128 207.1 -> 210.3 t/s against k_router on gpt-oss-20b).
bool cu_one_token_router_fits(const cu_ctx *c, const cu_blk &b) {
  const dmat &rw = b.t[CU_MOE_GATE_INP];
  const bool picks = b.gating == BL_GATING_SIGMOID ? cu_route_sigmoid_fits(b.n_expert, b.n_used, b.n_group) : cu_route_pick_fits(b.n_expert, b.n_used);
  return b.kind == CU_BLOCK_MOE && rw.d && rw.type == T_F32 && rw.ne0 == (int)c->dm.E && rw.ne1 == b.n_expert && picks;
}

// MoE block b's picks of ntok tokens from the router's logits in c->router into c->sel / c->selw:
// the sigmoid router's (router/sigmoid.cu), else softmax then top-k (mv_batch.cu's k_route_pick).
static int64_t block_picks(cu_ctx *c, const cu_blk &b, int ntok) {
  if (b.gating != BL_GATING_SIGMOID) return cu_route_pick(c->st, c->router, ntok, b.n_expert, b.n_used, b.norm_topk, b.w_scale, c->sel, c->selw);
  route_sig_args a;
  a.logits = c->router;
  a.corr = b.vec[CU_MOE_RCORR];
  a.n_expert = b.n_expert;
  a.k = b.n_used;
  a.n_group = b.n_group;
  a.n_group_used = b.n_group_used;
  a.norm_topk = b.norm_topk;
  a.w_scale = b.w_scale;
  a.sel = c->sel;
  a.selw = c->selw;
  return cu_route_sigmoid(c->st, a, ntok);
}

int64_t cu_one_token_router(cu_ctx *c, const cu_blk &b) {
  const int E = (int)c->dm.E;
  CU_OK(cu_rmsnorm(c->st, c->x, E, nullptr, E, b.vec[CU_MOE_NORM], b.eps, c->h, E, 1));
  mv_args a;
  memset(&a, 0, sizeof a);
  a.x = c->h;
  a.ldx = E;
  a.n = E;
  a.job[0] = job(b.t[CU_MOE_GATE_INP], b.vec[CU_MOE_RBIAS], c->router, b.n_expert, EPI_STORE);
  a.njobs = 1;
  CU_OK(cu_matvec(c->st, a, 1, c->smem_limit));
  return block_picks(c, b, 1);
}

int64_t cu_ffn_block(cu_ctx *c, const cu_blk &b, int ntok, bool big, bool routed) {
  const bool moe = b.kind == CU_BLOCK_MOE;
  if (routed) {
    // the picks were selected by the fused attention output + router (froute.cu)
    fmoe_args fm;
    if (!moe || ntok != 1 || big || !card_experts(c, b, fm)) return cu_fail(BL_E_INVAL, "experts: the fused router's picks without a one-token MoE step");
    if (b.general) cu_expert_options(fm, b); // gpt-oss's biases and clamped activation
    cu_mark(c, S_EXPERTS);
    bool done = false, flat = false, act8 = false, tma = false;
    CU_OK(cu_fmoe(c->st, fm, c->smem_limit, &done, &flat, &act8, &tma));
    if (!done) return cu_fail(BL_E_UNSUPPORTED, "experts: the one-token kernels refused a planned shape");
    c->n_down1 += flat;
    c->n_act8 += act8;
    c->n_tmagu += tma;
    return BL_OK;
  }
  const int E = (int)c->dm.E;
  const int rg = moe ? CU_MOE_GATE : 1;
  const dmat &gate = b.t[rg], &up = b.t[rg + 1], &down = b.t[rg + 2];
  const int ff = gate.ne1, K = moe ? b.n_used : 1;
  const int32_t *sel = c->dense_sel;
  const float *selw = !moe && c->ffn_w ? c->ffn_w : c->dense_w; // (a gated shared expert's decode rows: its gate)
  if (ntok == 1 && !big && b.general && moe && cu_one_token_router_fits(c, b)) {
    // one token of a block with biases or the clamped activation (gpt-oss): the picks made first
    // (cu_one_token_router), then the one-token expert kernels (fastdec.cu) on those picks, the
    // biases and the activation in their epilogues
    fmoe_args fm = one_token_experts(c, b, gate, up, down, K);
    fm.sel = c->sel;
    fm.selw = c->selw;
    fm.n_expert = b.n_expert;
    expert_options(fm, b);
    if (cu_fmoe_fits(fm, c->smem_limit)) {
      cu_mark(c, S_ROUTER);
      CU_OK(cu_one_token_router(c, b));
      cu_mark(c, S_EXPERTS);
      bool done = false, flat = false;
      CU_OK(cu_fmoe(c->st, fm, c->smem_limit, &done, &flat));
      if (!done) return cu_fail(BL_E_UNSUPPORTED, "experts: the one-token kernels refused a planned shape");
      c->n_down1 += flat;
      return BL_OK;
    }
  }
  if (ntok == 1 && !big && !b.general) {
    // one token: the router as a plain product (its normalised row kept in h), the expert kernels
    // selecting for themselves from the logits (fastdec.cu)
    fmoe_args fm = one_token_experts(c, b, gate, up, down, K);
    fm.logits = moe ? c->router : nullptr;
    fm.n_expert = moe ? b.n_expert : 1;
    if (!moe && c->ffn_w) { // a gated shared expert: its one pick (0) weighed by the gate
      fm.sel = c->dense_sel;
      fm.selw = c->ffn_w;
    }
    if (cu_fmoe_fits(fm, c->smem_limit)) {
      cu_mark(c, S_ROUTER);
      bool done = true;
      if (moe) {
        fmv_args f;
        memset(&f, 0, sizeof f);
        f.job[0].m = b.t[CU_MOE_GATE_INP];
        f.job[0].y = c->router;
        f.job[0].epi = EPI_STORE;
        f.njobs = 1;
        f.x = c->x;
        f.n = E;
        f.norm = 1;
        f.normw = b.vec[CU_MOE_NORM];
        f.eps = b.eps;
        f.h = c->h;
        CU_OK(cu_fmv(c->st, f, c->smem_limit, c->sm_count, &done));
      } else if (!b.shared_in) {
        CU_OK(cu_rmsnorm(c->st, c->x, E, nullptr, E, b.vec[0], b.eps, c->h, E, ntok));
      }
      if (done) {
        cu_mark(c, S_EXPERTS);
        bool flat = false;
        CU_OK(cu_fmoe(c->st, fm, c->smem_limit, &done, &flat));
        if (!done) return cu_fail(BL_E_UNSUPPORTED, "experts: the one-token kernels refused a planned shape");
        c->n_down1 += flat;
        return BL_OK;
      }
    }
  }
  // prompt batches on the tensor cores (gpt-oss's biases and clamped activation in their epilogues);
  // decode batches of a block on the general kernels (b.general) take moe_dec.cu's
  const bool tc = big && cu_gemm_supported(gate.type, gate.ne0) && cu_gemm_supported(down.type, down.ne0);
  // decode batches' experts grouped by expert (moe_batch.cu; not in the batch-invariant mode)
  const moe_batch_args mb = batch_experts(c, b, gate, up, down);
  const bool grouped_ok = !tc && !b.general && (cu_fast & FAST_MOE) && moe && ntok >= 2 && ntok <= MV_MAX_NT && cu_moe_batch_fits(mb, ntok, c->smem_limit);
  bool grouped = false; // the picks' kernel grouped the pairs too
  bool hq_ready = false; // and quantized the experts' rows (moe_batch_args.hq)
  cu_mark(c, S_ROUTER);
  bool picked = false;
  const dmat &rw = b.t[CU_MOE_GATE_INP];
  if (moe && ntok >= 2 && ntok <= MV_MAX_NT && rw.d && rw.type == T_F32 && rw.ne0 == E && rw.ne1 == b.n_expert && cu_route_pick_fits(b.n_expert, K)) {
    // a decode batch: the router's product with each row read once (its normalised rows kept in
    // h for the experts), then each token's picks (mv_batch.cu)
    mv_args a = normed_products(c, b.vec[CU_MOE_NORM], b.eps);
    a.job[0] = job(rw, b.vec[CU_MOE_RBIAS], c->router, b.n_expert, EPI_STORE);
    a.njobs = 1;
    CU_OK(cu_mv_batch(c->st, a, ntok, c->h, E, c->smem_limit, &picked));
    if (picked && grouped_ok && cu_moe_batch_pick_fits(mb, ntok, c->smem_limit)) {
      // the picks and the grouping by expert in one launch
      CU_OK(cu_moe_batch_pick(c->st, mb, c->router, b.norm_topk, b.w_scale, ntok, c->smem_limit, &hq_ready));
      grouped = true;
      sel = c->sel;
      selw = c->selw;
    } else if (picked) {
      CU_OK(block_picks(c, b, ntok));
      sel = c->sel;
      selw = c->selw;
    }
  }
  if (moe && !picked && ntok == 1 && b.general && cu_one_token_router_fits(c, b)) {
    CU_OK(cu_one_token_router(c, b));
    picked = true;
    sel = c->sel;
    selw = c->selw;
  }
  if (moe && !picked) {
    router_args r;
    memset(&r, 0, sizeof r);
    r.x = c->x;
    r.ldx = E;
    r.n = E;
    r.ntok = ntok;
    r.normw = b.vec[CU_MOE_NORM];
    r.eps = b.eps;
    r.w = reinterpret_cast<const float *>(b.t[CU_MOE_GATE_INP].d);
    r.ldw = (int)(b.t[CU_MOE_GATE_INP].nb1 / 4);
    r.n_expert = b.n_expert;
    r.k = K;
    r.h = c->h;
    r.ldh = E;
    r.logits = c->router;
    r.sel = c->sel;
    r.selw = c->selw;
    r.counters = c->cnt_router;
    r.max_groups = c->router_groups;
    r.norm_topk = b.norm_topk;
    r.w_scale = b.w_scale;
    r.bias = b.vec[CU_MOE_RBIAS];
    // a prompt batch (FAST_ROUTEBIG): rows normalised once, a tiled product, then the picks (route_big.cu)
    if (big && !r.bias && (cu_fast & FAST_ROUTEBIG) && rw.type == T_F32 && rw.ne0 == E && rw.ne1 == b.n_expert && K <= ROUTER_MAX_K &&
        cu_route_big_fits(r, c->smem_limit)) {
      CU_OK(cu_route_big(c->st, r, c->smem_limit));
      c->n_routebig++;
    } else {
      CU_OK(cu_router(c->st, r, c->smem_limit));
    }
    // the sigmoid router's picks replace the softmax picks from the logits both routers wrote
    if (b.gating == BL_GATING_SIGMOID) CU_OK(block_picks(c, b, ntok));
    sel = c->sel;
    selw = c->selw;
  } else if (!moe && !b.shared_in) {
    CU_OK(cu_rmsnorm(c->st, c->x, E, nullptr, E, b.vec[0], b.eps, c->h, E, ntok));
  }
  // an uploaded host block (hybrid.cu): its picks counted, and in sparse steps its used experts copied
  // now (prompt batches: or the lightest of them left to the CPU, cpu_share.cu)
  if (moe && c->hy->up_cur >= 0) CU_OK(cu_hybrid_picked(c, sel, selw, ntok, K, tc));
  cu_mark(c, S_EXPERTS);
  if (!tc) {
    // a decode batch: the pairs grouped by expert, each weight row read once for all its pairs (moe_batch.cu)
    if (grouped_ok) {
      // FAST_COMBINE: the combine left pending for the next reader of x (the next layer's Q/K/V rows fuse it)
      moe_batch_args md = mb;
      if (cu_fast & FAST_COMBINE) md.defer = &c->pend;
      bool dng = false, gumma = false, dnmma = false;
      CU_OK(cu_moe_batch(c->st, md, ntok, c->smem_limit, grouped, hq_ready, &dng, &gumma, &dnmma));
      c->n_mb_nomma += md.no_mma && (cu_fast & (FAST_GUMMA | FAST_DNMMA)) != 0;
      c->n_dng += dng;
      c->n_gumma += gumma;
      c->n_dnmma += dnmma;
      return BL_OK;
    }
    moe_dec_args m;
    expert_rows(m, c, gate, up, down, sel, selw, K);
    if (moe) expert_options(m, b);
    return cu_moe_dec(c->st, m, ntok, c->smem_limit);
  }
  gemm_args g;
  memset(&g, 0, sizeof g);
  g.job[0] = gjob(gate, c->act, ff, nullptr);
  g.njobs = 1;
  g.w2 = up;
  g.b = c->h;
  g.ldb = E;
  g.mode = EPI_SWIGLU;
  g.act = b.act;
  g.alpha = b.alpha;
  g.limit = b.limit;
  const dmat &bgate = b.t[CU_MOE_BGATE], &bup = b.t[CU_MOE_BUP], &bdown = b.t[CU_MOE_BDOWN];
  if (moe && bgate.d) {
    g.job[0].bias = reinterpret_cast<const float *>(bgate.d);
    g.job[0].bias_e = bgate.nb1 / 4;
  }
  if (moe && bup.d) {
    g.bias2 = reinterpret_cast<const float *>(bup.d);
    g.bias2_e = bup.nb1 / 4;
  }
  if (!moe) {
    g.ntok = ntok;
    CU_OK(cu_gemm(c->st, g, 64, (ntok + 63) / 64));
    return dense_product(c, down, nullptr, c->act, ff, ntok, c->x, E, EPI_ADD, true);
  }
  const int pairs = ntok * K;
  const int bn = pairs / (b.n_expert > 0 ? b.n_expert : 1) >= expert_bn64_min() ? 64 : 32;
  sort_args s;
  s.sel = c->sel;
  s.n_pairs = pairs;
  s.k = K;
  s.n_expert = b.n_expert;
  s.bn = bn;
  s.pair_tok = c->pair_tok;
  s.pair_of = c->pair_of;
  s.tiles = c->tiles;
  s.n_tiles = c->n_tiles;
  CU_OK(cu_moe_sort(c->st, s));
  const int max_tiles = (pairs + bn - 1) / bn + b.n_expert;
  if (max_tiles > c->max_tiles) return cu_fail(BL_E_INVAL, "experts: %d tiles, the context holds %d", max_tiles, c->max_tiles);
  g.b_rows = c->pair_tok;
  g.tiles = c->tiles;
  g.n_tiles = c->n_tiles;
  // FAST_GEMMB16: the normalised rows converted to halves once, gate/up's SwiGLU rows written as
  // halves, both copied into the tiles by cp.async (the tiles' own conversions give the same halves)
  const bool b16 = (cu_fast & FAST_GEMMB16) && c->act16 && (size_t)ntok * E <= c->b16_elems && (size_t)pairs * ff <= c->act16_elems && E % 8 == 0 &&
                   ff % 8 == 0;
  if (b16) {
    CU_OK(cu_f16_rows(c->st, c->h, E, E, ntok, c->b16, E));
    g.b16 = c->b16;
    g.c16 = c->act16;
    c->n_gemmb16++;
  }
  CU_OK(cu_gemm(c->st, g, bn, max_tiles));
  gemm_args d;
  memset(&d, 0, sizeof d);
  d.job[0] = gjob(down, c->ypair, E, nullptr);
  if (moe && bdown.d) {
    d.job[0].bias = reinterpret_cast<const float *>(bdown.d);
    d.job[0].bias_e = bdown.nb1 / 4;
  }
  d.njobs = 1;
  d.b = c->act;
  d.b16 = b16 ? c->act16 : nullptr;
  d.ldb = ff;
  d.tiles = c->tiles;
  d.n_tiles = c->n_tiles;
  d.mode = EPI_STORE;
  CU_OK(cu_gemm(c->st, d, bn, max_tiles));
  CU_OK(cu_moe_combine(c->st, c->ypair, E, c->pair_of, c->selw, K, c->x, E, E, ntok));
  return cu_cpu_share_add(c);
}

static int64_t output_block(cu_ctx *c, const cu_blk &b, int nout, int topk) {
  if (nout <= 0) return BL_OK;
  const int E = (int)c->dm.E, V = (int)c->dm.V;
  cu_mark(c, S_OUTPUT);
  CU_OK(cu_rmsnorm(c->st, c->x, E, in_out(c), E, b.vec[0], b.eps, c->h, E, nout));
  CU_OK(dense_product(c, b.t[1], nullptr, c->h, E, nout, c->logits, V, EPI_STORE, nout > MV_MAX_NT));
  cu_mark(c, S_TOPK);
  if (topk > 0) CU_OK(cu_topk(c->st, c->logits, V, V, nout, topk, c->candv, c->candi, c->topv, c->topi));
  return BL_OK;
}

// A shared expert (cu_blk.shared_in): the dense FFN path on the MoE block's normalised input
// (c->hsh in place of h for its launches), its sum added to x.
// Products of rows normalised on the way in (normed_products' arguments): the batched launch for 2..8
// rows, else the one-token kernels.
static int64_t normed_launch(cu_ctx *c, const mv_args &m, int ntok) {
  bool batched = false;
  CU_OK(cu_mv_batch(c->st, m, ntok, nullptr, 0, c->smem_limit, &batched));
  return batched ? BL_OK : cu_matvec(c->st, m, ntok, c->smem_limit);
}

// A scalar gate (Qwen's, vec[CU_FFN_GATE_INP]; its weights a token in shg_w, made with hsh by the MoE
// block before): decode steps weigh the FFN's rows by it (c->ffn_w: the one-token and decode-batch
// kernels take a pick's weight); prompt batches put the FFN's sum into shg (x there for its launches,
// its pending combine flushed), then x += gate * shg.
static int64_t shared_block(cu_ctx *c, const cu_blk &b, int ntok, bool big) {
  float *h = c->h, *x = c->x;
  const bool gated = b.vec[CU_FFN_GATE_INP] != nullptr;
  const int E = (int)c->dm.E;
  c->h = c->hsh;
  int64_t s = BL_OK;
  if (gated && !big) c->ffn_w = c->shg_w;
  if (gated && big) {
    const cudaError_t e = cudaMemsetAsync(c->shg, 0, (size_t)ntok * E * sizeof(float), c->st);
    if (e != cudaSuccess) s = cu_fail_cuda(e, "clearing the shared expert's rows");
    c->x = c->shg;
  }
  if (s == BL_OK) s = cu_ffn_block(c, b, ntok, big, false);
  if (s == BL_OK && gated) s = cu_combine_flush(c->st, &c->pend);
  c->h = h;
  c->x = x;
  c->ffn_w = nullptr;
  if (s != BL_OK || !gated || !big) return s;
  return cu_gated_add(c->st, c->shg_w, c->shg, c->x, E, ntok);
}

// The gated delta-net (Qwen3-Next, Qwen3.5 / 3.6), as ffi/cpu/deltanet.c forms it: the norm; the
// in-projections (qkv and z, or older files' fused qkvz split after; beta and alpha, or ba); the conv
// over each sequence's previous inputs and its state; the delta rule over each sequence's slot state;
// the gated output norm; out added to x (deltanet/deltanet.cu). The batch's sequences are the host's (seq_runs).
static int64_t dn_block(cu_ctx *c, const cu_blk &b, int ntok, bool big, const cu_blk *moe, bool *routed) {
  *routed = false;
  const int E = (int)c->dm.E, nk = b.dn_nk, nv = b.dn_nv, hk = b.dn_hk, hv = b.dn_hv;
  const int qk = nk * hk, vd = nv * hv, C = 2 * qk + vd;
  const size_t T = (size_t)c->dm.maxT;
  const bool fused_ba = b.t[CU_DN_BA].d != nullptr, qkvz = b.t[CU_DN_QKVZ].d != nullptr;
  float *alpha = c->dn_ba + T * nv;
  int ldb = nv; // beta's and alpha's rows
  // beta and alpha side by side on the card (the plan lays a block's tensors out in role order): one
  // product of 2 nv rows, each token's betas then its alphas
  const dmat &mb = b.t[CU_DN_BETA], &ma = b.t[CU_DN_ALPHA];
  const bool adj = !fused_ba && mb.type == ma.type && mb.ne0 == ma.ne0 && mb.nb1 == ma.nb1 && mb.ne1 == nv && ma.ne1 == nv &&
                   mb.d + (size_t)mb.nb1 * nv == ma.d;
  cu_mark(c, S_QKV);
  if (!big) {
    // decode steps: the rows normalised on the way into the products, three a launch (alpha apart)
    mv_args m = normed_products(c, b.vec[CU_DN_NORM], b.eps);
    int nj = 0;
    if (qkvz) m.job[nj++] = job(b.t[CU_DN_QKVZ], nullptr, c->dn_cv, C + vd, EPI_STORE);
    else {
      m.job[nj++] = job(b.t[CU_DN_QKV], nullptr, c->dn_raw, C, EPI_STORE);
      m.job[nj++] = job(b.t[CU_DN_GATE], nullptr, c->dn_z, vd, EPI_STORE);
    }
    dmat both = mb;
    both.ne1 = 2 * nv;
    both.nb2 = both.nb1 * both.ne1;
    if (fused_ba) m.job[nj++] = job(b.t[CU_DN_BA], nullptr, c->dn_ba, 2 * nv, EPI_STORE);
    else if (adj) {
      m.job[nj++] = job(both, nullptr, c->dn_ba, 2 * nv, EPI_STORE);
      alpha = c->dn_ba + nv;
      ldb = 2 * nv;
    } else m.job[nj++] = job(mb, nullptr, c->dn_ba, nv, EPI_STORE);
    m.njobs = nj;
    m.q8 = 1;
    CU_OK(normed_launch(c, m, ntok));
    if (!fused_ba && !adj) {
      m.job[0] = job(b.t[CU_DN_ALPHA], nullptr, alpha, nv, EPI_STORE);
      m.njobs = 1;
      CU_OK(normed_launch(c, m, ntok));
    }
  } else {
    CU_OK(cu_rmsnorm(c->st, c->x, E, nullptr, E, b.vec[CU_DN_NORM], b.eps, c->h, E, ntok));
    const gemm_job ba = fused_ba ? gjob(b.t[CU_DN_BA], c->dn_ba, 2 * nv, nullptr) : gjob(b.t[CU_DN_BETA], c->dn_ba, nv, nullptr);
    if (qkvz) { // older Qwen3-Next files: the fused rows into cv's room, split into raw and z
      const gemm_job in[2] = {gjob(b.t[CU_DN_QKVZ], c->dn_cv, C + vd, nullptr), ba};
      CU_OK(dense_products(c, in, 2, c->h, E, ntok, EPI_STORE, big));
    } else {
      const gemm_job in[3] = {gjob(b.t[CU_DN_QKV], c->dn_raw, C, nullptr), gjob(b.t[CU_DN_GATE], c->dn_z, vd, nullptr), ba};
      CU_OK(dense_products(c, in, 3, c->h, E, ntok, EPI_STORE, big));
    }
    if (!fused_ba) CU_OK(dense_product(c, b.t[CU_DN_ALPHA], nullptr, c->h, E, ntok, alpha, nv, EPI_STORE, big));
  }
  dn_args a;
  memset(&a, 0, sizeof a);
  a.raw = c->dn_raw;
  a.cv = c->dn_cv;
  a.z = c->dn_z;
  if (fused_ba) a.ba = c->dn_ba;
  else {
    a.beta = c->dn_ba;
    a.alpha = alpha;
    a.ldb = ldb;
  }
  a.seq_conv = !big;
  a.convw = b.vec[CU_DN_CONV];
  a.dt = b.vec[CU_DN_DT];
  a.a = b.vec[CU_DN_A];
  a.normw = b.vec[CU_DN_ONORM];
  a.o = c->dn_o;
  a.rs = c->rs;
  a.slot_floats = (int64_t)rs_slot_floats(c);
  a.layer_off = (int64_t)b.layer * c->p.rs_dim;
  a.pos = in_pos(c);
  a.runs = in_runs(c);
  a.tok = in_tokrun(c);
  a.ntok = ntok;
  // prompt batches (never captured) take the step's runs; decode steps every entry (a graph's grid is
  // fixed; the host fills those past the runs with none)
  a.n_runs = big ? c->n_runs : ntok;
  a.C = C;
  a.K = b.dn_K;
  a.nk = nk;
  a.nv = nv;
  a.hk = hk;
  a.hv = hv;
  a.grouped = b.dn_grouped;
  a.eps = b.dn_eps;
  if (qkvz) CU_OK(cu_dn_split_qkvz(c->st, a, c->dn_cv));
  CU_OK(cu_dn_conv(c->st, a));
  cu_mark(c, S_ATTN);
  CU_OK(cu_dn_rule(c->st, a));
  cu_mark(c, S_O);
  fo_args f;
  // one token: out's product takes the next MoE block's router (froute.cu), as an attention's does
  if (moe && ntok == 1 && !big && fused_router(c, b.t[CU_DN_OUT], c->dn_o, vd, nullptr, *moe, f)) return fused_out_router(c, f, routed);
  return dense_product(c, b.t[CU_DN_OUT], nullptr, c->dn_o, vd, ntok, c->x, E, EPI_ADD, big);
}

int64_t cu_enqueue(cu_ctx *c, int ntok, int nout, int topk, int n_fa_tiles) {
  const bool big = ntok >= c->prefill_min;
  const std::vector<cu_blk> &bl = c->w->blocks;
  bool routed = false; // the next MoE block's router ran fused into the attention output
  // a MoE block's combine left pending (FAST_COMBINE): a function of this enqueue alone (graph
  // capture); an attention block's Q/K/V fuse it or launch it first, every other block launches it
  // before it starts
  c->pend.ntok = 0;
  c->attx8.nt = 0; // the attention's int8 rows for the output product: never carried over from a failed step
  const bool mb_count = ntok >= 2 && ntok <= MV_MAX_NT;
  if (mb_count) CU_TRY(cudaMemsetAsync(c->mb_tiles_d, 0, MB_LAYER_BITS * sizeof(int32_t), c->st), "clearing the experts' counts");
  for (size_t i = 0; i < bl.size(); i++) {
    const cu_blk &b = bl[i];
    if (b.kind != CU_BLOCK_ATTN) CU_OK(cu_combine_flush(c->st, &c->pend));
    switch (b.kind) {
      case CU_BLOCK_EMBED: cu_mark(c, S_EMBED); CU_OK(cu_rows_f32(c->st, b.t[0], in_tok(c), ntok, c->x, (int)c->dm.E)); break;
      case CU_BLOCK_ATTN: {
        // (a block whose experts stay in host memory takes its router apart)
        // the MoE block the fusion pass put after it (a block whose experts stay in host memory takes its router apart)
        const cu_blk *next = b.moe_next >= 0 ? &bl[(size_t)b.moe_next] : nullptr;
        const cu_blk *moe = next && (!next->host || cu_host_split(c, *next, ntok, big)) ? next : nullptr;
        CU_OK(attn_block(c, b, ntok, big, n_fa_tiles, moe, &routed));
        break;
      }
      case CU_BLOCK_MOE:
      case CU_BLOCK_FFN:
        // a shared expert after this MoE block reads the block's normalised input: kept apart, since
        // the MoE paths' own copy (h) is not made by every one of them
        if (b.shared_next) {
          const float *g = bl[i + 1].vec[CU_FFN_GATE_INP]; // a gated shared expert's gate made with its input
          if (g) CU_OK(cu_rmsnorm_gate(c->st, c->x, b.vec[CU_MOE_NORM], b.eps, g, c->hsh, c->shg_w, (int)c->dm.E, ntok));
          else CU_OK(cu_rmsnorm(c->st, c->x, (int)c->dm.E, nullptr, (int)c->dm.E, b.vec[CU_MOE_NORM], b.eps, c->hsh, (int)c->dm.E, ntok));
        }
        if (b.shared_in) CU_OK(shared_block(c, b, ntok, big));
        else if (b.host) CU_OK(cu_host_block(c, b, ntok, big, routed));
        else CU_OK(cu_ffn_block(c, b, ntok, big, routed));
        routed = false;
        break;
      case CU_BLOCK_MLA: CU_OK(mla_block(c, b, ntok, big, n_fa_tiles)); break;
      case CU_BLOCK_DN: {
        const cu_blk *next = b.moe_next >= 0 ? &bl[(size_t)b.moe_next] : nullptr;
        CU_OK(dn_block(c, b, ntok, big, next && (!next->host || cu_host_split(c, *next, ntok, big)) ? next : nullptr, &routed));
        break;
      }
      case CU_BLOCK_OUTPUT: CU_OK(output_block(c, b, nout, topk)); break;
      default: return cu_fail(BL_E_INVAL, "forward: block %zu has unknown kind %d", i, b.kind);
    }
  }
  CU_OK(cu_combine_flush(c->st, &c->pend)); // a program ending with a MoE block
  if (mb_count) CU_TRY(cudaMemcpyAsync(c->mb_tiles_h, c->mb_tiles_d, MB_LAYER_BITS * sizeof(int32_t), cudaMemcpyDeviceToHost, c->st), "reading the experts' counts");
  cu_mark(c, S_END);
  return BL_OK;
}
