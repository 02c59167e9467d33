// bloomery CLI: what this machine has for a model (the agent interface's `machine` object): CUDA
// cards with their compute capability and free memory, host RAM (/proc/meminfo and the cgroup
// limit, v2 or v1), CPU cores and the kernel paths (AVX2, AVX-512) the CPU library can run.
import { readFileSync } from "node:fs";
import { arch, cpus, platform, totalmem, freemem } from "node:os";
import { join } from "node:path";
import { cudaDeviceInfo, cudaStatus } from "../../ffi/cuda.ts";
import { cpuPath, cpuPaths, usableCores } from "../../ffi/cpu-kernels.ts";

export interface CardInfo {
  /** CUDA device index (-dev CUDA<index>) */
  index: number;
  name: string;
  /** "9.0" */
  compute_capability: string;
  sm_count: number;
  total_bytes: number;
  free_bytes: number;
  /** this build has code for the card */
  supported: boolean;
}

export interface RamInfo {
  total_bytes: number;
  /** MemAvailable (what can be used without swapping) */
  available_bytes: number;
  /** the cgroup's memory limit; null when there is none */
  cgroup_limit_bytes: number | null;
  /** the limit less what the cgroup uses now (reclaimable file pages not counted); null without a limit */
  cgroup_available_bytes: number | null;
  /** what a model may use: the smaller of available_bytes and cgroup_available_bytes */
  usable_bytes: number;
}

export interface CpuInfo {
  model: string;
  /** cores this process may use (affinity and cgroup quota) */
  cores: number;
  logical_cpus: number;
  avx2: boolean;
  avx512: boolean;
  /** the kernel path the CPU library runs (scalar, avx2, avx512) */
  kernel_path: string;
}

export interface Machine {
  os: string;
  arch: string;
  cuda: { usable: boolean; reason: string; devices: number; driver_version: number };
  cards: CardInfo[];
  ram: RamInfo;
  cpu: CpuInfo;
}

/** A number from a file, or undefined when absent or not a number. */
function readNumber(path: string): number | undefined {
  try {
    const t = readFileSync(path, "utf8").trim();
    return /^\d+$/.test(t) ? Number(t) : undefined;
  } catch {
    return undefined;
  }
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** Key -> bytes of /proc/meminfo ("MemTotal:  24684084 kB"). */
export function parseMeminfo(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    const m = /^(\w+):\s+(\d+)(?:\s+kB)?/.exec(line);
    if (m) out.set(m[1], Number(m[2]) * (line.includes("kB") ? 1024 : 1));
  }
  return out;
}

/** A field of a cgroup memory.stat file. */
function statField(text: string | undefined, key: string): number {
  const m = text ? new RegExp(`^${key} (\\d+)$`, "m").exec(text) : null;
  return m ? Number(m[1]) : 0;
}

/** Limits of 2^60 or more mean "no limit" (cgroup v1 writes PAGE_COUNTER_MAX pages). */
const NO_LIMIT = 2 ** 60;

/** The cgroup memory limit and use of this process, read under `root` ("/" on a real machine). */
export function readCgroupMemory(root = "/"): { limit: number; used: number } | null {
  const self = readText(join(root, "proc/self/cgroup")) ?? "";
  // v2: "0::/path" -> /sys/fs/cgroup/path/memory.max
  const v2 = /^0::(\S*)$/m.exec(self)?.[1] ?? "/";
  for (const dir of [join(root, "sys/fs/cgroup", v2), join(root, "sys/fs/cgroup")]) {
    const max = readText(join(dir, "memory.max"));
    if (max === undefined) continue;
    if (max.trim() === "max") return null;
    const limit = Number(max.trim());
    if (!Number.isFinite(limit) || limit >= NO_LIMIT) return null;
    const current = readNumber(join(dir, "memory.current")) ?? 0;
    const inactive = statField(readText(join(dir, "memory.stat")), "inactive_file");
    return { limit, used: Math.max(0, current - inactive) };
  }
  // v1: memory.limit_in_bytes of the memory controller
  const v1dir = join(root, "sys/fs/cgroup/memory");
  const limit = readNumber(join(v1dir, "memory.limit_in_bytes"));
  if (limit === undefined || limit >= NO_LIMIT) return null;
  const usage = readNumber(join(v1dir, "memory.usage_in_bytes")) ?? 0;
  const inactive = statField(readText(join(v1dir, "memory.stat")), "total_inactive_file");
  return { limit, used: Math.max(0, usage - inactive) };
}

/** Host memory: /proc/meminfo and the cgroup under `root` (os totals where /proc is absent). */
export function readRam(root = "/"): RamInfo {
  const info = parseMeminfo(readText(join(root, "proc/meminfo")) ?? "");
  const total = info.get("MemTotal") ?? totalmem();
  const available = info.get("MemAvailable") ?? info.get("MemFree") ?? freemem();
  const cg = readCgroupMemory(root);
  const cgAvail = cg ? Math.max(0, cg.limit - cg.used) : null;
  return {
    total_bytes: total,
    available_bytes: available,
    cgroup_limit_bytes: cg ? cg.limit : null,
    cgroup_available_bytes: cgAvail,
    usable_bytes: cgAvail === null ? available : Math.min(available, cgAvail),
  };
}

function readCpu(): CpuInfo {
  const paths = cpuPaths();
  const list = cpus();
  return {
    model: list[0]?.model.trim() ?? "",
    cores: usableCores(),
    logical_cpus: list.length,
    avx2: paths.includes("avx2"),
    avx512: paths.includes("avx512"),
    kernel_path: cpuPath(),
  };
}

function readCards(devices?: readonly number[]): { cuda: Machine["cuda"]; cards: CardInfo[] } {
  const st = cudaStatus();
  const cards: CardInfo[] = [];
  if (st.devices > 0) {
    for (let i = 0; i < st.devices; i++) {
      if (devices && !devices.includes(i)) continue;
      const d = cudaDeviceInfo(i);
      cards.push({
        index: d.index,
        name: d.name,
        compute_capability: `${d.ccMajor}.${d.ccMinor}`,
        sm_count: d.smCount,
        total_bytes: d.totalBytes,
        free_bytes: d.freeBytes,
        supported: d.hasCode,
      });
    }
  }
  return { cuda: { usable: st.ok, reason: st.reason, devices: st.devices, driver_version: st.driverVersion }, cards };
}

/**
 * Probe this machine (reads /proc and /sys under `root`; cards through the CUDA library). Reading
 * a card's free memory opens a CUDA context on it that lives as long as the process, so a start
 * probes only the card it would use (`devices`); --recommend probes them all.
 */
export function probeMachine(root = "/", devices?: readonly number[]): Machine {
  return { os: platform(), arch: arch(), ...readCards(devices), ram: readRam(root), cpu: readCpu() };
}

/** The CUDA indices -dev lists (CUDA<n> names, in order; none, other names and repeats left out). */
export function listedCards(devices: readonly string[]): number[] {
  const out: number[] = [];
  for (const d of devices) {
    const m = /^CUDA(\d+)$/i.exec(d);
    if (m && !out.includes(Number(m[1]))) out.push(Number(m[1]));
  }
  return out;
}

/** The cards a start probes: those -dev lists when it lists several (the layer split's plan reads each one's free memory), else the one it uses. */
export function probedCards(devices: readonly string[]): number[] {
  const l = listedCards(devices);
  return l.length > 1 ? l : [startDevice(devices)];
}

/** The CUDA device a start uses: -dev CUDA<n> when it names exactly one, else 0 (as planEngine reads -dev). */
export function startDevice(devices: readonly string[]): number {
  const d = devices.filter((x) => x !== "none");
  const m = d.length === 1 ? /^CUDA(\d+)$/i.exec(d[0]) : null;
  return m ? Number(m[1]) : 0;
}
