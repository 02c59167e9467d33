// Test helper for the agent interface: run the real executable without blocking this process (a
// stand-in hub in the test must keep answering), read its JSON lines from stdout as they come, and
// give every run a fresh Hugging Face cache and bloomery cache.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EXE } from "./exe.ts";
import { ROOT } from "./paths.ts";

export interface Finished {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout's lines parsed as JSON (a line that is not JSON fails the parse) */
  events: Record<string, any>[];
}

/** An environment with fresh caches, no token and no JSON-events variable, plus `extra`. */
export function agentEnv(extra: Record<string, string> = {}): Record<string, string> {
  const cache = mkdtempSync(join(tmpdir(), "bloomery-agent-"));
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined || /^(HF_|HUGGING_FACE_|LLAMA_|BLOOMERY_|BUN_BE_BUN$)/.test(k)) continue;
    env[k] = v;
  }
  return { ...env, HF_HUB_CACHE: join(cache, "hub"), HF_HOME: join(cache, "hf-home"), XDG_CACHE_HOME: join(cache, "xdg"), ...extra };
}

export function jsonLines(text: string): Record<string, any>[] {
  return text.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l));
}

/** Run bloomery-serve to its end. */
export async function run(args: string[], env: Record<string, string> = agentEnv(), timeoutMs = 60000): Promise<Finished> {
  const p = Bun.spawn([EXE, ...args], { cwd: ROOT, env, stdout: "pipe", stderr: "pipe" });
  const timer = setTimeout(() => p.kill("SIGKILL"), timeoutMs);
  const [stdout, stderr] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
  const code = await p.exited;
  clearTimeout(timer);
  return {
    code, stdout, stderr,
    get events() {
      return jsonLines(stdout);
    },
  };
}

export interface Started {
  proc: ReturnType<typeof Bun.spawn>;
  /** events so far */
  events: Record<string, any>[];
  stderr(): string;
  /** resolves with the first event named `name` (rejects when the process ends first) */
  waitFor(name: string, timeoutMs?: number): Promise<Record<string, any>>;
  /** SIGTERM, then the exit code and every event */
  stop(): Promise<number>;
}

/** Start bloomery-serve and follow its stdout events. */
export function start(args: string[], env: Record<string, string> = agentEnv()): Started {
  const proc = Bun.spawn([EXE, ...args], { cwd: ROOT, env, stdout: "pipe", stderr: "pipe" });
  const events: Record<string, any>[] = [];
  let err = "";
  let buf = "";
  const waiters: { name: string; res: (e: Record<string, any>) => void }[] = [];
  const dec = new TextDecoder();
  const outDone = (async () => {
    for await (const chunk of proc.stdout as ReadableStream<Uint8Array>) {
      buf += dec.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim() === "") continue;
        const e = JSON.parse(line);
        events.push(e);
        for (const w of waiters.filter((x) => x.name === e.event)) w.res(e);
      }
    }
  })();
  void (async () => {
    for await (const chunk of proc.stderr as ReadableStream<Uint8Array>) err += dec.decode(chunk, { stream: true });
  })();
  return {
    proc,
    events,
    stderr: () => err,
    waitFor(name, timeoutMs = 60000) {
      const have = events.find((e) => e.event === name);
      if (have) return Promise.resolve(have);
      return new Promise((res, rej) => {
        const t = setTimeout(() => rej(new Error(`no '${name}' event in ${timeoutMs} ms; events ${JSON.stringify(events.map((e) => e.event))}\n${err}`)), timeoutMs);
        waiters.push({ name, res: (e) => { clearTimeout(t); res(e); } });
        void proc.exited.then(async () => {
          await outDone;
          clearTimeout(t);
          const e = events.find((x) => x.event === name);
          if (e) res(e);
          else rej(new Error(`exited ${proc.exitCode} before a '${name}' event; events ${JSON.stringify(events)}\n${err}`));
        });
      });
    },
    async stop() {
      proc.kill("SIGTERM");
      const code = await proc.exited;
      await outDone;
      return code;
    },
  };
}
