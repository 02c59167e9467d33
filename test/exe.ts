// Test helper: which bloomery-serve the tests run. Their own executable, build/test/bloomery-serve
// (`npm test` compiles it with `scripts/build.ts --for-tests`; a test that needs it builds it when it
// is missing or older than the sources), so the tests never write dist/; or, when BLOOMERY_TEST_EXE
// names one (dist/bloomery-serve, an unpacked release), that executable as it is, never rebuilt.
// runCli falls back to the TypeScript entry point through Bun when no executable is there.
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { ROOT } from "./paths.ts";

/** Set when BLOOMERY_TEST_EXE names the executable to test (it is used as it is). */
export const GIVEN_EXE = process.env.BLOOMERY_TEST_EXE ? resolve(process.env.BLOOMERY_TEST_EXE) : undefined;
export const EXE = GIVEN_EXE ?? join(ROOT, "build", "test", "bloomery-serve");

export function serveCommand(): string[] {
  if (existsSync(EXE)) return [EXE];
  return [process.execPath, join(ROOT, "src", "cli", "main.ts")];
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Run bloomery-serve with arguments and wait for it. */
export function runCli(args: string[], env: Record<string, string> = {}): RunResult {
  const p = Bun.spawnSync([...serveCommand(), ...args], { cwd: ROOT, env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" });
  return { code: p.exitCode ?? -1, stdout: p.stdout.toString(), stderr: p.stderr.toString() };
}
