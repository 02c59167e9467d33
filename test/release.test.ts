// Tests of the release: the archive writer against the system's tar, SHA256SUMS checks, the
// toolchain messages per target, and end-to-end runs: scripts/release.ts builds the linux
// x86-64 archive, its sums verify with sha256sum -c, and install.sh installs it from a local host;
// it cross-builds the linux-arm64 archive and smoke-tests it under qemu-user.
import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { ROOT } from "./paths.ts";
import { parseSums, ReleaseError, tarBytes, verifySums, writeSums, writeTarGz } from "../scripts/release-archive.ts";
import { TARGETS, archiveName, missingToolchain, targetById, type Host } from "../scripts/release-targets.ts";
import { arm64Runner, elfMachine } from "../scripts/arm64-emu.ts";

const work = mkdtempSync(join(tmpdir(), "release-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const enc = new TextEncoder();
const VERSION = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version;

function sh(cmd: string[], cwd = work): { code: number; out: string } {
  const p = Bun.spawnSync(cmd, { cwd, stdout: "pipe", stderr: "pipe" });
  return { code: p.exitCode ?? -1, out: p.stdout.toString() + p.stderr.toString() };
}

describe("archives and sums", () => {
  test("the tar.gz unpacks with the system tar: names, modes, bytes, owner root, fixed time", () => {
    const big = new Uint8Array(70_000).map((_, i) => (i * 7) & 0xff);
    const path = join(work, "a.tar.gz");
    writeTarGz(path, [
      { name: "bloomery-serve", data: big, mode: 0o755 },
      { name: "README.md", data: enc.encode("hello\n"), mode: 0o644 },
      { name: "empty", data: new Uint8Array(0), mode: 0o600 },
    ], 1_700_000_000, 1);
    const list = sh(["tar", "-tvzf", path]);
    expect(list.code).toBe(0);
    const lines = list.out.trim().split("\n");
    expect(lines.map((l) => l.split(/\s+/).at(-1))).toEqual(["README.md", "bloomery-serve", "empty"]);
    expect(lines[1]).toMatch(/^-rwxr-xr-x root\/root\s+70000 2023-11-1[45] /);
    expect(lines[2]).toMatch(/^-rw------- root\/root\s+0 /);
    const out = join(work, "x");
    mkdirSync(out);
    expect(sh(["tar", "-xzf", path, "-C", out]).code).toBe(0);
    expect(new Uint8Array(readFileSync(join(out, "bloomery-serve")))).toEqual(big);
    expect(readFileSync(join(out, "README.md"), "utf8")).toBe("hello\n");
  });

  test("the same input gives the same archive bytes (reproducible)", () => {
    const e = [{ name: "f", data: enc.encode("x"), mode: 0o644 }];
    expect(tarBytes(e, 0)).toEqual(tarBytes(e, 0));
    expect(() => tarBytes([{ name: "../evil", data: enc.encode(""), mode: 0o644 }], 0)).toThrow(ReleaseError);
    expect(() => tarBytes([{ name: "n".repeat(101), data: enc.encode(""), mode: 0o644 }], 0)).toThrow(/does not fit/);
  });

  test("SHA256SUMS is sha256sum's format; a changed file or a bad line is caught", () => {
    const dir = join(work, "sums");
    mkdirSync(dir);
    writeFileSync(join(dir, "a.tar.gz"), "aaa");
    writeFileSync(join(dir, "b.tar.gz"), "bbb");
    writeFileSync(join(dir, "notes.txt"), "skip me");
    writeSums(dir, (n) => n.endsWith(".tar.gz"));
    expect(sh(["sha256sum", "-c", "SHA256SUMS"], dir).code).toBe(0);
    expect(verifySums(dir)).toEqual(["a.tar.gz", "b.tar.gz"]);
    writeFileSync(join(dir, "b.tar.gz"), "bbB");
    expect(() => verifySums(dir)).toThrow(/b\.tar\.gz: sha256 .* does not match/);
    expect(() => parseSums("abc  file\n")).toThrow(/line 1/);
    expect(parseSums(`${"0".repeat(64)} *bin.tar.gz\n`).get("bin.tar.gz")).toBe("0".repeat(64));
  });
});

describe("targets", () => {
  const host = (os: string, arch: string, tools: string[], nvcc: [number, number] | null): Host => ({
    os, arch, has: (t) => tools.includes(t), nvccVersion: () => nvcc,
  });
  test("names", () => {
    expect(TARGETS.map((t) => archiveName("1.2.3", t))).toEqual([
      "bloomery-1.2.3-linux-x64.tar.gz", "bloomery-1.2.3-linux-x64-cuda.tar.gz", "bloomery-1.2.3-linux-arm64.tar.gz", "bloomery-1.2.3-linux-arm64-cuda.tar.gz",
      "bloomery-1.2.3-darwin-arm64.tar.gz",
    ]);
    expect(targetById("darwin-arm64-metal")?.exe).toBe("bloomery-serve-metal");
    expect(targetById("linux-x64-cuda")?.cuda?.archs).toEqual(["sm_86", "sm_90", "sm_120a", "compute_120"]);
    expect(targetById("linux-arm64-cuda")?.cuda?.archs).toEqual(["sm_121a"]);
    expect(targetById("linux-arm64")).toMatchObject({ bunTarget: "bun-linux-arm64", libs: ["libbloomery_cpu.so"], placeholders: ["libbloomery_cuda.so"] });
  });
  test("what each target needs, said when it is missing", () => {
    const x64 = host("linux", "x64", ["gcc", "nvcc"], [13, 0]);
    expect(missingToolchain(targetById("linux-x64")!, x64, ROOT)).toBeNull();
    expect(missingToolchain(targetById("linux-x64")!, host("linux", "x64", [], null), ROOT)).toContain("needs gcc");
    expect(missingToolchain(targetById("linux-x64-cuda")!, host("linux", "x64", ["gcc"], null), ROOT)).toContain("CUDA toolkit >= 12.8");
    expect(missingToolchain(targetById("linux-x64-cuda")!, host("linux", "x64", ["gcc", "nvcc"], [12, 4]), ROOT)).toContain("nvcc 12.4 is too old");
    const arm = missingToolchain(targetById("linux-arm64-cuda")!, x64, ROOT) ?? "";
    expect(arm).toContain("aarch64-linux-gnu-gcc");
    expect(arm).toContain("cuda-cross-sbsa");
    expect(arm).toContain("12.9");
    expect(missingToolchain(targetById("darwin-arm64-metal")!, x64, ROOT)).toContain("Xcode");
    expect(missingToolchain(targetById("darwin-arm64-metal")!, host("darwin", "arm64", [], null), ROOT)).toContain("xcode-select --install");
    expect(missingToolchain(targetById("linux-x64")!, host("darwin", "arm64", ["gcc"], null), ROOT)).toContain("x86-64 Linux host");
    // linux-arm64: natively on aarch64 with gcc, or cross-built on x86-64 with the aarch64 gcc and npm
    const a64 = targetById("linux-arm64")!;
    expect(missingToolchain(a64, host("linux", "arm64", ["gcc"], null), ROOT)).toBeNull();
    expect(missingToolchain(a64, host("linux", "x64", ["gcc", "aarch64-linux-gnu-gcc", "npm"], null), ROOT)).toBeNull();
    expect(missingToolchain(a64, host("linux", "x64", ["gcc", "npm"], null), ROOT)).toContain("apt-get install gcc-aarch64-linux-gnu");
    expect(missingToolchain(a64, host("linux", "x64", ["gcc", "aarch64-linux-gnu-gcc"], null), ROOT)).toContain("npm");
    expect(missingToolchain(a64, host("darwin", "arm64", ["gcc"], null), ROOT)).toContain("aarch64 Linux host");
  });
  test("asking for a target this machine cannot build fails, naming the toolchain", () => {
    const p = Bun.spawnSync([process.execPath, "scripts/release.ts", "--targets", "darwin-arm64-metal", "--out", join(work, "none")], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    expect(p.exitCode).toBe(1);
    expect(p.stderr.toString()).toContain("darwin-arm64-metal: build it on macOS arm64 with Xcode");
    const bad = Bun.spawnSync([process.execPath, "scripts/release.ts", "--targets", "windows-x64"], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    expect(bad.exitCode).toBe(1);
    expect(bad.stderr.toString()).toContain("unknown target 'windows-x64'");
  });
});

const canBuild = process.platform === "linux" && process.arch === "x64" && Bun.which("gcc") !== null;
if (!canBuild) console.log(`release end-to-end skipped: needs an x86-64 Linux host with gcc (this is ${process.platform}-${process.arch})`);

describe.skipIf(!canBuild)("end to end", () => {
  test("release.ts builds the linux x86-64 archive; its sums verify; install.sh installs it and it runs", async () => {
    const out = join(work, "dist");
    const p = Bun.spawn([process.execPath, "scripts/release.ts", "--targets", "linux-x64", "--out", out, "--level", "1"], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    const [stdout, stderr, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    if (code !== 0) throw new Error(`release.ts failed (${code}):\n${stdout}\n${stderr}`);
    expect(stdout).toContain("--version, synth, serve and /health pass");
    const name = `bloomery-${VERSION}-linux-x64.tar.gz`;
    expect(existsSync(join(out, name))).toBe(true);
    expect(existsSync(join(out, ".stage"))).toBe(false);
    const check = sh(["sha256sum", "-c", "SHA256SUMS"], out);
    expect(check.code).toBe(0);
    expect(check.out).toContain(`${name}: OK`);
    expect(check.out).toContain("install.sh: OK");

    // install it the way a user would, from a local stand-in for the release host
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch(req) {
        const f = join(out, decodeURIComponent(new URL(req.url).pathname).replace(/^\/+/, ""));
        return f.startsWith(out) && existsSync(f) ? new Response(Bun.file(f)) : new Response("Not Found", { status: 404 });
      },
    });
    try {
      const root = mkdtempSync(join(work, "root-"));
      const bin = join(root, "bin");
      mkdirSync(bin);
      for (const t of ["uname", "mktemp", "mkdir", "mv", "rm", "chmod", "grep", "sed", "tr", "head", "tar", "gzip", "sha256sum", "curl"]) symlinkSync(Bun.which(t)!, join(bin, t));
      symlinkSync(Bun.which("dash") ?? Bun.which("sh")!, join(bin, "sh"));
      const cpuinfo = join(root, "cpuinfo");
      writeFileSync(cpuinfo, "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n");
      chmodSync(cpuinfo, 0o644);
      const home = join(root, "home");
      mkdirSync(home);
      const inst = Bun.spawn([join(bin, "sh")], {
        cwd: root,
        env: { HOME: home, PATH: bin, BLOOMERY_RELEASE_URL: `http://127.0.0.1:${server.port}`, BLOOMERY_CPUINFO: cpuinfo },
        stdin: new TextEncoder().encode(readFileSync(join(out, "install.sh"), "utf8")),
        stdout: "pipe",
        stderr: "pipe",
      });
      const [iout, ierr, icode] = await Promise.all([new Response(inst.stdout).text(), new Response(inst.stderr).text(), inst.exited]);
      if (icode !== 0) throw new Error(`install.sh failed (${icode}):\n${iout}\n${ierr}`);
      expect(ierr).toContain(`installed bloomery-serve ${VERSION}`);
      const v = sh([join(home, ".local", "bin", "bloomery-serve"), "--version"]);
      expect(v.out.trim()).toBe(`bloomery-serve ${VERSION}`);
    } finally {
      server.stop(true);
    }
  }, 300_000);
});

// linux-arm64 cross-built here: needs the aarch64 gcc, qemu-user for the smoke test, and the arm64
// Bun runtime already fetched (scripts/arm64-tests.ts fetches it; this test uses no network)
const armRuntime = join(ROOT, "build", "bun-runtime", `bun-linux-aarch64-${Bun.version}`, "bun");
const armEmu = arm64Runner();
const armWhy = !canBuild || process.arch !== "x64"
  ? "needs an x86-64 Linux host"
  : !Bun.which("aarch64-linux-gnu-gcc")
    ? "no aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)"
    : typeof armEmu === "string"
      ? armEmu
      : !existsSync(armRuntime)
        ? `no arm64 Bun runtime at ${armRuntime} (bun scripts/arm64-tests.ts or bun scripts/bun-runtime.ts fetches it from npm)`
        : null;
if (armWhy) console.log(`release linux-arm64 end-to-end skipped: ${armWhy}`);

describe.skipIf(armWhy !== null)("linux-arm64 end to end", () => {
  test("release.ts cross-builds the linux-arm64 archive, smoke-tests it under qemu-user, and SHA256SUMS lists it", async () => {
    const out = join(work, "dist-arm64");
    const p = Bun.spawn([process.execPath, "scripts/release.ts", "--targets", "linux-arm64", "--out", out, "--level", "1"], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    const [stdout, stderr, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    if (code !== 0) throw new Error(`release.ts failed (${code}):\n${stdout}\n${stderr}`);
    expect(stdout).toContain("--version, synth, serve and /health pass (under ");
    const name = `bloomery-${VERSION}-linux-arm64.tar.gz`;
    const check = sh(["sha256sum", "-c", "SHA256SUMS"], out);
    expect(check.code).toBe(0);
    expect(check.out).toContain(`${name}: OK`);
    const x = join(work, "x-arm64");
    mkdirSync(x);
    expect(sh(["tar", "-xzf", join(out, name), "-C", x]).code).toBe(0);
    expect(elfMachine(new Uint8Array(readFileSync(join(x, "bloomery-serve")).subarray(0, 64)))).toBe("aarch64");
    rmSync(out, { recursive: true, force: true });
    rmSync(x, { recursive: true, force: true });
  }, 600_000);
});
