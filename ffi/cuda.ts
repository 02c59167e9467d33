// bloomery: bun:ffi bindings of the CUDA library (ffi/bloomery.h, "CUDA" section). The library
// is embedded in the executable like the CPU library; it loads without a driver or a GPU, and
// cudaStatus() says whether a usable card is there (and why not). A build made without nvcc
// embeds an empty placeholder, reported as "no CUDA library in this build".
import { CString, dlopen, ptr, type Pointer } from "bun:ffi";
import { statSync } from "node:fs";
import libPath from "../build/libbloomery_cuda.so" with { type: "file" };
import { NativeError } from "./cpu.ts";

const i64 = "i64" as const, u64 = "u64" as const, p = "ptr" as const;

export const cudaSymbols = {
  bl_cuda_abi_version: { args: [], returns: i64 },
  bl_cuda_last_error: { args: [], returns: p },
  bl_cuda_probe: { args: [p, p], returns: i64 },
  bl_cuda_device_info: { args: [i64, p], returns: i64 },
  bl_cuda_plan_bytes: { args: [p, p, p, p, p], returns: i64 },
  bl_cuda_weights_new: { args: [i64, p, p, p], returns: i64 },
  bl_cuda_check: { args: [p, p], returns: i64 },
  bl_cuda_weights_free: { args: [u64], returns: i64 },
  bl_cuda_ctx_new: { args: [u64, p, p, p], returns: i64 },
  bl_cuda_ctx_free: { args: [u64], returns: i64 },
  bl_cuda_forward: { args: [u64, p], returns: i64 },
  bl_cuda_forward_topk: { args: [u64, p, i64, p, p], returns: i64 },
  bl_cuda_kv_clear: { args: [u64, i64, i64], returns: i64 },
  bl_cuda_kv_copy: { args: [u64, i64, i64, i64], returns: i64 },
  bl_cuda_kv_pos_bytes: { args: [u64], returns: i64 },
  bl_cuda_kv_save: { args: [u64, i64, i64, p], returns: i64 },
  bl_cuda_kv_load: { args: [u64, i64, i64, p], returns: i64 },
  bl_cuda_kv_stash: { args: [u64, i64, i64, p], returns: i64 },
  bl_cuda_kv_unstash: { args: [u64, u64, i64, i64], returns: i64 },
  bl_cuda_kv_stash_free: { args: [u64, u64], returns: i64 },
  bl_cuda_free_bytes: { args: [u64, p], returns: i64 },
  bl_cuda_rs_bytes: { args: [u64], returns: i64 },
  bl_cuda_rs_save: { args: [u64, i64, p], returns: i64 },
  bl_cuda_rs_load: { args: [u64, i64, p], returns: i64 },
  bl_cuda_rs_snap_reserve: { args: [u64], returns: i64 },
  bl_cuda_rs_snap_take: { args: [u64, i64], returns: i64 },
  bl_cuda_rs_snap_back: { args: [u64, i64], returns: i64 },
  bl_cuda_set_option: { args: [u64, i64, i64], returns: i64 },
  bl_cuda_set_host: { args: [u64, u64, u64, u64], returns: i64 },
  bl_cuda_host_stats: { args: [u64, p, i64], returns: i64 },
  bl_cuda_share_decide: { args: [i64, i64, "f64", "f64", "f64", "f64", "f64"], returns: i64 },
  bl_cuda_share_climb: { args: [i64, i64, "f64", p, p, i64], returns: i64 },
  bl_cuda_ctx_stats: { args: [u64, p, i64], returns: i64 },
  bl_cuda_test_matmul: { args: [i64, i64, i64, p, i64, i64, p, i64, i64, p], returns: i64 },
  bl_cuda_test_dequant: { args: [i64, i64, p, i64, p], returns: i64 },
  bl_cuda_test_route_sigmoid: { args: [i64, p, p, i64, i64, i64, i64, i64, i64, "f64", p, p], returns: i64 },
  bl_cuda_test_launch: { args: [i64, i64, i64, p, p], returns: i64 },
  bl_cuda_test_launch_host: { args: [i64, i64, i64, p], returns: i64 },
  bl_cuda_test_replay: { args: [u64, i64, p], returns: i64 },
} as const;

type Lib = ReturnType<typeof dlopen<typeof cudaSymbols>>["symbols"];

/**
 * Option keys of bl_cuda_set_option (cuda/runtime/ctx.h); uploadMin: batches of at least this many tokens
 * upload their host experts (cuda/hybrid/hybrid.cu; 0 never; the cost model sets it); cardShare: of a token's
 * picks in a host-expert layer, how many the card computes reading them from host memory (one-token steps);
 * promoteSlots: card slots a host layer for its hottest experts (run-time promotion; 0 off); hostShare: of
 * an upload step's host layers, the share in thousandths the CPU runs while the next ones upload (-1:
 * the cost model); sparseUpload: an upload step copies only the experts its picks use, a layer at a time
 * (1), every layer whole two ahead (0), or by the share the last upload step's picks used (-1, the default);
 * mmaPairs: decode batches' MoE layers whose experts got fewer pairs each than this (thousandths; 0:
 * never) in the last batches take the dp4a kernels instead of the tensor cores (3000 by default);
 * foAccLimit: the power of two (-126..22, 22 by default) from which a partial logit of the fused router
 * takes the float sums instead of CudaFast.foAcc's accumulators (tests lower it); cpuTokens: sparse prompt
 * layers give the CPU the used experts with at most twice this many tokens that no copy ahead brought (copies
 * ahead skip those the last picks gave at most this many; 0 off, 65536 all of them without the time cap (tests),
 * -1 BLOOMERY_HYBRID_CPU_TOKENS or the default;
 * cuda/hybrid/cpu_share.cu). carveout (percent of L1/shared memory every kernel prefers, -1 the driver's
 * choice) is process-wide (a kernel attribute); pdl (programmatic dependent launch) and fast (the
 * kernels in use, bits of CudaFast; `default` at first) are the context's, like the rest. Each
 * starts at the context's bl_cuda_options (src/engine/cuda-options.ts).
 */
export const CudaOption = { graphs: 1, prefillMin: 2, maxSplits: 3, carveout: 16, pdl: 17, fast: 18, invariant: 19, uploadMin: 20, cardShare: 21, promoteSlots: 22, hostShare: 23, sparseUpload: 24, mmaPairs: 25, foAccLimit: 26, cpuTokens: 27 } as const;

/**
 * Bits of CudaOption.fast (cuda/internal.h FAST_*): products (staged one-token products), experts
 * (one-token gate/up and down), attention (fused one-token attention), int8 (Q4_K / Q6_K rows on
 * int8 activations), fusedRouter (the router folded into the attention output product, the
 * experts selected once; needs experts), headGroups (one-token attention a block per head group
 * and slice; before attention), x8 (decode batches' int8 products take their activation rows
 * quantized once a launch, not by each block: the same values; off for A/B runs), combine (decode
 * batches' expert outputs added to x by the next layer's row quantization), qkAttention (decode batches of distinct slots: Q/K
 * norm, RoPE and the cache write inside the attention), attnX8 (decode batches' attention writes its
 * output rows' int8 slots; the output product skips their quantization launch), gemmRaw (prompt products copy
 * each K slice's stored blocks at once), gemm16 (prompt batches' dense products from an f16 copy of the
 * weights), routeBig (prompt batches' router as a tiled product), fa2 (prompt attention sharing K/V tiles
 * across a KV group's heads), gemmB16 (prompt batches' expert products on f16 activation rows), qkTok
 * (Q/K norm, RoPE and cache write a block a token), downGroups (decode batches' grouped down: a lane
 * group of 4 a row of up to 48 int8 units), down1 (the one-token down's lanes over every pick's units),
 * guMma (decode batches' Q4_K gate/up as int8 tensor-core products), downMma (their Q4_K / Q6_K down
 * likewise; before downGroups), act8 (the one-token gate/up quantizes its SwiGLU rows for down), l2Kv
 * (one token's Q/K/V product fetches the slot's cached keys and values into L2 for the attention; a
 * hint only), attnMma (one token's attention past 1,024 positions
 * with 8 query heads of 128 a KV head forms its scores and values on the tensor cores), foAcc
 * (the fused output + router's blocks add their partial logits into one 64-bit integer accumulator an
 * expert, which the picker reads instead of summing every block's partials: integer sums, the same bits
 * in any order; a partial of 2^22 or more takes the float sums),
 * a2Merge (long contexts' one-token attention merges its slices in a kernel of its own, a block a head),
 * tmaGu (the one-token gate/up copies its rows by two bulk copies a block, sm_90+).
 * 0: the general kernels only. The library starts with `default` = `all`. Bits 256 (pick), 4194304
 * (att8), 8388608 (l2Down), 33554432 (l2Weights) and 134217728 (pickx) were deleted with their
 * kernels (measured slower or no faster on the H200; docs/cuda.md "The fast bits"); the library
 * ignores them.
 */
export const CudaFast = { products: 1, experts: 2, attention: 4, int8: 8, fusedRouter: 16, headGroups: 32, x8: 64, combine: 128, qkAttention: 512, attnX8: 1024, gemmRaw: 2048, gemm16: 4096, routeBig: 8192, fa2: 16384, gemmB16: 32768, qkTok: 65536, downGroups: 131072, down1: 262144, guMma: 524288, downMma: 1048576, act8: 2097152, l2Kv: 16777216, attnMma: 67108864, foAcc: 268435456, a2Merge: 536870912, tmaGu: 1073741824, all: 1967128319, default: 1967128319 } as const;

export interface CudaDeviceInfo {
  index: number;
  name: string;
  ccMajor: number;
  ccMinor: number;
  smCount: number;
  totalBytes: number;
  freeBytes: number;
  driverVersion: number;
  runtimeVersion: number;
  l2Bytes: number;
  hasCode: boolean;
}

export interface CudaStatus {
  /** a driver, at least one device, and code in this build for device 0 */
  ok: boolean;
  /** why not (empty when ok) */
  reason: string;
  devices: number;
  driverVersion: number;
}

let lib: Lib | null = null;
let loadError = "";
let status: CudaStatus | undefined;

/** The CUDA library's symbols, or null (cudaStatus().reason says why). */
export function cudaLib(): Lib | null {
  if (lib || loadError) return lib;
  try {
    if (statSync(libPath).size === 0) {
      loadError = "this build has no CUDA library (it was built without nvcc)";
      return null;
    }
    lib = dlopen(libPath, cudaSymbols).symbols;
  } catch (e) {
    loadError = `the CUDA library could not be loaded: ${e instanceof Error ? e.message : String(e)}`;
  }
  return lib;
}

/** The CUDA library; throws when it is not there. */
export function cuda(): Lib {
  const l = cudaLib();
  if (!l) throw new NativeError(5, loadError);
  return l;
}

/** The CUDA library's message of its last failure on this thread ("" without the library). */
export function cudaLastError(): string {
  const l = cudaLib();
  const q = l ? (l.bl_cuda_last_error() as Pointer | null) : null;
  return q ? new CString(q).toString() : "";
}

/** Throws NativeError with the CUDA library's message when status is not BL_OK. */
export function checkCuda(s: number | bigint, what: string): void {
  const n = Number(s);
  if (n === 0) return;
  const msg = cudaLastError();
  throw new NativeError(n, `${what}: ${msg || `CUDA library status ${n}`}`);
}

/** Whether a usable card is present (probed once per process). */
export function cudaStatus(): CudaStatus {
  if (status) return status;
  const l = cudaLib();
  if (!l) return (status = { ok: false, reason: loadError, devices: 0, driverVersion: 0 });
  const out = new BigInt64Array(2);
  const s = Number(l.bl_cuda_probe(ptr(out), ptr(out, 8)));
  if (s !== 0) return (status = { ok: false, reason: cudaLastError() || `status ${s}`, devices: 0, driverVersion: Number(out[1]) });
  const st: CudaStatus = { ok: true, reason: "", devices: Number(out[0]), driverVersion: Number(out[1]) };
  const d = cudaDeviceInfo(0);
  if (!d.hasCode) {
    st.ok = false;
    st.reason = `${d.name} (compute capability ${d.ccMajor}.${d.ccMinor}) has no code in this build (sm_86, sm_90, sm_120a, PTX compute_120)`;
  }
  return (status = st);
}

const DEVICE_SLOTS = 23;

/** Properties and free memory of device i. */
export function cudaDeviceInfo(i: number): CudaDeviceInfo {
  const buf = new BigInt64Array(DEVICE_SLOTS);
  checkCuda(cuda().bl_cuda_device_info(i, ptr(buf)), `reading CUDA device ${i}`);
  const bytes = new Uint8Array(buf.buffer, 11 * 8, 96);
  const end = bytes.indexOf(0);
  const n = (k: number) => Number(buf[k]);
  return {
    index: n(0), ccMajor: n(1), ccMinor: n(2), smCount: n(3), totalBytes: n(4), freeBytes: n(5),
    driverVersion: n(6), runtimeVersion: n(7), l2Bytes: n(8), hasCode: n(10) !== 0,
    name: new TextDecoder().decode(bytes.subarray(0, end < 0 ? 96 : end)),
  };
}
