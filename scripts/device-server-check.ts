// bloomery: the server on the GPU machine - starts `bloomery-serve -m <model> -ngl 99 -c 8192
// -np 4 --port 0`, waits for the model, checks the log names the CUDA backend, sends one
// /completion of 64 tokens (its timings printed), then 4 concurrent ones of 128 tokens
// (aggregate tokens a second), and stops the server. The server's log goes to <log>.
// Usage: BUN_BE_BUN=1 bloomery-serve scripts/device-server-check.ts <model.gguf> <log>
import { appendFileSync, writeFileSync } from "node:fs";

const [model, logPath] = [process.argv[2], process.argv[3] ?? "/tmp/server.log"];
if (!model) {
  process.stderr.write("usage: device-server-check.ts <model.gguf> [log]\n");
  process.exit(2);
}
const env = { ...process.env };
delete env.BUN_BE_BUN;
writeFileSync(logPath, "");
const proc = Bun.spawn([process.execPath, "-m", model, "-ngl", "99", "-c", "8192", "-np", "4", "--port", "0"], {
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
async function complete(prompt: string, n: number): Promise<Timings> {
  const r = await fetch(`http://127.0.0.1:${port}/completion`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt, n_predict: n, ignore_eos: true, temperature: 0.8, seed: 42 }),
  });
  const j = (await r.json()) as { timings?: Timings; error?: unknown };
  if (!r.ok || !j.timings) throw new Error(`HTTP ${r.status}: ${JSON.stringify(j).slice(0, 400)}`);
  return j.timings;
}

try {
  const one = await complete("The quick brown fox jumps over the lazy dog. Once upon a time", 64);
  console.log(`one request, n_predict 64: timings ${JSON.stringify(one)}`);
  const w0 = performance.now();
  const all = await Promise.all([0, 1, 2, 3].map((i) => complete(`Request ${i}: tell me a long story about the sea and ships.`, 128)));
  const wall = (performance.now() - w0) / 1000;
  const tokens = all.reduce((s, t) => s + t.predicted_n, 0);
  for (const [i, t] of all.entries())
    console.log(`concurrent ${i}: predicted ${t.predicted_n} at ${t.predicted_per_second.toFixed(1)} t/s, prompt ${t.prompt_n} at ${t.prompt_per_second.toFixed(1)} t/s`);
  console.log(`4 concurrent x 128: ${tokens} tokens in ${wall.toFixed(2)} s = ${(tokens / wall).toFixed(1)} t/s aggregate`);
} catch (e) {
  console.log(`request failed: ${e instanceof Error ? e.message : String(e)}`);
} finally {
  proc.kill("SIGTERM");
  const t1 = performance.now();
  while (proc.exitCode === null && performance.now() - t1 < 10_000) await Bun.sleep(100);
  if (proc.exitCode === null) proc.kill("SIGKILL");
}
