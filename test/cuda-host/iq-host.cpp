// bloomery tests: the card's grid-type readers (cuda/quants/quants_iq.cuh) run on the CPU through the host
// stand-in (common.cuh here; test/cuda-iq-host.test.ts builds and runs this): every type's qt<T>
// units against the CPU library's bl_dequantize bit for bit, and its d8<T> int8-activation dot on
// an x8 row (dot8.cuh's layout, chunks in x8_pos order) against the float64 sum of the dequantized
// weights times the int8 activations' values. Random blocks (every field but the scale d random).
// Q2_K's and Q3_K's qt<T> units (cuda/quants/quants.cuh) too, dequantization only (the card has no
// int8 dot for them). Prints a line per type; exits 1 if any differs.
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include "dot8.cuh"
extern "C" int64_t bl_synth_fill(int64_t type, void *dst, int64_t first_block, int64_t n_blocks, uint64_t seed, double weight_std, int64_t flags);
extern "C" int64_t bl_dequantize(int64_t type, const void *src, float *dst, int64_t n);

static uint32_t rs = 12345;
static uint32_t rnd() { rs = rs * 1664525u + 1013904223u; return rs >> 8; }

// qt<T>'s units of nblk blocks at w against bl_dequantize: the CPU's values into ref, the count of elements differing in bits
template <int T>
static int dequant_diff(const char *name, const std::vector<uint8_t> &w, int nblk, std::vector<float> &ref) {
  using Q = qt<T>;
  const int n = nblk * 256;
  std::vector<float> got(n);
  ref.assign(n, 0.0f);
  bl_dequantize(T, w.data(), ref.data(), n);
  for (int b = 0; b < nblk; b++)
    for (int u = 0; u < Q::UPB; u++)
      Q::unit(w.data() + (size_t)b * Q::BB, u, [&](int pos, float a, float c, float d, float e) {
        float *y = got.data() + (size_t)b * 256 + pos;
        y[0] = a; y[1] = c; y[2] = d; y[3] = e;
      });
  int bad = 0;
  for (int i = 0; i < n; i++) if (memcmp(&ref[i], &got[i], 4)) { if (bad < 3) printf("  %s dequant %d: %g vs %g\n", name, i, got[i], ref[i]); bad++; }
  return bad;
}

template <int T>
static int check(const char *name) {
  using Q = qt<T>;
  using D = d8<T>;
  const int nblk = 48, n = nblk * 256;
  std::vector<uint8_t> w((size_t)nblk * Q::BB + 16);
  bl_synth_fill(T, w.data(), 0, nblk, 7, 0.05, 0);
  for (int i = 0; i < nblk * Q::BB; i++) { // random fields but d (IQ1_M: d in the top nibbles of bytes 49, 51, 53, 55)
    const int at = i % Q::BB;
    if (T != T_IQ1_M && at < 2) continue;
    if (T == T_IQ1_M && at >= 48 && at % 2 == 1) w[i] = (w[i] & 0xf0) | (rnd() & 15);
    else w[i] = (uint8_t)rnd();
  }
  std::vector<float> ref;
  const int bad = dequant_diff<T>(name, w, nblk, ref);
  // x8 row: groups of 32 quantized (amax / 127), chunks in x8_pos order
  std::vector<float> x(n);
  for (int i = 0; i < n; i++) x[i] = (float)((int)(rnd() & 0xffff) - 32768) / 32768.0f;
  std::vector<uint8_t> buf((size_t)x8_bytes(n) + 64);
  int8_t *q = (int8_t *)buf.data();
  float *dd = (float *)(buf.data() + n), *ss = dd + n / 32;
  int *hh = (int *)(ss + n / 32);
  std::vector<int8_t> qe(n);
  for (int g = 0; g < n / 32; g++) {
    float amax = 0, sum = 0;
    for (int j = 0; j < 32; j++) { amax = fmaxf(amax, fabsf(x[32 * g + j])); sum += x[32 * g + j]; }
    dd[g] = amax / 127.0f; ss[g] = sum;
    for (int j = 0; j < 32; j++) qe[32 * g + j] = (int8_t)lrintf(x[32 * g + j] * 127.0f / amax);
    hh[2 * g] = hh[2 * g + 1] = 0;
  }
  for (int c = 0; c < n / 16; c++) memcpy(q + 16 * x8_pos(c, n), qe.data() + 16 * c, 16);
  const x8v xv = x8_at(buf.data(), n);
  double sref = 0, sabs = 0;
  for (int i = 0; i < n; i++) { const double xv8 = (double)dd[i / 32] * qe[i]; sref += (double)ref[i] * xv8; sabs += fabs((double)ref[i] * xv8); }
  float sgot = 0;
  for (int b = 0; b < nblk; b++)
    for (int u = 0; u < D::UPB; u++) sgot += D::unit(w.data() + (size_t)b * Q::BB, u, xv, b * 8);
  const double rel = fabs(sgot - sref) / sabs;
  printf("%s: dequant %d of %d elements differ in bits; d8 dot %.6g vs %.6g (|err| / sum|w x| %.2e)\n", name, bad, n, (double)sgot, sref, rel);
  return bad || rel > 1e-5;
}

// Q2_K / Q3_K: every byte random but the f16 scales (bytes 80..83 of Q2_K, 108..109 of Q3_K)
template <int T>
static int check_k(const char *name, int d_at) {
  using Q = qt<T>;
  const int nblk = 48, n = nblk * 256;
  std::vector<uint8_t> w((size_t)nblk * Q::BB + 16);
  bl_synth_fill(T, w.data(), 0, nblk, 7, 0.05, 0);
  for (int i = 0; i < nblk * Q::BB; i++)
    if (i % Q::BB < d_at) w[i] = (uint8_t)rnd();
  std::vector<float> ref;
  const int bad = dequant_diff<T>(name, w, nblk, ref);
  printf("%s: dequant %d of %d elements differ in bits\n", name, bad, n);
  return bad != 0;
}

int main() {
  int f = 0;
  f |= check_k<T_Q2_K>("Q2_K", 80);
  f |= check_k<T_Q3_K>("Q3_K", 108);
  f |= check<T_IQ2_XXS>("IQ2_XXS");
  f |= check<T_IQ2_XS>("IQ2_XS");
  f |= check<T_IQ2_S>("IQ2_S");
  f |= check<T_IQ3_XXS>("IQ3_XXS");
  f |= check<T_IQ3_S>("IQ3_S");
  f |= check<T_IQ1_S>("IQ1_S");
  f |= check<T_IQ1_M>("IQ1_M");
  printf(f ? "FAIL\n" : "all ok\n");
  return f;
}
