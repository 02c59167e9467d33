// bloomery release: `bun scripts/release.ts [--targets all|ID,...] [--out DIR] [--version V]
// [--level 1|6|9] [--no-smoke]`. Builds one executable per target with its native libraries
// embedded, smoke-tests it where it runs, and writes dist/release/bloomery-<version>-<target>.tar.gz,
// install.sh and SHA256SUMS. Targets this machine cannot build are named with the toolchain they
// need; asking for one explicitly makes the run fail.
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { TARGETS, archiveName, currentHost, missingToolchain, targetById, type ReleaseTarget } from "./release-targets.ts";
import { ReleaseError, sha256File, verifySums, writeSums, writeTarGz, type ArchiveEntry } from "./release-archive.ts";
import { smokeTest } from "./release-smoke.ts";
import { prepareDemoAsset } from "./demo-asset.ts";
import { writeFormula } from "./release-formula.ts";
import { archInfo } from "./build-arch.ts";
import { bunRuntime } from "./bun-runtime.ts";
import { arm64Runner } from "./arm64-emu.ts";

const root = resolve(import.meta.dir, "..");
/** Entry points of the executable (as scripts/build.ts compiles them: the CLI and the engine worker). */
export const ENTRYPOINTS = ["src/cli/main.ts", "src/engine/worker.ts", "src/server/body-worker.ts"];

export interface ReleaseOptions {
  targets: "all" | string[];
  out: string;
  version: string;
  level: 1 | 6 | 9;
  smoke: boolean;
}

export function parseArgs(argv: string[]): ReleaseOptions {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version?: unknown };
  const o: ReleaseOptions = { targets: "all", out: join(root, "dist", "release"), version: typeof pkg.version === "string" ? pkg.version : "", level: 9, smoke: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new ReleaseError(`${a} needs a value`);
      return v;
    };
    if (a === "--targets") {
      const v = val();
      o.targets = v === "all" ? "all" : v.split(",").map((s) => s.trim()).filter((s) => s !== "");
    } else if (a === "--out") o.out = resolve(val());
    else if (a === "--version") o.version = val();
    else if (a === "--level") {
      const l = Number(val());
      if (l !== 1 && l !== 6 && l !== 9) throw new ReleaseError("--level must be 1, 6 or 9");
      o.level = l;
    } else if (a === "--no-smoke") o.smoke = false;
    else if (a === "-h" || a === "--help") {
      console.log(`usage: bun scripts/release.ts [--targets all|${TARGETS.map((t) => t.id).join(",")}] [--out DIR] [--version V] [--level 1|6|9] [--no-smoke]`);
      process.exit(0);
    } else throw new ReleaseError(`unknown argument '${a}' (see --help)`);
  }
  if (!/^[0-9A-Za-z][0-9A-Za-z.+-]*$/.test(o.version)) throw new ReleaseError(`version '${o.version}' is not a release version (e.g. 0.1.0)`);
  if (o.targets !== "all") {
    for (const id of o.targets) {
      if (!targetById(id)) throw new ReleaseError(`unknown target '${id}'; targets: ${TARGETS.map((t) => t.id).join(", ")}`);
    }
  }
  return o;
}

function run(cmd: string[], what: string): void {
  const p = Bun.spawnSync(cmd, { cwd: root, stdout: "inherit", stderr: "inherit" });
  if (p.exitCode !== 0) throw new ReleaseError(`${what} failed: ${cmd.join(" ")}`);
}

function capture(cmd: string[]): string | null {
  if (!Bun.which(cmd[0])) return null;
  const p = Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
  return p.exitCode === 0 ? p.stdout.toString() : null;
}

/** A Linux target of the other architecture (linux-arm64 on an x86-64 host): a cross build. */
function crossArch(t: ReleaseTarget): ReturnType<typeof archInfo> | null {
  if (t.os !== "linux" || process.platform !== "linux") return null;
  const a = archInfo(t.arch);
  return a.cross ? a : null;
}

/** Build the target's native libraries (scripts/build-native.ts owns how) and stage copies of them. */
function stageLibraries(t: ReleaseTarget, stage: string): Map<string, string> {
  const args = [process.execPath, "scripts/build-native.ts"];
  // a CUDA target's own architectures; a target without CUDA compiles none (its library is a stand-in)
  args.push(...(t.cuda ? ["--cuda-arch", t.cuda.archs.join(",")] : ["--cuda", "cpu"]));
  // another architecture's CPU library goes to build/linux-<arch>/
  const cross = crossArch(t);
  if (cross) args.push("--arch", cross.name);
  run(args, `${t.id}: building the native libraries`);
  const dir = join(root, "build", ...(cross?.subdir ?? []));
  const libs = new Map<string, string>();
  for (const lib of t.libs) {
    const src = join(dir, lib);
    if (!existsSync(src) || statSync(src).size === 0) throw new ReleaseError(`${t.id}: scripts/build-native.ts did not produce ${src}`);
    const dst = join(stage, lib);
    copyFileSync(src, dst);
    if (lib.endsWith(".so")) checkNeeded(t, dst);
    libs.set(lib, dst);
  }
  for (const lib of t.placeholders) {
    const dst = join(stage, lib);
    writeFileSync(dst, "");
    libs.set(lib, dst);
  }
  if (t.cuda) checkCudaLibrary(t, libs.get("libbloomery_cuda.so")!);
  return libs;
}

/** The CUDA library must hold SASS for every listed arch (and PTX when asked) and need no toolkit library. */
function checkCudaLibrary(t: ReleaseTarget, lib: string): void {
  // build-native records the arch list it linked with; it must be exactly this target's
  const stamp = join(root, "build", "libbloomery_cuda.arch");
  const linked = existsSync(stamp) ? readFileSync(stamp, "utf8").trim() : "";
  if (linked !== t.cuda!.archs.join("-")) {
    throw new ReleaseError(`${t.id}: build/libbloomery_cuda.so was linked for '${linked || "unknown archs"}', this target needs ${t.cuda!.archs.join(", ")}`);
  }
  checkNeeded(t, lib);
  // cuobjdump (CUDA toolkit, not in every install) reads the fat binary itself: the stronger check
  const elf = capture(["cuobjdump", "--list-elf", lib]);
  if (elf === null) return;
  const sass = t.cuda!.archs.filter((a) => a.startsWith("sm_"));
  const missing = sass.filter((a) => !new RegExp(`\\.${a}\\.cubin`).test(elf));
  if (missing.length > 0) throw new ReleaseError(`${t.id}: ${basename(lib)} has no SASS for ${missing.join(", ")} (cuobjdump lists: ${elf.trim().split("\n").join("; ")})`);
  const ptxWanted = t.cuda!.archs.filter((a) => a.startsWith("compute_")).map((a) => a.replace("compute_", "sm_"));
  if (ptxWanted.length > 0) {
    const ptx = capture(["cuobjdump", "--list-ptx", lib]) ?? "";
    const absent = ptxWanted.filter((a) => !new RegExp(`\\.${a}\\.ptx`).test(ptx));
    if (absent.length > 0) throw new ReleaseError(`${t.id}: ${basename(lib)} carries no PTX for ${absent.join(", ")}, so newer cards could not compile it at start (cuobjdump --list-ptx: ${ptx.trim().split("\n").join("; ")})`);
  }
}

/** A shipped library may need only what every Linux has (libc, libm, ...) and the driver's libcuda. */
function checkNeeded(t: ReleaseTarget, lib: string): void {
  const dyn = capture(["readelf", "-d", lib]);
  if (dyn === null) return;
  const needed = [...dyn.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]);
  const toolkit = needed.filter((n) => /^lib(cudart|cublas|cublasLt|nvrtc|cufft|curand|cusparse|nvJitLink)\./.test(n));
  if (toolkit.length > 0) throw new ReleaseError(`${t.id}: ${basename(lib)} needs ${toolkit.join(", ")}, which users without the CUDA toolkit lack; link them statically`);
}

/** Compile the executable for `t` with the staged libraries in place of build/*. */
async function compile(t: ReleaseTarget, libs: Map<string, string>, outfile: string): Promise<void> {
  const unknown: string[] = [];
  // a cross build: the target's Bun runtime from npm (checked against package-lock.json), not a download by bun build
  const executablePath = crossArch(t) ? bunRuntime(t.bunTarget, (s) => console.log(`${t.id}: ${s}`)) : undefined;
  const result = await Bun.build({
    entrypoints: ENTRYPOINTS.map((e) => join(root, e)),
    compile: executablePath ? { target: t.bunTarget, outfile, executablePath } : { target: t.bunTarget, outfile },
    minify: false,
    plugins: [
      {
        name: "bloomery-release-libs",
        setup(b) {
          b.onResolve({ filter: /(^|\/)build\/[^/]+\.(so|dylib)$/ }, (args) => {
            const name = args.path.slice(args.path.lastIndexOf("/") + 1);
            const staged = libs.get(name);
            if (!staged) {
              unknown.push(`${name} (imported by ${args.importer})`);
              return undefined;
            }
            return { path: staged };
          });
        },
      },
    ],
  });
  if (unknown.length > 0) throw new ReleaseError(`${t.id}: the sources import ${unknown.join(", ")}, which this target neither ships nor stubs (its libraries: ${t.libs.join(", ")}); add it to the target's libs or placeholders in scripts/release-targets.ts`);
  if (!result.success) throw new ReleaseError(`${t.id}: bun build --compile failed:\n${result.logs.map(String).join("\n")}`);
  if (!existsSync(outfile)) throw new ReleaseError(`${t.id}: bun build --compile wrote no ${outfile}`);
}

async function buildTarget(t: ReleaseTarget, o: ReleaseOptions, log: (s: string) => void): Promise<string> {
  const stage = join(o.out, ".stage", t.id);
  rmSync(stage, { recursive: true, force: true });
  mkdirSync(stage, { recursive: true });
  const libs = stageLibraries(t, stage);
  const exe = join(stage, t.exe);
  log(`${t.id}: compiling ${t.exe} (${t.bunTarget}) with ${[...libs.keys()].join(", ")}`);
  prepareDemoAsset(root);
  await compile(t, libs, exe);
  const runsHere = t.os === process.platform && t.arch === process.arch;
  // an aarch64 Linux executable on an x86-64 host: smoke-tested under qemu-user where it is installed
  const emu = !runsHere && t.os === "linux" && t.arch === "arm64" ? arm64Runner() : null;
  if (o.smoke && runsHere) await smokeTest(exe, o.version, log);
  else if (o.smoke && emu && typeof emu === "object") await smokeTest(exe, o.version, log, emu.prefix);
  else if (o.smoke) log(`${t.id}: smoke test skipped (the executable does not run on ${process.platform}-${process.arch}${typeof emu === "string" ? `: ${emu}` : ""})`);
  const entries: ArchiveEntry[] = [{ name: t.exe, data: readFileSync(exe), mode: 0o755 }];
  for (const doc of ["README.md", "LICENSE"]) {
    const p = join(root, doc);
    if (existsSync(p)) entries.push({ name: doc, data: readFileSync(p), mode: 0o644 });
  }
  const archive = join(o.out, archiveName(o.version, t));
  const epoch = Number(process.env.SOURCE_DATE_EPOCH ?? "0");
  const sum = writeTarGz(archive, entries, Number.isSafeInteger(epoch) && epoch >= 0 ? epoch : 0, o.level);
  log(`${t.id}: ${archive} (${(statSync(archive).size / 1048576).toFixed(1)} MiB, sha256 ${sum})`);
  rmSync(stage, { recursive: true, force: true });
  return archive;
}

export async function release(o: ReleaseOptions, log: (s: string) => void = console.log): Promise<{ built: string[]; skipped: string[] }> {
  const host = currentHost();
  const explicit = o.targets !== "all";
  const wanted = o.targets === "all" ? [...TARGETS] : o.targets.map((id) => targetById(id)!);
  const skipped: string[] = [];
  const buildable: ReleaseTarget[] = [];
  for (const t of wanted) {
    const missing = missingToolchain(t, host, root);
    if (missing) skipped.push(missing);
    else buildable.push(t);
  }
  if (explicit && skipped.length > 0) throw new ReleaseError(`cannot build here:\n  ${skipped.join("\n  ")}`);
  if (buildable.length === 0) throw new ReleaseError(`no target can be built here:\n  ${skipped.join("\n  ")}`);
  mkdirSync(o.out, { recursive: true });
  const built: string[] = [];
  for (const t of buildable) built.push(await buildTarget(t, o, log));
  rmSync(join(o.out, ".stage"), { recursive: true, force: true });
  copyFileSync(join(root, "scripts", "install.sh"), join(o.out, "install.sh"));
  const sums = writeSums(o.out, (n) => n === "install.sh" || (n.startsWith(`bloomery-${o.version}-`) && n.endsWith(".tar.gz")));
  const checked = verifySums(o.out);
  log(`${sums}: ${checked.length} files (${checked.join(", ")}); sha256 of the sums file ${sha256File(sums)}`);
  try {
    log(`formula: ${writeFormula(o.out, o.version)}`);
  } catch (e) {
    log(`formula not written (${e instanceof Error ? e.message : String(e)}); once every archive is in ${o.out}, run: bun scripts/release-formula.ts --dir ${o.out}`);
  }
  for (const s of skipped) log(`skipped ${s}`);
  return { built, skipped };
}

if (import.meta.main) {
  try {
    await release(parseArgs(process.argv.slice(2)));
  } catch (e) {
    console.error(`release: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  }
}
