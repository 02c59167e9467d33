// bloomery CUDA library: the program's weights on the card (validated, each distinct tensor
// uploaded once: matrices as stored, norm and bias vectors as f32) and the contexts made from
// them (work buffers sized from the program's largest blocks, the f16 KV cache, pinned staging),
// with the KV cache operations (clear, copy between slots; save and load are kvmove.cu).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unordered_map>

#include "ctx.h"

static float h2f_host(uint16_t h) {
  const uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
  uint32_t bits;
  if (e == 0) {
    if (m == 0) bits = s;
    else { // subnormal: normalise
      int ee = -1;
      uint32_t mm = m;
      do {
        ee++;
        mm <<= 1;
      } while ((mm & 1024) == 0);
      bits = s | ((uint32_t)(127 - 15 - ee) << 23) | ((mm & 1023) << 13);
    }
  } else if (e == 31) bits = s | 0x7f800000u | (m << 13);
  else bits = s | ((e + 127 - 15) << 23) | (m << 13);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static bool vector_role(int kind, int role) {
  switch (kind) {
    case CU_BLOCK_ATTN:
      return role == CU_ATTN_NORM || role == CU_ATTN_Q_NORM || role == CU_ATTN_K_NORM || (role >= CU_ATTN_BQ && role <= CU_ATTN_SINKS);
    case CU_BLOCK_MOE: return role == CU_MOE_NORM || role == CU_MOE_RBIAS || role == CU_MOE_RCORR; // the experts' biases are F32 rows (matrices)
    case CU_BLOCK_MLA: return role == CU_MLA_NORM || role == CU_MLA_Q_A_NORM || role == CU_MLA_KV_A_NORM;
    case CU_BLOCK_DN: return role == CU_DN_NORM || role == CU_DN_CONV || role == CU_DN_DT || role == CU_DN_A || role == CU_DN_ONORM;
    case CU_BLOCK_FFN: return role == CU_FFN_NORM || role == CU_FFN_GATE_INP;
    case CU_BLOCK_OUTPUT: return role == 0;
    default: return false;
  }
}

static const char *kind_name(int64_t k) {
  switch (k) {
    case CU_BLOCK_EMBED: return "embed";
    case CU_BLOCK_ATTN: return "attention";
    case CU_BLOCK_MOE: return "experts";
    case CU_BLOCK_FFN: return "ffn";
    case CU_BLOCK_OUTPUT: return "output";
    case CU_BLOCK_MLA: return "latent attention";
    case CU_BLOCK_DN: return "delta-net";
    default: return "block";
  }
}

struct plan_item {
  uint64_t host;
  size_t bytes, off;
  bool vec;
  int type;
  int64_t n;
};

struct cu_plan {
  std::vector<plan_item> items;
  std::unordered_map<uint64_t, size_t> index; // host address (| 1 for vectors) -> item
  size_t total = 0;
  cu_dims dm = {};
};


static int64_t add_tensor(cu_plan &pl, const bl_tensor &t, bool vec, int64_t bi, int64_t role, int64_t kind, bool place = true) {
  if (vec) {
    if (t.type != T_F32 && t.type != T_F16 && t.type != T_BF16)
      return cu_fail(BL_E_UNSUPPORTED, "block %lld (%s) tensor %lld: vector of type %s (F32, F16 or BF16 expected)", (long long)bi,
                     kind_name(kind), (long long)role, cu_type_name((int)t.type));
  } else {
    cu_type_geom g;
    if (!cu_type_geom_of((int)t.type, &g))
      return cu_fail(BL_E_UNSUPPORTED, "block %lld (%s) tensor %lld: %s weights are not implemented on the card yet", (long long)bi,
                     kind_name(kind), (long long)role, cu_type_name((int)t.type));
    if (t.ne[0] <= 0 || t.ne[0] % g.be != 0 || t.nb1 != (t.ne[0] / g.be) * g.bb)
      return cu_fail(BL_E_UNSUPPORTED, "block %lld (%s) tensor %lld: %s rows of %lld elements (%lld bytes) are not whole blocks",
                     (long long)bi, kind_name(kind), (long long)role, g.name, (long long)t.ne[0], (long long)t.nb1);
    if (t.ne[2] > 1 && t.nb2 < t.nb1 * t.ne[1])
      return cu_fail(BL_E_INVAL, "block %lld (%s) tensor %lld: slab stride %lld is smaller than a slab", (long long)bi, kind_name(kind),
                     (long long)role, (long long)t.nb2);
  }
  if (!place) return BL_OK; // validated only: host experts (hybrid.cu)
  const uint64_t key = t.data | (vec ? 1u : 0u);
  if (pl.index.count(key)) return BL_OK;
  plan_item it;
  it.host = t.data;
  it.vec = vec;
  it.type = (int)t.type;
  // a vector role's elements: all of them (the delta-net's conv weights are [taps, channels], contiguous)
  it.n = t.ne[0] * (t.ne[1] > 1 ? t.ne[1] : 1) * (t.ne[2] > 1 ? t.ne[2] : 1) * (t.ne[3] > 1 ? t.ne[3] : 1);
  it.bytes = vec ? (size_t)it.n * 4 : (t.ne[2] > 1 ? (size_t)t.nb2 * t.ne[2] : (size_t)t.nb1 * t.ne[1]);
  it.off = pl.total;
  pl.total += cu_align256(it.bytes);
  pl.index[key] = pl.items.size();
  pl.items.push_back(it);
  return BL_OK;
}

// The bytes of a matrix (all its slabs).
static size_t host_bytes(const bl_tensor &t) { return t.ne[2] > 1 ? (size_t)t.nb2 * t.ne[2] : (size_t)t.nb1 * t.ne[1]; }
static bool is_expert_role(int r) { return r >= CU_MOE_GATE && r <= CU_MOE_DOWN; }

// Validates the program's fused blocks and lays their tensors out.
static int64_t make_plan(const bl_program *prog, const std::vector<cu_fblock> &bl, cu_plan &pl) {
  if (!prog || bl.empty()) return cu_fail(BL_E_INVAL, "cuda: empty program");
  if (prog->n_embd <= 0 || prog->n_vocab <= 0) return cu_fail(BL_E_INVAL, "cuda: program without sizes");
  if (prog->n_embd % 4) return cu_fail(BL_E_UNSUPPORTED, "cuda: n_embd %lld is not a multiple of 4", (long long)prog->n_embd);
  cu_dims &d = pl.dm;
  d.E = prog->n_embd;
  d.V = prog->n_vocab;
  d.qd = d.kd = d.hd = d.ff = 4;
  d.X = d.K = 1;
  d.max_nh = d.max_nkv = 1;
  const int64_t E = d.E;
  for (int64_t i = 0; i < (int64_t)bl.size(); i++) {
    const cu_fblock &b = bl[(size_t)i];
    const bl_tensor *t = b.t;
    switch (b.kind) {
      case CU_BLOCK_EMBED:
        CU_OK(cu_plan_need(t[0], i, "token_embd"));
        CU_OK(cu_plan_shape(t[0], i, "token_embd", E, d.V));
        break;
      case CU_BLOCK_ATTN: {
        const int64_t nh = b.n_head, nkv = b.n_head_kv, hd = b.head_dim;
        if (nh <= 0 || nkv <= 0 || hd <= 0 || nh % nkv || hd % 4 || b.n_rot > hd || b.n_rot % 2)
          return cu_fail(BL_E_INVAL, "block %lld: bad heads (n_head %lld, n_head_kv %lld, head_dim %lld, n_rot %lld)", (long long)i,
                         (long long)nh, (long long)nkv, (long long)hd, (long long)b.n_rot);
        if (!cu_attn_decode_supported((int)hd, (int)(nh / nkv)))
          return cu_fail(BL_E_UNSUPPORTED, "block %lld: attention with head size %lld and %lld query heads per KV head has no CUDA kernel",
                         (long long)i, (long long)hd, (long long)(nh / nkv));
        if (b.layer < 0 || b.layer > 65535) return cu_fail(BL_E_INVAL, "block %lld: KV layer %lld out of range", (long long)i, (long long)b.layer);
        if (d.kv_width && nkv * hd != d.kv_width) return cu_fail(BL_E_UNSUPPORTED, "block %lld: KV width %lld differs from other layers' %lld", (long long)i, (long long)(nkv * hd), (long long)d.kv_width);
        d.kv_width = nkv * hd;
        if (b.layer + 1 > d.kv_layers) d.kv_layers = b.layer + 1;
        const char *nm[4] = {"attn_q", "attn_k", "attn_v", "attn_output"};
        for (int r = 1; r <= 4; r++) CU_OK(cu_plan_need(t[r], i, nm[r - 1]));
        // a gated attention's q rows: each head's query, then its output gate
        CU_OK(cu_plan_shape(t[1], i, "attn_q", E, (b.gate ? 2 : 1) * nh * hd));
        CU_OK(cu_plan_shape(t[2], i, "attn_k", E, nkv * hd));
        CU_OK(cu_plan_shape(t[3], i, "attn_v", E, nkv * hd));
        CU_OK(cu_plan_shape(t[4], i, "attn_output", nh * hd, E));
        for (int r = CU_ATTN_Q_NORM; r <= CU_ATTN_K_NORM; r++)
          if (t[r].data && t[r].ne[0] != hd) return cu_fail(BL_E_INVAL, "block %lld: q/k norm of %lld elements", (long long)i, (long long)t[r].ne[0]);
        for (int r = CU_ATTN_BQ; r <= CU_ATTN_BV; r++)
          if (t[r].data && t[r].ne[0] != (r == CU_ATTN_BQ ? nh * hd : nkv * hd)) return cu_fail(BL_E_INVAL, "block %lld: bias size", (long long)i);
        if (t[CU_ATTN_BO].data && t[CU_ATTN_BO].ne[0] != E) return cu_fail(BL_E_INVAL, "block %lld: output bias of %lld elements", (long long)i, (long long)t[CU_ATTN_BO].ne[0]);
        if (t[CU_ATTN_SINKS].data && t[CU_ATTN_SINKS].ne[0] != nh) return cu_fail(BL_E_INVAL, "block %lld: %lld sinks for %lld heads", (long long)i, (long long)t[CU_ATTN_SINKS].ne[0], (long long)nh);
        // (a gated block's q rows: the product of twice the width, then the queries and the gates in c->q)
        const int64_t qw = (b.gate ? 2 : 1) * nh * hd;
        d.qd = d.qd > qw ? d.qd : qw;
        d.kd = d.kd > nkv * hd ? d.kd : nkv * hd;
        d.hd = d.hd > hd ? d.hd : hd;
        if (nh > d.max_nh) d.max_nh = nh;
        if (nkv > d.max_nkv) d.max_nkv = nkv;
        break;
      }
      case CU_BLOCK_MLA: CU_OK(cu_plan_mla(b, i, d)); break;
      case CU_BLOCK_DN: CU_OK(cu_plan_dn(b, i, d)); break;
      case CU_BLOCK_MOE:
      case CU_BLOCK_FFN: {
        const bool moe = b.kind == CU_BLOCK_MOE;
        const int rg = moe ? CU_MOE_GATE : 1;
        const bl_tensor &g = t[rg], &u = t[rg + 1], &dn = t[rg + 2];
        CU_OK(cu_plan_need(g, i, "ffn_gate"));
        CU_OK(cu_plan_need(u, i, "ffn_up"));
        CU_OK(cu_plan_need(dn, i, "ffn_down"));
        const int64_t ff = g.ne[1];
        CU_OK(cu_plan_shape(g, i, "ffn_gate", E, ff));
        CU_OK(cu_plan_shape(u, i, "ffn_up", E, ff));
        CU_OK(cu_plan_shape(dn, i, "ffn_down", ff, E));
        if (g.type != u.type) return cu_fail(BL_E_UNSUPPORTED, "block %lld: gate and up weights of different types", (long long)i);
        if (ff % 4) return cu_fail(BL_E_UNSUPPORTED, "block %lld: hidden size %lld", (long long)i, (long long)ff);
        int64_t X = 1, K = 1;
        if (moe) {
          X = b.n_expert;
          K = b.n_expert_used;
          if (X <= 0 || K <= 0 || K > X || K > ROUTER_MAX_K || X > 1024)
            return cu_fail(BL_E_UNSUPPORTED, "block %lld: %lld experts, %lld used", (long long)i, (long long)X, (long long)K);
          if (g.ne[2] != X || u.ne[2] != X || dn.ne[2] != X) return cu_fail(BL_E_INVAL, "block %lld: expert count of the tensors is not %lld", (long long)i, (long long)X);
          CU_OK(cu_plan_need(t[CU_MOE_GATE_INP], i, "ffn_gate_inp"));
          if (t[CU_MOE_GATE_INP].type != T_F32) return cu_fail(BL_E_UNSUPPORTED, "block %lld: router weights of type %s (F32 expected)", (long long)i, cu_type_name((int)t[CU_MOE_GATE_INP].type));
          CU_OK(cu_plan_shape(t[CU_MOE_GATE_INP], i, "ffn_gate_inp", E, X));
          if (t[CU_MOE_RBIAS].data && t[CU_MOE_RBIAS].ne[0] != X) return cu_fail(BL_E_INVAL, "block %lld: router bias of %lld elements", (long long)i, (long long)t[CU_MOE_RBIAS].ne[0]);
          if (t[CU_MOE_RCORR].data && t[CU_MOE_RCORR].ne[0] != X)
            return cu_fail(BL_E_INVAL, "block %lld: router selection bias of %lld elements", (long long)i, (long long)t[CU_MOE_RCORR].ne[0]);
          const char *bn[3] = {"ffn_gate_exps bias", "ffn_up_exps bias", "ffn_down_exps bias"};
          for (int k = 0; k < 3; k++) {
            const bl_tensor &bt = t[CU_MOE_BGATE + k];
            if (!bt.data) continue;
            if (bt.type != T_F32) return cu_fail(BL_E_UNSUPPORTED, "block %lld: %s of type %s (F32 expected)", (long long)i, bn[k], cu_type_name((int)bt.type));
            CU_OK(cu_plan_shape(bt, i, bn[k], k == 2 ? E : ff, X));
          }
        }
        if (b.shared) {
          const cu_fblock *m = i > 0 ? &bl[(size_t)i - 1] : nullptr;
          if (!m || m->kind != CU_BLOCK_MOE) return cu_fail(BL_E_INVAL, "block %lld: a shared expert not right after a MoE block", (long long)i);
          d.n_shared++;
          if (t[CU_FFN_GATE_INP].data) {
            if (t[CU_FFN_GATE_INP].ne[0] != E) return cu_fail(BL_E_INVAL, "block %lld: a shared expert's gate of %lld elements", (long long)i, (long long)t[CU_FFN_GATE_INP].ne[0]);
            d.n_shared_gate++;
          }
        }
        d.ff = d.ff > ff ? d.ff : ff;
        d.X = d.X > X ? d.X : X;
        d.K = d.K > K ? d.K : K;
        break;
      }
      case CU_BLOCK_OUTPUT:
        CU_OK(cu_plan_need(t[1], i, "output"));
        CU_OK(cu_plan_shape(t[1], i, "output", E, d.V));
        break;
      default: return cu_fail(BL_E_INVAL, "block %lld has unknown kind %lld", (long long)i, (long long)b.kind);
    }
    const bool host = b.kind == CU_BLOCK_MOE && b.host_experts;
    if (host) {
      int64_t lb = 0;
      for (int r = CU_MOE_GATE; r <= CU_MOE_DOWN; r++) lb += (int64_t)cu_align256(host_bytes(b.t[r]));
      if (lb > d.host_layer_bytes) d.host_layer_bytes = lb;
      d.n_host++;
    }
    for (int r = 0; r < CU_BLOCK_TENSORS; r++)
      if (b.t[r].data) CU_OK(add_tensor(pl, b.t[r], vector_role((int)b.kind, r), i, r, b.kind, !(host && is_expert_role(r))));
  }
  return BL_OK;
}

struct buf_req {
  void **ptr;
  size_t bytes;
};

// The work buffers of a context (pointers filled by alloc_buffers); also used for sizing.
static std::vector<buf_req> buffer_list(cu_ctx *c) {
  const cu_dims &d = c->dm;
  // lead slots for sparse steps' first uploads (hybrid.cu): bl_cuda_options.hybrid_lead (0..HYB_LEAD_MAX)
  const int64_t lead = c->o.hybrid_lead;
  c->hy->n_lead = d.n_host > 0 && d.host_layer_bytes > 0 ? (lead >= 0 ? (int)std::min<int64_t>(lead, HYB_LEAD_MAX) : (int)(HYB_LEAD_BYTES / d.host_layer_bytes)) : 0;
  if (c->hy->n_lead < 0) c->hy->n_lead = 0;
  if (c->hy->n_lead > HYB_LEAD_MAX) c->hy->n_lead = HYB_LEAD_MAX;
  if (c->hy->n_lead > d.n_host - 1) c->hy->n_lead = d.n_host > 1 ? (int)d.n_host - 1 : 0; // a step leads at most its uploads but one (hybrid.cu)
  const size_t T = (size_t)d.maxT, F = sizeof(float), I = sizeof(int32_t);
  const size_t pairs = T * d.K;
  c->max_tiles = (int)((pairs + 31) / 32 + d.X + 1);
  c->router_groups = (int)T;
  // split attention's partials: a token's heads x slices x (hd + 4) (attn2.cu's stride; attn.cu takes less)
  const size_t part = (size_t)MV_MAX_NT * (c->max_splits > CU_A2_MAX_SPLITS ? c->max_splits : CU_A2_MAX_SPLITS) * ((size_t)d.qd + 4 * d.max_nh);
  const size_t kv = (size_t)c->p.kv_layers * kv_layer_elems(c) * sizeof(__half);
  c->fa_cap = (int64_t)T + (int64_t)T / 64 + 2;
  c->rpart_ld = (int)((d.X + 3) & ~(int64_t)3);
  const size_t rpart_rows = (size_t)((d.E + FO_BLOCK_ROWS - 1) / FO_BLOCK_ROWS);
  // MV_MAX_NT rows of the batched int8 products' widths (the residual, attention's output)
  c->xq_bytes = cu_x8_scratch_bytes(d.E > d.qd ? d.E : d.qd);
  // one token's K SwiGLU rows in dot8.cuh's int8 layout (q, scales, sums, sums per 16), 16-byte multiple
  const size_t na = (size_t)d.K * d.ff;
  c->act8_bytes = ((na + na / 32 * 8 + na / 16 * 4) + 15) / 16 * 16;
  // FAST_GEMM16's copies where batches of GEMM16_MIN_TOK rows can come: the largest dense launch's
  // weights (Q/K/V together, the attention output, a dense down) and its activation rows
  const int64_t wide = d.qd + 2 * d.kd > d.ff ? d.qd + 2 * d.kd : d.ff;
  const int64_t bw = d.E > d.qd ? (d.E > d.ff ? d.E : d.ff) : (d.qd > d.ff ? d.qd : d.ff);
  c->w16_elems = d.maxT >= GEMM16_MIN_TOK ? (size_t)(d.E * wide) : 0;
  c->b16_elems = d.maxT >= GEMM16_MIN_TOK ? (size_t)(T * bw) : 0;
  c->act16_elems = d.maxT >= GEMM16_MIN_TOK ? pairs * (size_t)d.ff : 0;
  std::vector<buf_req> v = {
      {(void **)&c->x, T * d.E * F}, {(void **)&c->h, T * d.E * F}, {(void **)&c->q, T * d.qd * F}, {(void **)&c->k, T * d.kd * F},
      {(void **)&c->v, T * d.kd * F}, {(void **)&c->att, T * d.qd * F}, {(void **)&c->router, T * d.X * F},
      {(void **)&c->sel, pairs * I}, {(void **)&c->selw, pairs * F}, {(void **)&c->act, pairs * d.ff * F},
      {(void **)&c->ypair, pairs * d.E * F}, {(void **)&c->pair_tok, pairs * I}, {(void **)&c->pair_of, pairs * I},
      {(void **)&c->tiles, (size_t)c->max_tiles * sizeof(int4)}, {(void **)&c->n_tiles, 64}, {(void **)&c->part, part * F},
      {(void **)&c->cnt_attn, (size_t)MV_MAX_NT * d.max_nh * I}, {(void **)&c->cnt_router, (size_t)c->router_groups * I},
      {(void **)&c->dense_sel, T * I}, {(void **)&c->dense_w, T * F}, {(void **)&c->xq, c->xq_bytes}, {(void **)&c->act8, c->act8_bytes},
      {(void **)&c->rpart, rpart_rows * c->rpart_ld * F}, {(void **)&c->cnt_fo, 64},
      {(void **)&c->fo_acc, (size_t)d.X * FO_ACC_STRIDE * sizeof(unsigned long long)},
      {(void **)&c->candv, T * TOPK_CHUNKS * TOPK_MAX * F}, {(void **)&c->candi, T * TOPK_CHUNKS * TOPK_MAX * I},
      {(void **)&c->topv, T * TOPK_MAX * F}, {(void **)&c->topi, T * TOPK_MAX * I},
      {(void **)&c->d_in, in_bytes_all(c)},
      {(void **)&c->kc, kv}, {(void **)&c->vc, kv_planes(c) > 1 ? kv : 0},
      {(void **)&c->mla_ql, (size_t)MLA_CHUNK * d.mla_q * F}, {(void **)&c->mla_lat, (size_t)MLA_CHUNK * d.mla_lat * F},
      {(void **)&c->mla_part, d.mla_q ? (size_t)MV_MAX_NT * d.mla_nh * CU_MLA_SPLITS * (d.mla_kvl + 2) * F : 0},
      {(void **)&c->w16, c->w16_elems * sizeof(__half)}, {(void **)&c->b16, c->b16_elems * sizeof(__half)},
      {(void **)&c->act16, c->act16_elems * sizeof(__half)},
      {(void **)&c->mb_tiles_d, MB_LAYER_BITS * I},
      {(void **)&c->hsh, d.n_shared ? T * d.E * F : 0},
      {(void **)&c->shg, d.n_shared_gate ? T * d.E * F : 0}, {(void **)&c->shg_w, d.n_shared_gate ? T * F : 0},
      {(void **)&c->dn_raw, T * d.dn_c * F}, {(void **)&c->dn_cv, T * d.dn_cz * F}, {(void **)&c->dn_z, T * d.dn_vd * F},
      {(void **)&c->dn_ba, T * 2 * d.dn_nv * F}, {(void **)&c->dn_o, T * d.dn_vd * F},
      {(void **)&c->rs, d.n_dn ? (size_t)c->p.kv_slots * rs_slot_floats(c) * F : 0},
  };
  // the staging slots: two in turn, then the lead slots (unused ones take no memory)
  for (int s = 0; s < HYB_SLOTS; s++) v.push_back({&c->hy->stage[s], s < 2 + c->hy->n_lead ? (size_t)d.host_layer_bytes : 0});
  return v;
}

static size_t ctx_bytes(cu_ctx *c) {
  size_t s = 0;
  for (const buf_req &b : buffer_list(c)) s += cu_align256(b.bytes);
  return s + (size_t)MV_MAX_NT * c->dm.V * sizeof(float); // first logits rows
}

// The context's sizes from the weights' dimensions and the parameters; checks they agree.
static int64_t ctx_dims(const cu_dims &wd, const bl_ctx_params *p, cu_dims &d) {
  if (!p) return cu_fail(BL_E_INVAL, "cuda: null context parameters");
  if (p->n_embd != wd.E || p->n_vocab != wd.V) return cu_fail(BL_E_INVAL, "cuda: program and context disagree on sizes");
  if (p->max_tokens <= 0 || p->kv_slots <= 0 || p->kv_ctx <= 0 || p->kv_layers < wd.kv_layers || p->kv_k_dim <= 0 ||
      (p->kv_v_dim != p->kv_k_dim && !(p->kv_v_dim == 0 && wd.mla_q > 0)))
    return cu_fail(BL_E_INVAL, "cuda: invalid context parameters (tokens %lld, KV %lld x %lld x %lld, width %lld; the program has %lld KV layers)",
                   (long long)p->max_tokens, (long long)p->kv_layers, (long long)p->kv_slots, (long long)p->kv_ctx, (long long)p->kv_k_dim,
                   (long long)wd.kv_layers);
  if (wd.n_dn && (p->rs_layers < wd.dn_layers || p->rs_dim < wd.dn_rs_need))
    return cu_fail(BL_E_INVAL, "cuda: a recurrent state of %lld layers x %lld floats a slot, the program's delta-net takes %lld x %lld", (long long)p->rs_layers,
                   (long long)p->rs_dim, (long long)wd.dn_layers, (long long)wd.dn_rs_need);
  if (wd.kv_width && wd.kv_width != p->kv_k_dim)
    return cu_fail(BL_E_INVAL, "cuda: KV width %lld, the program's attention has %lld", (long long)p->kv_k_dim, (long long)wd.kv_width);
  if (p->max_tokens > (1 << 20) || p->kv_ctx > (1 << 24)) return cu_fail(BL_E_INVAL, "cuda: context parameters out of range");
  d = wd;
  d.maxT = p->max_tokens;
  return BL_OK;
}

// The program's fused blocks (fuse.cu), or a refusal naming the op.
static int64_t fuse_program(const bl_program *prog, std::vector<cu_fblock> &out) {
  std::string why;
  if (!cu_fuse(prog, out, &why, nullptr)) return cu_fail(BL_E_UNSUPPORTED, "cuda: %s", why.c_str());
  return BL_OK;
}

int64_t cu_check_plan(const bl_program *prog, const std::vector<cu_fblock> &blocks) {
  cu_plan pl;
  return make_plan(prog, blocks, pl);
}

extern "C" int64_t bl_cuda_plan_bytes(const bl_ctx_params *p, const bl_program *prog, const bl_cuda_options *o, int64_t *weight_bytes, int64_t *context_bytes) {
  std::vector<cu_fblock> bl;
  CU_OK(fuse_program(prog, bl));
  cu_plan pl;
  CU_OK(make_plan(prog, bl, pl));
  cu_ctx c = cu_ctx();
  cu_hybrid hy{};
  c.hy = &hy;
  c.o = o ? *o : cu_options_default();
  CU_OK(ctx_dims(pl.dm, p, c.dm));
  c.p = *p;
  c.max_splits = 32;
  if (weight_bytes) *weight_bytes = (int64_t)pl.total;
  if (context_bytes) *context_bytes = (int64_t)ctx_bytes(&c);
  return BL_OK;
}

extern "C" int64_t bl_cuda_ctx_free(uint64_t h) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  if (!c) return BL_OK;
  (void)cudaSetDevice(c->dev);
  if (c->st) (void)cudaStreamSynchronize(c->st);
  cu_hybrid_free(c);
  cu_profile_print(c);
  cu_trace_dump();
  cu_drop_graphs(c);
  for (const buf_req &b : buffer_list(c))
    if (*b.ptr) (void)cudaFree(*b.ptr);
  if (c->logits) (void)cudaFree(c->logits);
  if (c->h_in) (void)cudaFreeHost(c->h_in);
  if (c->h_out) (void)cudaFreeHost(c->h_out);
  if (c->mb_tiles_h) (void)cudaFreeHost(c->mb_tiles_h);
  cu_kv_stage_free(c);
  cu_rs_free(c);
  delete c->hy;
  if (c->st) (void)cudaStreamDestroy(c->st);
  (void)cudaGetLastError();
  delete c;
  return BL_OK;
}

static void rope_of(const cu_fblock &b, rope_params &r) {
  r.n_rot = (int)b.n_rot;
  r.mode = (int)b.rope_type;
  const float base = (float)b.rope_base;
  r.freq_scale = b.rope_freq_scale > 0 ? (float)b.rope_freq_scale : 1.0f;
  r.ext_factor = (float)b.yarn_ext_factor;
  const float attn_factor = b.yarn_attn_factor > 0 ? (float)b.yarn_attn_factor : 1.0f;
  r.corr_lo = r.corr_hi = 0;
  if (r.ext_factor != 0 && b.yarn_orig_ctx > 0 && r.n_rot > 0) {
    auto corr = [&](float turns) { return r.n_rot * logf((float)b.yarn_orig_ctx / (turns * 2.0f * (float)M_PI)) / (2.0f * logf(base)); };
    const float lo = floorf(corr((float)b.yarn_beta_fast)), hi = ceilf(corr((float)b.yarn_beta_slow));
    r.corr_lo = lo > 0 ? lo : 0;
    r.corr_hi = hi < r.n_rot - 1 ? hi : (float)(r.n_rot - 1);
  }
  r.theta_scale = r.n_rot > 0 ? powf(base, -2.0f / r.n_rot) : 1.0f;
  r.mscale = attn_factor;
  if (r.ext_factor != 0) r.mscale *= 1.0f + 0.1f * logf(1.0f / r.freq_scale);
}

static int64_t upload(cu_weights *c, const cu_plan &pl) {
  uint8_t *base = static_cast<uint8_t *>(c->arena);
  std::vector<float> tmp;
  for (const plan_item &it : pl.items) {
    const void *src = reinterpret_cast<const void *>(it.host);
    if (!it.vec) {
      CU_TRY(cudaMemcpy(base + it.off, src, it.bytes, cudaMemcpyHostToDevice), "uploading weights");
      continue;
    }
    tmp.resize((size_t)it.n);
    const uint16_t *s16 = static_cast<const uint16_t *>(src);
    for (int64_t i = 0; i < it.n; i++) {
      if (it.type == T_F32) memcpy(&tmp[i], static_cast<const float *>(src) + i, 4);
      else if (it.type == T_F16) tmp[i] = h2f_host(s16[i]);
      else {
        const uint32_t bits = (uint32_t)s16[i] << 16;
        memcpy(&tmp[i], &bits, 4);
      }
    }
    CU_TRY(cudaMemcpy(base + it.off, tmp.data(), it.bytes, cudaMemcpyHostToDevice), "uploading norm weights");
  }
  return BL_OK;
}

// A matrix's geometry from its tensor, its bytes at d (null: not on the card).
static dmat dmat_of(const bl_tensor &t, const uint8_t *d) {
  dmat m;
  m.d = d;
  m.type = (int32_t)t.type;
  m.ne0 = (int32_t)t.ne[0];
  m.ne1 = (int32_t)t.ne[1];
  m.ne2 = (int32_t)(t.ne[2] > 0 ? t.ne[2] : 1);
  m.nb1 = t.nb1;
  m.nb2 = t.ne[2] > 1 ? t.nb2 : t.nb1 * t.ne[1];
  return m;
}

static int64_t build_blocks(cu_weights *c, const cu_plan &pl) {
  const std::vector<cu_fblock> &bl = c->fused;
  uint8_t *base = static_cast<uint8_t *>(c->arena);
  const int64_t n = (int64_t)bl.size();
  c->blocks.resize((size_t)n);
  c->host_blocks.clear();
  for (int64_t i = 0; i < n; i++) {
    const cu_fblock &b = bl[(size_t)i];
    cu_blk &o = c->blocks[(size_t)i];
    memset(static_cast<void *>(&o), 0, sizeof o);
    o.kind = (int)b.kind;
    o.layer = (int)b.layer;
    o.n_head = (int)b.n_head;
    o.n_head_kv = (int)b.n_head_kv;
    o.head_dim = (int)b.head_dim;
    o.n_expert = (int)b.n_expert;
    o.n_used = (int)b.n_expert_used;
    o.norm_topk = (int)b.norm_topk;
    o.eps = (float)b.eps;
    o.attn_scale = b.attn_scale > 0 ? (float)b.attn_scale : (b.head_dim > 0 ? 1.0f / sqrtf((float)b.head_dim) : 1.0f);
    o.w_scale = (float)b.expert_weights_scale;
    o.window = (int)b.window;
    o.act = (int)b.act;
    o.alpha = (float)b.alpha;
    o.limit = (float)b.limit;
    o.gating = (int)b.gating;
    o.n_group = (int)b.n_group;
    o.n_group_used = (int)b.n_group_used;
    o.shared_in = b.shared != 0;
    o.kvl = (int)b.kv_lora;
    o.nope = (int)b.nope;
    o.vd = (int)b.v_dim;
    o.q_lora = (int)b.q_lora;
    o.mla_eps = (float)b.mla_eps;
    o.gated = b.kind == CU_BLOCK_ATTN && b.gate != 0;
    o.dn_nk = (int)b.n_k_heads;
    o.dn_nv = (int)b.n_v_heads;
    o.dn_hk = (int)b.head_k;
    o.dn_hv = (int)b.head_v;
    o.dn_K = (int)b.conv_kernel;
    o.dn_grouped = b.head_map == BL_DN_GROUPED;
    o.dn_eps = (float)b.dn_eps;
    o.shared_next = b.kind == CU_BLOCK_MOE && i + 1 < n && bl[(size_t)i + 1].shared;
    // the sigmoid router's picks are router/sigmoid.cu's alone: no kernel that selects for itself takes the block
    o.general = b.window != 0 || b.act != BL_ACT_SWIGLU || (b.kind == CU_BLOCK_ATTN && (b.t[CU_ATTN_SINKS].data || b.t[CU_ATTN_BO].data)) ||
                (b.kind == CU_BLOCK_MOE && (b.t[CU_MOE_RBIAS].data || b.t[CU_MOE_BGATE].data || b.t[CU_MOE_BUP].data || b.t[CU_MOE_BDOWN].data ||
                                            b.gating == BL_GATING_SIGMOID));
    rope_of(b, o.rope);
    o.src = &bl[(size_t)i];
    // the neighbours the kernels fuse across (decided here, once: the attention's or delta-net's output
    // product takes the next MoE block's router)
    o.moe_next = i + 1 < n && bl[(size_t)i + 1].kind == CU_BLOCK_MOE && (b.kind == CU_BLOCK_ATTN || b.kind == CU_BLOCK_DN) ? (int)(i + 1) : -1;
    if (b.kind == CU_BLOCK_MOE && b.host_experts) {
      o.host = 1;
      o.host_j = (int)c->host_blocks.size();
      c->host_blocks.push_back((int)i);
    }
    for (int r = 0; r < CU_BLOCK_TENSORS; r++) {
      const bl_tensor &t = b.t[r];
      if (!t.data) continue;
      const bool vec = vector_role((int)b.kind, r);
      if (b.kind == CU_BLOCK_MOE && b.host_experts && is_expert_role(r)) {
        // stays in host memory: the geometry, no device copy (hybrid.cu)
        o.t[r] = dmat_of(t, nullptr);
        o.hx[r - CU_MOE_GATE] = reinterpret_cast<const uint8_t *>(t.data);
        o.hbytes[r - CU_MOE_GATE] = host_bytes(t);
        continue;
      }
      const plan_item &it = pl.items[pl.index.at(t.data | (vec ? 1u : 0u))];
      if (vec) {
        o.vec[r] = reinterpret_cast<const float *>(base + it.off);
      } else {
        o.t[r] = dmat_of(t, base + it.off);
      }
    }
  }
  return BL_OK;
}

thread_local int cu_pdl = 0;
int cu_carveout = -1;
thread_local const bl_cuda_options *cu_opt = &cu_options_default();

// Every option's default (ffi/bloomery.h bl_cuda_options; src/engine/cuda-options.ts has the same).
const bl_cuda_options &cu_options_default() {
  static const bl_cuda_options d = [] {
    bl_cuda_options o = {};
    o.fast = -1;
    o.graphs = 1;
    o.pdl = 1;
    o.carveout = -1;
    o.mma_pairs = -1;
    o.mv_batch = 1;
    o.moe_batch = 1;
    o.a2_mma_class = -1;
    o.host_pin = 1;
    o.hybrid_lead = -1;
    o.upload_min = -1;
    o.host_share = -1;
    o.sparse_upload = -1;
    o.card_share = -1;
    o.mailbox = 1;
    o.pull = 1;
    o.spin = 1;
    o.cpu_tokens = -1;
    return o;
  }();
  return d;
}

int cu_sms = 1;
int cu_smem_sm = 0;

static int inited_optin = -1, inited_carveout = -2, device_major = 0;

int64_t cu_init_kernels(int smem_optin) {
  int dev = 0;
  CU_TRY(cudaGetDevice(&dev), "reading the device");
  CU_TRY(cudaDeviceGetAttribute(&device_major, cudaDevAttrComputeCapabilityMajor, dev), "reading the device");
  cu_tma_ok = device_major >= 9;
  CU_TRY(cudaDeviceGetAttribute(&cu_sms, cudaDevAttrMultiProcessorCount, dev), "reading the device");
  CU_TRY(cudaDeviceGetAttribute(&cu_smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev), "reading the device");
  if (inited_optin == smem_optin && inited_carveout == cu_carveout) return BL_OK;
  CU_OK(cu_matvec_init(smem_optin));
  CU_OK(cu_moe_dec_init(smem_optin));
  CU_OK(cu_attn_init(smem_optin));
  CU_OK(cu_gemm_init(smem_optin));
  CU_OK(cu_gemm16_init(smem_optin));
  CU_OK(cu_attn_dec_init());
  CU_OK(cu_misc_init());
  CU_OK(cu_moe_init());
  CU_OK(cu_moe_batch_init(smem_optin));
  CU_OK(cu_mv_batch_init(smem_optin));
  CU_OK(cu_x8_rows_init());
  CU_OK(cu_fast_init(smem_optin));
  CU_OK(cu_attn1_init(smem_optin));
  CU_OK(cu_attn2_init(smem_optin));
  CU_OK(cu_fo_init(smem_optin));
  CU_OK(cu_route_big_init(smem_optin));
  CU_OK(cu_route_sigmoid_init());
  CU_OK(cu_mla_init(smem_optin));
  inited_optin = smem_optin;
  inited_carveout = cu_carveout;
  return BL_OK;
}

// The carveout every kernel prefers, from now on (process-wide; graphs captured before keep theirs).
static int64_t set_carveout(int v) {
  if (v < -1 || v > 100) return cu_fail(BL_E_INVAL, "set_option: carveout %d (0..100 percent, or -1 for the driver's choice)", v);
  cu_carveout = v;
  return inited_optin < 0 ? BL_OK : cu_init_kernels(inited_optin);
}

extern "C" int64_t bl_cuda_weights_free(uint64_t h) {
  cu_weights *w = reinterpret_cast<cu_weights *>(h);
  if (!w) return BL_OK;
  (void)cudaSetDevice(w->dev);
  cu_host_unregister(w);
  if (w->arena) (void)cudaFree(w->arena);
  (void)cudaGetLastError();
  delete w;
  return BL_OK;
}

static int64_t weights_init(cu_weights *w, int64_t dev, const bl_program *prog, const bl_cuda_options &o) {
  int n = 0, drv = 0;
  CU_OK(cu_probe(&n, &drv));
  if (dev < 0 || dev >= n) return cu_fail(BL_E_INVAL, "CUDA device %lld does not exist (%d devices)", (long long)dev, n);
  w->dev = (int)dev;
  CU_TRY(cudaSetDevice(w->dev), "selecting the device");
  cudaDeviceProp prop;
  CU_TRY(cudaGetDeviceProperties(&prop, w->dev), "reading the device properties");
  snprintf(w->device_name, sizeof w->device_name, "%.80s", prop.name);
  if (!cu_has_code(w->dev))
    return cu_fail(BL_E_UNSUPPORTED, "%s (compute capability %d.%d) has no code in this build (it carries sm_86, sm_90, sm_120a and PTX for compute_120)",
                   prop.name, prop.major, prop.minor);
  w->smem_optin = (int)prop.sharedMemPerBlockOptin;
  w->sm_count = prop.multiProcessorCount;
  if (o.carveout != cu_carveout) { // before the kernels' attributes are set (cu_init_kernels sets them anew for a changed one)
    if (o.carveout < -1 || o.carveout > 100) return cu_fail(BL_E_INVAL, "cuda options: carveout %lld (0..100 percent, or -1 for the driver's choice)", (long long)o.carveout);
    cu_carveout = (int)o.carveout;
  }
  CU_OK(cu_init_kernels(w->smem_optin));
  CU_OK(fuse_program(prog, w->fused));
  cu_plan pl;
  CU_OK(make_plan(prog, w->fused, pl));
  w->dm = pl.dm;
  size_t fr = 0, tot = 0;
  CU_TRY(cudaMemGetInfo(&fr, &tot), "reading the device memory");
  if (pl.total + ((size_t)256 << 20) > fr)
    return cu_fail(BL_E_NOMEM, "the model's weights (%.2f GiB) do not fit %s: %.2f GiB free of %.2f GiB", pl.total / 1073741824.0, prop.name,
                   fr / 1073741824.0, tot / 1073741824.0);
  CU_TRY(cudaMalloc(&w->arena, pl.total > 0 ? pl.total : 256), "allocating the weights");
  w->arena_bytes = pl.total;
  CU_OK(upload(w, pl));
  CU_OK(build_blocks(w, pl));
  CU_OK(cu_host_register(w, o.host_pin != 0));
  CU_TRY(cudaDeviceSynchronize(), "finishing the upload");
  return BL_OK;
}

extern "C" int64_t bl_cuda_weights_new(int64_t dev, const bl_program *prog, const bl_cuda_options *o, uint64_t *out) {
  if (!prog || !out) return cu_fail(BL_E_INVAL, "cuda weights_new: null argument");
  cu_weights *w = new (std::nothrow) cu_weights();
  if (!w) return cu_fail(BL_E_NOMEM, "cuda weights_new: out of memory");
  const int64_t s = weights_init(w, dev, prog, o ? *o : cu_options_default());
  if (s != BL_OK) {
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", bl_cuda_last_error());
    bl_cuda_weights_free(reinterpret_cast<uint64_t>(w));
    cu_fail(s, "%s", keep);
    return s;
  }
  *out = reinterpret_cast<uint64_t>(w);
  return BL_OK;
}

static int64_t ctx_init(cu_ctx *c, const cu_weights *w, const bl_ctx_params *p) {
  const bl_cuda_options &o = c->o; // set by bl_cuda_ctx_new
  if (o.host_share < -1 || o.host_share > 900) return cu_fail(BL_E_INVAL, "cuda options: host share %lld (thousandths 0..900, or -1: the cost model)", (long long)o.host_share);
  if (o.sparse_upload < -1 || o.sparse_upload > 1) return cu_fail(BL_E_INVAL, "cuda options: sparse uploads %lld (1, 0 or -1)", (long long)o.sparse_upload);
  if (o.cpu_tokens < -1 || o.cpu_tokens > 65536) return cu_fail(BL_E_INVAL, "cuda options: CPU share %lld tokens (0..65536, -1: the default)", (long long)o.cpu_tokens);
  c->w = w;
  c->dev = w->dev;
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  CU_OK(ctx_dims(w->dm, p, c->dm));
  c->p = *p;
  c->sm_count = w->sm_count;
  c->smem_limit = w->smem_optin - CU_SMEM_RESERVE;
  c->max_splits = 32;
  c->min_chunk = 64;
  c->use_graphs = 1;
  c->prefill_min = MV_MAX_NT + 1;
  c->hy->upload_min = 1 << 30; // measured when the host hook is set (hybrid.cu)
  c->hy->host_share_opt = (int)o.host_share;
  c->hy->sparse_opt = (int)o.sparse_upload;
  c->hy->cpu_tok = (int)o.cpu_tokens; // -1: the default, taken when the host hook is set
  c->hy->used_share = -1;
  c->hy->up_cur = -1;
  c->mb_pairs_min = 3000; // H200, -npl 2: 625 t/s at 2 on the benchmark file, 658 at 3, 655 at 4.5 (docs/cuda-runs.md call 142)
  c->foacc_lim = FO_ACC_LIM;
  if (o.graphs == 0) c->use_graphs = 0;
  c->profile = o.profile != 0;
  c->invariant = o.invariant != 0;
  c->o.fast = o.fast < 0 ? FAST_DEFAULT : o.fast & FAST_ALL;
  c->o.pdl = o.pdl != 0 && device_major >= 9; // programmatic dependent launch: sm_90 and newer
  cu_trace_setup(reinterpret_cast<const char *>(o.trace_path));
  if (o.mma_pairs >= 0) c->mb_pairs_min = (int)o.mma_pairs; // decode batches: the tensor-core experts from this many pairs an expert (thousandths; 0: always)
  if (o.prefill_min >= 2 && o.prefill_min <= MV_MAX_NT + 1) c->prefill_min = (int)o.prefill_min; // batches of at least this many tokens take the prefill kernels
  size_t fr = 0, tot = 0;
  CU_TRY(cudaMemGetInfo(&fr, &tot), "reading the device memory");
  const size_t cb = ctx_bytes(c);
  if (cb + ((size_t)128 << 20) > fr)
    return cu_fail(BL_E_NOMEM, "the KV cache and work buffers (%.2f GiB for %lld slots of %lld positions) do not fit %s beside the weights: %.2f GiB free of %.2f GiB",
                   cb / 1073741824.0, (long long)p->kv_slots, (long long)p->kv_ctx, w->device_name, fr / 1073741824.0, tot / 1073741824.0);
  CU_TRY(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking), "creating a stream");
  for (const buf_req &b : buffer_list(c)) {
    CU_TRY(cudaMalloc(b.ptr, b.bytes > 0 ? b.bytes : 64), "allocating work buffers");
  }
  const size_t kvb = (size_t)c->p.kv_layers * kv_layer_elems(c) * 2;
  CU_TRY(cudaMemset(c->kc, 0, kvb), "clearing the KV cache");
  if (kv_planes(c) > 1) CU_TRY(cudaMemset(c->vc, 0, kvb), "clearing the KV cache");
  CU_TRY(cudaMemset(c->cnt_attn, 0, (size_t)MV_MAX_NT * c->dm.max_nh * sizeof(int)), "clearing counters");
  CU_TRY(cudaMemset(c->cnt_router, 0, (size_t)c->router_groups * sizeof(int)), "clearing counters");
  CU_TRY(cudaMemset(c->cnt_fo, 0, 64), "clearing counters");
  CU_TRY(cudaMemset(c->fo_acc, 0, (size_t)c->dm.X * FO_ACC_STRIDE * sizeof(unsigned long long)), "clearing counters");
  // sparse uploads leave the unused experts' slabs of a staging buffer as they were: zeros or
  // earlier weights, never uninitialised bytes (a kernel's tile past a slab's end reads finite values)
  for (int s = 0; s < 2 + c->hy->n_lead; s++)
    if (c->hy->stage[s]) CU_TRY(cudaMemset(c->hy->stage[s], 0, (size_t)c->dm.host_layer_bytes), "clearing the staging buffers");
  CU_TRY(cudaMemset(c->dense_sel, 0, (size_t)c->dm.maxT * sizeof(int32_t)), "clearing buffers");
  {
    std::vector<float> ones((size_t)c->dm.maxT, 1.0f);
    CU_TRY(cudaMemcpy(c->dense_w, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice), "filling buffers");
  }
  if (c->dm.n_dn) CU_TRY(cudaMemset(c->rs, 0, (size_t)c->p.kv_slots * rs_slot_floats(c) * sizeof(float)), "clearing the recurrent state");
  CU_TRY(cudaMallocHost(&c->h_in, in_bytes_all(c)), "allocating pinned memory");
  CU_TRY(cudaMallocHost(&c->mb_tiles_h, MB_LAYER_BITS * sizeof(int32_t)), "allocating pinned memory");
  c->h_out_bytes = (int64_t)MV_MAX_NT * c->dm.V * (int64_t)sizeof(float);
  const int64_t topk_bytes = c->dm.maxT * TOPK_MAX * 8;
  if (topk_bytes > c->h_out_bytes) c->h_out_bytes = topk_bytes;
  CU_TRY(cudaMallocHost(&c->h_out, (size_t)c->h_out_bytes), "allocating pinned memory");
  CU_OK(cu_ensure_logits(c, MV_MAX_NT));
  CU_TRY(cudaDeviceSynchronize(), "making the context");
  return BL_OK;
}

extern "C" int64_t bl_cuda_ctx_new(uint64_t weights, const bl_ctx_params *p, const bl_cuda_options *o, uint64_t *out) {
  const cu_weights *w = reinterpret_cast<const cu_weights *>(weights);
  if (!w || !p || !out) return cu_fail(BL_E_INVAL, "cuda ctx_new: null argument");
  cu_ctx *c = new (std::nothrow) cu_ctx();
  if (c) c->hy = new (std::nothrow) cu_hybrid();
  if (!c || !c->hy) {
    delete c;
    return cu_fail(BL_E_NOMEM, "cuda ctx_new: out of memory");
  }
  c->o = o ? *o : cu_options_default();
  const int64_t s = ctx_init(c, w, p);
  if (s != BL_OK) {
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", bl_cuda_last_error());
    bl_cuda_ctx_free(reinterpret_cast<uint64_t>(c));
    cu_fail(s, "%s", keep);
    return s;
  }
  *out = reinterpret_cast<uint64_t>(c);
  return BL_OK;
}

extern "C" int64_t bl_cuda_set_option(uint64_t h, int64_t key, int64_t value) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  if (!c) return cu_fail(BL_E_INVAL, "set_option: null context");
  switch (key) {
    case BL_CUDA_OPT_GRAPHS: c->use_graphs = value != 0; return BL_OK;
    case BL_CUDA_OPT_PREFILL_MIN: c->prefill_min = value < 2 ? 2 : (int)value; return BL_OK;
    case BL_CUDA_OPT_MAX_SPLITS:
      if (value < 1 || value > 32) return cu_fail(BL_E_INVAL, "set_option: %lld attention splits (1..32)", (long long)value);
      c->max_splits = (int)value;
      cu_drop_graphs(c);
      return BL_OK;
    case CU_OPT_CARVEOUT:
      CU_OK(set_carveout((int)value));
      cu_drop_graphs(c);
      return BL_OK;
    case CU_OPT_FAST:
      c->o.fast = (int)value & FAST_ALL;
      cu_drop_graphs(c);
      return BL_OK;
    case CU_OPT_INVARIANT:
      c->invariant = value != 0;
      c->o.invariant = c->invariant;
      cu_drop_graphs(c);
      return BL_OK;
    case CU_OPT_UPLOAD_MIN:
      c->hy->upload_min = value <= 0 ? (1 << 30) : (int)(value < c->prefill_min ? c->prefill_min : (value > (1 << 30) ? (1 << 30) : value));
      return BL_OK;
    case CU_OPT_CARD_SHARE:
      if (value < 0 || value > CU_SHARE_MAX) return cu_fail(BL_E_INVAL, "set_option: card share %lld (0..%d picks)", (long long)value, CU_SHARE_MAX);
      c->hy->card_share = (int)value;
      c->hy->share_auto = 0; // asked for: fixed
      cu_drop_graphs(c);
      return BL_OK;
    case CU_OPT_PROMOTE_SLOTS: return cu_set_promote_slots(c, value);
    case CU_OPT_HOST_SHARE:
      if (value < -1 || value > 900) return cu_fail(BL_E_INVAL, "set_option: host share %lld (thousandths 0..900, or -1: the cost model)", (long long)value);
      c->hy->host_share_opt = (int)value;
      return BL_OK;
    case CU_OPT_SPARSE_UP:
      if (value < -1 || value > 1) return cu_fail(BL_E_INVAL, "set_option: sparse uploads %lld (1 the used experts, 0 whole layers, -1 by the last upload step)", (long long)value);
      c->hy->sparse_opt = (int)value;
      return BL_OK;
    case CU_OPT_MMA_PAIRS:
      if (value < 0 || value > 1000000) return cu_fail(BL_E_INVAL, "set_option: pairs an expert %lld (thousandths, 0..1000000)", (long long)value);
      c->mb_pairs_min = (int)value;
      return BL_OK;
    case CU_OPT_FOACC_LIM:
      if (value < -126 || value > 22) return cu_fail(BL_E_INVAL, "set_option: accumulator limit 2^%lld (-126..22)", (long long)value);
      c->foacc_lim = ldexpf(1.0f, (int)value);
      cu_drop_graphs(c);
      return BL_OK;
    case CU_OPT_CPU_TOKENS:
      if (value < -1 || value > 65536) return cu_fail(BL_E_INVAL, "set_option: CPU share %lld tokens (0..65536, -1: the default)", (long long)value);
      c->hy->cpu_tok = value >= 0 ? (int)value : cu_cpu_share_default(c);
      return BL_OK;
    case CU_OPT_PDL:
      c->o.pdl = value != 0 && device_major >= 9;
      cu_drop_graphs(c);
      return BL_OK;
    default: return cu_fail(BL_E_INVAL, "set_option: unknown option %lld", (long long)key);
  }
}

extern "C" int64_t bl_cuda_ctx_stats(uint64_t h, int64_t *out, int64_t n) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  if (!c || !out) return cu_fail(BL_E_INVAL, "stats: null argument");
  const int64_t v[25] = {(int64_t)c->w->arena_bytes, c->p.kv_layers * (int64_t)kv_layer_elems(c) * 2 * kv_planes(c), c->steps, c->graph_steps,
                         (int64_t)c->graphs.size(), c->sm_count, c->pend.fused, c->attx8.used, c->n_gemm16, c->n_routebig, c->n_fa2, c->n_gemmb16,
                         c->n_qktok, c->n_dng, c->n_down1, c->n_gumma, c->n_dnmma, c->n_act8, c->n_l2pf, c->n_attmma, c->n_foacc, c->n_a2merge, c->n_tmagu,
                         c->n_mb_nomma, c->n_a2gen};
  for (int64_t i = 0; i < n && i < 25; i++) out[i] = v[i];
  return BL_OK;
}

// ---- KV cache ----
static int64_t kv_check(const cu_ctx *c, int64_t slot, int64_t n) {
  if (!c) return cu_fail(BL_E_INVAL, "kv: null context");
  if (slot < 0 || slot >= c->p.kv_slots) return cu_fail(BL_E_INVAL, "kv: slot %lld out of range", (long long)slot);
  if (n < 0 || n > c->p.kv_ctx) return cu_fail(BL_E_INVAL, "kv: %lld positions out of range", (long long)n);
  return BL_OK;
}

extern "C" int64_t bl_cuda_kv_clear(uint64_t h, int64_t slot, int64_t from) {
  // positions are written before they are read; clearing is the caller's bookkeeping
  return kv_check(reinterpret_cast<cu_ctx *>(h), slot, from);
}

extern "C" int64_t bl_cuda_kv_copy(uint64_t h, int64_t src, int64_t dst, int64_t n) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  CU_OK(kv_check(c, src, n));
  CU_OK(kv_check(c, dst, n));
  if (src == dst || n == 0) return BL_OK;
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  const size_t row = (size_t)c->p.kv_k_dim * 2 * (size_t)n, slot = (size_t)c->p.kv_ctx * c->p.kv_k_dim;
  for (int64_t l = 0; l < c->p.kv_layers; l++) {
    const size_t base = (size_t)l * kv_layer_elems(c);
    CU_TRY(cudaMemcpyAsync(c->kc + base + dst * slot, c->kc + base + src * slot, row, cudaMemcpyDeviceToDevice, c->st), "copying KV");
    if (kv_planes(c) > 1) CU_TRY(cudaMemcpyAsync(c->vc + base + dst * slot, c->vc + base + src * slot, row, cudaMemcpyDeviceToDevice, c->st), "copying KV");
  }
  CU_TRY(cudaStreamSynchronize(c->st), "copying KV");
  return BL_OK;
}
