// bloomery: how this host runs an aarch64 Linux program: directly on an aarch64 Linux host, under
// qemu-user on an x86-64 one (Debian's qemu-user or qemu-user-static, with the aarch64 glibc of
// libc6-arm64-cross as the sysroot), or the sentence saying what to install. The arm64 tests
// (scripts/arm64-tests.ts, test/arm64-exe.test.ts) and the release's smoke test use it.
import { existsSync } from "node:fs";
import { join } from "node:path";

/** Debian's packages for the arm64 cross build and its emulated run (apt-get install ...). */
export const ARM64_APT_PACKAGES = ["qemu-user", "gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"];

export interface Arm64Runner {
  /** the command prefix (empty on an aarch64 host) */
  prefix: string[];
  /** in words, for the logs */
  how: string;
  emulated: boolean;
}

/**
 * qemu's CPU model: "max" (the default) has Advanced SIMD, the dot product and the int8 matrix
 * multiply, so every aarch64 kernel path runs; cortex-a53 has Advanced SIMD only, neoverse-n1
 * adds the dot product (the run-time choice from the hardware capability bits is checked on both).
 */
export type QemuCpu = "max" | "cortex-a53" | "neoverse-n1";

export function arm64Runner(
  cpu: QemuCpu = "max",
  env: Record<string, string | undefined> = process.env,
  which: (tool: string) => string | null = (t) => Bun.which(t),
  exists: (path: string) => boolean = existsSync,
  host = { platform: process.platform as string, arch: process.arch as string },
): Arm64Runner | string {
  if (host.platform !== "linux") return `aarch64 Linux programs do not run on ${host.platform}`;
  if (host.arch === "arm64") return { prefix: [], how: "natively (aarch64 host)", emulated: false };
  if (host.arch !== "x64") return `aarch64 programs are run under qemu-user on x86-64 hosts only (this is ${host.arch})`;
  const qemu = env.BLOOMERY_QEMU_AARCH64 ?? which("qemu-aarch64") ?? which("qemu-aarch64-static");
  if (!qemu || !exists(qemu)) return `qemu-aarch64 is not installed (apt-get install ${ARM64_APT_PACKAGES.join(" ")})`;
  const sysroot = env.QEMU_LD_PREFIX ?? "/usr/aarch64-linux-gnu";
  if (!exists(join(sysroot, "lib", "ld-linux-aarch64.so.1"))) {
    return `the aarch64 glibc is not in ${sysroot} (apt-get install libc6-arm64-cross, or QEMU_LD_PREFIX naming another sysroot)`;
  }
  return { prefix: [qemu, "-L", sysroot, "-cpu", cpu], how: `under ${qemu} -cpu ${cpu} (sysroot ${sysroot})`, emulated: true };
}

/** The ELF machine of a file: "aarch64", "x86-64", another number, or null when it is not ELF. */
export function elfMachine(bytes: Uint8Array): string | null {
  if (bytes.length < 20 || bytes[0] !== 0x7f || bytes[1] !== 0x45 || bytes[2] !== 0x4c || bytes[3] !== 0x46) return null;
  const m = bytes[18] | (bytes[19] << 8); // e_machine, little-endian
  return m === 183 ? "aarch64" : m === 62 ? "x86-64" : `machine ${m}`;
}
