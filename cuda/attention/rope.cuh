// bloomery CUDA library: RoPE's rotation factors of pair p at a position, formed as the CPU
// reference forms them (theta_scale^p by repeated products, YaRN's ramp between the interpolated
// and extrapolated angles, the magnitude scale) - one copy for every kernel that rotates Q and K.
#pragma once
#include "common.cuh"
#include "internal.h"

__device__ __forceinline__ void rope_factors(const rope_params &r, int32_t pos, int p, float &cs, float &sn) {
  float theta_extrap = (float)pos;
  for (int s = 0; s < p; s++) theta_extrap *= r.theta_scale;
  const float theta_interp = r.freq_scale * theta_extrap;
  float theta = theta_interp;
  if (r.ext_factor != 0.0f) {
    const float y = ((float)p - r.corr_lo) / fmaxf(0.001f, r.corr_hi - r.corr_lo);
    const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * r.ext_factor;
    theta = theta_interp * (1 - mix) + theta_extrap * mix;
  }
  cs = cosf(theta) * r.mscale;
  sn = sinf(theta) * r.mscale;
}

// Pair p of a head's row src rotated by (cs, sn) into dst (either may be the other): elements p and
// p + n_rot / 2 (NEOX), else 2p and 2p + 1.
__device__ __forceinline__ void rope_pair(const float *src, float *dst, const rope_params &r, int p, float cs, float sn) {
  const int ia = r.mode == BL_ROPE_NEOX ? p : 2 * p, ib = r.mode == BL_ROPE_NEOX ? p + r.n_rot / 2 : 2 * p + 1;
  const float x0 = src[ia], x1 = src[ib];
  dst[ia] = x0 * cs - x1 * sn;
  dst[ib] = x0 * sn + x1 * cs;
}
// The same in place.
__device__ __forceinline__ void rope_rotate(float *xs, const rope_params &r, int p, float cs, float sn) { rope_pair(xs, xs, r, p, cs, sn); }
