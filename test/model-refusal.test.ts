// The real executable refuses what it cannot serve, clearly and at once, instead of answering /health
// ok and then 500 to every request, blocking forever or reporting an internal error: broken models
// (vocabulary, gate/up types, block_count, NaN weights), a directory, a FIFO, a link loop, a dangling
// link, a crafted 5 MB key name full of terminal escapes, and a 100 GiB sparse tail (only the tensors'
// pages are prefaulted).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EXE } from "./exe.ts";
import { ensureBuilt } from "./server-helpers.ts";
import { editGguf, f32Fill, q8ToF32, GgmlType, GgufValueType } from "./gguf-edit.ts";
import { FIXTURES, hasFixtures, ROOT } from "./paths.ts";
import { GgufFile } from "../src/gguf/index.ts";

const DEMO = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");
const dir = mkdtempSync(join(tmpdir(), "bloomery-refusal-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Ended {
  code: number | null;
  stderr: string;
  ms: number;
  /** /health answered 200 at some point while it ran */
  healthy: boolean;
}

/** Start a server on `model`; poll /health while it runs; kill it after `limitMs`. */
async function serveUntilExit(model: string, limitMs = 30000): Promise<Ended> {
  const t0 = performance.now();
  const p = Bun.spawn([EXE, "-m", model, "--port", "0"], { cwd: ROOT, stdout: "ignore", stderr: "pipe", env: { ...process.env, BLOOMERY_JSON_EVENTS: "" } });
  let stderr = "";
  let healthy = false;
  const reader = (async () => {
    const dec = new TextDecoder();
    for await (const c of p.stderr as ReadableStream<Uint8Array>) stderr += dec.decode(c, { stream: true });
  })();
  const killer = setTimeout(() => p.kill("SIGKILL"), limitMs);
  const poll = (async () => {
    while (p.exitCode === null && p.signalCode === null) {
      const m = /listening on (http:\/\/\S+)/.exec(stderr);
      if (m) {
        const r = await fetch(`${m[1]}/health`).catch(() => null);
        if (r?.status === 200) {
          healthy = true;
          p.kill("SIGTERM");
          return;
        }
      }
      await Bun.sleep(20);
    }
  })();
  const code = await p.exited;
  clearTimeout(killer);
  await Promise.all([reader, poll]);
  return { code: p.signalCode ? null : code, stderr, ms: performance.now() - t0, healthy };
}

beforeAll(() => ensureBuilt(), 600000);

describe.skipIf(!hasFixtures)("broken models are refused at load (exit 6), never served as healthy", () => {
  const cases: [string, () => string, RegExp][] = [
    ["a vocabulary one token short", () => {
      const toks = GgufFile.open(DEMO).raw("tokenizer.ggml.tokens") as string[];
      return editGguf(DEMO, join(dir, "vocab.gguf"), { kv: { "tokenizer.ggml.tokens": { type: GgufValueType.ARRAY, elemType: GgufValueType.STRING, value: toks.slice(0, -1) } } });
    }, /model check: the vocabulary has 7999 tokens/],
    ["gate and up experts of different types", () => editGguf(DEMO, join(dir, "gateup.gguf"), {
      tensor: (t) => (t.name === "blk.1.ffn_up_exps.weight" ? { ...t, type: GgmlType.F32, data: q8ToF32(t.data) } : t),
    }), /model check: blk\.1\.ffn_gate_exps\.weight is Q8_0 and blk\.1\.ffn_up_exps\.weight is F32/],
    ["block_count smaller than the layers present", () => editGguf(DEMO, join(dir, "layers.gguf"), { kv: { "qwen3moe.block_count": { type: GgufValueType.U32, value: 3 } } }),
      /model check: qwen3moe\.block_count is 3 but the file holds 12 tensors of 1 more layer \(blk\.3\.\*\)/],
    ["NaN weights", () => editGguf(DEMO, join(dir, "nan.gguf"), { tensor: (t) => (t.name === "blk.0.attn_norm.weight" ? { ...t, data: f32Fill(256, NaN) } : t) }),
      /model check: a one-token forward pass .* gives 8000 NaN or infinite logits of 8000 .*blk\.0\.attn_norm\.weight holds 256 NaN/],
  ];
  for (const [what, make, msg] of cases) {
    test(what, async () => {
      const r = await serveUntilExit(make());
      expect(r.healthy).toBe(false);
      expect(r.code).toBe(6);
      expect(r.stderr).toMatch(msg);
      expect(r.stderr).toContain("exit: 6 E_BAD_MODEL");
    }, 60000);
  }
});

describe("model paths that are not files", () => {
  test("a directory: said to be one, with the .gguf files inside; exit 6, not an internal error", async () => {
    const d = join(dir, "folder");
    mkdirSync(d);
    writeFileSync(join(d, "model-Q4_K_M.gguf"), "");
    const r = await serveUntilExit(d);
    expect(r.code).toBe(6);
    expect(r.stderr).toContain(`error: ${d}: is a directory with no .safetensors file and no model.safetensors.index.json, so neither a GGUF file nor a checkpoint folder: -m takes the model's .gguf file or a Hugging Face safetensors folder; it holds 'model-Q4_K_M.gguf'`);
    expect(r.stderr).not.toContain("EISDIR");
  }, 60000);

  test("a FIFO is refused at once (it blocked forever, deaf to SIGTERM)", async () => {
    const f = join(dir, "pipe.gguf");
    expect(Bun.spawnSync(["mkfifo", f]).exitCode).toBe(0);
    const r = await serveUntilExit(f, 20000);
    expect(r.code).toBe(6);
    expect(r.stderr).toContain("is a named pipe (FIFO), not a regular file");
    expect(r.ms).toBeLessThan(15000);
  }, 60000);

  test("a symbolic link loop and a dangling link say so (exit 3), not 'no such file'", async () => {
    const a = join(dir, "loop-a.gguf"), b = join(dir, "loop-b.gguf");
    symlinkSync(b, a);
    symlinkSync(a, b);
    const loop = await serveUntilExit(a);
    expect(loop.code).toBe(3);
    expect(loop.stderr).toContain(`error: ${a}: is a symbolic link loop (too many levels of symbolic links)`);
    expect(loop.stderr).not.toContain("does not exist; it is not a known model name");
    const dangling = join(dir, "dangling.gguf");
    symlinkSync(join(dir, "gone.gguf"), dangling);
    const d = await serveUntilExit(dangling);
    expect(d.code).toBe(3);
    expect(d.stderr).toContain(`is a symbolic link to '${join(dir, "gone.gguf")}', which does not exist`);
  }, 60000);
});

describe("untrusted text from a file", () => {
  test("a crafted 5 MB key name with terminal escapes: a short message with the escapes shown, not sent", async () => {
    const key = Buffer.from(`\x1b[2J\x1b[31mEVIL\u202e${"A".repeat(5_000_000)}`);
    const b = Buffer.alloc(24 + 8 + key.length + 4);
    b.write("GGUF", 0);
    b.writeUInt32LE(3, 4);
    b.writeBigUInt64LE(0n, 8);
    b.writeBigUInt64LE(1n, 16);
    b.writeBigUInt64LE(BigInt(key.length), 24);
    key.copy(b, 32);
    b.writeInt32LE(99, 32 + key.length);
    const p = join(dir, "evil.gguf");
    writeFileSync(p, b);
    const r = await serveUntilExit(p);
    expect(r.code).toBe(6);
    expect(r.stderr.length).toBeLessThan(4000); // it was 10,000,428 bytes
    expect(r.stderr).not.toMatch(/[\x1b\u202e]/);
    expect(r.stderr).toContain("key '\\x1b[2J\\x1b[31mEVIL\\u202eAAAA");
    expect(r.stderr).toContain("... (5000014 characters)': unknown value type 99");
  }, 60000);
});

describe.skipIf(!hasFixtures)("a file with a huge zero tail", () => {
  test("a 100 GiB sparse tail: the demo loads and generates in seconds with its usual memory (it hung)", () => {
    const p = join(dir, "tail.gguf");
    copyFileSync(DEMO, p);
    truncateSync(p, statSync(DEMO).size + 100 * 2 ** 30);
    const time = Bun.which("time") ? "/usr/bin/time" : undefined;
    const args = [EXE, "generate", "-m", p, "-p", "def f(x):", "-n", "4", "--temp", "0"];
    const t0 = performance.now();
    const r = Bun.spawnSync(time ? [time, "-f", "maxrss_kb=%M", ...args] : args, { cwd: ROOT, stdout: "pipe", stderr: "pipe", timeout: 60000 });
    const ms = performance.now() - t0;
    const err = r.stderr.toString();
    expect(r.exitCode).toBe(0);
    expect(err).toContain("has 100.00 GiB after its last tensor; they are not read");
    expect(ms).toBeLessThan(30000);
    const rss = /maxrss_kb=(\d+)/.exec(err);
    if (rss) expect(Number(rss[1])).toBeLessThan(1024 * 1024); // KiB: under 1 GiB (4 GiB of tail once took 4.3 GB)
  }, 90000);
});
