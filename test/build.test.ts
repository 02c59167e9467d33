// The build: which CUDA code it compiles (CPU only, this machine's card, every release target, a
// list; the old --cuda-arch / BLOOMERY_CUDA_ARCH spellings), what it says while it works (a line per
// CUDA source: which file, n of m, the time), and a checkout as a clone has it (no ../shared) building
// an executable that serves --demo, with the tests' build never writing dist/.
import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { archForCompute, BuildChoiceError, chooseCuda, RELEASE_ARCHS, type BuildHost } from "../scripts/build-cuda-mode.ts";
import { checkDemoAsset, DEMO_ASSET, DemoAssetError } from "../scripts/demo-asset.ts";
import { TARGETS } from "../scripts/release-targets.ts";
import { ROOT } from "./paths.ts";

const work = mkdtempSync(join(tmpdir(), "bloomery-build-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const H200: BuildHost = { nvcc: "/usr/local/bin/nvcc", cards: [{ name: "NVIDIA H200", compute: "9.0" }], ci: false };
const NO_CARD: BuildHost = { nvcc: "/usr/local/bin/nvcc", cards: null, ci: false };
const NO_NVCC: BuildHost = { nvcc: undefined, cards: null, ci: false };

/** The environment of this process without the build's own variables (a helper's shell may set them). */
function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !/^(BLOOMERY_|NVCC$|CI$)/.test(k)) env[k] = v;
  return { ...env, ...extra };
}

describe("what CUDA code a build compiles", () => {
  test("by default: this machine's card; every release target in CI; the CPU only without a card or nvcc", () => {
    expect(chooseCuda([], {}, H200)).toMatchObject({ kind: "archs", archs: ["sm_90"], label: "native", why: "for this machine's card (NVIDIA H200, compute 9.0)" });
    expect(chooseCuda([], {}, { ...NO_CARD, ci: true })).toMatchObject({ kind: "archs", archs: [...RELEASE_ARCHS], label: "release" });
    const cpu = chooseCuda([], {}, NO_CARD);
    expect(cpu.kind).toBe("cpu");
    expect(cpu.why).toContain("nvcc is here but no NVIDIA card is");
    expect(cpu.why).toContain("--cuda release");
    expect(chooseCuda([], {}, NO_NVCC)).toMatchObject({ kind: "cpu", why: expect.stringContaining("nvcc is not here") });
    expect(chooseCuda([], {}, { ...NO_NVCC, cards: H200.cards })).toMatchObject({ kind: "cpu" });
  });

  test("chosen: --cuda cpu|native|release|list, BLOOMERY_CUDA, and the old --cuda-arch / BLOOMERY_CUDA_ARCH", () => {
    expect(chooseCuda(["--cuda", "cpu"], {}, H200).kind).toBe("cpu");
    expect(chooseCuda(["--cuda=none"], {}, H200).kind).toBe("cpu");
    expect(chooseCuda(["--cuda", "release"], {}, H200)).toMatchObject({ archs: [...RELEASE_ARCHS], label: "release" });
    expect(chooseCuda(["--cuda", "native"], {}, H200)).toMatchObject({ archs: ["sm_90"] });
    expect(chooseCuda(["--cuda", "sm_86,compute_120"], {}, NO_CARD)).toMatchObject({ archs: ["sm_86", "compute_120"], label: "given" });
    expect(chooseCuda(["--cuda-arch", "sm_120a"], { BLOOMERY_CUDA_ARCH: "sm_90" }, NO_CARD)).toMatchObject({ archs: ["sm_120a"] });
    expect(chooseCuda([], { BLOOMERY_CUDA_ARCH: "sm_90" }, NO_CARD)).toMatchObject({ archs: ["sm_90"], why: "as BLOOMERY_CUDA_ARCH asks" });
    expect(chooseCuda([], { BLOOMERY_CUDA: "cpu", BLOOMERY_CUDA_ARCH: "sm_90" }, H200).kind).toBe("cpu");
    expect(chooseCuda(["--cuda", "release"], { BLOOMERY_CUDA: "cpu" }, NO_CARD).kind).toBe("archs");
    // the release list is the release target's own
    expect(RELEASE_ARCHS).toEqual(TARGETS.find((t) => t.id === "linux-x64-cuda")!.cuda!.archs);
  });

  test("refusals say what is missing", () => {
    expect(() => chooseCuda(["--cuda", "native"], {}, NO_CARD)).toThrow(/no NVIDIA card found \(nvidia-smi is missing or did not answer\)/);
    expect(() => chooseCuda(["--cuda", "release"], {}, NO_NVCC)).toThrow(/needs nvcc, which is not here/);
    expect(() => chooseCuda(["--cuda-arch", "sm_90"], {}, NO_NVCC)).toThrow(BuildChoiceError);
    expect(() => chooseCuda(["--cuda", "sm90"], {}, H200)).toThrow(/bad CUDA architecture 'sm90'/);
    expect(() => chooseCuda(["--cuda"], {}, H200)).toThrow(/--cuda needs a value/);
  });

  test("a card's compute capability as the release names its architecture", () => {
    expect(["8.6", "8.9", "9.0", "12.0", "12.1", "10.0"].map(archForCompute)).toEqual(["sm_86", "sm_89", "sm_90", "sm_120a", "sm_121a", "sm_100a"]);
    expect(() => archForCompute("7.5")).toThrow(/older than the cards bloomery's CUDA code is written for/);
    const two = chooseCuda([], {}, { ...H200, cards: [{ name: "NVIDIA H200", compute: "9.0" }, { name: "NVIDIA RTX PRO 6000", compute: "12.0" }] });
    expect(two).toMatchObject({ archs: ["sm_90", "sm_120a"] });
  });
});

/** A stand-in nvcc: writes its -o file after a short wait, fails on FAKE_NVCC_FAIL's file. */
function fakeNvcc(): string {
  const p = join(work, "fake-nvcc");
  writeFileSync(p, `#!/bin/sh
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
if [ -n "$FAKE_NVCC_FAIL" ]; then case "$*" in *"$FAKE_NVCC_FAIL"*) echo "fake nvcc: error in $FAKE_NVCC_FAIL" >&2; exit 2;; esac; fi
sleep 0.02
echo "$*" > "$out"
`);
  chmodSync(p, 0o755);
  return p;
}

/** A build folder whose CPU library is the checkout's, newer than its sources (so only CUDA is built). */
function buildDir(name: string): string {
  const d = join(work, name);
  mkdirSync(d, { recursive: true });
  const lib = join(d, "libbloomery_cpu.so");
  copyFileSync(join(ROOT, "build", "libbloomery_cpu.so"), lib);
  const later = new Date(Date.now() + 60_000);
  utimesSync(lib, later, later);
  return d;
}

const haveCpuLib = existsSync(join(ROOT, "build", "libbloomery_cpu.so"));

describe.skipIf(!haveCpuLib)("the CUDA build's progress (a stand-in nvcc)", () => {
  const cuSources = [...new Bun.Glob("**/*.cu").scanSync(join(ROOT, "cuda"))].length;

  test("it says what it builds and why, then a line per source (file, n of m, seconds, elapsed), then the link", () => {
    const dir = buildDir("b1");
    const p = Bun.spawnSync([process.execPath, "scripts/build-native.ts", "--build-dir", dir, "--cuda", "sm_90,compute_120", "--jobs", "3"], { cwd: ROOT, env: cleanEnv({ NVCC: fakeNvcc() }), stdout: "pipe", stderr: "pipe" });
    const out = p.stdout.toString();
    expect(p.exitCode).toBe(0);
    expect(out).toStartWith("build-native: building the CPU library and the CUDA library for sm_90, compute_120 (as --cuda asks) [choose: --cuda cpu|native|release|sm_XX,...]\n");
    expect(out).toContain("libbloomery_cpu.so is up to date");
    expect(out).toContain(`CUDA library for sm_90, compute_120, as --cuda asks: ${cuSources} of ${cuSources} sources to compile, 3 at a time`);
    const lines = out.split("\n").filter((l) => /^build-native: \[\d+\/\d+\] cuda\/(\w+\/)?\w+\.cu \d+\.\d s \(\d+:\d\d elapsed\)$/.test(l));
    expect(lines.length).toBe(cuSources);
    expect(lines[0]).toStartWith("build-native: [1/");
    expect(lines.at(-1)).toStartWith(`build-native: [${cuSources}/${cuSources}] `);
    expect(out).toContain(`${join(dir, "libbloomery_cuda.so")} (sm_90, compute_120) after`);
    expect(JSON.parse(readFileSync(join(dir, "native-build.json"), "utf8")).cuda).toEqual(["sm_90", "compute_120"]);
    // again: nothing to compile, nothing to link
    const again = Bun.spawnSync([process.execPath, "scripts/build-native.ts", "--build-dir", dir, "--cuda-arch", "sm_90,compute_120"], { cwd: ROOT, env: cleanEnv({ NVCC: fakeNvcc() }), stdout: "pipe", stderr: "pipe" });
    expect(again.stdout.toString()).toContain("(sm_90, compute_120) is up to date");
    expect(again.stdout.toString()).not.toContain("[1/");
  });

  test("a source that fails is named, and the build stops", () => {
    const dir = buildDir("b2");
    const p = Bun.spawnSync([process.execPath, "scripts/build-native.ts", "--build-dir", dir, "--cuda", "sm_90", "--jobs", "1"], { cwd: ROOT, env: cleanEnv({ NVCC: fakeNvcc(), FAKE_NVCC_FAIL: "cuda/attention/attn.cu" }), stdout: "pipe", stderr: "pipe" });
    expect(p.exitCode).toBe(1);
    expect(p.stderr.toString()).toContain("build-native: cuda/attention/attn.cu failed to compile (nvcc exit 2)");
    expect(p.stderr.toString()).toContain("a CUDA source failed to compile");
    expect(p.stdout.toString()).not.toContain(`[${cuSources}/`);
  });

  test("nvcc without a card, not in CI: the CPU only, saying why and how to ask for CUDA", () => {
    const dir = buildDir("b3");
    const p = Bun.spawnSync([process.execPath, "scripts/build-native.ts", "--build-dir", dir], { cwd: ROOT, env: cleanEnv({ NVCC: fakeNvcc(), PATH: "/usr/bin:/bin" }), stdout: "pipe", stderr: "pipe" });
    expect(p.exitCode).toBe(0);
    expect(p.stdout.toString()).toStartWith("build-native: building the CPU library, no CUDA library (nvcc is here but no NVIDIA card is");
    expect(p.stdout.toString()).toContain("no CUDA library in this build: the executable runs on the CPU");
    expect(readFileSync(join(dir, "libbloomery_cuda.so")).length).toBe(0);
    expect(JSON.parse(readFileSync(join(dir, "native-build.json"), "utf8")).cuda).toBeNull();
  });
});

describe("the two set-up lines", () => {
  test("README's two lines, and the npm scripts they run: start builds dist/ and serves the demo; test builds its own executable", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    expect(readme).toContain("    npm ci && npm start ");
    expect(readme).toContain("    npm ci && npm test ");
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> };
    expect(pkg.scripts.start).toBe("bun scripts/build.ts && dist/bloomery-serve --demo");
    expect(pkg.scripts.test).toBe("bun scripts/build.ts --for-tests && bun test --timeout 120000");
    expect(readFileSync(join(ROOT, ".ci", "run"), "utf8")).toContain("npm test");
  });
});

describe("the demo model in the repository", () => {
  test("the committed asset is whole; a missing file, a Git LFS pointer or a changed file is refused saying how to restore it", () => {
    expect(checkDemoAsset(ROOT)).toBe(join(ROOT, DEMO_ASSET));
    const root = join(work, "asset");
    mkdirSync(join(root, "assets", "demo"), { recursive: true });
    expect(() => checkDemoAsset(root)).toThrow(/is missing .*git checkout -- assets\/demo\/bloomery-demo-q8_0\.gguf/);
    writeFileSync(join(root, DEMO_ASSET), "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 15520864\n");
    expect(() => checkDemoAsset(root)).toThrow(/is a Git LFS pointer/);
    const bytes = readFileSync(join(ROOT, DEMO_ASSET));
    bytes[1000] ^= 1;
    writeFileSync(join(root, DEMO_ASSET), bytes);
    expect(() => checkDemoAsset(root)).toThrow(DemoAssetError);
  });
});

/** The files a clone of this checkout would hold (tracked and new, not ignored), copied to `dst`. */
function copyCheckout(dst: string): void {
  const ls = Bun.spawnSync(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"], { cwd: ROOT, stdout: "pipe" });
  if (ls.exitCode !== 0) throw new Error("git ls-files failed");
  for (const f of ls.stdout.toString().split("\0").filter(Boolean)) {
    if (!existsSync(join(ROOT, f))) continue; // deleted, not yet committed
    mkdirSync(dirname(join(dst, f)), { recursive: true });
    copyFileSync(join(ROOT, f), join(dst, f));
  }
}

const canClone = haveCpuLib && Bun.which("git") !== null && existsSync(join(ROOT, ".git"));

describe.skipIf(!canClone)("a checkout as a clone has it (no ../shared, no build/)", () => {
  test("builds the tests' executable without touching dist/, then dist/bloomery-serve, which serves --demo", async () => {
    const clone = join(work, "clone", "bloomery");
    copyCheckout(clone);
    expect(existsSync(join(clone, "..", "shared"))).toBe(false);
    expect(existsSync(join(clone, "build"))).toBe(false);
    symlinkSync(join(ROOT, "node_modules"), join(clone, "node_modules"));
    // the CPU library as this checkout built it (compiling it again takes minutes on 2 cores)
    mkdirSync(join(clone, "build"));
    copyFileSync(join(ROOT, "build", "libbloomery_cpu.so"), join(clone, "build", "libbloomery_cpu.so"));
    const later = new Date(Date.now() + 60_000);
    utimesSync(join(clone, "build", "libbloomery_cpu.so"), later, later);
    const env = cleanEnv({ PATH: "/usr/bin:/bin", XDG_CACHE_HOME: join(work, "cache") });
    const sh = (args: string[]) => {
      const p = Bun.spawnSync([process.execPath, ...args], { cwd: clone, env, stdout: "pipe", stderr: "pipe" });
      if (p.exitCode !== 0) throw new Error(`${args.join(" ")} failed:\n${p.stdout}\n${p.stderr}`);
      return p.stdout.toString();
    };
    const t = sh(["scripts/build.ts", "--for-tests", "--cuda", "cpu"]);
    expect(t).toContain("build: build/test/bloomery-serve in");
    expect(existsSync(join(clone, "build", "test", "bloomery-serve"))).toBe(true);
    expect(existsSync(join(clone, "dist"))).toBe(false);
    // --no-demo (device runs with a carry limit): 15 MB smaller, and --demo says so
    const nd = join(clone, "build", "nodemo");
    expect(sh(["scripts/build.ts", "--cuda", "cpu", "--no-demo", "--out", nd])).toContain("and no demo model (--no-demo)");
    const none = Bun.spawnSync([nd, "--demo"], { cwd: work, env, stdout: "pipe", stderr: "pipe" });
    expect(none.exitCode).toBe(3);
    expect(none.stderr.toString()).toContain("this build has no demo model (it was built with --no-demo)");
    const d = sh(["scripts/build.ts", "--cuda", "cpu"]);
    expect(d).toContain("with the CPU library (no CUDA library), the engine worker and the demo model (assets/demo/bloomery-demo-q8_0.gguf)");
    const exe = join(clone, "dist", "bloomery-serve");
    const p = Bun.spawn([exe, "--demo", "--port", "0"], { cwd: work, env, stdout: "ignore", stderr: "pipe" });
    try {
      let log = "";
      const dec = new TextDecoder();
      const reader = (p.stderr as ReadableStream<Uint8Array>).getReader();
      let url: string | undefined;
      const t0 = Date.now();
      while (!url && Date.now() - t0 < 30000) {
        const { value, done } = await reader.read();
        if (done) break;
        log += dec.decode(value, { stream: true });
        url = /listening on (http:\/\/\S+)/.exec(log)?.[1];
      }
      expect(url).toBeDefined();
      let ok = false;
      while (!ok && Date.now() - t0 < 60000) {
        ok = (await fetch(`${url}/health`).catch(() => null))?.status === 200;
        if (!ok) await Bun.sleep(50);
      }
      expect(ok).toBe(true);
      const r = await fetch(`${url}/completion`, { method: "POST", body: JSON.stringify({ prompt: "def read_json(path):\n", n_predict: 8, temperature: 0 }) });
      expect(r.status).toBe(200);
      expect(((await r.json()) as { content: string }).content.length).toBeGreaterThan(0);
    } finally {
      p.kill("SIGTERM");
      await p.exited;
    }
  }, 180000);
});
