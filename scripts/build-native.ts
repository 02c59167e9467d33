// bloomery: builds the native libraries into build/ (the CPU library with gcc; the CUDA
// library with nvcc when nvcc is present). Usage: bun scripts/build-native.ts [--cuda-arch sm_90,...]
import { readdirSync, mkdirSync, statSync, existsSync } from "node:fs";
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
