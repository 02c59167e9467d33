// bloomery release: the targets a release ships, and whether this machine has the toolchain to
// build each one (and, when not, exactly what is missing).
import { readdirSync } from "node:fs";
import { join } from "node:path";

export type TargetId = "linux-x64" | "linux-x64-cuda" | "linux-arm64" | "linux-arm64-cuda" | "darwin-arm64-metal";

export interface ReleaseTarget {
  id: TargetId;
  os: "linux" | "darwin";
  arch: "x64" | "arm64";
  /** Bun's --compile target */
  bunTarget: "bun-linux-x64" | "bun-linux-arm64" | "bun-darwin-arm64";
  /** the executable's name in the archive */
  exe: "bloomery-serve" | "bloomery-serve-metal";
  /** native libraries (file names under build/) the executable embeds */
  libs: string[];
  /**
   * libraries the sources import that this target does not ship: an empty file stands in
   * (ffi/cuda.ts reports "no CUDA library in this build" and the engine runs on the CPU)
   */
  placeholders: string[];
  /**
   * GPU code for the CUDA library, as scripts/build-native.ts --cuda-arch spells it: sm_XX is
   * SASS for that card, compute_XX is PTX that newer cards compile once at start
   */
  cuda?: { archs: string[]; minNvcc: [number, number] };
  /** archive name suffix after "bloomery-<version>-" */
  suffix: string;
}

export const TARGETS: readonly ReleaseTarget[] = [
  {
    id: "linux-x64", os: "linux", arch: "x64", bunTarget: "bun-linux-x64", exe: "bloomery-serve",
    libs: ["libbloomery_cpu.so"], placeholders: ["libbloomery_cuda.so"], suffix: "linux-x64",
  },
  {
    id: "linux-x64-cuda", os: "linux", arch: "x64", bunTarget: "bun-linux-x64", exe: "bloomery-serve",
    libs: ["libbloomery_cpu.so", "libbloomery_cuda.so"], placeholders: [], suffix: "linux-x64-cuda",
    // sm_120a needs CUDA 12.8
    cuda: { archs: ["sm_86", "sm_90", "sm_120a", "compute_120"], minNvcc: [12, 8] },
  },
  {
    // the CPU build for aarch64 Linux (NEON / dotprod / i8mm chosen at run time): cross-built on an
    // x86-64 host with Debian's aarch64 gcc and the arm64 Bun runtime from npm (docs/arm64.md)
    id: "linux-arm64", os: "linux", arch: "arm64", bunTarget: "bun-linux-arm64", exe: "bloomery-serve",
    libs: ["libbloomery_cpu.so"], placeholders: ["libbloomery_cuda.so"], suffix: "linux-arm64",
  },
  {
    id: "linux-arm64-cuda", os: "linux", arch: "arm64", bunTarget: "bun-linux-arm64", exe: "bloomery-serve",
    libs: ["libbloomery_cpu.so", "libbloomery_cuda.so"], placeholders: [], suffix: "linux-arm64-cuda",
    // GB10 (DGX Spark): sm_121a needs CUDA 12.9
    cuda: { archs: ["sm_121a"], minNvcc: [12, 9] },
  },
  {
    id: "darwin-arm64-metal", os: "darwin", arch: "arm64", bunTarget: "bun-darwin-arm64", exe: "bloomery-serve-metal",
    libs: ["libbloomery_cpu.so", "libbloomery_metal.dylib"], placeholders: ["libbloomery_cuda.so"], suffix: "darwin-arm64",
  },
];

export function targetById(id: string): ReleaseTarget | undefined {
  return TARGETS.find((t) => t.id === id);
}

export function archiveName(version: string, t: ReleaseTarget): string {
  return `bloomery-${version}-${t.suffix}.tar.gz`;
}

export interface Host {
  os: string;
  arch: string;
  /** which(1) over PATH */
  has(tool: string): boolean;
  /** nvcc's "release X.Y", or null */
  nvccVersion(): [number, number] | null;
}

export function currentHost(): Host {
  return {
    os: process.platform,
    arch: process.arch,
    has: (tool) => Bun.which(tool) !== null,
    nvccVersion: () => {
      if (!Bun.which("nvcc")) return null;
      const p = Bun.spawnSync(["nvcc", "--version"], { stdout: "pipe", stderr: "pipe" });
      const m = /release (\d+)\.(\d+)/.exec(p.stdout.toString());
      return m ? [Number(m[1]), Number(m[2])] : null;
    },
  };
}

function hasSources(root: string, dir: string, exts: string[]): boolean {
  try {
    // the directory or its folders (cuda/ is laid out by op: cuda/attention/*.cu, ...)
    return readdirSync(join(root, dir), { withFileTypes: true }).some((f) =>
      f.isDirectory() ? hasSources(root, join(dir, f.name), exts) : exts.some((e) => f.name.endsWith(e)));
  } catch {
    return false;
  }
}

/** null when `t` can be built here; else the sentence naming the toolchain it needs. */
export function missingToolchain(t: ReleaseTarget, host: Host, root: string): string | null {
  const want = `${t.os}-${t.arch}`;
  const here = `${host.os === "darwin" ? "darwin" : host.os}-${host.arch === "arm64" ? "arm64" : host.arch}`;
  switch (t.id) {
    case "linux-x64":
      if (here !== want) return `${t.id}: build it on an x86-64 Linux host with gcc (the CPU library is compiled for the host; this is ${here})`;
      if (!host.has("gcc")) return `${t.id}: needs gcc (apt-get install gcc)`;
      return null;
    case "linux-x64-cuda": {
      if (here !== want) return `${t.id}: build it on an x86-64 Linux host with gcc and the CUDA toolkit >= 12.8 (this is ${here})`;
      if (!host.has("gcc")) return `${t.id}: needs gcc (apt-get install gcc)`;
      const v = host.nvccVersion();
      if (!v) return `${t.id}: needs nvcc from the CUDA toolkit >= 12.8 on PATH (sm_120a first appears in CUDA 12.8)`;
      if (older(v, t.cuda!.minNvcc)) return `${t.id}: nvcc ${v.join(".")} is too old; sm_120a needs the CUDA toolkit >= 12.8`;
      if (!hasSources(root, "cuda", [".cu"])) return `${t.id}: the CUDA library's sources (cuda/**/*.cu) are not in this checkout yet`;
      return null;
    }
    case "linux-arm64":
      if (here === want) return host.has("gcc") ? null : `${t.id}: needs gcc (apt-get install gcc)`;
      if (here !== "linux-x64") return `${t.id}: build it on an aarch64 Linux host with gcc, or cross-build it on an x86-64 Linux host (this is ${here})`;
      if (!host.has("aarch64-linux-gnu-gcc")) return `${t.id}: the cross build needs aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)`;
      if (!host.has("npm")) return `${t.id}: the cross build needs npm to fetch the arm64 Bun runtime (@oven/bun-linux-aarch64)`;
      return null;
    case "linux-arm64-cuda":
      if (here !== want) {
        return (
          `${t.id}: build it on an aarch64 Linux host (the GB10 itself, or any arm64 Linux box) with gcc and the CUDA toolkit >= 12.9 ` +
          `for sbsa (sm_121a first appears in CUDA 12.9; the GB10's DGX OS ships CUDA 13). Cross-building from ${here} would need ` +
          `aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu), NVIDIA's cross toolkit cuda-cross-sbsa-<ver> (from NVIDIA's ` +
          `CUDA apt repository, not Debian's) and scripts/build-native.ts taught to pass nvcc -ccbin for its CUDA library (the CPU ` +
          `library already cross-builds: the linux-arm64 target, docs/arm64.md)`
        );
      }
      if (!host.has("gcc")) return `${t.id}: needs gcc`;
      {
        const v = host.nvccVersion();
        if (!v || older(v, t.cuda!.minNvcc)) return `${t.id}: needs nvcc from the CUDA toolkit >= 12.9 for sbsa (sm_121a)`;
      }
      if (!hasSources(root, "cuda", [".cu"])) return `${t.id}: the CUDA library's sources (cuda/**/*.cu) are not in this checkout yet`;
      return null;
    case "darwin-arm64-metal":
      if (here !== want) {
        return `${t.id}: build it on macOS arm64 with Xcode 15+ (clang, and xcrun metal / metallib for the Metal shaders); Apple's toolchain does not run on ${here}`;
      }
      if (!host.has("xcrun")) return `${t.id}: needs Xcode's command line tools (xcode-select --install) and the Metal toolchain (xcrun metal)`;
      if (!hasSources(root, "metal", [".metal", ".m", ".mm"])) return `${t.id}: the Metal library's sources (metal/) are not in this checkout yet`;
      return null;
  }
}

function older(v: [number, number], min: [number, number]): boolean {
  return v[0] < min[0] || (v[0] === min[0] && v[1] < min[1]);
}
