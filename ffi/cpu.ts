// bloomery: bun:ffi bindings of the CPU library (ffi/bloomery.h). The library is embedded in
// the compiled executable; dlopen takes the path Bun gives for the embedded file.
import { dlopen, CString, type Pointer } from "bun:ffi";
import libPath from "../build/libbloomery_cpu.so" with { type: "file" };

const i64 = "i64" as const, u64 = "u64" as const, ptr = "ptr" as const, cstring = "cstring" as const, f64 = "f64" as const;

export const cpuSymbols = {
  bl_abi_version: { args: [], returns: i64 },
  bl_last_error: { args: [], returns: ptr },
  bl_map_file: { args: [cstring, ptr, ptr], returns: i64 },
  bl_unmap_file: { args: [u64, u64], returns: i64 },
  bl_copy_bytes: { args: [u64, ptr, u64], returns: i64 },
  bl_huge_copy: { args: [cstring, u64, u64, i64, ptr], returns: i64 },
  bl_huge_free: { args: [u64, u64], returns: i64 },
  bl_huge_available: { args: [], returns: i64 },
  bl_huge_backed: { args: [u64, u64], returns: i64 },
  bl_type_size: { args: [i64, ptr, ptr], returns: i64 },
  bl_dequantize: { args: [i64, ptr, ptr, i64], returns: i64 },
  bl_quantize: { args: [i64, ptr, ptr, i64], returns: i64 },
  bl_repack: { args: [i64, ptr, ptr, ptr, ptr, f64, i64, i64, i64, ptr, i64, ptr], returns: i64 },
  bl_matvec_ref: { args: [i64, u64, i64, i64, ptr, i64, ptr], returns: i64 },
  bl_synth_fill: { args: [i64, ptr, i64, i64, u64, f64, i64], returns: i64 },
  bl_rope_apply_params: { args: [ptr, ptr, i64, i64, i64], returns: i64 },
  bl_cpu_ctx_new: { args: [ptr, ptr, ptr], returns: i64 },
  bl_cpu_select_path: { args: [cstring], returns: i64 },
  bl_cpu_ctx_free: { args: [u64], returns: i64 },
  bl_cpu_hook_fns: { args: [ptr], returns: i64 },
  bl_cpu_ctx_keep_pin: { args: [u64, i64], returns: i64 },
  bl_cpu_ops_rows: { args: [u64, u64, i64, i64, ptr, ptr, i64], returns: i64 },
  bl_cpu_expert_rows: { args: [u64, u64, i64, i64, ptr, ptr, ptr, i64, ptr, ptr, i64], returns: i64 },
  bl_cpu_check: { args: [ptr, ptr, ptr], returns: i64 },
  bl_cpu_expert_picks: { args: [u64, i64, i64, ptr, i64], returns: i64 },
  bl_cpu_forward: { args: [u64, ptr, ptr], returns: i64 },
  bl_cpu_kv_clear: { args: [u64, i64, i64], returns: i64 },
  bl_cpu_kv_copy: { args: [u64, i64, i64, i64], returns: i64 },
  bl_cpu_kv_pos_bytes: { args: [u64], returns: i64 },
  bl_cpu_work_bytes: { args: [u64], returns: i64 },
  bl_cpu_kv_save: { args: [u64, i64, i64, ptr], returns: i64 },
  bl_cpu_kv_load: { args: [u64, i64, i64, ptr], returns: i64 },
  bl_cpu_rs_bytes: { args: [u64], returns: i64 },
  bl_cpu_rs_save: { args: [u64, i64, ptr], returns: i64 },
  bl_cpu_rs_load: { args: [u64, i64, ptr], returns: i64 },
  bl_cpu_rs_copy: { args: [u64, i64, i64], returns: i64 },
  bl_cpu_rs_clear: { args: [u64, i64], returns: i64 },
  bl_cpu_rs_snap_reserve: { args: [u64], returns: i64 },
  bl_cpu_rs_snap_take: { args: [u64, i64], returns: i64 },
  bl_cpu_rs_snap_back: { args: [u64, i64], returns: i64 },
  bl_sample_candidates: { args: [ptr], returns: i64 },
  bl_sample_argmax: { args: [ptr, i64, ptr], returns: i64 },
  bl_expert_store_sizes: { args: [ptr, ptr, ptr, ptr], returns: i64 },
  bl_expert_store_new: { args: [ptr, ptr], returns: i64 },
  bl_expert_store_free: { args: [u64], returns: i64 },
  bl_expert_store_stats: { args: [u64, ptr, i64], returns: i64 },
} as const;

type Lib = ReturnType<typeof dlopen<typeof cpuSymbols>>["symbols"];
let lib: Lib | null = null;

/** The CPU library's symbols, opened on first use; the path BLOOMERY_CPU_PATH asks for handed over
 * then (process-wide; a bad one makes every context refuse, saying why: bl_cpu_select_path). */
export function cpu(): Lib {
  if (!lib) {
    lib = dlopen(libPath, cpuSymbols).symbols;
    lib.bl_cpu_select_path(Buffer.from(`${process.env.BLOOMERY_CPU_PATH ?? ""}\0`, "utf8"));
  }
  return lib;
}

export class NativeError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "NativeError";
  }
}

/** Throws NativeError with the library's message when status is not BL_OK. */
export function check(status: number | bigint, what: string): void {
  const s = Number(status);
  if (s === 0) return;
  const p = cpu().bl_last_error() as Pointer | null;
  const msg = p ? new CString(p).toString() : "";
  throw new NativeError(s, `${what}: ${msg || `native status ${s}`}`);
}

/** A C string argument for bun:ffi. */
export function cstr(s: string): Buffer {
  return Buffer.from(s + "\0", "utf8");
}
