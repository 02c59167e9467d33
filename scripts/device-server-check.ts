// bloomery: the server on the GPU machine (issue 7's HTTP benchmark) - starts `bloomery-serve -m
// <model> -ngl 99 -c 65536 -np 8 --port 0` (extra flags after the log path), waits for the
// model, checks the log names the CUDA backend, then: one /completion of 128 tokens, 4 and 8
// concurrent ones of 128 tokens (total tokens a second and the slowest stream's), and the
// prompt cache's time to first token: a 4,000-token prefix with one question (cold), an
// unrelated 4,000-token prompt on the same slot, the prefix with another question (restored
// from the cache), and that again with cache_prompt off. The server's log goes to <log>.
// Usage: BUN_BE_BUN=1 bloomery-serve scripts/device-server-check.ts <model.gguf> <log> [flags...]
import { appendFileSync, writeFileSync } from "node:fs";

const [model, logPath] = [process.argv[2], process.argv[3] ?? "/tmp/server.log"];
const extra = process.argv.slice(4);
if (!model) {
  process.stderr.write("usage: device-server-check.ts <model.gguf> [log]\n");
  process.exit(2);
}
const env = { ...process.env };
delete env.BUN_BE_BUN;
writeFileSync(logPath, "");
const proc = Bun.spawn([process.execPath, "-m", model, "-ngl", "99", "-c", "65536", "-np", "8", "--port", "0", ...extra], {
  env,
  stdout: "pipe",
  stderr: "pipe",
});
let log = "";
let port = 0;
let ready = false;
async function pump(s: ReadableStream<Uint8Array>): Promise<void> {
  const dec = new TextDecoder();
  for await (const chunk of s) {
    const t = dec.decode(chunk);
    log += t;
    appendFileSync(logPath, t);
    const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
    if (m) port = Number(m[1]);
    if (log.includes("main: model loaded")) ready = true;
  }
}
void pump(proc.stdout);
void pump(proc.stderr);
const t0 = performance.now();
while (!(ready && port) && performance.now() - t0 < 180_000 && proc.exitCode === null) await Bun.sleep(100);
if (!ready || !port) {
  console.log(`server not ready after ${((performance.now() - t0) / 1000).toFixed(1)} s (exit ${proc.exitCode}); log tail:\n${log.slice(-2000)}`);
  proc.kill();
  process.exit(1);
}
console.log(`server ready in ${((performance.now() - t0) / 1000).toFixed(1)} s on port ${port}`);
for (const l of log.split("\n")) if (/backend|placement|CUDA/i.test(l)) console.log(`log: ${l}`);
console.log(`log says CUDA backend: ${/CUDA backend/.test(log) ? "yes" : "NO"}`);

interface Timings {
  prompt_n: number;
  prompt_ms: number;
  prompt_per_second: number;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_second: number;
}
async function complete(prompt: string, n: number, extra: Record<string, unknown> = {}): Promise<Timings & { wall: number; cache_n?: number }> {
  const t = performance.now();
  const r = await fetch(`http://127.0.0.1:${port}/completion`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt, n_predict: n, ignore_eos: true, temperature: 0.8, seed: 42, ...extra }),
  });
  const j = (await r.json()) as { timings?: Timings & { cache_n?: number }; error?: unknown };
  if (!r.ok || !j.timings) throw new Error(`HTTP ${r.status}: ${JSON.stringify(j).slice(0, 400)}`);
  return { ...j.timings, wall: (performance.now() - t) / 1000 };
}

async function concurrent(n: number): Promise<void> {
  const w0 = performance.now();
  const all = await Promise.all(Array.from({ length: n }, (_, i) => complete(`Request ${i}: tell me a long story about the sea and ships, part ${i}.`, 128)));
  const wall = (performance.now() - w0) / 1000;
  const tokens = all.reduce((s, t) => s + t.predicted_n, 0);
  const slowest = Math.min(...all.map((t) => t.predicted_per_second));
  console.log(`${n} concurrent x 128: ${tokens} tokens in ${wall.toFixed(2)} s = ${(tokens / wall).toFixed(1)} t/s total; streams ${all.map((t) => t.predicted_per_second.toFixed(1)).join(", ")} t/s (slowest ${slowest.toFixed(1)})`);
}

/** About n tokens of varied text (numbered sentences; the synthetic vocabulary splits words finely). */
function longText(seed: string, words: number): string {
  const w = ["river", "stone", "engine", "lantern", "harbor", "copper", "meadow", "signal", "winter", "orchard", "ledger", "thunder"];
  let s = "";
  for (let i = 0; i < words; i++) s += `${seed}${w[(i * 7 + seed.length) % w.length]} ${i % 97} `;
  return s;
}

async function countTokens(text: string): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${port}/tokenize`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ content: text }) });
  return ((await r.json()) as { tokens: number[] }).tokens.length;
}

try {
  await complete("warm up", 8);
  const one = await complete("The quick brown fox jumps over the lazy dog. Once upon a time", 128);
  console.log(`1 request x 128: ${one.predicted_per_second.toFixed(1)} t/s (prompt ${one.prompt_n} at ${one.prompt_per_second.toFixed(1)} t/s)`);
  await concurrent(4);
  await concurrent(8);
  // the prompt cache: a 4,000-token prefix, then an unrelated prompt on the same slot, then the prefix again
  let words = 1200;
  let prefix = longText("a", words);
  for (let i = 0; i < 4; i++) {
    const n = await countTokens(prefix);
    if (Math.abs(n - 4000) < 100) break;
    words = Math.round((words * 4000) / n);
    prefix = longText("a", words);
  }
  const nPrefix = await countTokens(prefix);
  const slot = { id_slot: 0, cache_prompt: true };
  const a = await complete(`${prefix}\nQuestion one: what comes next?`, 1, slot);
  const c = await complete(longText("zz", words), 1, slot);
  const b = await complete(`${prefix}\nQuestion two: what came first?`, 1, slot);
  const cold = await complete(`${prefix}\nQuestion three: what came first?`, 1, { id_slot: 0, cache_prompt: false });
  console.log(`prompt cache, prefix ${nPrefix} tokens: first request ${a.wall.toFixed(3)} s (prompt ${a.prompt_n} in ${a.prompt_ms.toFixed(1)} ms); unrelated on the same slot ${c.wall.toFixed(3)} s; ` +
    `second request sharing the prefix ${b.wall.toFixed(3)} s (prompt ${b.prompt_n} evaluated, cache_n ${b.cache_n ?? "?"}, ${b.prompt_ms.toFixed(1)} ms); without the cache ${cold.wall.toFixed(3)} s ` +
    `(prompt ${cold.prompt_n} in ${cold.prompt_ms.toFixed(1)} ms): time to first token ${(cold.wall / b.wall).toFixed(1)}x sooner with the cache`);
} catch (e) {
  console.log(`request failed: ${e instanceof Error ? e.message : String(e)}`);
} finally {
  proc.kill("SIGTERM");
  const t1 = performance.now();
  while (proc.exitCode === null && performance.now() - t1 < 10_000) await Bun.sleep(100);
  if (proc.exitCode === null) proc.kill("SIGKILL");
}
