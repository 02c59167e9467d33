// bloomery: builds the native libraries into build/: the CPU library with gcc, and the CUDA library
// with nvcc for the architectures chosen (scripts/build-cuda-mode.ts: --cuda cpu | native | release |
// sm_XX,..., or --cuda-arch / BLOOMERY_CUDA_ARCH; by default the card in this machine, every release
// target in CI, else the CPU only), saying what it builds and why, with a progress line per CUDA source.
// Usage: bun scripts/build-native.ts [--cuda MODE] [--cuda-arch sm_90,...] [--jobs N] [--force] [--trace] [--build-dir DIR]
//        [--arch x64|arm64]
// It records its choice in build/native-build.json (scripts/build.ts embeds the CUDA library only
// when this build made one). --arch arm64 on an x86-64 host cross-compiles the CPU library with
// Debian's aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu) into build/linux-arm64/
// (no CUDA library: that needs NVIDIA's aarch64 toolkit, docs/arm64.md).
import { readdirSync, mkdirSync, statSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join, resolve } from "node:path";
import { BuildChoiceError, chooseCuda, findNvcc, probeCards, type CudaChoice } from "./build-cuda-mode.ts";
import { cpuCompiler, parseArch } from "./build-arch.ts";

const root = join(import.meta.dir, "..");
const argv = process.argv.slice(2);
let arch: ReturnType<typeof parseArch>;
try {
  arch = parseArch(argv);
} catch (e) {
  console.error(`build-native: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
}
// --build-dir DIR: where the libraries and objects go (default build/, or build/linux-arm64/ for a
// cross build; the build's own tests use another)
const build = argv.includes("--build-dir") ? resolve(argv[argv.indexOf("--build-dir") + 1]) : join(root, "build", ...arch.subdir);
const force = argv.includes("--force");
const t0 = performance.now();
mkdirSync(build, { recursive: true });

function say(line: string): void {
  console.log(`build-native: ${line}`);
}

function fail(line: string): never {
  console.error(`build-native: ${line}`);
  process.exit(1);
}

function run(cmd: string[]): void {
  const p = Bun.spawnSync(cmd, { stdout: "inherit", stderr: "inherit" });
  if (p.exitCode !== 0) fail(`failed: ${cmd.join(" ")}`);
}

function clock(ms: number): string {
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
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

// cuda/'s folders (one an op: docs/cuda.md's "Shape"): cuda/ itself, then each folder in it
function folders(dir: string): string[] {
  return [dir, ...readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => join(dir, e.name)).sort()];
}

function jobs(): number {
  const i = argv.indexOf("--jobs");
  const v = i >= 0 ? argv[i + 1] : process.env.BLOOMERY_BUILD_JOBS;
  if (v === undefined) return Math.max(1, availableParallelism());
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) fail(`--jobs / BLOOMERY_BUILD_JOBS: expected a positive integer, got '${v}'`);
  return n;
}

// what to build: said before anything compiles
const nvcc = findNvcc(process.env, existsSync);
let choice: CudaChoice;
try {
  choice = arch.cross
    ? { kind: "cpu", why: `a cross build for ${arch.name} makes no CUDA library (it needs NVIDIA's ${arch.name} toolkit on an ${arch.name} host)` } as CudaChoice
    : chooseCuda(argv, process.env, { nvcc, cards: nvcc ? probeCards() : null, ci: !!process.env.CI && process.env.CI !== "false" });
} catch (e) {
  if (e instanceof BuildChoiceError) fail(e.message);
  throw e;
}

say(choice.kind === "cpu"
  ? `building the CPU library, no CUDA library (${choice.why}) [choose: --cuda cpu|native|release|sm_XX,...]`
  : `building the CPU library and the CUDA library for ${choice.archs.join(", ")} (${choice.why}) [choose: --cuda cpu|native|release|sm_XX,...]`);

// CPU library: baseline x86-64 (or armv8-a) code; SIMD paths carry their own target attributes
// and are chosen at run time from cpuid (the hardware capability bits on aarch64), never by the
// build machine.
const cpuDir = join(root, "ffi", "cpu");
const cpuSrc = sources(cpuDir, [".c"]);
const cpuDeps = [...cpuSrc, ...sources(cpuDir, [".h"]), join(root, "ffi", "bloomery.h")];
const cpuLib = join(build, "libbloomery_cpu.so");
const stampFile = join(build, "libbloomery_cpu.arch");
const sameArch = !existsSync(cpuLib) || (existsSync(stampFile) ? readFileSync(stampFile, "utf8") : "x64") === arch.name;
if (!existsSync(cpuLib) || newest(cpuDeps) > statSync(cpuLib).mtimeMs || force || !sameArch) {
  const cc = cpuCompiler(arch, (t) => Bun.which(t) !== null);
  if (typeof cc !== "object") fail(cc);
  say(`compiling the CPU library for ${arch.name} (${cpuSrc.length} C sources, ${cc.cc}) ...`);
  const c0 = performance.now();
  run([
    cc.cc, "-std=gnu11", "-O2", "-g", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
    "-Wno-unused-parameter", "-fvisibility=default", "-pthread", ...cc.flags,
    "-o", cpuLib, ...cpuSrc, "-lm",
  ]);
  writeFileSync(stampFile, arch.name);
  say(`${cpuLib} in ${clock(performance.now() - c0)}`);
} else {
  say(`${cpuLib} is up to date`);
}

// CUDA library: one object per .cu of cuda/ and its folders, a pool of nvcc jobs, linked with the static CUDA runtime
// so only the driver is needed at run time. Without one (the CPU only) an empty placeholder stands
// in where none was built before: the executable then says it has no CUDA library and runs on the CPU.
const cudaLib = join(build, "libbloomery_cuda.so");
const cudaDir = join(root, "cuda");
if (choice.kind === "cpu") {
  if (!existsSync(cudaLib)) writeFileSync(cudaLib, "");
  say("no CUDA library in this build: the executable runs on the CPU");
  record(null);
} else {
  await buildCuda(nvcc!, choice.archs, choice.why);
  record(choice.archs);
}

function record(archs: string[] | null): void {
  writeFileSync(join(build, "native-build.json"), `${JSON.stringify({ cuda: archs, trace: archs ? trace() : false, arch: arch.name }, null, 1)}\n`);
}

function trace(): boolean {
  // --trace (or BLOOMERY_CUDA_TRACE_BUILD=1): the kernel timeline tracer compiled in (cuda/runtime/trace.cuh), a measurement build
  return argv.includes("--trace") || process.env.BLOOMERY_CUDA_TRACE_BUILD === "1";
}

function gencode(a: string): string {
  const num = a.replace(/^(sm|compute)_/, "");
  return a.startsWith("sm_") ? `-gencode=arch=compute_${num},code=sm_${num}` : `-gencode=arch=compute_${num},code=compute_${num}`;
}

async function buildCuda(nvccPath: string, archs: string[], why: string): Promise<void> {
  // sources and headers in cuda/ and its folders; every folder is on the include path, so a file
  // includes another by its name alone wherever either lives (names are unique across the folders)
  const dirs = folders(cudaDir);
  const src = dirs.flatMap((d) => sources(d, [".cu"])).sort();
  const headers = [...dirs.flatMap((d) => sources(d, [".cuh", ".h"])), join(root, "ffi", "bloomery.h")];
  const names = [...src, ...headers].map((f) => f.slice(f.lastIndexOf("/") + 1));
  const twice = names.find((b, i) => names.indexOf(b) !== i);
  if (twice) fail(`two files in cuda/ are named ${twice}: names must be unique across its folders (objects and includes go by name)`);
  const tr = trace();
  const tag = archs.join("-") + (tr ? "-trace" : "");
  const objDir = join(build, `cuda-obj-${tag}`);
  mkdirSync(objDir, { recursive: true });
  const stamp = join(build, "libbloomery_cuda.arch");
  const sameArch = existsSync(stamp) && readFileSync(stamp, "utf8") === tag;
  const hdrTime = newest(headers);
  const common = ["-std=c++17", "-O3", "-Xcompiler", "-Wall,-Werror,-fPIC", "-Werror", "all-warnings", ...(tr ? ["-DBL_TRACE"] : []), ...archs.map(gencode),
    ...dirs.map((d) => `-I${d}`)];
  const objOf = (f: string) => join(objDir, f.slice(f.lastIndexOf("/") + 1).replace(/\.cu$/, ".o"));
  const todo = src.filter((f) => force || !existsSync(objOf(f)) || statSync(objOf(f)).mtimeMs <= Math.max(statSync(f).mtimeMs, hdrTime));
  const objs = src.map(objOf);
  const n = jobs();
  if (todo.length) {
    say(`CUDA library for ${archs.join(", ")}${tr ? " (with the tracer)" : ""}, ${why}: ${todo.length} of ${src.length} sources to compile, ${Math.min(n, todo.length)} at a time (each takes nvcc from seconds to minutes; every one is reported as it ends)`);
  }
  await compileAll(nvccPath, common, todo, objOf, n);
  if (!todo.length && sameArch && existsSync(cudaLib) && statSync(cudaLib).size > 0 && statSync(cudaLib).mtimeMs >= newest(objs)) {
    say(`${cudaLib} (${archs.join(", ")}) is up to date`);
    return;
  }
  say(`linking ${cudaLib} ...`);
  run([nvccPath, "-shared", "-cudart", "static", ...archs.map(gencode), "-Xcompiler", "-static-libstdc++,-static-libgcc", "-o", cudaLib, ...objs]);
  await Bun.write(stamp, tag);
  say(`${cudaLib} (${archs.join(", ")}) after ${clock(performance.now() - t0)}`);
}

/** Compile the sources with at most `n` nvcc processes at once; a line as each ends, a heartbeat each minute. */
async function compileAll(nvccPath: string, common: string[], todo: string[], objOf: (f: string) => string, n: number): Promise<void> {
  const running = new Map<string, number>();
  let next = 0, done = 0, failed = 0;
  const name = (f: string) => f.slice(root.length + 1);
  const heartbeat = setInterval(() => {
    const now = performance.now();
    const list = [...running].map(([f, s]) => `${name(f)} (${clock(now - s)})`).join(", ");
    say(`still compiling ${list}; ${done} of ${todo.length} done, ${clock(now - t0)} elapsed`);
  }, 60000);
  const worker = async () => {
    while (next < todo.length && !failed) {
      const f = todo[next++];
      const s = performance.now();
      running.set(f, s);
      const p = Bun.spawn([nvccPath, ...common, "-c", f, "-o", objOf(f)], { stdout: "inherit", stderr: "inherit" });
      const code = await p.exited;
      running.delete(f);
      if (code !== 0) {
        failed++;
        console.error(`build-native: ${name(f)} failed to compile (nvcc exit ${code})`);
        continue;
      }
      done++;
      say(`[${done}/${todo.length}] ${name(f)} ${((performance.now() - s) / 1000).toFixed(1)} s (${clock(performance.now() - t0)} elapsed)`);
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(n, todo.length) }, worker));
  } finally {
    clearInterval(heartbeat);
  }
  if (failed) fail("a CUDA source failed to compile");
}
