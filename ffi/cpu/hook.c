/* bloomery CPU library: the host hooks - one MoE (or FFN) block on residual rows a caller owns, or
 * a MoE block's experts for picks the caller made (the rest of them computed elsewhere),
 * for a card's step whose block leaves its experts to the CPU (cuda/hybrid.cu calls it from a
 * stream callback or the mailbox's thread): in host memory, or read from the files through the
 * block's expert store (moe.c). The rows are computed as bl_cpu_forward computes that block. */
#include "ctx.h"
#include "common.h"
#include <stdio.h>
#include <string.h>

/* A block marked as read from disk must carry its expert store (moe.c reads the experts there). */
static int64_t check_disk(const bl_block *b, const char *what) {
  if (b->host_experts == BL_HOST_EXPERTS_DISK && !b->expert_store)
    return bl_fail(BL_E_INVAL, "%s: the block's experts are marked as read from disk (host_experts %d) but it has no expert store", what, BL_HOST_EXPERTS_DISK);
  return BL_OK;
}

int64_t bl_cpu_block_rows(uint64_t h, const bl_block *b, int64_t n_tok, float *x, char *err, int64_t err_len) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = BL_OK;
  if (!c || !b || !x) s = bl_fail(BL_E_INVAL, "host block: null argument");
  else if (n_tok <= 0 || n_tok > c->p.max_tokens)
    s = bl_fail(BL_E_INVAL, "host block: %lld rows (the context takes 1..%lld)", (long long)n_tok, (long long)c->p.max_tokens);
  else if (b->kind != BL_BLOCK_MOE && b->kind != BL_BLOCK_FFN) s = bl_fail(BL_E_INVAL, "host block: kind %lld is not an FFN block", (long long)b->kind);
  else s = check_disk(b, "host block");
  if (s == BL_OK) {
    const size_t bytes = (size_t)n_tok * (size_t)c->p.n_embd * sizeof(float);
    memcpy(c->x, x, bytes);
    bl_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.n_tokens = n_tok;
    s = bl_cpu_begin(c, n_tok);
    if (s == BL_OK) {
      s = b->kind == BL_BLOCK_MOE ? bl_moe_block(c, b, &batch) : bl_ffn_block(c, b, &batch);
      bl_cpu_end(c);
    }
    if (s == BL_OK) memcpy(x, c->x, bytes);
  }
  if (s != BL_OK && err && err_len > 0) snprintf(err, (size_t)err_len, "%s", bl_last_error());
  return s;
}

int64_t bl_cpu_expert_rows(uint64_t h, const bl_block *b, int64_t n_tok, const float *x, const int32_t *sel, const float *selw, int64_t k,
                           float *out, char *err, int64_t err_len) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = BL_OK;
  if (!c || !b || !x || !sel || !selw || !out) s = bl_fail(BL_E_INVAL, "host experts: null argument");
  else if (n_tok <= 0 || n_tok > c->p.max_tokens)
    s = bl_fail(BL_E_INVAL, "host experts: %lld rows (the context takes 1..%lld)", (long long)n_tok, (long long)c->p.max_tokens);
  else if (b->kind != BL_BLOCK_MOE) s = bl_fail(BL_E_INVAL, "host experts: kind %lld is not a MoE block", (long long)b->kind);
  else if (k <= 0 || k > b->n_expert_used) s = bl_fail(BL_E_INVAL, "host experts: %lld picks a token (the block uses %lld)", (long long)k, (long long)b->n_expert_used);
  else s = check_disk(b, "host experts");
  if (s == BL_OK)
    for (int64_t i = 0; i < n_tok * k; i++)
      if (sel[i] < -1 || sel[i] >= b->n_expert) { /* -1: no pick (the card computes that one) */
        s = bl_fail(BL_E_INVAL, "host experts: pick %d outside the %lld experts", sel[i], (long long)b->n_expert);
        break;
      }
  if (s == BL_OK) {
    const size_t bytes = (size_t)n_tok * (size_t)c->p.n_embd * sizeof(float);
    memcpy(c->x, x, bytes);
    memcpy(c->sel, sel, sizeof(int32_t) * (size_t)(n_tok * k));
    memcpy(c->selw, selw, sizeof(float) * (size_t)(n_tok * k));
    s = bl_cpu_begin(c, n_tok);
    if (s == BL_OK) {
      s = bl_moe_picked(c, b, n_tok, k);
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

int64_t bl_cpu_block_rows_fn(uint64_t *out) {
  if (!out) return bl_fail(BL_E_INVAL, "block_rows_fn: null argument");
  bl_block_rows_fn f = bl_cpu_block_rows;
  bl_expert_rows_fn g = bl_cpu_expert_rows;
  out[0] = (uint64_t)(uintptr_t)f;
  out[1] = (uint64_t)(uintptr_t)g;
  return BL_OK;
}
