// Test helper: how to run bloomery-serve: the compiled executable when `npm run build` made it,
// else the TypeScript entry point through Bun (same code, for quick local runs).
import { existsSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./paths.ts";

export const EXE = join(ROOT, "dist", "bloomery-serve");

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
