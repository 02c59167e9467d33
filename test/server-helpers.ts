// Test helper for the server tests: build the tests' executable (build/test/bloomery-serve, never
// dist/) when it is missing or older than the sources (or use BLOOMERY_TEST_EXE as it is), start it
// on a free port (--port 0) with a fixture model, read the address it prints, wait until /health
// answers 200, stop it at the end.
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EXE, GIVEN_EXE } from "./exe.ts";
import { FIXTURES, ROOT } from "./paths.ts";

export const DEMO_MODEL = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");
export const TINY_MODEL = join(FIXTURES, "tiny-qwen3moe", "tiny-q8_0.gguf");

function newestSource(dir: string): number {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) t = Math.max(t, newestSource(p));
    else if (/\.(ts|c|h|css)$/.test(e.name)) t = Math.max(t, statSync(p).mtimeMs);
  }
  return t;
}

let built = false;

/** Builds the tests' executable (scripts/build.ts --for-tests) when it is missing or stale; a given one (BLOOMERY_TEST_EXE) must exist. */
export function ensureBuilt(): void {
  if (built) return;
  if (GIVEN_EXE) {
    if (!existsSync(GIVEN_EXE)) throw new Error(`BLOOMERY_TEST_EXE=${GIVEN_EXE} does not exist`);
    built = true;
    return;
  }
  const stale = !existsSync(EXE) || Math.max(newestSource(join(ROOT, "src")), newestSource(join(ROOT, "ffi"))) > statSync(EXE).mtimeMs;
  if (stale) {
    const p = Bun.spawnSync([process.execPath, "scripts/build.ts", "--for-tests"], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    if (p.exitCode !== 0) throw new Error(`building ${EXE} failed:\n${p.stdout.toString()}\n${p.stderr.toString()}`);
  }
  built = true;
}

export interface RunningServer {
  url: string;
  port: number;
  proc: ReturnType<typeof Bun.spawn>;
  /** everything the server printed to stderr so far */
  log(): string;
  stop(): Promise<void>;
}

/** The chat template of a real model from the fixtures, written to a file for --chat-template-file. */
export function templateFile(name: string): string {
  const all = JSON.parse(readFileSync(join(FIXTURES, "templates", "renderings.json"), "utf8"));
  const src = all.templates?.[name]?.template;
  if (typeof src !== "string") throw new Error(`no template ${name} in the fixtures`);
  const dir = mkdtempSync(join(tmpdir(), "bloomery-tpl-"));
  const path = join(dir, name);
  writeFileSync(path, src);
  return path;
}

/**
 * Starts the real executable on a free port. Resolves once the address is printed and, unless
 * `waitReady` is false, /health answers 200.
 */
export async function startServer(args: string[], opts: { env?: Record<string, string>; waitReady?: boolean } = {}): Promise<RunningServer> {
  ensureBuilt();
  const proc = Bun.spawn([EXE, "--port", "0", ...args], { cwd: ROOT, env: { ...process.env, ...opts.env }, stdout: "pipe", stderr: "pipe" });
  let log = "";
  const dec = new TextDecoder();
  let resolveUrl: (u: string) => void = () => {};
  let rejectUrl: (e: Error) => void = () => {};
  const urlP = new Promise<string>((res, rej) => {
    resolveUrl = res;
    rejectUrl = rej;
  });
  void (async () => {
    for await (const chunk of proc.stderr as ReadableStream<Uint8Array>) {
      log += dec.decode(chunk, { stream: true });
      const m = /server is listening on (http:\/\/\S+)/.exec(log);
      if (m) resolveUrl(m[1]);
    }
    rejectUrl(new Error(`server exited before listening:\n${log}`));
  })();
  void proc.exited.then(() => rejectUrl(new Error(`server exited (${proc.exitCode}):\n${log}`)));
  const timer = setTimeout(() => rejectUrl(new Error(`server did not print its address in time:\n${log}`)), 30000);
  const url = await urlP.finally(() => clearTimeout(timer));
  const server: RunningServer = {
    url,
    port: Number(new URL(url).port),
    proc,
    log: () => log,
    async stop() {
      proc.kill("SIGTERM");
      await proc.exited;
    },
  };
  if (opts.waitReady !== false) {
    const t0 = Date.now();
    for (;;) {
      const r = await fetch(`${url}/health`).catch(() => null);
      if (r?.status === 200) break;
      if (proc.exitCode !== null) throw new Error(`server exited while loading:\n${log}`);
      if (Date.now() - t0 > 60000) throw new Error(`server not ready after 60 s:\n${log}`);
      await Bun.sleep(50);
    }
  }
  return server;
}

/** POST JSON, return status, headers and the parsed body (or text when not JSON). */
export async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; json: any; text: string }> {
  const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body: typeof body === "string" ? body : JSON.stringify(body) });
  const text = await r.text();
  let json: any = undefined;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.status, headers: r.headers, json, text };
}

/** Reads a server-sent event stream into its events ({event, data} with data parsed when JSON). */
export async function readSse(res: Response): Promise<{ event?: string; data: any; raw: string }[]> {
  const text = await res.text();
  return parseSse(text);
}

export function parseSse(text: string): { event?: string; data: any; raw: string }[] {
  const out: { event?: string; data: any; raw: string }[] = [];
  for (const block of text.split("\n\n")) {
    if (block.trim() === "") continue;
    let event: string | undefined;
    let data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) event = line.slice(7);
      else if (line.startsWith("data: ")) data += line.slice(6);
    }
    let parsed: any = data;
    try {
      parsed = JSON.parse(data);
    } catch {
      parsed = data;
    }
    out.push({ event, data: parsed, raw: block });
  }
  return out;
}
