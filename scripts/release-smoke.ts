// bloomery release: the smoke test a freshly compiled executable must pass before it is archived:
// it prints its version, writes a small synthetic model, serves it (the engine worker and the
// native libraries come from inside the executable) and answers /health with 200. An executable of
// another architecture runs behind a prefix (qemu-aarch64 ..., scripts/arm64-emu.ts), given more time.
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { ReleaseError } from "./release-archive.ts";

export async function smokeTest(exe: string, version: string, log: (s: string) => void, prefix: string[] = []): Promise<void> {
  const v = Bun.spawnSync([...prefix, exe, "--version"], { stdout: "pipe", stderr: "pipe" });
  const out = v.stdout.toString() + v.stderr.toString();
  if (v.exitCode !== 0 || !out.includes(version)) {
    throw new ReleaseError(`smoke: ${exe} --version exited ${v.exitCode} and printed '${out.trim().slice(0, 200)}', expected version ${version}`);
  }
  const dir = mkdtempSync(join(tmpdir(), "bloomery-smoke-"));
  try {
    const model = join(dir, "smoke.gguf");
    const s = Bun.spawnSync([...prefix, exe, "synth", "test-moe-wide:Q4_K_M", "-o", model], { stdout: "pipe", stderr: "pipe", cwd: dir });
    if (s.exitCode !== 0) throw new ReleaseError(`smoke: ${exe} synth failed (${s.exitCode}): ${s.stderr.toString().slice(0, 500)}`);
    await serveHealth([...prefix, exe], ["-m", model], dir, prefix.length > 0 ? 300_000 : 60_000);
    log(`smoke: ${exe}: --version, synth, serve and /health pass${prefix.length > 0 ? ` (under ${prefix[0]})` : ""}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function serveHealth(cmd: string[], args: string[], cwd: string, waitMs: number): Promise<void> {
  // a clean environment: nothing from this checkout may leak in (no BUN_*, no NODE_PATH)
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: cwd };
  const proc = Bun.spawn([...cmd, "--port", "0", "--host", "127.0.0.1", ...args], { cwd, env, stdout: "pipe", stderr: "pipe" });
  let log = "";
  try {
    const dec = new TextDecoder();
    const deadline = Date.now() + waitMs;
    let url = "";
    const reader = (proc.stderr as ReadableStream<Uint8Array>).getReader();
    let pending: ReturnType<typeof reader.read> | null = null;
    while (!url) {
      if (Date.now() > deadline) throw new ReleaseError(`smoke: the server printed no address in ${waitMs / 1000} s:\n${log}`);
      // a read still pending after the second is kept for the next turn: dropping it would lose its chunk
      pending ??= reader.read();
      const r = await Promise.race([pending, Bun.sleep(1000).then(() => null)]);
      if (r === null) continue;
      pending = null;
      if (r.done) throw new ReleaseError(`smoke: the server exited (${await proc.exited}) before listening:\n${log}`);
      log += dec.decode(r.value, { stream: true });
      url = /server is listening on (http:\/\/\S+)/.exec(log)?.[1] ?? "";
    }
    void (async () => {
      for (;;) {
        const r = await reader.read().catch(() => ({ done: true as const, value: undefined }));
        if (r.done) return;
        log += dec.decode(r.value, { stream: true });
      }
    })();
    for (;;) {
      const res = await fetch(`${url}/health`).catch(() => null);
      if (res?.status === 200) return;
      if (proc.exitCode !== null) throw new ReleaseError(`smoke: the server exited (${proc.exitCode}) while loading:\n${log}`);
      if (Date.now() > deadline) throw new ReleaseError(`smoke: /health is not 200 after ${waitMs / 1000} s:\n${log}`);
      await Bun.sleep(100);
    }
  } finally {
    proc.kill("SIGTERM");
    await proc.exited;
  }
}
