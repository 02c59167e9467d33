// bloomery: bun:ffi bindings of the CPU library's kernel paths, thread setter and probes
// (ffi/bloomery.h, "CPU kernel paths, threads and probes"), beside ffi/cpu.ts's core symbols.
import { dlopen, CString, ptr, type Pointer } from "bun:ffi";
import libPath from "../build/libbloomery_cpu.so" with { type: "file" };
import { check, cpu } from "./cpu.ts";

const i64 = "i64" as const, u64 = "u64" as const, p = "ptr" as const, cstring = "cstring" as const, f32 = "f32" as const;

export const kernelSymbols = {
  bl_cpu_path_name: { args: [], returns: p },
  bl_cpu_paths: { args: [], returns: i64 },
  bl_cpu_set_path: { args: [cstring], returns: i64 },
  bl_cpu_path_check: { args: [], returns: i64 },
  bl_cpu_usable_cores: { args: [], returns: i64 },
  bl_cpu_ctx_set_threads: { args: [u64, i64, i64], returns: i64 },
  bl_cpu_ctx_threads: { args: [u64, p, p], returns: i64 },
  bl_kernel_quantize: { args: [cstring, i64, p, p, i64], returns: i64 },
  bl_kernel_matmul: { args: [cstring, i64, p, i64, i64, p, i64, i64, p], returns: i64 },
  bl_kernel_float: { args: [cstring, i64, f32, p, p, i64, p], returns: i64 },
  bl_kernel_delta_rule: { args: [cstring, i64, i64, i64, i64, p, p, p, p, p, p, p], returns: i64 },
  bl_membw: { args: [i64, i64, i64, p], returns: i64 },
  bl_prefault: { args: [u64, u64], returns: i64 },
  bl_kernel_bench: { args: [cstring, i64, p, i64, i64, i64, i64, i64, i64, i64, p], returns: i64 },
} as const;

type Lib = ReturnType<typeof dlopen<typeof kernelSymbols>>["symbols"];
let lib: Lib | null = null;

/** The kernel symbols of the CPU library, opened on first use (after cpu(), which hands the library the path BLOOMERY_CPU_PATH asks for). */
export function kernels(): Lib {
  if (!lib) {
    cpu();
    lib = dlopen(libPath, kernelSymbols).symbols;
  }
  return lib;
}

/** The CPU kernel paths, in order of the bits of bl_cpu_paths (avx2, avx512 on x86-64; neon, dotprod, i8mm on aarch64). */
export const CPU_PATHS = ["scalar", "avx2", "avx512", "neon", "dotprod", "i8mm"] as const;
export type CpuPath = (typeof CPU_PATHS)[number];

const cs = (s: string): Buffer => Buffer.from(s + "\0", "utf8");

/** The path the kernels run on now. */
export function cpuPath(): CpuPath {
  const name = new CString(kernels().bl_cpu_path_name() as Pointer).toString();
  return name as CpuPath;
}

/** The paths this CPU can run. */
export function cpuPaths(): CpuPath[] {
  const m = Number(kernels().bl_cpu_paths());
  return CPU_PATHS.filter((_, i) => (m >> i) & 1);
}

/** Switch every later forward to `path` (throws NativeError when the CPU lacks it). */
export function setCpuPath(path: string): void {
  check(kernels().bl_cpu_set_path(cs(path)), `selecting CPU path ${path}`);
}

/** Cores the process may use (allowed CPUs capped by the cgroup quota). */
export function usableCores(): number {
  return Number(kernels().bl_cpu_usable_cores());
}

/** -t and -tb of a CPU context (each clamped to the usable cores). */
export function setCtxThreads(ctx: bigint, nThreads: number, nThreadsBatch: number): void {
  check(kernels().bl_cpu_ctx_set_threads(ctx, nThreads, nThreadsBatch), "setting the CPU threads");
}

export function ctxThreads(ctx: bigint): { nThreads: number; nThreadsBatch: number } {
  const a = new BigInt64Array(2);
  check(kernels().bl_cpu_ctx_threads(ctx, ptr(a), ptr(a, 8)), "reading the CPU threads");
  return { nThreads: Number(a[0]), nThreadsBatch: Number(a[1]) };
}

/** Memory read bandwidth in GB/s (best of `reps` passes over `bytes`, `threads` pinned threads). */
export function memoryBandwidth(threads: number, bytes: number, reps: number): number {
  const out = new Float64Array(1);
  check(kernels().bl_membw(threads, bytes, reps, ptr(out)), "measuring memory bandwidth");
  return out[0];
}

/** y[i][r] = W row r . x row i on one path (x converted by that path's quantizer). */
export function kernelMatmul(path: string, type: number, w: Uint8Array, rowStride: number, rows: number,
  x: Float32Array, nX: number, n: number): Float32Array {
  const y = new Float32Array(Math.max(1, nX * rows));
  check(kernels().bl_kernel_matmul(cs(path), type, ptr(w), rowStride, rows, ptr(x), nX, n, ptr(y)), `kernel matmul (${path}, type ${type})`);
  return y.subarray(0, nX * rows);
}

/** Convert x to an activation type on one path. */
export function kernelQuantize(path: string, actType: number, x: Float32Array, bytes: number): Uint8Array {
  const out = new Uint8Array(Math.max(1, bytes));
  check(kernels().bl_kernel_quantize(cs(path), actType, ptr(x), ptr(out), x.length), `kernel quantize (${path}, type ${actType})`);
  return out.subarray(0, bytes);
}

/** The float helpers of a path (see bl_kernel_float in ffi/bloomery.h). */
export const FloatOp = { dotF32: 0, dotF16: 1, axpyF16: 2, toF16: 3, roundF16: 4, swiglu: 5, expSum: 6, axpyF32: 7, scaleF32: 8 } as const;

/** Rows the float helpers read and write. */
export type FloatBuf = Float32Array | Uint16Array;

export function kernelFloat(path: string, op: number, a: number, x: FloatBuf, y: FloatBuf, n: number): number {
  const r = new Float64Array(1);
  check(kernels().bl_kernel_float(cs(path), op, a, ptr(x), ptr(y), n, ptr(r)), `kernel float op ${op} (${path})`);
  return r[0];
}

/** The forms of the gated delta rule (bl_kernel_delta_rule): a token at a time, in chunks of 64, or the one the op picks for the run. */
export const DeltaForm = { recurrent: 0, chunked: 1, auto: 2 } as const;

/** One head's inputs to the gated delta rule over n tokens: q, k n rows of hk; v n rows of hv; g (log decays) and beta n each. */
export interface DeltaInputs {
  n: number;
  hk: number;
  hv: number;
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  g: Float32Array;
  beta: Float32Array;
}

/** One head's gated delta rule on one path: the state (hv rows of hk) taken through the tokens in place, and the outputs (n rows of hv). */
export function kernelDeltaRule(path: string, form: number, x: DeltaInputs, state: Float32Array): Float32Array {
  const { n, hk, hv } = x;
  if (x.q.length < n * hk || x.k.length < n * hk || x.v.length < n * hv || x.g.length < n || x.beta.length < n || state.length < hk * hv)
    throw new RangeError("kernelDeltaRule: a buffer is shorter than its shape");
  const o = new Float32Array(Math.max(1, n * hv));
  const one = new Float32Array(1);
  const at = (a: Float32Array) => ptr(a.length ? a : one);
  check(kernels().bl_kernel_delta_rule(cs(path), form, n, hk, hv, at(x.q), at(x.k), at(x.v), at(x.g), at(x.beta), ptr(state), ptr(o)),
    `kernel delta rule (${path}, form ${form})`);
  return o.subarray(0, n * hv);
}

/** Best wall time in ns of one pass of a path's tile over `rows` rows against nA activation rows on `threads` threads. */
export function kernelBench(path: string, type: number, w: Uint8Array, rowStride: number, rows: number, n: number,
  nA: number, tileRows: number, threads: number, reps: number): number {
  const out = new Float64Array(1);
  check(kernels().bl_kernel_bench(cs(path), type, ptr(w), rowStride, rows, n, nA, tileRows, threads, reps, ptr(out)), `kernel bench (${path}, type ${type})`);
  return out[0];
}

/** Map every page of a read-only mapping into the page tables now (as llama's MAP_POPULATE does). */
export function prefault(base: bigint, size: bigint): void {
  check(kernels().bl_prefault(base, size), "prefaulting the model mapping");
}
