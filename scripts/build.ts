// bloomery: `npm run build` / `bun scripts/build.ts`: builds the native libraries (scripts/build-native.ts:
// the CPU library, and the CUDA library for the architectures chosen), then compiles one executable
// with the libraries, the engine worker and the demo model embedded: dist/bloomery-serve, or --out PATH.
// `--for-tests` (npm test) writes the tests' own executable, build/test/bloomery-serve, and never dist/;
// with BLOOMERY_TEST_EXE set it compiles nothing (the tests run that executable).
// `--no-demo` leaves the demo model out (an executable 15 MB smaller, for carry-limited device runs).
// `--arch arm64` on an x86-64 host cross-builds: the CPU library with aarch64-linux-gnu-gcc
// (build/linux-arm64/) and the executable with --target=bun-linux-arm64 and the arm64 Bun runtime
// from npm (scripts/bun-runtime.ts): dist/linux-arm64/bloomery-serve (docs/arm64.md).
// Usage: bun scripts/build.ts [--cuda cpu|native|release|sm_XX,...] [--cuda-arch sm_XX,...] [--out PATH]
//        [--for-tests] [--no-demo] [--jobs N] [--force] [--trace] [--arch x64|arm64]
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { checkDemoAsset, DemoAssetError } from "./demo-asset.ts";
import { CUDA_USAGE } from "./build-cuda-mode.ts";
import { buildWebui } from "./build-webui.ts";
import { parseArch } from "./build-arch.ts";
import { bunRuntime } from "./bun-runtime.ts";

const root = join(import.meta.dir, "..");
const bun = process.execPath;
const argv = process.argv.slice(2);
const TEST_EXE = join(root, "build", "test", "bloomery-serve");
const ENTRYPOINTS = ["src/cli/main.ts", "src/engine/worker.ts", "src/server/body-worker.ts"];

if (argv.includes("-h") || argv.includes("--help")) {
  console.log(`usage: bun scripts/build.ts [--cuda MODE] [--out PATH] [--for-tests] [--jobs N] [--force] [--trace]
  --cuda MODE   which CUDA code to compile: ${CUDA_USAGE}
                cpu: none (the executable runs on the CPU); native: the cards in this machine (nvidia-smi);
                release: every release target (sm_86, sm_90, sm_120a and PTX compute_120: long on few cores)
                default: native with a card, release in CI (CI set) with nvcc, else cpu
  --out PATH    the executable (default dist/bloomery-serve)
  --for-tests   the tests' executable build/test/bloomery-serve (npm test); nothing when BLOOMERY_TEST_EXE is set
  --no-demo     leave the demo model out (--demo then says this build has none)
  --jobs N      nvcc processes at once (default: the CPU count; env BLOOMERY_BUILD_JOBS)
  --arch A      x64 or arm64: on another host a cross build (the CPU library only, with aarch64-linux-gnu-gcc;
                the executable with the arm64 Bun runtime from npm): dist/linux-arm64/bloomery-serve`);
  process.exit(0);
}

function value(name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

/** A path as the lines show it: relative inside the checkout, else absolute. */
function show(p: string): string {
  const r = relative(root, p);
  return r.startsWith("..") ? p : r;
}

function run(cmd: string[]): void {
  const p = Bun.spawnSync(cmd, { cwd: root, stdout: "inherit", stderr: "inherit" });
  if (p.exitCode !== 0) {
    console.error(`build: failed: ${cmd.map(show).join(" ")}`);
    process.exit(1);
  }
}

let arch: ReturnType<typeof parseArch>;
try {
  arch = parseArch(argv);
} catch (e) {
  console.error(`build: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
}
const forTests = argv.includes("--for-tests") && !arch.cross;
const noDemo = argv.includes("--no-demo");
const given = process.env.BLOOMERY_TEST_EXE;
const out = resolve(root, value("--out") ?? (arch.cross ? join(root, "dist", ...arch.subdir, "bloomery-serve") : forTests ? TEST_EXE : join(root, "dist", "bloomery-serve")));
// build-native reads the CUDA choice from the same arguments
const nativeArgs = argv.filter((a, i) => a !== "--for-tests" && a !== "--no-demo" && a !== "--out" && argv[i - 1] !== "--out");

if (forTests && given) {
  console.log(`build: the tests run BLOOMERY_TEST_EXE=${given} (compiled by you): building the native libraries for the tests that load them, no executable`);
}
run([bun, "scripts/build-native.ts", ...nativeArgs]);
if (forTests && given) process.exit(0);

let demo: string;
try {
  demo = checkDemoAsset(root);
} catch (e) {
  if (e instanceof DemoAssetError) {
    console.error(`build: ${e.message}`);
    process.exit(1);
  }
  throw e;
}

// the CUDA library goes in only when this build made one (a CPU build embeds an empty stand-in:
// the executable then says it has no CUDA library and runs on the CPU)
const buildDir = join(root, "build", ...arch.subdir);
const native = JSON.parse(readFileSync(join(buildDir, "native-build.json"), "utf8")) as { cuda: string[] | null };
const stand = (name: string): string => {
  const p = join(root, "build", "empty", name);
  mkdirSync(dirname(p), { recursive: true });
  if (!existsSync(p)) writeFileSync(p, "");
  return p;
};
const what = (native.cuda ? `the CPU and CUDA (${native.cuda.join(", ")}) libraries` : "the CPU library (no CUDA library)") + (arch.cross ? ` for ${arch.name} (${arch.bunTarget})` : "");
console.log(`build: compiling ${show(out)} with ${what}, the engine worker and ${noDemo ? "no demo model (--no-demo)" : `the demo model (${show(demo)})`} ...`);
await buildWebui(root); // the web UI's bundle, embedded as text (src/server/webui/assets.ts)
mkdirSync(dirname(out), { recursive: true });
// a cross build: the other architecture's Bun runtime (from npm) and its CPU library
const executablePath = arch.cross ? bunRuntime(arch.bunTarget, (s) => console.log(`build: ${s}`)) : undefined;
const t0 = performance.now();
const result = await Bun.build({
  entrypoints: ENTRYPOINTS.map((e) => join(root, e)),
  compile: arch.cross ? { outfile: out, target: arch.bunTarget, executablePath } : { outfile: out },
  plugins: [{
    name: "bloomery-stand-ins",
    setup(b) {
      if (arch.cross) b.onResolve({ filter: /(^|\/)build\/libbloomery_cpu\.so$/ }, () => ({ path: join(buildDir, "libbloomery_cpu.so") }));
      if (!native.cuda) b.onResolve({ filter: /(^|\/)build\/libbloomery_cuda\.so$/ }, () => ({ path: stand("libbloomery_cuda.so") }));
      if (noDemo) b.onResolve({ filter: /(^|\/)assets\/demo\/bloomery-demo-q8_0\.gguf$/ }, () => ({ path: stand("bloomery-demo-q8_0.gguf") }));
    },
  }],
});
if (!result.success || !existsSync(out)) {
  console.error(`build: bun build --compile failed:\n${result.logs.map(String).join("\n")}`);
  process.exit(1);
}
console.log(`build: ${show(out)} in ${((performance.now() - t0) / 1000).toFixed(1)} s${forTests ? " (the tests' own executable: dist/ is left as it is)" : ""}`);
