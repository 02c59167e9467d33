/* bloomery CPU library: the grid types' sign words decoded eight at a time (AVX2 integer ops on 256 bits;
 * included by simd_avx2_iq.c and simd_avx512_iq.c after their #pragma GCC target). */
#ifndef BL_SIMD_IQ_SIGNS_H
#define BL_SIMD_IQ_SIGNS_H
#include <immintrin.h>

/* Eight sign-and-scale words (a 32-element group each: 4 x 7-bit sign indices, a 4-bit scale on top) as sign
 * bytes: bit 7 the parity of the other seven, as bl_iq_signs7x4 forms them; dword c group c's 32 element
 * signs. */
static inline __attribute__((always_inline)) __m256i iq_signs8(__m256i w) {
  const __m256i m7 = _mm256_set1_epi32(0x7f);
  const __m256i x = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(w, m7), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w, 7), m7), 8)),
                                    _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w, 14), m7), 16),
                                                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w, 21), m7), 24)));
  __m256i par = _mm256_xor_si256(x, _mm256_srli_epi32(x, 4));
  par = _mm256_xor_si256(par, _mm256_srli_epi32(par, 2));
  par = _mm256_xor_si256(par, _mm256_srli_epi32(par, 1));
  return _mm256_or_si256(x, _mm256_slli_epi32(_mm256_and_si256(par, _mm256_set1_epi32(0x01010101)), 7));
}

#endif
