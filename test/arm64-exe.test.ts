// The linux-arm64 executable (scripts/build.ts --arch arm64) under qemu-user on an x86-64 host
// (natively on an aarch64 one): it is an aarch64 program, prints its version, and `--demo` serves
// the built-in model, whose greedy completion equals transformers' tokens as on x86-64
// (test/server-demo.test.ts). Skipped with a line saying why when qemu-aarch64 or the arm64
// executable is missing, except under CI (a failure there: .ci/run installs qemu-user and runs
// scripts/arm64-tests.ts, which builds the executable, before npm test) or when
// BLOOMERY_ARM64_EXE names the executable.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { arm64Runner, elfMachine } from "../scripts/arm64-emu.ts";
import { FIXTURES, ROOT } from "./paths.ts";

const VERSION = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version;
const given = process.env.BLOOMERY_ARM64_EXE ? resolve(process.env.BLOOMERY_ARM64_EXE) : undefined;
const EXE = given ?? [join(ROOT, "build", "linux-arm64", "test", "bloomery-serve"), join(ROOT, "dist", "linux-arm64", "bloomery-serve")].find((p) => existsSync(p));
const runner = arm64Runner();
const why = typeof runner === "string"
  ? runner
  : !EXE
    ? "no arm64 executable (bun scripts/arm64-tests.ts builds one, or bun scripts/build.ts --arch arm64)"
    : !existsSync(EXE)
      ? `BLOOMERY_ARM64_EXE names ${EXE}, which does not exist`
      : null;
// under CI, or with an executable named, what is missing is a failure, not a skip
const ci = !!process.env.CI && process.env.CI !== "false";
const skip = why !== null && !ci && !given;
if (skip) console.log(`arm64 executable tests skipped: ${why}`);
const prefix = typeof runner === "string" ? [] : runner.prefix;
const cache = mkdtempSync(join(tmpdir(), "bloomery-arm64-cache-"));
afterAll(() => rmSync(cache, { recursive: true, force: true }));

describe.skipIf(skip)("the linux-arm64 executable", () => {
  test("is an aarch64 program and prints its version", () => {
    if (why || !EXE) throw new Error(`cannot run the arm64 executable: ${why}`);
    const head = new Uint8Array(readFileSync(EXE).subarray(0, 64));
    expect(elfMachine(head)).toBe("aarch64");
    const p = Bun.spawnSync([...prefix, EXE, "--version"], { stdout: "pipe", stderr: "pipe" });
    expect(p.exitCode).toBe(0);
    expect(p.stdout.toString().trim()).toBe(`bloomery-serve ${VERSION}`);
  }, 60_000);

  test("--demo serves the built-in model: a greedy completion equals transformers' tokens", async () => {
    if (why || !EXE) throw new Error(`cannot run the arm64 executable: ${why}`);
    const ref = (await Bun.file(join(FIXTURES, "demo-model", "demo-ref.json")).json()).refs[4] as { prompt: number[]; greedy: number[] };
    const t0 = performance.now();
    const proc = Bun.spawn([...prefix, EXE, "--demo", "--host", "127.0.0.1", "--port", "0"], {
      cwd: cache,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: cache, XDG_CACHE_HOME: cache },
      stdout: "pipe",
      stderr: "pipe",
    });
    let log = "";
    try {
      const dec = new TextDecoder();
      const reader = (proc.stderr as ReadableStream<Uint8Array>).getReader();
      const deadline = Date.now() + 300_000;
      let url = "";
      let pending: ReturnType<typeof reader.read> | null = null;
      while (!url) {
        if (Date.now() > deadline) throw new Error(`no address printed in 300 s:\n${log}`);
        // a read still pending after the second is kept for the next turn: dropping it would lose its chunk
        pending ??= reader.read();
        const r = await Promise.race([pending, Bun.sleep(1000).then(() => null)]);
        if (r === null) continue;
        pending = null;
        if (r.done) throw new Error(`the server exited (${await proc.exited}) before listening:\n${log}`);
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
        const h = await fetch(`${url}/health`).catch(() => null);
        if (h?.status === 200) break;
        if (proc.exitCode !== null) throw new Error(`the server exited (${proc.exitCode}) while loading:\n${log}`);
        if (Date.now() > deadline) throw new Error(`/health is not 200 after 300 s:\n${log}`);
        await Bun.sleep(200);
      }
      const ready = performance.now() - t0;
      const res = await fetch(`${url}/completion`, { method: "POST", body: JSON.stringify({ prompt: ref.prompt, n_predict: 16, temperature: 0, return_tokens: true }) });
      expect(res.status).toBe(200);
      const r = (await res.json()) as { tokens: number[]; content: string; timings?: { prompt_per_second?: number; predicted_per_second?: number } };
      const t = r.timings ?? {};
      console.log(`arm64 --demo ${typeof runner === "string" ? "" : runner.how}: ready in ${(ready / 1000).toFixed(1)} s; ` +
        `prompt ${t.prompt_per_second?.toFixed(1)} tok/s, generation ${t.predicted_per_second?.toFixed(1)} tok/s; ${JSON.stringify(r.content)}`);
      expect(r.tokens).toEqual(ref.greedy.slice(0, 16));
      expect(r.content).toContain("as f:");
      expect(log).toContain("CPU backend");
    } finally {
      proc.kill("SIGTERM");
      await proc.exited;
    }
  }, 360_000);
});
