// bloomery build: which CUDA code a build compiles. The choices: none (the CPU only), the cards in
// this machine (their compute capability from nvidia-smi), every release target, or an explicit
// architecture list. Read from --cuda / --cuda-arch, then BLOOMERY_CUDA / BLOOMERY_CUDA_ARCH, else
// chosen (auto) from what the machine has, with the reason said.
import { TARGETS } from "./release-targets.ts";

/** The release's x86-64 CUDA architectures (scripts/release-targets.ts owns the list). */
export const RELEASE_ARCHS: readonly string[] = TARGETS.find((t) => t.id === "linux-x64-cuda")!.cuda!.archs;

export interface Card {
  name: string;
  /** "9.0" */
  compute: string;
}

export interface BuildHost {
  /** nvcc's path, or undefined */
  nvcc: string | undefined;
  /** the cards nvidia-smi lists; null when there is no nvidia-smi or it did not answer */
  cards: Card[] | null;
  /** a CI run (CI set in the environment) */
  ci: boolean;
}

export type CudaChoice =
  | { kind: "cpu"; why: string }
  | { kind: "archs"; archs: string[]; label: "native" | "release" | "given"; why: string };

export class BuildChoiceError extends Error {}

const USAGE = "--cuda cpu | native | release | sm_XX[,sm_YY,compute_ZZ] (or BLOOMERY_CUDA=...; BLOOMERY_CUDA_ARCH=sm_XX,... and --cuda-arch sm_XX,... still name a list)";

/** The SASS architecture for a card's compute capability, as the release spells its targets. */
export function archForCompute(compute: string): string {
  const m = /^(\d+)\.(\d+)$/.exec(compute.trim());
  if (!m) throw new BuildChoiceError(`nvidia-smi gave the compute capability '${compute}', not MAJOR.MINOR`);
  const major = Number(m[1]), minor = Number(m[2]);
  if (major < 8) throw new BuildChoiceError(`compute capability ${compute} is older than the cards bloomery's CUDA code is written for (8.6 and newer): build for the CPU with --cuda cpu`);
  // Blackwell and newer: the arch-specific targets (sm_120a, sm_121a), as the release builds them
  return major >= 10 ? `sm_${major}${minor}a` : `sm_${major}${minor}`;
}

function checkList(list: string[], from: string): string[] {
  if (!list.length) throw new BuildChoiceError(`${from}: no architecture given (${USAGE})`);
  for (const a of list) {
    if (!/^(sm|compute)_\d+a?$/.test(a)) throw new BuildChoiceError(`${from}: bad CUDA architecture '${a}' (sm_90, sm_120a, compute_120, ...)`);
  }
  return list;
}

function split(spec: string): string[] {
  return spec.split(",").map((s) => s.trim()).filter(Boolean);
}

function native(host: BuildHost, from: string): CudaChoice {
  if (!host.cards) throw new BuildChoiceError(`${from}: no NVIDIA card found (nvidia-smi is missing or did not answer); name the architecture instead (--cuda sm_90) or build every release target (--cuda release)`);
  if (!host.cards.length) throw new BuildChoiceError(`${from}: nvidia-smi lists no card; name the architecture instead (--cuda sm_90)`);
  const archs = [...new Set(host.cards.map((c) => archForCompute(c.compute)))];
  const cards = host.cards.map((c) => `${c.name}, compute ${c.compute}`).join("; ");
  return { kind: "archs", archs, label: "native", why: `for this machine's card${host.cards.length > 1 ? "s" : ""} (${cards})` };
}

/** What the flags, the environment and the machine ask for. */
export function chooseCuda(argv: readonly string[], env: Readonly<Record<string, string | undefined>>, host: BuildHost): CudaChoice {
  const flag = (name: string): string | undefined => {
    const i = argv.indexOf(name);
    if (i >= 0) {
      const v = argv[i + 1];
      if (v === undefined || v.startsWith("--")) throw new BuildChoiceError(`${name} needs a value (${USAGE})`);
      return v;
    }
    const eq = argv.find((a) => a.startsWith(`${name}=`));
    return eq?.slice(name.length + 1);
  };
  const archFlag = flag("--cuda-arch");
  if (archFlag !== undefined) return given(checkList(split(archFlag), "--cuda-arch"), "--cuda-arch", host);
  const cudaFlag = flag("--cuda");
  if (cudaFlag !== undefined) return fromSpec(cudaFlag, "--cuda", host);
  if (env.BLOOMERY_CUDA) return fromSpec(env.BLOOMERY_CUDA, "BLOOMERY_CUDA", host);
  if (env.BLOOMERY_CUDA_ARCH) return given(checkList(split(env.BLOOMERY_CUDA_ARCH), "BLOOMERY_CUDA_ARCH"), "BLOOMERY_CUDA_ARCH", host);
  return auto(host);
}

function given(archs: string[], from: string, host: BuildHost): CudaChoice {
  if (!host.nvcc) throw new BuildChoiceError(`${from} asks for CUDA code (${archs.join(", ")}) but nvcc is not here: install the CUDA toolkit (12.8 or newer) or build with --cuda cpu`);
  return { kind: "archs", archs, label: "given", why: `as ${from} asks` };
}

function fromSpec(spec: string, from: string, host: BuildHost): CudaChoice {
  const s = spec.trim().toLowerCase();
  if (s === "cpu" || s === "none" || s === "off" || s === "0") return { kind: "cpu", why: `as ${from}=${spec} asks` };
  if (s === "auto") return auto(host);
  const need = (c: CudaChoice): CudaChoice => {
    if (c.kind === "archs" && !host.nvcc) throw new BuildChoiceError(`${from}=${spec} needs nvcc, which is not here: install the CUDA toolkit (12.8 or newer) or build with --cuda cpu`);
    return c;
  };
  if (s === "native") return need(native(host, `${from}=native`));
  if (s === "release" || s === "all") return need({ kind: "archs", archs: [...RELEASE_ARCHS], label: "release", why: `every release target, as ${from}=${spec} asks` });
  return given(checkList(split(spec), from), from, host);
}

function auto(host: BuildHost): CudaChoice {
  if (!host.nvcc) return { kind: "cpu", why: "nvcc is not here (install the CUDA toolkit 12.8+ to build the GPU library)" };
  if (host.cards?.length) {
    try {
      return native(host, "auto");
    } catch (e) {
      return { kind: "cpu", why: `${(e as Error).message}` };
    }
  }
  if (host.ci) return { kind: "archs", archs: [...RELEASE_ARCHS], label: "release", why: "every release target: a CI run (CI is set) with nvcc keeps the release's CUDA code compiling" };
  return {
    kind: "cpu",
    why: `nvcc is here but no NVIDIA card is (nvidia-smi ${host.cards ? "lists none" : "is missing or did not answer"}): the CUDA library would not run on this machine; --cuda release builds it for every release target, --cuda sm_90 for one card`,
  };
}

/** The cards nvidia-smi lists (null without it). */
export function probeCards(): Card[] | null {
  if (!Bun.which("nvidia-smi")) return null;
  const p = Bun.spawnSync(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"], { stdout: "pipe", stderr: "pipe", timeout: 20000 });
  if (p.exitCode !== 0) return null;
  const cards: Card[] = [];
  for (const line of p.stdout.toString().split("\n")) {
    const i = line.lastIndexOf(",");
    if (i < 0) continue;
    cards.push({ name: line.slice(0, i).trim(), compute: line.slice(i + 1).trim() });
  }
  return cards;
}

export function findNvcc(env: Readonly<Record<string, string | undefined>>, exists: (p: string) => boolean): string | undefined {
  const cands = [env.NVCC, Bun.which("nvcc") ?? undefined, "/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"];
  return cands.find((p): p is string => !!p && exists(p));
}

export const CUDA_USAGE = USAGE;
