// bloomery build: which CPU architecture the native CPU library is compiled for (--arch x64|arm64),
// the C compiler and flags for it (a cross compiler on another host: Debian's aarch64-linux-gnu-gcc),
// and where its outputs go. scripts/build-native.ts and scripts/build.ts read it.

export type ArchName = "x64" | "arm64";

export interface BuildArch {
  name: ArchName;
  /** the host is another architecture: a cross build */
  cross: boolean;
  /** build/ subfolder of a cross build (build/linux-arm64/), [] for the host's own */
  subdir: string[];
  /** Bun's --compile target for the executable */
  bunTarget: "bun-linux-x64" | "bun-linux-arm64";
}

const HOST: ArchName | null = process.arch === "x64" ? "x64" : process.arch === "arm64" ? "arm64" : null;

export function archInfo(name: ArchName, host: ArchName | null = HOST): BuildArch {
  const cross = name !== host;
  return { name, cross, subdir: cross ? [`linux-${name}`] : [], bunTarget: name === "x64" ? "bun-linux-x64" : "bun-linux-arm64" };
}

/** --arch x64|arm64 (aarch64 is taken for arm64); the host's own when absent. Throws on anything else. */
export function parseArch(argv: string[], host: ArchName | null = HOST): BuildArch {
  const i = argv.indexOf("--arch");
  if (i < 0) {
    if (!host) throw new Error(`this host is ${process.arch}: the CPU library builds for x64 or arm64 only (--arch)`);
    return archInfo(host, host);
  }
  const v = argv[i + 1];
  const name = v === "x64" || v === "x86_64" || v === "amd64" ? "x64" : v === "arm64" || v === "aarch64" ? "arm64" : null;
  if (!name) throw new Error(`--arch: expected x64 or arm64, got '${v ?? ""}'`);
  return archInfo(name, host);
}

/**
 * The C compiler and the flags that differ by architecture, or the sentence saying what to install.
 * aarch64: armv8-a baseline code (the dotprod / i8mm kernels carry their own target attributes,
 * chosen at run time from the hardware capability bits) and -ffp-contract=off: gcc fuses a * b + c
 * into one rounding by default on aarch64, which the reference numerics forbid (x86-64's baseline
 * has no FMA to fuse into, so its plain C is already unfused).
 */
export function cpuCompiler(a: BuildArch, has: (tool: string) => boolean, env: Record<string, string | undefined> = process.env): { cc: string; flags: string[] } | string {
  if (a.name === "x64") {
    if (a.cross) return "building the x86-64 CPU library on another architecture is not set up (build it on an x86-64 host)";
    return { cc: "gcc", flags: [] };
  }
  const cc = env.BLOOMERY_CC_ARM64 ?? (a.cross ? "aarch64-linux-gnu-gcc" : "gcc");
  if (!has(cc)) {
    return a.cross
      ? `the arm64 CPU library needs the cross compiler ${cc} (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross), or BLOOMERY_CC_ARM64 naming another`
      : `the arm64 CPU library needs ${cc} (apt-get install gcc)`;
  }
  return { cc, flags: ["-march=armv8-a", "-ffp-contract=off"] };
}
