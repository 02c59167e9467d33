/* bloomery CPU library: the host hook - one MoE (or FFN) block on residual rows a caller owns,
 * for a card's step whose block keeps its experts in host memory (cuda/hybrid.cu calls it from a
 * stream callback). The rows are computed as bl_cpu_forward computes that block. */
#include "ctx.h"
#include "common.h"
#include <stdio.h>
#include <string.h>

int64_t bl_cpu_block_rows(uint64_t h, const bl_block *b, int64_t n_tok, float *x, char *err, int64_t err_len) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = BL_OK;
  if (!c || !b || !x) s = bl_fail(BL_E_INVAL, "host block: null argument");
  else if (n_tok <= 0 || n_tok > c->p.max_tokens)
    s = bl_fail(BL_E_INVAL, "host block: %lld rows (the context takes 1..%lld)", (long long)n_tok, (long long)c->p.max_tokens);
  else if (b->kind != BL_BLOCK_MOE && b->kind != BL_BLOCK_FFN) s = bl_fail(BL_E_INVAL, "host block: kind %lld is not an FFN block", (long long)b->kind);
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

int64_t bl_cpu_block_rows_fn(uint64_t *out) {
  if (!out) return bl_fail(BL_E_INVAL, "block_rows_fn: null argument");
  bl_block_rows_fn f = bl_cpu_block_rows;
  *out = (uint64_t)(uintptr_t)f;
  return BL_OK;
}
