/* bloomery CPU library: rotary position embedding (see rope.h). */
#include "rope.h"
#include <math.h>

static float corr_dim(int n_rot, int n_ctx_orig, float n_turns, float base) {
  return n_rot * logf(n_ctx_orig / (n_turns * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

void bl_rope_init(bl_rope *r, const bl_rope_params *b) {
  r->n_rot = b->type == BL_ROPE_NONE ? 0 : (int)b->n_rot;
  r->mode = (int)b->type;
  r->base = (float)b->base;
  r->freq_scale = b->freq_scale > 0 ? (float)b->freq_scale : 1.0f;
  r->ext_factor = (float)b->ext_factor;
  r->attn_factor = b->attn_factor > 0 ? (float)b->attn_factor : 1.0f;
  r->corr_lo = 0;
  r->corr_hi = 0;
  if (r->ext_factor != 0 && b->orig_ctx > 0) {
    float lo = floorf(corr_dim(r->n_rot, (int)b->orig_ctx, (float)b->beta_fast, r->base));
    float hi = ceilf(corr_dim(r->n_rot, (int)b->orig_ctx, (float)b->beta_slow, r->base));
    r->corr_lo = lo > 0 ? lo : 0;
    r->corr_hi = hi < r->n_rot - 1 ? hi : (float)(r->n_rot - 1);
  }
}

static float ramp(float lo, float hi, int i0) {
  float y = (i0 / 2 - lo) / fmaxf(0.001f, hi - lo);
  return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

void bl_rope_apply(const bl_rope *r, float *v, int n_heads, int hd, int32_t pos) {
  const float theta_scale = powf(r->base, -2.0f / r->n_rot);
  float mscale = r->attn_factor;
  if (r->ext_factor != 0) mscale *= 1.0f + 0.1f * logf(1.0f / r->freq_scale);
  float theta_extrap = (float)pos;
  for (int i0 = 0; i0 < r->n_rot; i0 += 2) {
    float theta_interp = r->freq_scale * theta_extrap;
    float theta = theta_interp;
    if (r->ext_factor != 0) {
      float mix = ramp(r->corr_lo, r->corr_hi, i0) * r->ext_factor;
      theta = theta_interp * (1 - mix) + theta_extrap * mix;
    }
    float cs = cosf(theta) * mscale, sn = sinf(theta) * mscale;
    for (int h = 0; h < n_heads; h++) {
      float *x = v + (int64_t)h * hd;
      int a, b;
      if (r->mode == BL_ROPE_NEOX) { a = i0 / 2; b = i0 / 2 + r->n_rot / 2; }
      else { a = i0; b = i0 + 1; }
      float x0 = x[a], x1 = x[b];
      x[a] = x0 * cs - x1 * sn;
      x[b] = x0 * sn + x1 * cs;
    }
    theta_extrap *= theta_scale;
  }
}

/* Exported for tests: rotate n_heads vectors of hd floats at pos with these RoPE settings. */
int64_t bl_rope_apply_params(const bl_rope_params *b, float *v, int64_t n_heads, int64_t hd, int64_t pos) {
  if (!b || !v || n_heads <= 0 || hd <= 0 || b->n_rot > hd || b->n_rot % 2) return 1;
  bl_rope r;
  bl_rope_init(&r, b);
  bl_rope_apply(&r, v, (int)n_heads, (int)hd, (int32_t)pos);
  return 0;
}
