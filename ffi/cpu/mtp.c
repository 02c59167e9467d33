/* bloomery CPU library: the MTP_IN op (bloomery.h), the input of an MTP (next-token prediction) layer as
 * llama.cpp's nextn draft builds it: each row's token embedding and the hidden state the batch gives for the
 * row, each RMS-normalised by its own weight, concatenated (embedding first) and projected by eh_proj. */
#include "ctx.h"
#include "common.h"
#include <string.h>

static int64_t vec_ok(const bl_tensor *t, int64_t n, const char *what) {
  if (!t->data) return bl_fail(BL_E_INVAL, "missing %s", what);
  if (t->type != BL_F32 && t->type != BL_F16 && t->type != BL_BF16)
    return bl_fail(BL_E_UNSUPPORTED, "%s: a vector of type %lld (F32, F16 or BF16)", what, (long long)t->type);
  if (t->ne[0] != n) return bl_fail(BL_E_INVAL, "%s: %lld elements, %lld expected", what, (long long)t->ne[0], (long long)n);
  return BL_OK;
}

int64_t bl_mtp_in_check(const bl_ctx_params *p, const bl_op *op) {
  if (BL_OP_PARAMS(op, bl_norm_params)->kind != BL_NORM_RMS) return bl_fail(BL_E_UNSUPPORTED, "norm kind %lld", (long long)BL_OP_PARAMS(op, bl_norm_params)->kind);
  const int64_t E = p->n_embd;
  const bl_tensor *te = bl_op_t(op, BL_MTP_EMBED), *w = bl_op_t(op, BL_MTP_EH_PROJ);
  const bl_type_traits *tr = te->data ? bl_traits((int32_t)te->type) : NULL;
  if (!tr || !tr->to_float)
    return bl_fail(BL_E_UNSUPPORTED, "the embedding of type %s (ggml type %lld) cannot be read on the CPU", bl_type_name(te->type), (long long)te->type);
  if (te->ne[0] != E) return bl_fail(BL_E_INVAL, "embedding rows of %lld elements, n_embd is %lld", (long long)te->ne[0], (long long)E);
  int64_t s;
  if ((s = vec_ok(bl_op_t(op, BL_MTP_ENORM), E, "enorm")) || (s = vec_ok(bl_op_t(op, BL_MTP_HNORM), E, "hnorm"))) return s;
  if (!w->data) return bl_fail(BL_E_INVAL, "missing eh_proj");
  if (w->ne[0] != 2 * E || w->ne[1] != E) return bl_fail(BL_E_INVAL, "eh_proj of %lld x %lld, %lld x %lld expected", (long long)w->ne[0], (long long)w->ne[1], (long long)(2 * E), (long long)E);
  /* the concatenated rows live in the attention's output rows and go through the products' row conversion */
  if (p->max_q_dim < 2 * E) return bl_fail(BL_E_INVAL, "the context's max_q_dim %lld is below the MTP input's %lld (2 x n_embd)", (long long)p->max_q_dim, (long long)(2 * E));
  return bl_weight_type_check(w, "eh_proj");
}

int64_t bl_mtp_in_op(bl_cpu_ctx *c, const bl_op *op, const bl_batch *batch) {
  const int64_t E = c->p.n_embd, n = batch->n_tokens, E2 = 2 * E;
  const float *hid = (const float *)(uintptr_t)batch->hidden_in;
  if (!hid) return bl_fail(BL_E_INVAL, "mtp input: the batch gives no hidden_in rows");
  const bl_tensor *te = bl_op_t(op, BL_MTP_EMBED);
  const bl_type_traits *tr = bl_traits((int32_t)te->type);
  const int32_t *tok = (const int32_t *)(uintptr_t)batch->tokens;
  float *cat = c->att; /* n rows of 2E: [embedding | hidden] */
  for (int64_t t = 0; t < n; t++) {
    if (tok[t] < 0 || tok[t] >= te->ne[1]) return bl_fail(BL_E_INVAL, "mtp input: token id %d outside the vocabulary of %lld", tok[t], (long long)te->ne[1]);
    tr->to_float(bl_tensor_row(te, 0, tok[t]), cat + t * E2, E);
  }
  const float eps = (float)BL_OP_PARAMS(op, bl_norm_params)->eps;
  int64_t s;
  if ((s = bl_rmsnorm_rows(c, cat, E2, cat, E2, n, E, bl_op_t(op, BL_MTP_ENORM), eps))) return s;
  if ((s = bl_rmsnorm_rows(c, hid, E, cat + E, E2, n, E, bl_op_t(op, BL_MTP_HNORM), eps))) return s;
  return bl_matmul(c, bl_op_t(op, BL_MTP_EH_PROJ), 0, cat, E2, n, c->x, E);
}
