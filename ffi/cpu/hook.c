/* bloomery CPU library: the host hooks - a run of a card's program (a MoE layer's NORM, ROUTER and
 * EXPERTS, or a NORM and FFN) on residual rows a caller owns, or the run's experts for picks the
 * caller made (the rest of them computed elsewhere), for a card's step whose layer leaves its experts
 * to the CPU (cuda/hybrid/hybrid.cu calls it from a stream callback or the mailbox's thread): in host memory,
 * or read from the files through the op's expert store (moe.c). The rows are computed as
 * bl_cpu_forward computes those ops. */
#include "ctx.h"
#include "common.h"
#include <stdio.h>
#include <string.h>

/* The run's ops are of the kinds a card hands to the CPU, and each checks against the context. */
static int64_t check_run(const bl_cpu_ctx *c, const bl_op *ops, int64_t n, const char *what, const bl_op **norm, const bl_op **experts) {
  *norm = *experts = NULL;
  if (n <= 0 || n > 4) return bl_fail(BL_E_INVAL, "%s: a run of %lld ops", what, (long long)n);
  for (int64_t i = 0; i < n; i++) {
    const bl_op *op = &ops[i];
    int64_t s = BL_OK;
    switch (op->kind) {
      case BL_OP_NORM: if (!*norm) *norm = op; break;
      case BL_OP_ROUTER: s = bl_router_check(&c->p, op); break;
      case BL_OP_EXPERTS: s = bl_experts_check(&c->p, op); *experts = op; break;
      case BL_OP_FFN: s = bl_ffn_check(&c->p, op); break;
      default: s = bl_fail(BL_E_INVAL, "%s: op %lld is %s, not a norm, router, experts or ffn op", what, (long long)i, bl_op_name(op->kind));
    }
    if (s != BL_OK) return s;
  }
  return BL_OK;
}

int64_t bl_cpu_ops_rows(uint64_t h, const bl_op *ops, int64_t n_ops, int64_t n_tok, float *x, char *err, int64_t err_len) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  const bl_op *norm, *experts;
  int64_t s = BL_OK;
  if (!c || !ops || !x) s = bl_fail(BL_E_INVAL, "host ops: null argument");
  else if (n_tok <= 0 || n_tok > c->p.max_tokens)
    s = bl_fail(BL_E_INVAL, "host ops: %lld rows (the context takes 1..%lld)", (long long)n_tok, (long long)c->p.max_tokens);
  else s = check_run(c, ops, n_ops, "host ops", &norm, &experts);
  if (s == BL_OK) {
    const size_t bytes = (size_t)n_tok * (size_t)c->p.n_embd * sizeof(float);
    memcpy(c->x, x, bytes);
    bl_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.n_tokens = n_tok;
    s = bl_cpu_begin(c, n_tok);
    if (s == BL_OK) {
      s = bl_cpu_run_ops(c, ops, n_ops, &batch);
      bl_cpu_end(c);
    }
    if (s == BL_OK) memcpy(x, c->x, bytes);
  }
  if (s != BL_OK && err && err_len > 0) snprintf(err, (size_t)err_len, "%s", bl_last_error());
  return s;
}

int64_t bl_cpu_expert_rows(uint64_t h, const bl_op *ops, int64_t n_ops, int64_t n_tok, const float *x, const int32_t *sel,
                           const float *selw, int64_t k, float *out, char *err, int64_t err_len) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  const bl_op *norm = NULL, *experts = NULL;
  int64_t s = BL_OK;
  if (!c || !ops || !x || !sel || !selw || !out) s = bl_fail(BL_E_INVAL, "host experts: null argument");
  else if (n_tok <= 0 || n_tok > c->p.max_tokens)
    s = bl_fail(BL_E_INVAL, "host experts: %lld rows (the context takes 1..%lld)", (long long)n_tok, (long long)c->p.max_tokens);
  else if ((s = check_run(c, ops, n_ops, "host experts", &norm, &experts)) == BL_OK && !experts)
    s = bl_fail(BL_E_INVAL, "host experts: the run has no experts op");
  const bl_experts_params *xp = s == BL_OK ? BL_OP_PARAMS(experts, bl_experts_params) : NULL;
  if (s == BL_OK && (k <= 0 || k > xp->n_used))
    s = bl_fail(BL_E_INVAL, "host experts: %lld picks a token (the op uses %lld)", (long long)k, (long long)xp->n_used);
  if (s == BL_OK)
    for (int64_t i = 0; i < n_tok * k; i++)
      if (sel[i] < -1 || sel[i] >= xp->n_expert) { /* -1: no pick (the card computes that one) */
        s = bl_fail(BL_E_INVAL, "host experts: pick %d outside the %lld experts", sel[i], (long long)xp->n_expert);
        break;
      }
  if (s == BL_OK) {
    const size_t bytes = (size_t)n_tok * (size_t)c->p.n_embd * sizeof(float);
    memcpy(c->x, x, bytes);
    memcpy(c->sel, sel, sizeof(int32_t) * (size_t)(n_tok * k));
    memcpy(c->selw, selw, sizeof(float) * (size_t)(n_tok * k));
    s = bl_cpu_begin(c, n_tok);
    if (s == BL_OK) {
      s = bl_moe_picked(c, norm, experts, n_tok, k);
      bl_cpu_end(c);
    }
    if (s == BL_OK) memcpy(out, c->moe_out, bytes);
  }
  if (s != BL_OK && err && err_len > 0) snprintf(err, (size_t)err_len, "%s", bl_last_error());
  return s;
}

int64_t bl_cpu_ctx_keep_pin(uint64_t h, int64_t on) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  if (!c) return bl_fail(BL_E_INVAL, "keep_pin: null context");
  c->stay_pinned = on != 0;
  c->pinned_set = 0;
  return BL_OK;
}

int64_t bl_cpu_hook_fns(uint64_t *out) {
  if (!out) return bl_fail(BL_E_INVAL, "hook_fns: null argument");
  bl_ops_rows_fn f = bl_cpu_ops_rows;
  bl_expert_rows_fn g = bl_cpu_expert_rows;
  out[0] = (uint64_t)(uintptr_t)f;
  out[1] = (uint64_t)(uintptr_t)g;
  return BL_OK;
}
