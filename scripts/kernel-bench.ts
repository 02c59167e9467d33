// bloomery: CPU kernel microbenchmark per weight type and path (bl_kernel_bench: one path's tile
// over synthetic weight rows, items of rows claimed from a counter on pinned threads, as matmul
// does), printed as a markdown table: weight GB/s and rows/s for one-token products (1 activation
// row) and prompt tiles (16 rows), against Q4_K.
// Usage: npx bun scripts/kernel-bench.ts [--types Q4_K,IQ2_XXS,...] [--paths scalar,avx2,avx512]
//        [--na 1,16] [--threads N] [--mb MB] [--n N] [--reps R]
//   --mb: weight bytes per pass (default 64: past the caches, the decode case; 1 keeps them in L2)
import { ptr } from "bun:ffi";
import { check, cpu } from "../ffi/cpu.ts";
import { cpuPaths, kernelBench } from "../ffi/cpu-kernels.ts";
import { TYPE_INFO, typeByName } from "../src/gguf/index.ts";

const argv = process.argv.slice(2);
const opt = (name: string, def: string): string => (argv.includes(name) ? argv[argv.indexOf(name) + 1] : def);
const DEFAULT_TYPES = "Q4_K,Q2_K,Q3_K,IQ2_XXS,IQ2_XS,IQ2_S,IQ3_XXS,IQ3_S,IQ1_S,IQ1_M,IQ4_XS";
const types = opt("--types", DEFAULT_TYPES).split(",");
// "avx512+lanes": what the AVX-512 path runs (lane-order kernels where a type has them, else its element-order ones)
const have: string[] = [...cpuPaths(), ...(cpuPaths().includes("avx512") ? ["avx512+lanes"] : [])];
const paths = opt("--paths", have.join(",")).split(",").filter((p) => have.includes(p));
const nas = opt("--na", "1,16").split(",").map(Number);
const threads = Number(opt("--threads", "1"));
const mb = Number(opt("--mb", "64"));
const n = Number(opt("--n", "4096"));
const reps = Number(opt("--reps", "5"));

const q4k: Record<string, number> = {};
console.log(`kernel-bench: rows of ${n} elements, ${mb} MB of weights a pass, ${threads} thread(s), best of ${reps}; paths ${paths.join(", ")}`);
console.log("");
console.log("| type | bits/weight | path | activation rows | GB/s of weights | rows/s | vs Q4_K |");
console.log("| --- | --- | --- | --- | --- | --- | --- |");
for (const name of types) {
  const type = typeByName(name);
  if (type === undefined) throw new Error(`kernel-bench: unknown type ${name}`);
  const info = TYPE_INFO[type];
  const rowBytes = (n / info.blockElems) * info.blockBytes;
  const rows = Math.max(64, Math.floor((mb * 1e6) / rowBytes));
  const w = new Uint8Array(rows * rowBytes);
  if (Number(cpu().bl_synth_fill(type, ptr(w), 0, (rows * rowBytes) / info.blockBytes, 7n, 0.02, 0)) !== 0) {
    // types synth does not generate (the checkpoint folders' FP8 / NVFP4 / MLX4): one quantized row of
    // pseudo-random floats, repeated
    const x = Float32Array.from({ length: n }, (_, i) => 0.02 * Math.sin(i * 12.9898 + 78.233) * Math.cos(i * 0.7));
    const row = new Uint8Array(rowBytes);
    check(cpu().bl_quantize(type, ptr(x), ptr(row), n), "quantize");
    for (let r = 0; r < rows; r++) w.set(row, r * rowBytes);
  }
  const bpw = (8 * info.blockBytes) / info.blockElems;
  for (const path of paths) {
    for (const na of nas) {
      // scalar is slow: fewer rows, the same per-row rate
      const r = path === "scalar" ? Math.min(rows, 256) : rows;
      const ns = kernelBench(path, type, w, rowBytes, r, n, na, na > 1 ? 32 : 256, threads, path === "scalar" ? 2 : reps);
      const gbs = (r * rowBytes) / ns;
      const key = `${path}/${na}`;
      if (name === "Q4_K") q4k[key] = (r * 1e9) / ns;
      const rps = (r * 1e9) / ns;
      const rel = q4k[key] ? `${(rps / q4k[key]).toFixed(2)}x` : "";
      console.log(`| ${name} | ${bpw.toFixed(4)} | ${path} | ${na} | ${gbs.toFixed(2)} | ${rps.toExponential(3)} | ${rel} |`);
    }
  }
}
