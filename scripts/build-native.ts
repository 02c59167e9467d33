// bloomery: builds the native libraries into build/ (the CPU library with gcc; the CUDA
// library with nvcc when nvcc is present). Usage: bun scripts/build-native.ts [--cuda-arch sm_90,...]
import { readdirSync, mkdirSync, statSync, existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

const root = join(import.meta.dir, "..");
const build = join(root, "build");
mkdirSync(build, { recursive: true });

function run(cmd: string[]): void {
  const p = Bun.spawnSync(cmd, { stdout: "inherit", stderr: "inherit" });
  if (p.exitCode !== 0) {
    console.error(`build-native: failed: ${cmd.join(" ")}`);
    process.exit(1);
  }
}

function newest(paths: string[]): number {
  return Math.max(...paths.map((p) => statSync(p).mtimeMs));
}

function sources(dir: string, ext: string[]): string[] {
  return readdirSync(dir)
    .filter((f) => ext.some((e) => f.endsWith(e)))
    .map((f) => join(dir, f))
    .sort();
}

// CPU library: baseline x86-64 code; SIMD paths carry their own target attributes and are
// chosen at run time from cpuid, never by the build machine.
const cpuDir = join(root, "ffi", "cpu");
const cpuSrc = sources(cpuDir, [".c"]);
const cpuDeps = [...cpuSrc, ...sources(cpuDir, [".h"]), join(root, "ffi", "bloomery.h")];
const cpuLib = join(build, "libbloomery_cpu.so");
if (!existsSync(cpuLib) || newest(cpuDeps) > statSync(cpuLib).mtimeMs || process.argv.includes("--force")) {
  run([
    "gcc", "-std=gnu11", "-O2", "-g", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
    "-Wno-unused-parameter", "-fvisibility=default", "-pthread",
    "-o", cpuLib, ...cpuSrc, "-lm",
  ]);
  console.log(`build-native: ${cpuLib}`);
}

// CUDA library: one object per cuda/*.cu (compiled in parallel), linked with the static CUDA
// runtime, so only the driver is needed at run time. SASS for sm_86, sm_90 and sm_120a plus PTX
// for newer cards by default; BLOOMERY_CUDA_ARCH=sm_90 (or --cuda-arch sm_90,...) builds only
// those, for quick device runs. Without nvcc an empty placeholder stands in: the executable then
// says it has no CUDA library and runs on the CPU.
const cudaLib = join(build, "libbloomery_cuda.so");
const cudaDir = join(root, "cuda");
const nvcc = findNvcc();
if (!nvcc) {
  if (!existsSync(cudaLib)) await Bun.write(cudaLib, "");
  console.log("build-native: nvcc not found: no CUDA library in this build (the engine runs on the CPU)");
} else {
  await buildCuda(nvcc);
}

function findNvcc(): string | undefined {
  const cands = [process.env.NVCC, Bun.which("nvcc"), "/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"];
  return cands.find((p): p is string => !!p && existsSync(p));
}

function cudaArchs(): string[] {
  const i = process.argv.indexOf("--cuda-arch");
  const spec = i >= 0 ? process.argv[i + 1] : process.env.BLOOMERY_CUDA_ARCH;
  const list = (spec ?? "sm_86,sm_90,sm_120a,compute_120").split(",").map((s) => s.trim()).filter(Boolean);
  for (const a of list) {
    if (!/^(sm|compute)_\d+a?$/.test(a)) {
      console.error(`build-native: bad CUDA architecture '${a}' (sm_90, sm_120a, compute_120, ...)`);
      process.exit(1);
    }
  }
  return list;
}

function gencode(a: string): string {
  const num = a.replace(/^(sm|compute)_/, "");
  return a.startsWith("sm_") ? `-gencode=arch=compute_${num},code=sm_${num}` : `-gencode=arch=compute_${num},code=compute_${num}`;
}

async function buildCuda(nvccPath: string): Promise<void> {
  const archs = cudaArchs();
  const src = sources(cudaDir, [".cu"]);
  const headers = [...sources(cudaDir, [".cuh", ".h"]), join(root, "ffi", "bloomery.h")];
  // --trace (or BLOOMERY_CUDA_TRACE_BUILD=1): the kernel timeline tracer compiled in (cuda/trace.cuh), a measurement build
  const trace = process.argv.includes("--trace") || process.env.BLOOMERY_CUDA_TRACE_BUILD === "1";
  const tag = archs.join("-") + (trace ? "-trace" : "");
  const objDir = join(build, `cuda-obj-${tag}`);
  mkdirSync(objDir, { recursive: true });
  const stamp = join(build, "libbloomery_cuda.arch");
  const sameArch = existsSync(stamp) && readFileSync(stamp, "utf8") === tag;
  const force = process.argv.includes("--force");
  const hdrTime = newest(headers);
  const common = ["-std=c++17", "-O3", "-Xcompiler", "-Wall,-Werror,-fPIC", "-Werror", "all-warnings", ...(trace ? ["-DBL_TRACE"] : []), ...archs.map(gencode)];
  const jobs: { obj: string; proc: ReturnType<typeof Bun.spawn> }[] = [];
  for (const f of src) {
    const obj = join(objDir, f.slice(cudaDir.length + 1).replace(/\.cu$/, ".o"));
    if (!force && existsSync(obj) && statSync(obj).mtimeMs > Math.max(statSync(f).mtimeMs, hdrTime)) continue;
    jobs.push({ obj, proc: Bun.spawn([nvccPath, ...common, "-c", f, "-o", obj], { stdout: "inherit", stderr: "inherit" }) });
  }
  const objs = src.map((f) => join(objDir, f.slice(cudaDir.length + 1).replace(/\.cu$/, ".o")));
  const codes = await Promise.all(jobs.map((j) => j.proc.exited));
  if (codes.some((c) => c !== 0)) {
    console.error("build-native: a CUDA source failed to compile");
    process.exit(1);
  }
  if (!jobs.length && sameArch && existsSync(cudaLib) && statSync(cudaLib).size > 0 && statSync(cudaLib).mtimeMs >= newest(objs)) return;
  run([nvccPath, "-shared", "-cudart", "static", ...archs.map(gencode), "-Xcompiler", "-static-libstdc++,-static-libgcc", "-o", cudaLib, ...objs]);
  await Bun.write(stamp, tag);
  console.log(`build-native: ${cudaLib} (${archs.join(", ")})`);
}
