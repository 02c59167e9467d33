/* bloomery native ABI: the one C header every native library (CPU, CUDA, Metal) implements
 * and the ffi/ TypeScript bindings reach through bun:ffi. Every entry point returns a status (BL_OK = 0) or a
 * value documented as such; the message of the last failure on this thread is bl_last_error().
 * Structs passed across the ABI are made of 8-byte slots only (int64_t, double, pointers),
 * so TypeScript lays them out by slot index (ffi/layout.ts) without padding rules. */
#ifndef BLOOMERY_H
#define BLOOMERY_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BL_ABI_VERSION 1

enum bl_status {
  BL_OK = 0,
  BL_E_INVAL = 1,       /* a bad argument (message says which) */
  BL_E_IO = 2,          /* a file could not be opened, read or mapped */
  BL_E_NOMEM = 3,       /* an allocation failed */
  BL_E_UNSUPPORTED = 4, /* a type or feature this library does not implement */
  BL_E_DEVICE = 5       /* a GPU runtime error */
};

int64_t bl_abi_version(void);
const char *bl_last_error(void);

/* ---- file mapping (weights are read through these, never copied into JavaScript) ---- */
/* Map a whole file read-only. *base receives the address, *size the length. */
int64_t bl_map_file(const char *path, uint64_t *base, uint64_t *size);
int64_t bl_unmap_file(uint64_t base, uint64_t size);
/* Copy len bytes at base+off into dst (bounds are the caller's mapping). */
int64_t bl_copy_bytes(uint64_t src, void *dst, uint64_t len);

/* ---- quant blocks ---- */
/* block_elems and block_bytes of a ggml type id; BL_E_UNSUPPORTED when unknown. */
int64_t bl_type_size(int64_t type, int64_t *block_elems, int64_t *block_bytes);
/* Reference (scalar) dequantization of n elements (n a multiple of the block). */
int64_t bl_dequantize(int64_t type, const void *src, float *dst, int64_t n);
/* Reference quantization of n floats into type (for the GGUF writer and activations). */
int64_t bl_quantize(int64_t type, const float *src, void *dst, int64_t n);
/* Dot products of `rows` rows of a weight matrix (type, row length n, row stride in bytes)
 * with one f32 vector x, converting x to the type's activation format as ggml does. */
int64_t bl_matvec_ref(int64_t type, const void *w, int64_t row_stride, int64_t rows,
                      const float *x, int64_t n, float *y);

#ifdef __cplusplus
}
#endif
#endif
