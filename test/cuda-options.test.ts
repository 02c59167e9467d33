// The CUDA library's options (src/engine/cuda-options.ts, bl_cuda_options): the environment knobs
// read as the native library read them, their slots, the backend's options over them, every knob
// documented in docs/cuda.md, and no getenv left in cuda/ (the library reads no environment).
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { CUDA_OPTION_FIELDS } from "../ffi/layout.ts";
import { backendCudaOptions } from "../src/engine/cuda-backend.ts";
import { CUDA_ENV_KNOBS, CUDA_OPTION_DEFAULTS, cudaOptionSlots, cudaOptionsFromEnv } from "../src/engine/cuda-options.ts";
import { ROOT } from "./paths.ts";

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

describe("CUDA options", () => {
  test("no environment: the defaults, every field set", () => {
    const o = cudaOptionsFromEnv({});
    expect(o).toEqual({ ...CUDA_OPTION_DEFAULTS });
    expect(Object.keys(o).sort()).toEqual(CUDA_OPTION_FIELDS.map(([n]) => n as string).sort());
  });

  test("the knobs read as cuda/ read them", () => {
    const o = cudaOptionsFromEnv({
      BLOOMERY_CUDA_FAST: "55", BLOOMERY_CUDA_GRAPHS: "0", BLOOMERY_CUDA_PDL: "0x", BLOOMERY_CUDA_CARVEOUT: "101",
      BLOOMERY_CUDA_PREFILL_MIN: "4", BLOOMERY_CUDA_MMA_PAIRS: "1.5", BLOOMERY_CUDA_A2_LONG: "2,64", BLOOMERY_CUDA_A2_MMA_CLASS: "44",
      BLOOMERY_CUDA_PROFILE: "0", BLOOMERY_HYBRID_HOST_SHARE: "1.5", BLOOMERY_HYBRID_CARD_SHARE: "auto", BLOOMERY_HYBRID_SPARSE: "7",
      BLOOMERY_HYBRID_UPLOAD_MIN: "-3", BLOOMERY_HYBRID_CPU_CAP: "0.5", BLOOMERY_CUDA_TRACE: "/tmp/t.bin", BLOOMERY_HYBRID_MAILBOX: "",
    });
    expect(o.fast).toBe(55);
    expect(o.graphs).toBe(0);
    expect(o.pdl).toBe(0); // starts with '0'
    expect(o.carveout).toBe(-1); // out of range: ignored
    expect(o.prefill_min).toBe(4);
    expect(o.mma_pairs).toBe(1500);
    expect([o.a2_long_heads, o.a2_long_chunk]).toEqual([2, 64]);
    expect(o.a2_mma_class).toBe(-1); // one digit only
    expect(o.profile).toBe(0);
    expect(o.host_share).toBe(900);
    expect(o.card_share).toBe(-2);
    expect(o.sparse_upload).toBe(1);
    expect(o.upload_min).toBe(0); // never
    expect(o.cpu_cap).toBe(0.5);
    expect(o.trace_path).toBe("/tmp/t.bin");
    expect(o.mailbox).toBe(1); // "" is unset
  });

  test("the backend's options over the environment: batch invariance and graphs", () => {
    const o = backendCudaOptions({ batchInvariant: true, graphs: false, cuda: { fa2_heads: 2 } }, { BLOOMERY_FA2_HEADS: "1", BLOOMERY_CUDA_FAST: "7" });
    expect(o.invariant).toBe(1);
    expect(o.graphs).toBe(0);
    expect(o.fa2_heads).toBe(2);
    expect(o.fast).toBe(7);
    expect(backendCudaOptions({}, {}).invariant).toBe(0);
  });

  test("slots: ints, the float, the trace path as a C string", () => {
    const { slots, keep } = cudaOptionSlots({ ...CUDA_OPTION_DEFAULTS, cpu_cap: 0.25, fast: 9, trace_path: "x.bin" });
    const at = (n: string) => CUDA_OPTION_FIELDS.findIndex(([f]) => f === n);
    expect(slots.f[at("cpu_cap")]).toBe(0.25);
    expect(slots.i[at("fast")]).toBe(9n);
    expect(slots.i[at("hybrid_lead")]).toBe(-1n);
    expect(keep?.toString("utf8")).toBe("x.bin\0");
    expect(slots.i[at("trace_path")]).not.toBe(0n);
    expect(cudaOptionSlots({ ...CUDA_OPTION_DEFAULTS }).slots.i[at("trace_path")]).toBe(0n);
  });

  test("every knob is documented in docs/cuda.md", () => {
    const doc = readFileSync(join(ROOT, "docs", "cuda.md"), "utf8");
    for (const k of CUDA_ENV_KNOBS) expect(doc).toContain(`\`${k.env}\``);
  });

  test("cuda/ reads no environment", () => {
    const bad = files(join(ROOT, "cuda")).filter((f) => /\bgetenv\s*\(/.test(readFileSync(f, "utf8")));
    expect(bad).toEqual([]);
  });
});
