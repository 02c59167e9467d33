// Tests of scripts/install.sh run as `curl | sh` in a clean root: a fresh HOME and a PATH holding
// only the tools the installer needs (plus stand-ins for uname and nvidia-smi), against a local
// Bun HTTP server standing in for the release host.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { ROOT } from "./paths.ts";
import { writeTarGz, writeSums } from "../scripts/release-archive.ts";

const SCRIPT = readFileSync(join(ROOT, "scripts", "install.sh"), "utf8");
const VERSION = "9.9.9";
const SUFFIXES: [string, string][] = [
  ["linux-x64", "bloomery-serve"], ["linux-x64-cuda", "bloomery-serve"], ["linux-arm64", "bloomery-serve"], ["linux-arm64-cuda", "bloomery-serve"],
  ["darwin-arm64", "bloomery-serve-metal"],
];
const AVX2 = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma f16c bmi2\n\n";
const NO_AVX2 = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme sse sse2 ssse3 sse4_1 sse4_2 avx\n\n";
const TOOLS = ["uname", "mktemp", "mkdir", "mv", "rm", "chmod", "grep", "sed", "tr", "head", "tar", "gzip", "sha256sum"];

let work = "";
let server: ReturnType<typeof Bun.serve>;
let base = "";

function fakeExe(suffix: string): Uint8Array {
  return new TextEncoder().encode(`#!/bin/sh\necho "bloomery-serve ${VERSION} (${suffix})"\n`);
}

/** A release directory: one small archive per target, SHA256SUMS, optionally a lie in the sums. */
function makeRelease(dir: string, version: string, opts: { corrupt?: string } = {}): void {
  mkdirSync(dir, { recursive: true });
  for (const [suffix, exe] of SUFFIXES) {
    writeTarGz(join(dir, `bloomery-${version}-${suffix}.tar.gz`), [{ name: exe, data: fakeExe(suffix), mode: 0o755 }, { name: "README.md", data: new TextEncoder().encode("# bloomery\n"), mode: 0o644 }], 0, 1);
  }
  writeSums(dir, (n) => n.endsWith(".tar.gz"));
  if (opts.corrupt) {
    // the archive changed after the sums were written (a tampered or truncated download)
    const p = join(dir, `bloomery-${version}-${opts.corrupt}.tar.gz`);
    const b = new Uint8Array(readFileSync(p));
    b[b.length - 5] ^= 0xff;
    writeFileSync(p, b);
  }
}

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), "install-test-"));
  makeRelease(join(work, "rel", "good"), VERSION);
  makeRelease(join(work, "rel", "bad"), VERSION, { corrupt: "linux-x64" });
  makeRelease(join(work, "rel", "two"), VERSION);
  makeRelease(join(work, "rel", "two"), "9.10.0");
  server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(req) {
      const path = decodeURIComponent(new URL(req.url).pathname);
      if (path.includes("..")) return new Response("no", { status: 400 });
      const file = join(work, path);
      if (!path.startsWith("/rel/") || !existsSync(file)) return new Response("Not Found", { status: 404 });
      return new Response(Bun.file(file));
    },
  });
  base = `http://127.0.0.1:${server.port}`;
});
afterAll(() => server.stop(true));

interface Machine {
  os?: string;
  arch?: string;
  cpuinfo?: string;
  /** nvidia-smi's answer, one "cc, driver" line a card; undefined = no nvidia-smi */
  gpus?: string;
  /** "wget" to offer wget instead of curl */
  downloader?: "curl" | "wget";
  env?: Record<string, string>;
  release?: string;
  /** appended to the clean PATH */
  extraPath?: string;
}

interface Run {
  code: number;
  out: string;
  err: string;
  home: string;
}

/** Pipe install.sh into sh in a clean root, as `curl -fsSL .../install.sh | sh` would. */
async function install(m: Machine = {}): Promise<Run> {
  const root = mkdtempSync(join(work, "root-"));
  const bin = join(root, "bin");
  const home = join(root, "home");
  mkdirSync(bin);
  mkdirSync(home);
  for (const t of [...TOOLS, m.downloader ?? "curl"]) {
    const real = Bun.which(t);
    if (!real) throw new Error(`test needs ${t}`);
    if (t !== "uname") symlinkSync(real, join(bin, t));
  }
  symlinkSync(Bun.which("dash") ?? Bun.which("sh")!, join(bin, "sh"));
  const script = (name: string, body: string): void => {
    writeFileSync(join(bin, name), `#!/bin/sh\n${body}`);
    chmodSync(join(bin, name), 0o755);
  };
  script("uname", `case "$1" in -s) echo '${m.os ?? "Linux"}' ;; -m) echo '${m.arch ?? "x86_64"}' ;; *) echo '${m.os ?? "Linux"}' ;; esac\n`);
  if (m.gpus !== undefined) script("nvidia-smi", `printf '%s\\n' ${m.gpus.split("\n").map((l) => `'${l}'`).join(" ")}\n`);
  const cpuinfo = join(root, "cpuinfo");
  writeFileSync(cpuinfo, m.cpuinfo ?? AVX2);
  const env: Record<string, string> = {
    HOME: home,
    PATH: m.extraPath ? `${bin}:${m.extraPath}` : bin,
    BLOOMERY_RELEASE_URL: `${base}/rel/${m.release ?? "good"}`,
    BLOOMERY_CPUINFO: cpuinfo,
    ...m.env,
  };
  // asynchronous: the stand-in release host runs in this process and must keep answering
  const p = Bun.spawn([join(bin, "sh")], { env, stdin: new TextEncoder().encode(SCRIPT), stdout: "pipe", stderr: "pipe", cwd: root });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out, err, home };
}

function installed(r: Run, exe = "bloomery-serve"): string {
  return readFileSync(join(r.home, ".local", "bin", exe), "utf8");
}

describe("install.sh in a clean root", () => {
  test("x86-64 without a card: the CPU build lands in ~/.local/bin, runs, and the next command is printed", async () => {
    const r = await install();
    expect(r.err).toContain("platform linux-x64 -> linux-x64");
    expect(r.code).toBe(0);
    expect(installed(r)).toContain("(linux-x64)");
    expect(r.err).toContain(`installed bloomery-serve ${VERSION} (linux-x64)`);
    expect(r.err).toContain("is not on your PATH");
    expect(r.out).toContain(`${join(r.home, ".local", "bin", "bloomery-serve")} --demo`);
  });

  test("cards of compute 8.6+ with a new driver get the CUDA build; every card is read", async () => {
    const r = await install({ gpus: "8.6, 580.65.06\n9.0, 580.65.06" });
    expect(r.code).toBe(0);
    expect(r.err).toContain("NVIDIA compute 8.6 9.0, driver 580.65.06 -> linux-x64-cuda");
    expect(installed(r)).toContain("(linux-x64-cuda)");
  });

  test("an older card or an older driver gets the CPU build, saying why", async () => {
    const old = await install({ gpus: "7.5, 580.65.06" });
    expect(old.code).toBe(0);
    expect(old.err).toContain("needs compute 8.6 or newer");
    expect(installed(old)).toContain("(linux-x64)");
    const drv = await install({ gpus: "8.9, 550.54.14" });
    expect(drv.code).toBe(0);
    expect(drv.err).toContain("driver 550.54.14 is older than 580");
    expect(installed(drv)).toContain("(linux-x64)");
    const forced = await install({ gpus: "7.5, 550.54.14", env: { BLOOMERY_VARIANT: "cuda" } });
    expect(installed(forced)).toContain("(linux-x64-cuda)");
  });

  test("a checksum mismatch is refused and nothing is installed", async () => {
    const r = await install({ release: "bad" });
    expect(r.code).toBe(7);
    expect(r.err).toContain("checksum mismatch for bloomery-9.9.9-linux-x64.tar.gz");
    expect(existsSync(join(r.home, ".local", "bin", "bloomery-serve"))).toBe(false);
  });

  test("an x86-64 CPU without AVX2 is refused", async () => {
    const r = await install({ cpuinfo: NO_AVX2 });
    expect(r.code).toBe(3);
    expect(r.err).toContain("this CPU has no AVX2");
    expect(existsSync(join(r.home, ".local"))).toBe(false);
  });

  test("an unsupported OS or architecture is refused", async () => {
    const bsd = await install({ os: "FreeBSD" });
    expect(bsd.code).toBe(2);
    expect(bsd.err).toContain("unsupported operating system 'FreeBSD'");
    const riscv = await install({ arch: "riscv64" });
    expect(riscv.code).toBe(2);
    expect(riscv.err).toContain("unsupported CPU architecture 'riscv64'");
    const intelMac = await install({ os: "Darwin", arch: "x86_64" });
    expect(intelMac.code).toBe(2);
    expect(intelMac.err).toContain("Apple silicon");
  });

  test("Linux aarch64 with a GB10 gets the aarch64 CUDA build; without one the aarch64 CPU build, saying why", async () => {
    const arm = "processor : 0\nFeatures : fp asimd asimddp i8mm\n";
    const gb10 = await install({ arch: "aarch64", gpus: "12.1, 580.95.05", cpuinfo: arm });
    expect(gb10.code).toBe(0);
    expect(gb10.err).toContain("NVIDIA compute 12.1, driver 580.95.05 -> linux-arm64-cuda");
    expect(installed(gb10)).toContain("(linux-arm64-cuda)");
    const none = await install({ arch: "aarch64", cpuinfo: arm });
    expect(none.code).toBe(0);
    expect(none.err).toContain("platform linux-arm64 -> linux-arm64\n");
    expect(installed(none)).toContain("(linux-arm64)");
    expect(none.err).toContain(`installed bloomery-serve ${VERSION} (linux-arm64)`);
    const orin = await install({ arch: "aarch64", gpus: "8.7, 580.95.05", cpuinfo: arm });
    expect(orin.code).toBe(0);
    expect(orin.err).toContain("the aarch64 CUDA build is for the GB10 (compute 12.1); installing the CPU build");
    expect(installed(orin)).toContain("(linux-arm64)");
    const oldDriver = await install({ arch: "aarch64", gpus: "12.1, 570.10.01", cpuinfo: arm });
    expect(oldDriver.err).toContain("driver 570.10.01 is older than 580");
    expect(installed(oldDriver)).toContain("(linux-arm64)");
    const cpu = await install({ arch: "arm64", gpus: "12.1, 580.95.05", cpuinfo: arm, env: { BLOOMERY_VARIANT: "cpu" } });
    expect(installed(cpu)).toContain("(linux-arm64)");
    const cuda = await install({ arch: "aarch64", cpuinfo: arm, env: { BLOOMERY_VARIANT: "cuda" } });
    expect(installed(cuda)).toContain("(linux-arm64-cuda)");
  });

  test("macOS on Apple silicon gets bloomery-serve-metal", async () => {
    const r = await install({ os: "Darwin", arch: "arm64" });
    expect(r.code).toBe(0);
    expect(installed(r, "bloomery-serve-metal")).toContain("(darwin-arm64)");
    expect(r.out).toContain("bloomery-serve-metal --demo");
  });

  test("wget instead of curl (where installed), a chosen directory already on PATH, a chosen version", async () => {
    const dir = mkdtempSync(join(work, "dest-"));
    const wget = Bun.which("wget") !== null;
    if (!wget) console.log("install.sh with wget skipped: wget is not installed here (curl is used instead)");
    const r = await install({ downloader: wget ? "wget" : "curl", release: "two", env: { BLOOMERY_INSTALL_DIR: dir, BLOOMERY_VERSION: "9.10.0" } });
    expect(r.code).toBe(0);
    expect(r.err).toContain("downloading bloomery-9.10.0-linux-x64.tar.gz");
    expect(readFileSync(join(dir, "bloomery-serve"), "utf8")).toContain("(linux-x64)");
    const onPath = await install({ env: { BLOOMERY_INSTALL_DIR: dir }, extraPath: dir });
    expect(onPath.code).toBe(0);
    expect(onPath.err).not.toContain("is not on your PATH");
    expect(onPath.out).toContain("\n    bloomery-serve --demo\n");
    const absent = await install({ env: { BLOOMERY_VERSION: "1.2.3" } });
    expect(absent.code).toBe(6);
    expect(absent.err).toContain("has no version 1.2.3 of the linux-x64 archive");
  });

  test("a release host that is down is named", async () => {
    const r = await install({ env: { BLOOMERY_RELEASE_URL: `${base}/rel/missing` } });
    expect(r.code).toBe(6);
    expect(r.err).toContain(`cannot download ${base}/rel/missing/SHA256SUMS`);
  });
});
