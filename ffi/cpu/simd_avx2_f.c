/* bloomery CPU library: AVX2 path (placeholder while its kernels are written). */
#include "kernels.h"
void bl_avx2_fill_f(bl_kernels *k) { (void)k; }
void bl_avx2_fill_k(bl_kernels *k) { (void)k; }
void bl_avx2_fill_q(bl_kernels *k) { (void)k; }
void bl_kernels_init_avx2(bl_kernels *k) {
  bl_avx2_fill_f(k);
  bl_avx2_fill_k(k);
  bl_avx2_fill_q(k);
}
