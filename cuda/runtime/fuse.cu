// bloomery CUDA library: the fusion pass (fuse.h): one walk over the program's ops matching each run
// to a fused block the card's kernels run, refusing by name what they do not implement; and
// bl_cuda_check, the same pass without a device.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common.cuh"
#include "fuse.h"
#include "internal.h"

static const bl_tensor NO_TENSOR = {};

static const bl_tensor &role(const bl_op &op, int r) {
  return r < op.n_tensors && op.tensors ? reinterpret_cast<const bl_tensor *>(op.tensors)[r] : NO_TENSOR;
}

template <class P>
static const P *params(const bl_op &op) {
  return reinterpret_cast<const P *>(op.params);
}

static const char *op_name(int64_t k) {
  switch (k) {
    case BL_OP_EMBED: return "embed";
    case BL_OP_NORM: return "norm";
    case BL_OP_ATTN: return "attention";
    case BL_OP_ROUTER: return "router";
    case BL_OP_EXPERTS: return "experts";
    case BL_OP_FFN: return "ffn";
    case BL_OP_OUTPUT: return "output";
    case BL_OP_MLA: return "mla";
    case BL_OP_DELTANET: return "gated delta-net";
    case BL_OP_MTP_IN: return "mtp input";
    default: return "unknown op";
  }
}


namespace {
struct pass {
  const bl_op *ops;
  int64_t n;
  std::string *why;
  int64_t *bad;

  bool fail(int64_t i, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char head[96];
    if (i >= 0) snprintf(head, sizeof head, "op %lld (%s): ", (long long)i, op_name(ops[i].kind));
    else head[0] = 0;
    if (why) *why = std::string(head) + msg;
    if (bad) *bad = i;
    return false;
  }

  bool norm_ok(int64_t i) {
    const bl_norm_params *p = params<bl_norm_params>(ops[i]);
    if (!p) return fail(i, "no parameters");
    if (p->kind != BL_NORM_RMS) return fail(i, "norm kind %lld is not implemented on the card", (long long)p->kind);
    return true;
  }

  // an attention op's RoPE (its rotated dims, kind, base and YaRN's terms)
  static void rope_into(cu_fblock &b, const bl_rope_params &r) {
    b.n_rot = r.n_rot;
    b.rope_type = r.type;
    b.yarn_orig_ctx = r.orig_ctx;
    b.rope_base = r.base;
    b.rope_freq_scale = r.freq_scale;
    b.yarn_ext_factor = r.ext_factor;
    b.yarn_attn_factor = r.attn_factor;
    b.yarn_beta_fast = r.beta_fast;
    b.yarn_beta_slow = r.beta_slow;
  }

  void start(cu_fblock &b, int64_t kind, int64_t i, int64_t count) {
    memset(&b, 0, sizeof b);
    b.kind = kind;
    b.ops = &ops[i];
    b.n_ops = count;
    b.first_op = i;
  }

  bool attention(int64_t i, cu_fblock &b) {
    const bl_op &nm = ops[i], &op = ops[i + 1];
    const bl_attn_params *a = params<bl_attn_params>(op);
    if (!a) return fail(i + 1, "no parameters");
    if (a->window < 0) return fail(i + 1, "a sliding window of %lld", (long long)a->window);
    if (a->gate && role(op, BL_ATTN_BQ).data) return fail(i + 1, "a q bias with the output gate in q's rows is not implemented on the card");
    if (a->rope.type != BL_ROPE_NORMAL && a->rope.type != BL_ROPE_NEOX) return fail(i + 1, "RoPE type %lld is not implemented on the card", (long long)a->rope.type);
    const double eps = params<bl_norm_params>(nm)->eps;
    if ((role(op, BL_ATTN_Q_NORM).data || role(op, BL_ATTN_K_NORM).data) && a->eps != eps)
      return fail(i + 1, "Q/K norms with an epsilon (%g) other than the input norm's (%g) are not implemented on the card", a->eps, eps);
    start(b, CU_BLOCK_ATTN, i, 2);
    b.layer = a->kv_layer;
    b.n_head = a->n_head;
    b.n_head_kv = a->n_head_kv;
    b.head_dim = a->head_dim;
    rope_into(b, a->rope);
    b.eps = eps;
    b.attn_scale = a->scale;
    b.window = a->window;
    b.gate = a->gate != 0;
    b.t[CU_ATTN_NORM] = role(nm, BL_NORM_WEIGHT);
    const int map[][2] = {{CU_ATTN_Q, BL_ATTN_Q}, {CU_ATTN_K, BL_ATTN_K}, {CU_ATTN_V, BL_ATTN_V}, {CU_ATTN_O, BL_ATTN_O},
                          {CU_ATTN_Q_NORM, BL_ATTN_Q_NORM}, {CU_ATTN_K_NORM, BL_ATTN_K_NORM}, {CU_ATTN_BQ, BL_ATTN_BQ},
                          {CU_ATTN_BK, BL_ATTN_BK}, {CU_ATTN_BV, BL_ATTN_BV}, {CU_ATTN_BO, BL_ATTN_BO},
                          {CU_ATTN_SINKS, BL_ATTN_SINKS}};
    for (const auto &m : map) b.t[m[0]] = role(op, m[1]);
    return true;
  }

  // DeepSeek V2/V3's and Kimi K2's attention: the block's norm, q (or its LoRA), the latent, and the
  // absorbed heads (forward.cu mla_block, attention/mla.cu).
  bool mla(int64_t i, cu_fblock &b) {
    const bl_op &nm = ops[i], &op = ops[i + 1];
    const bl_mla_params *a = params<bl_mla_params>(op);
    if (!a) return fail(i + 1, "no parameters");
    if (a->rope.type != BL_ROPE_NORMAL && a->rope.type != BL_ROPE_NEOX) return fail(i + 1, "RoPE type %lld is not implemented on the card", (long long)a->rope.type);
    if (!cu_mla_supported((int)a->kv_lora, (int)(a->kv_lora + a->rope.n_rot)))
      return fail(i + 1, "a latent of %lld with a rotated part of %lld is not implemented on the card (latents of at most %d, a multiple of 32; rows of at most %d, a multiple of 8)",
                  (long long)a->kv_lora, (long long)a->rope.n_rot, CU_MLA_MAX_LATENT, CU_MLA_MAX_ROW);
    start(b, CU_BLOCK_MLA, i, 2);
    b.layer = a->kv_layer;
    b.n_head = a->n_head;
    b.n_head_kv = 1;
    b.head_dim = a->nope + a->rope.n_rot;
    b.kv_lora = a->kv_lora;
    b.nope = a->nope;
    b.v_dim = a->v_dim;
    b.mla_eps = a->eps;
    rope_into(b, a->rope);
    b.eps = params<bl_norm_params>(nm)->eps;
    b.attn_scale = a->scale;
    b.t[CU_MLA_NORM] = role(nm, BL_NORM_WEIGHT);
    for (int r = 0; r < BL_MLA_TENSORS; r++) b.t[CU_MLA_Q + r] = role(op, BL_MLA_Q + r);
    b.q_lora = b.t[CU_MLA_Q_A].data ? b.t[CU_MLA_Q_A].ne[1] : 0;
    return true;
  }

  // Qwen3-Next's and Qwen3.5's linear attention: the block's norm, the in-projections, the conv, the
  // gated delta rule over the slot's recurrent state, the gated output norm and out (forward.cu dn_block,
  // deltanet/deltanet.cu).
  bool deltanet(int64_t i, cu_fblock &b) {
    const bl_op &nm = ops[i], &op = ops[i + 1];
    const bl_deltanet_params *d = params<bl_deltanet_params>(op);
    if (!d) return fail(i + 1, "no parameters");
    if (!cu_dn_supported((int)d->head_k, (int)d->head_v, (int)d->conv_kernel))
      return fail(i + 1, "k heads of %lld and v heads of %lld with a conv of %lld taps are not implemented on the card (heads of at most %d, at most %d taps)",
                  (long long)d->head_k, (long long)d->head_v, (long long)d->conv_kernel, CU_DN_MAX_HEAD, CU_DN_MAX_TAPS);
    if (d->head_map != BL_DN_TILED && d->head_map != BL_DN_GROUPED) return fail(i + 1, "head map %lld", (long long)d->head_map);
    if (d->n_k_heads <= 0 || d->n_v_heads <= 0 || d->n_v_heads % d->n_k_heads)
      return fail(i + 1, "%lld v heads over %lld k heads", (long long)d->n_v_heads, (long long)d->n_k_heads);
    start(b, CU_BLOCK_DN, i, 2);
    b.layer = d->rs_layer;
    b.n_k_heads = d->n_k_heads;
    b.n_v_heads = d->n_v_heads;
    b.head_k = d->head_k;
    b.head_v = d->head_v;
    b.conv_kernel = d->conv_kernel;
    b.head_map = d->head_map;
    b.dn_eps = d->eps;
    b.eps = params<bl_norm_params>(nm)->eps;
    b.t[CU_DN_NORM] = role(nm, BL_NORM_WEIGHT);
    for (int r = 0; r < BL_DN_TENSORS; r++) b.t[CU_DN_QKV + r] = role(op, BL_DN_QKV + r);
    return true;
  }

  bool moe(int64_t i, cu_fblock &b) {
    const bl_op &nm = ops[i], &rt = ops[i + 1], &ex = ops[i + 2];
    const bl_router_params *r = params<bl_router_params>(rt);
    const bl_experts_params *x = params<bl_experts_params>(ex);
    if (!r) return fail(i + 1, "no parameters");
    if (!x) return fail(i + 2, "no parameters");
    // top-k then softmax over the k is softmax, top-k and renormalisation: the same picks and weights
    if (r->gating != BL_GATING_SOFTMAX && r->gating != BL_GATING_SOFTMAX_WEIGHT && r->gating != BL_GATING_SIGMOID)
      return fail(i + 1, "gating %lld is not implemented on the card", (long long)r->gating);
    if (r->gating == BL_GATING_SOFTMAX_WEIGHT && r->norm_topk)
      return fail(i + 1, "top-k then softmax with a renormalisation of the picks is not implemented on the card");
    const bool sig = r->gating == BL_GATING_SIGMOID;
    if (role(rt, BL_ROUTER_CORR).data && !sig) return fail(i + 1, "a selection bias is taken only by the sigmoid router");
    if (r->n_group > 1 && !sig) return fail(i + 1, "expert groups are taken only by the sigmoid router");
    if (sig && !cu_route_sigmoid_fits((int)r->n_expert, (int)r->n_used, (int)r->n_group))
      return fail(i + 1, "sigmoid routing of %lld of %lld experts in %lld groups is not implemented on the card (at most 1,024 experts, 32 used, 32 groups)",
                  (long long)r->n_used, (long long)r->n_expert, (long long)r->n_group);
    if (x->act != BL_ACT_SWIGLU && x->act != BL_ACT_SWIGLU_OAI)
      return fail(i + 2, "activation %lld is not implemented on the card yet (SwiGLU and the clamped SwiGLU are)", (long long)x->act);
    if (r->n_expert != x->n_expert || r->n_used != x->n_used)
      return fail(i + 2, "%lld experts, %lld used, but the router picks %lld of %lld", (long long)x->n_expert, (long long)x->n_used,
                  (long long)r->n_used, (long long)r->n_expert);
    if (x->host != 0 && x->host != BL_HOST_EXPERTS_RAM && x->host != BL_HOST_EXPERTS_DISK) return fail(i + 2, "host mark %lld", (long long)x->host);
    if (x->host == BL_HOST_EXPERTS_DISK && !x->store) return fail(i + 2, "marked as read from disk but without an expert store");
    start(b, CU_BLOCK_MOE, i, 3);
    b.layer = x->layer;
    b.n_expert = x->n_expert;
    b.n_expert_used = x->n_used;
    b.norm_topk = r->gating == BL_GATING_SOFTMAX_WEIGHT ? 1 : r->norm_topk;
    b.gating = r->gating;
    b.n_group = r->n_group > 1 ? r->n_group : 0;
    b.n_group_used = r->n_group > 1 ? r->n_group_used : 0;
    b.act = x->act;
    b.alpha = x->alpha;
    b.limit = x->limit;
    b.eps = params<bl_norm_params>(nm)->eps;
    b.expert_weights_scale = r->scale;
    b.expert_store = x->store;
    b.expert_layer = x->store_layer;
    b.host_experts = x->host;
    b.t[CU_MOE_NORM] = role(nm, BL_NORM_WEIGHT);
    b.t[CU_MOE_GATE_INP] = role(rt, BL_ROUTER_W);
    b.t[CU_MOE_GATE] = role(ex, BL_EXPERTS_GATE);
    b.t[CU_MOE_UP] = role(ex, BL_EXPERTS_UP);
    b.t[CU_MOE_DOWN] = role(ex, BL_EXPERTS_DOWN);
    b.t[CU_MOE_RBIAS] = role(rt, BL_ROUTER_B);
    b.t[CU_MOE_BGATE] = role(ex, BL_EXPERTS_BGATE);
    b.t[CU_MOE_BUP] = role(ex, BL_EXPERTS_BUP);
    b.t[CU_MOE_BDOWN] = role(ex, BL_EXPERTS_BDOWN);
    b.t[CU_MOE_RCORR] = role(rt, BL_ROUTER_CORR);
    return true;
  }

  // An ffn right after the experts (DeepSeek's and GLM's shared expert; Qwen's under its scalar
  // sigmoid gate): on the normalised input the experts read (the MoE block keeps it for it), its sum
  // added to x as theirs is.
  bool shared_ffn(int64_t i, cu_fblock &b) {
    const bl_op &op = ops[i];
    const bl_ffn_params *f = params<bl_ffn_params>(op);
    if (!f) return fail(i, "no parameters");
    if (f->act != BL_ACT_SWIGLU) return fail(i, "a shared expert's activation %lld is not implemented on the card yet (SwiGLU is)", (long long)f->act);
    start(b, CU_BLOCK_FFN, i, 1);
    b.shared = 1;
    b.eps = params<bl_norm_params>(ops[i - 3])->eps;
    for (int k = 0; k < 3; k++) b.t[CU_FFN_GATE + k] = role(op, BL_FFN_GATE + k);
    b.t[CU_FFN_GATE_INP] = role(op, BL_FFN_GATE_INP);
    return true;
  }

  bool ffn(int64_t i, cu_fblock &b) {
    const bl_op &nm = ops[i], &op = ops[i + 1];
    const bl_ffn_params *f = params<bl_ffn_params>(op);
    if (!f) return fail(i + 1, "no parameters");
    if (f->act != BL_ACT_SWIGLU) return fail(i + 1, "activation %lld is not implemented on the card yet (SwiGLU is)", (long long)f->act);
    if (role(op, BL_FFN_GATE_INP).data) return fail(i + 1, "a scalar gate on an ffn with its own norm is not implemented on the card (a shared expert's after the experts is)");
    start(b, CU_BLOCK_FFN, i, 2);
    b.eps = params<bl_norm_params>(nm)->eps;
    b.t[0] = role(nm, BL_NORM_WEIGHT);
    for (int k = 0; k < 3; k++) b.t[1 + k] = role(op, BL_FFN_GATE + k);
    return true;
  }

  bool run(std::vector<cu_fblock> &out) {
    if (!ops || n <= 0) return fail(-1, "an empty program");
    for (int64_t i = 0; i < n;) {
      const bl_op &op = ops[i];
      if (op.n_tensors < 0 || op.n_tensors > BL_OP_MAX_TENSORS) return fail(i, "%lld tensors", (long long)op.n_tensors);
      if (op.kind != BL_OP_EMBED && !op.params) return fail(i, "no parameters");
      cu_fblock b;
      switch (op.kind) {
        case BL_OP_EMBED:
          start(b, CU_BLOCK_EMBED, i, 1);
          b.t[0] = role(op, BL_EMBED_TOKENS);
          i += 1;
          break;
        case BL_OP_OUTPUT:
          if (!norm_ok(i)) return false;
          start(b, CU_BLOCK_OUTPUT, i, 1);
          b.eps = params<bl_norm_params>(op)->eps;
          b.t[0] = role(op, BL_OUTPUT_NORM);
          b.t[1] = role(op, BL_OUTPUT_HEAD);
          i += 1;
          break;
        case BL_OP_NORM: {
          if (!norm_ok(i)) return false;
          const int64_t next = i + 1 < n ? ops[i + 1].kind : 0;
          if (next == BL_OP_ATTN) {
            if (!attention(i, b)) return false;
            i += 2;
          } else if (next == BL_OP_ROUTER && i + 2 < n && ops[i + 2].kind == BL_OP_EXPERTS) {
            if (!moe(i, b)) return false;
            i += 3;
          } else if (next == BL_OP_FFN) {
            if (!ffn(i, b)) return false;
            i += 2;
          } else if (next == BL_OP_MLA) {
            if (!mla(i, b)) return false;
            i += 2;
          } else if (next == BL_OP_DELTANET) {
            if (!deltanet(i, b)) return false;
            i += 2;
          } else {
            return fail(i, "the card runs a norm only fused into the attention, latent attention, delta-net, router + experts or ffn op after it");
          }
          break;
        }
        case BL_OP_MTP_IN: return fail(i, "an MTP layer's input (speculative decoding's draft-mtp) is not implemented on the card yet");
        case BL_OP_FFN:
          /* DeepSeek's and GLM's shared experts: an ffn on the h the experts' norm wrote (a MoE block's
           * norm + router + experts just before it) */
          if (i < 3 || ops[i - 1].kind != BL_OP_EXPERTS || ops[i - 2].kind != BL_OP_ROUTER || ops[i - 3].kind != BL_OP_NORM)
            return fail(i, "the card runs it only after its input norm (attention; router + experts; ffn) or right after a MoE layer's experts");
          if (!shared_ffn(i, b)) return false;
          i += 1;
          break;
        case BL_OP_ATTN:
        case BL_OP_MLA:
        case BL_OP_DELTANET:
        case BL_OP_ROUTER:
        case BL_OP_EXPERTS: return fail(i, "the card runs it only after its input norm (attention; latent attention; delta-net; router + experts; ffn)");
        default: return fail(i, "unknown kind %lld", (long long)op.kind);
      }
      out.push_back(b);
    }
    return true;
  }
};
} // namespace

bool cu_fuse(const bl_program *prog, std::vector<cu_fblock> &out, std::string *why, int64_t *bad_op) {
  out.clear();
  if (bad_op) *bad_op = -1;
  pass p{prog ? reinterpret_cast<const bl_op *>(prog->ops) : nullptr, prog ? prog->n_ops : 0, why, bad_op};
  return p.run(out);
}

extern "C" int64_t bl_cuda_check(const bl_program *prog, int64_t *bad_op) {
  std::vector<cu_fblock> blocks;
  std::string why;
  if (!cu_fuse(prog, blocks, &why, bad_op)) return cu_fail(BL_E_UNSUPPORTED, "cuda: %s", why.c_str());
  return cu_check_plan(prog, blocks);
}
