// bloomery build: the Bun runtime of another target, for `bun build --compile --target=...` on a
// host of another architecture. bun build would download it itself; instead it comes from the npm
// registry like every other package (`npm pack @oven/bun-linux-aarch64@<this Bun's version>`),
// checked against package-lock.json's sha512 where the lock pins that version, and kept in
// build/bun-runtime/<package>-<version>/bun. The compile gets it as executablePath
// (`--compile-executable-path`). The same binary runs the arm64 tests under qemu-user.
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";

const root = join(import.meta.dir, "..");

/** npm packages of the Bun runtime, by --compile target. */
export const RUNTIME_PACKAGES: Record<string, string> = {
  "bun-linux-x64": "@oven/bun-linux-x64",
  "bun-linux-arm64": "@oven/bun-linux-aarch64",
  "bun-darwin-arm64": "@oven/bun-darwin-aarch64",
};

export class RuntimeError extends Error {}

/** package-lock.json's sha512 integrity of `pkg` at `version`, or null when the lock does not pin it. */
export function lockedIntegrity(lockText: string, pkg: string, version: string): string | null {
  const lock = JSON.parse(lockText) as { packages?: Record<string, { version?: string; integrity?: string }> };
  const e = lock.packages?.[`node_modules/${pkg}`];
  return e && e.version === version && e.integrity?.startsWith("sha512-") ? e.integrity : null;
}

/** The path of the Bun runtime for `target` (fetched from npm on first use), at this Bun's version. */
export function bunRuntime(target: string, log: (s: string) => void = console.log, version = Bun.version): string {
  const pkg = RUNTIME_PACKAGES[target];
  if (!pkg) throw new RuntimeError(`no npm package of the Bun runtime is known for ${target} (known: ${Object.keys(RUNTIME_PACKAGES).join(", ")})`);
  const dir = join(root, "build", "bun-runtime", `${pkg.replace("@oven/", "")}-${version}`);
  const exe = join(dir, "bun");
  if (existsSync(exe)) return exe;
  mkdirSync(dir, { recursive: true });
  log(`bun-runtime: fetching ${pkg}@${version} from the npm registry (npm pack) for ${target}`);
  const tmp = join(dir, "pack");
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const p = Bun.spawnSync(["npm", "pack", `${pkg}@${version}`, "--pack-destination", tmp, "--silent"], { cwd: tmp, stdout: "pipe", stderr: "pipe" });
  const tgz = readdirSync(tmp).find((f) => f.endsWith(".tgz"));
  if (p.exitCode !== 0 || !tgz) throw new RuntimeError(`npm pack ${pkg}@${version} failed (exit ${p.exitCode}): ${p.stderr.toString().trim().slice(0, 400)}`);
  const bytes = readFileSync(join(tmp, tgz));
  const got = `sha512-${createHash("sha512").update(bytes).digest("base64")}`;
  const want = lockedIntegrity(readFileSync(join(root, "package-lock.json"), "utf8"), pkg, version);
  if (want && got !== want) throw new RuntimeError(`${pkg}@${version}: the tarball's ${got} is not package-lock.json's ${want}`);
  log(`bun-runtime: ${tgz} ${want ? "matches package-lock.json's sha512" : `(${got}; package-lock.json does not pin ${pkg}@${version})`}`);
  const x = Bun.spawnSync(["tar", "-xzf", join(tmp, tgz), "-C", tmp, "package/bin/bun"], { stdout: "pipe", stderr: "pipe" });
  if (x.exitCode !== 0) throw new RuntimeError(`unpacking ${tgz}: ${x.stderr.toString().trim()}`);
  renameSync(join(tmp, "package", "bin", "bun"), exe);
  chmodSync(exe, 0o755);
  rmSync(tmp, { recursive: true, force: true });
  return exe;
}

if (import.meta.main) {
  const target = process.argv[2] ?? "bun-linux-arm64";
  try {
    console.log(bunRuntime(target, (s) => console.error(s)));
  } catch (e) {
    console.error(`bun-runtime: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  }
}
