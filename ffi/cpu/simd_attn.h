/* bloomery CPU library: the attention sub-tile kernels' shared definition (kernels.h's attn_prep
 * and attn_heads): runs of up to BL_ATTN_SUB positions of a KV head against the query heads that
 * share it. */
#ifndef BL_SIMD_ATTN_H
#define BL_SIMD_ATTN_H
#include "kernels.h"

#define BL_ATTN_SUB 64

/* Floats of work space attn_prep / attn_heads need for head size hd. */
static inline int64_t bl_attn_work(int64_t hd) { return 2 * BL_ATTN_SUB * hd + BL_ATTN_SUB; }

/* The generic heads step (the scalar path, and the SIMD paths for head sizes not a multiple of
 * 16; its prep keeps nothing): per head, scores by k's dot_f16 on the f16 rows, the
 * online-softmax update, values by k's axpy_f16. */
void bl_attn_sub_generic(const bl_kernels *k, const float *q, int64_t qstride, int G, const uint16_t *kr,
                         const uint16_t *vr, int64_t kd, int nb, int hd, float scale, float *st, float *work);
#endif
