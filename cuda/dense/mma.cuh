// bloomery CUDA library: tensor-core building blocks (sm_80 and newer): ldmatrix fragment loads
// from shared memory and the m16n8k16 f16 product with f32 accumulators.
//   A (16x16, row): a0 rows g cols 2t..2t+1, a1 rows g+8, a2 cols +8, a3 rows g+8 cols +8
//   B (16x8, col):  b0 k 2t..2t+1 col g, b1 k +8;  C: c0,c1 row g cols 2t..2t+1, c2,c3 row g+8
// (g = lane / 4, t = lane % 4).
#pragma once
#include "common.cuh"

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_h2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t *>(&h);
}
// Four floats as four halves at p (8-byte aligned).
__device__ __forceinline__ void st_h4(__half *p, float a, float b, float c, float d) {
  uint2 v;
  v.x = pack_h2(a, b);
  v.y = pack_h2(c, d);
  *reinterpret_cast<uint2 *>(p) = v;
}

// m16n8k32 s8 x s8 -> s32, accumulating into c (g = lane / 4, t = lane % 4):
//   A (16x32, row): a0 row g k 4t..4t+3, a1 row g+8, a2 row g k 16+4t.., a3 row g+8 k 16+4t..
//   B (32x8, col):  b0 k 4t..4t+3 col g, b1 k 16+4t..;  C: c0,c1 row g cols 2t, 2t+1; c2,c3 row g+8
__device__ __forceinline__ void mma_s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
