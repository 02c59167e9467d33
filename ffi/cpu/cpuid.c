/* bloomery CPU library: run-time choice of the kernel path - on x86-64 from cpuid and xgetbv, on
 * aarch64 from the hardware capability bits (getauxval AT_HWCAP / AT_HWCAP2 on Linux, sysctl on
 * macOS), never from the build machine - the BLOOMERY_CPU_PATH override, and the exported path
 * queries. A path of the other architecture is never supported. */
#include "common.h"
#include "kernels.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

static const char *const path_names[BL_PATH_COUNT] = {"scalar", "avx2", "avx512", "neon", "dotprod", "i8mm"};
#define PATH_LIST "scalar, avx2, avx512, neon, dotprod, i8mm"

#if defined(__x86_64__)
static uint64_t xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

/* Feature bits of this CPU, and whether the OS saves the YMM / ZMM state. */
static int detect(bl_path p) {
  unsigned a, b, c, d;
  if (p == BL_PATH_SCALAR) return 1;
  if (p != BL_PATH_AVX2 && p != BL_PATH_AVX512) return 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
  if (!osxsave || !fma || !f16c) return 0;
  const uint64_t xcr0 = xgetbv0();
  if ((xcr0 & 0x6) != 0x6) return 0; /* XMM and YMM state */
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  const int avx2 = (b >> 5) & 1, bmi2 = (b >> 8) & 1;
  if (!avx2 || !bmi2) return 0;
  if (p == BL_PATH_AVX2) return 1;
  /* AVX-512 path: F, DQ, BW, VL and VNNI, with the OS saving opmask and ZMM state */
  const int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
  const int vnni = (c >> 11) & 1;
  if ((xcr0 & 0xe6) != 0xe6) return 0;
  return f && dq && bw && vl && vnni;
}
#elif defined(__aarch64__)
/* Advanced SIMD (every aarch64 Linux has it, but the bit is the word), the dot product
 * instructions (FEAT_DotProd: sdot / udot) and the int8 matrix multiply (FEAT_I8MM: smmla). */
#if defined(__linux__)
static int feature(int which) {
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  switch (which) {
    case 0: return (hw >> 1) & 1;   /* HWCAP_ASIMD */
    case 1: return (hw >> 20) & 1;  /* HWCAP_ASIMDDP */
    default: return (hw2 >> 13) & 1; /* HWCAP2_I8MM */
  }
}
#elif defined(__APPLE__)
static int feature(int which) {
  const char *name = which == 0 ? "hw.optional.AdvSIMD" : which == 1 ? "hw.optional.arm.FEAT_DotProd" : "hw.optional.arm.FEAT_I8MM";
  int v = 0;
  size_t len = sizeof v;
  if (sysctlbyname(name, &v, &len, NULL, 0) != 0) return which == 0; /* Advanced SIMD is in every Apple arm64 CPU */
  return v != 0;
}
#else
static int feature(int which) { return which == 0; }
#endif

static int detect(bl_path p) {
  switch (p) {
    case BL_PATH_SCALAR: return 1;
    case BL_PATH_NEON: return feature(0);
    case BL_PATH_DOTPROD: return feature(0) && feature(1);
    case BL_PATH_I8MM: return feature(0) && feature(1) && feature(2);
    default: return 0;
  }
}
#else
static int detect(bl_path p) { return p == BL_PATH_SCALAR; }
#endif

static bl_kernels tables[BL_PATH_COUNT];
static int supported[BL_PATH_COUNT];
static const bl_kernels *active;
static char env_error[256]; /* bl_cpu_select_path's refusal ("": none) */
static int best_path;
static pthread_once_t once = PTHREAD_ONCE_INIT;

int bl_path_by_name(const char *name) {
  for (int i = 0; i < BL_PATH_COUNT; i++)
    if (name && strcmp(name, path_names[i]) == 0) return i;
  return -1;
}

static void init(void) {
  tables[BL_PATH_SCALAR] = bl_kernels_scalar;
  supported[BL_PATH_SCALAR] = 1;
  for (int p = BL_PATH_SCALAR + 1; p < BL_PATH_COUNT; p++) {
    supported[p] = detect((bl_path)p);
    if (!supported[p]) continue;
    tables[p] = bl_kernels_scalar; /* entries a path leaves NULL fall back to the reference */
    tables[p].name = path_names[p];
    tables[p].path = (bl_path)p;
#if defined(__x86_64__)
    if (p == BL_PATH_AVX2) bl_kernels_init_avx2(&tables[p]);
    else bl_kernels_init_avx512(&tables[p]);
#elif defined(__aarch64__)
    bl_kernels_init_neon(&tables[p], (bl_path)p);
#endif
  }
  int best = BL_PATH_SCALAR;
  for (int p = 0; p < BL_PATH_COUNT; p++)
    if (supported[p]) best = p;
  active = &tables[best];
  best_path = best;
}

const bl_kernels *bl_kern(void) {
  pthread_once(&once, init);
  return active;
}

int bl_path_supported(bl_path p) {
  pthread_once(&once, init);
  return p >= 0 && p < BL_PATH_COUNT && supported[p];
}

const bl_kernels *bl_kern_path(bl_path p) {
  pthread_once(&once, init);
  return bl_path_supported(p) ? &tables[p] : NULL;
}

/* ---- exported ---- */

int64_t bl_cpu_path_check(void) {
  pthread_once(&once, init);
  if (env_error[0]) return bl_fail(BL_E_UNSUPPORTED, "%s", env_error);
  return BL_OK;
}

const char *bl_cpu_path_name(void) { return bl_kern()->name; }

int64_t bl_cpu_paths(void) {
  pthread_once(&once, init);
  int64_t m = 0;
  for (int p = 0; p < BL_PATH_COUNT; p++)
    if (supported[p]) m |= (int64_t)1 << p;
  return m;
}

int64_t bl_cpu_select_path(const char *name) {
  pthread_once(&once, init);
  env_error[0] = 0;
  active = &tables[best_path];
  if (!name || !*name || strcmp(name, "auto") == 0) return BL_OK;
  int p = bl_path_by_name(name);
  if (p < 0)
    snprintf(env_error, sizeof env_error, "BLOOMERY_CPU_PATH=%s is not a path (" PATH_LIST " or auto)", name);
  else if (!supported[p])
    snprintf(env_error, sizeof env_error, "BLOOMERY_CPU_PATH=%s: this CPU lacks the instructions of that path", name);
  else active = &tables[p];
  return env_error[0] ? bl_fail(BL_E_UNSUPPORTED, "%s", env_error) : BL_OK;
}

int64_t bl_cpu_set_path(const char *name) {
  pthread_once(&once, init);
  int p = bl_path_by_name(name);
  if (p < 0) return bl_fail(BL_E_INVAL, "cpu path '%s' is not one of " PATH_LIST, name ? name : "(null)");
  if (!supported[p]) return bl_fail(BL_E_UNSUPPORTED, "cpu path '%s': this CPU lacks the instructions of that path", name);
  active = &tables[p];
  env_error[0] = 0;
  return BL_OK;
}
