/* bloomery CPU library: rotary position embedding (normal and NEOX pair layouts, YaRN), as
 * ggml's rope with ext_factor / attn_factor / beta_fast / beta_slow defines it. */
#ifndef BL_ROPE_H
#define BL_ROPE_H
#include "../bloomery.h"

typedef struct {
  int n_rot, mode;
  float base, freq_scale, ext_factor, attn_factor;
  float corr_lo, corr_hi;
} bl_rope;

void bl_rope_init(bl_rope *r, const bl_rope_params *p);
/* Rotate the first n_rot dims of each of n_heads vectors (stride hd) at position pos. */
void bl_rope_apply(const bl_rope *r, float *v, int n_heads, int hd, int32_t pos);
#endif
