// bloomery CI: the CPU library's kernel and model tests on the arm64 build, run by the arm64 Bun
// under qemu-user on an x86-64 host, against the same fixtures and thresholds as the x86-64 run;
// then the arm64 executable's own test (test/arm64-exe.test.ts: --demo answers a completion).
// It builds what it needs: the arm64 CPU library (aarch64-linux-gnu-gcc) and the arm64 executable
// (scripts/build.ts --arch arm64, its Bun runtime from npm), then runs the test files in a copy of
// the sources whose build/libbloomery_cpu.so is the arm64 library (build/linux-arm64/tests/).
// Prints "N passed, N failed, N skipped" last and exits 1 on any failure (or, under CI, when qemu
// or the cross compiler is missing).
//
//   bun scripts/arm64-tests.ts [--no-build] [--no-exe-test] [--jobs 1|2]
//
// --no-exe-test leaves test/arm64-exe.test.ts to npm test, which runs it when the executable is
// there (.ci/run runs this script first).
//
// Needs Debian's qemu-user, gcc-aarch64-linux-gnu and libc6-dev-arm64-cross (.ci/run installs them).
import { cpSync, existsSync, mkdirSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { arm64Runner, ARM64_APT_PACKAGES, type QemuCpu } from "./arm64-emu.ts";
import { bunRuntime } from "./bun-runtime.ts";

const ROOT = join(import.meta.dir, "..");
const OUT = join(ROOT, "build", "linux-arm64");
const TREE = join(OUT, "tests", "repo");
/** The arm64 executable the exe test runs (never dist/). */
export const ARM64_TEST_EXE = join(OUT, "test", "bloomery-serve");
/** qemu-user's slowdown, for the tests' own time limits (test/paths.ts SLOWDOWN); thresholds stay. */
const SLOWDOWN = "10";
const argv = process.argv.slice(2);
const ci = !!process.env.CI && process.env.CI !== "false";
const jobs = argv.includes("--jobs") ? Number(argv[argv.indexOf("--jobs") + 1]) : 2;

/**
 * The runs: the kernel suite (every weight type's products, the float kernels and the gated delta rule's two forms, the quantizers,
 * whole forward passes on every path against the scalar path, llama.cpp's greedy text on every
 * path), tiny-qwen3moe against transformers (the family table's qwen3moe Q8_0 rows: its F16 rows
 * take three more minutes under qemu and add no kernel the others miss) and the demo model against
 * llama.cpp (test/model.test.ts). The two groups run side by side.
 */
const GROUPS: { name: string; runs: string[][] }[] = [
  { name: "forward", runs: [["test/kernels-forward.test.ts"]] },
  {
    name: "kernels+models",
    runs: [
      ["test/kernels-quant.test.ts", "test/kernels-float.test.ts", "test/delta-rule.test.ts", "test/quants.test.ts", "test/model.test.ts"],
      ["test/families-cpu.test.ts", "-t", "qwen3moe Q8_0"],
    ],
  },
];

interface Tally { passed: number; failed: number; skipped: number }
const total: Tally = { passed: 0, failed: 0, skipped: 0 };

function finish(): never {
  console.log(`${total.passed} passed, ${total.failed} failed, ${total.skipped} skipped`);
  process.exit(total.failed > 0 ? 1 : 0);
}

function say(s: string): void {
  console.log(`arm64 tests: ${s}`);
}

function sh(cmd: string[], what: string): void {
  const p = Bun.spawnSync(cmd, { cwd: ROOT, stdout: "inherit", stderr: "inherit" });
  if (p.exitCode !== 0) {
    say(`${what} failed (exit ${p.exitCode}): ${cmd.join(" ")}`);
    total.failed++;
    finish();
  }
}

function clock(ms: number): string {
  return ms < 60000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

/** bun test's summary counts in a run's output. */
export function countsOf(out: string): Tally | null {
  const n = (w: string): number | null => {
    const m = [...out.matchAll(new RegExp(`^ *(\\d+) ${w}$`, "gm"))].at(-1);
    return m ? Number(m[1]) : null;
  };
  const passed = n("pass"), failed = n("fail");
  if (passed === null && failed === null) return null;
  return { passed: passed ?? 0, failed: failed ?? 0, skipped: n("skip") ?? 0 };
}

/** A copy of the sources whose build/ holds the arm64 library (and the empty CUDA stand-in). */
function makeTree(): void {
  rmSync(join(OUT, "tests"), { recursive: true, force: true });
  mkdirSync(join(TREE, "build"), { recursive: true });
  for (const d of ["src", "ffi", "test", "package.json", "bunfig.toml", "tsconfig.json"]) cpSync(join(ROOT, d), join(TREE, d), { recursive: true });
  symlinkSync(join(ROOT, "node_modules"), join(TREE, "node_modules"));
  // the fixtures: ../shared/fixtures beside the tree, as beside a checkout
  const shared = join(ROOT, "..", "shared");
  if (existsSync(shared)) symlinkSync(realpathSync(shared), join(OUT, "tests", "shared"));
  cpSync(join(OUT, "libbloomery_cpu.so"), join(TREE, "build", "libbloomery_cpu.so"));
  writeFileSync(join(TREE, "build", "libbloomery_cuda.so"), "");
}

/** Run one bun under `cpu`'s qemu in the tree; its output, exit code and time. */
async function emulated(bun: string, cpu: QemuCpu, args: string[]): Promise<{ out: string; code: number; ms: number }> {
  const r = arm64Runner(cpu);
  if (typeof r === "string") return { out: r, code: 1, ms: 0 };
  const t0 = performance.now();
  const p = Bun.spawn([...r.prefix, bun, ...args], {
    cwd: TREE,
    env: { ...process.env, BLOOMERY_TEST_SLOWDOWN: SLOWDOWN },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [o, e, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { out: o + e, code, ms: performance.now() - t0 };
}

if (import.meta.main) {
  const runner = arm64Runner();
  if (typeof runner === "string") {
    say(`cannot run: ${runner}`);
    if (ci) {
      say(`CI needs them: apt-get install ${ARM64_APT_PACKAGES.join(" ")}`);
      total.failed++;
    } else total.skipped++;
    finish();
  }
  if (!runner.emulated) {
    say("this host is aarch64: npm test runs the whole suite on the arm64 library natively");
    total.skipped++;
    finish();
  }
  const t0 = performance.now();
  if (!argv.includes("--no-build")) {
    // the arm64 CPU library and executable (the executable's build makes the library first)
    sh([process.execPath, "scripts/build.ts", "--arch", "arm64", "--out", ARM64_TEST_EXE], "building the arm64 executable");
  }
  if (!existsSync(join(OUT, "libbloomery_cpu.so"))) {
    say(`no ${join(OUT, "libbloomery_cpu.so")}: run without --no-build`);
    total.failed++;
    finish();
  }
  let bun: string;
  try {
    bun = bunRuntime("bun-linux-arm64", say);
  } catch (e) {
    say(`the arm64 Bun runtime: ${e instanceof Error ? e.message : String(e)}`);
    total.failed++;
    finish();
  }
  makeTree();
  say(`built in ${clock(performance.now() - t0)}; running ${runner.how}`);

  // the kernel path the library picks from the hardware capability bits, on three CPU models
  const PATHS: [QemuCpu, string][] = [["cortex-a53", "scalar,neon"], ["neoverse-n1", "scalar,neon,dotprod"], ["max", "scalar,neon,dotprod,i8mm"]];
  for (const [cpu, want] of PATHS) {
    const r = await emulated(bun, cpu, ["-e", 'import { cpuPaths, cpuPath } from "./ffi/cpu-kernels.ts"; console.log(`${cpuPaths().join(",")} ${cpuPath()}`);']);
    const got = r.out.trim();
    const best = want.split(",").at(-1);
    if (r.code === 0 && got === `${want} ${best}`) {
      say(`-cpu ${cpu}: the library offers ${want} and picks ${best}`);
      total.passed++;
    } else {
      say(`-cpu ${cpu}: expected the paths ${want} and the pick ${best}, got (exit ${r.code}) ${got.slice(0, 400)}`);
      total.failed++;
    }
  }

  // the kernel and model tests, two groups side by side (--jobs 1: one after the other)
  const tests = performance.now();
  const groups = jobs >= 2 ? GROUPS : [{ name: "all", runs: GROUPS.flatMap((g) => g.runs) }];
  const results = await Promise.all(groups.map((g) => runGroup(bun, g)));
  for (const r of results) console.log(r);
  say(`kernel and model tests ${runner.how}: ${clock(performance.now() - tests)}`);

  // the arm64 executable: --demo under qemu answers a completion (the host's bun runs the test)
  if (argv.includes("--no-exe-test")) {
    say(`all in ${clock(performance.now() - t0)} (test/arm64-exe.test.ts is left to npm test)`);
    finish();
  }
  const x = Bun.spawnSync([process.execPath, "test", "--timeout", "600000", "test/arm64-exe.test.ts"], {
    cwd: ROOT,
    env: { ...process.env, BLOOMERY_ARM64_EXE: ARM64_TEST_EXE },
    stdout: "pipe",
    stderr: "pipe",
  });
  const xo = x.stdout.toString() + x.stderr.toString();
  console.log(xo);
  add("test/arm64-exe.test.ts", countsOf(xo), x.exitCode ?? 1);
  say(`all in ${clock(performance.now() - t0)}`);
  finish();
}

function add(what: string, c: Tally | null, code: number): string {
  if (!c) {
    total.failed++;
    return `${what}: no test results (exit ${code})`;
  }
  total.passed += c.passed;
  total.failed += c.failed + (code !== 0 && c.failed === 0 ? 1 : 0);
  total.skipped += c.skipped;
  return `${what}: ${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped (exit ${code})`;
}

async function runGroup(bun: string, g: { name: string; runs: string[][] }): Promise<string> {
  const lines: string[] = [];
  for (const files of g.runs) {
    const r = await emulated(bun, "max", ["test", "--timeout", "600000", ...files]);
    const summary = add(files.join(" "), countsOf(r.out), r.code);
    lines.push(r.out, `arm64 tests: ${summary} in ${clock(r.ms)}`);
    say(`${summary} in ${clock(r.ms)}`);
  }
  return lines.join("\n");
}
