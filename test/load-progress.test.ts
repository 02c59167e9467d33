// The load progress line (src/engine/load-progress.ts): nothing for a small file; for a large one a
// line every 2 s and one at the end (a line redrawn in place on a terminal); on stderr, so --json's
// stdout stays events only (the real executable, the threshold lowered to show it on the demo).
import { describe, expect, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LOAD_PROGRESS_MIN_BYTES, prefaultRanges, type ProgressSink } from "../src/engine/load-progress.ts";
import { EXE } from "./exe.ts";
import { ensureBuilt } from "./server-helpers.ts";
import { ROOT } from "./paths.ts";

const GiB = 2 ** 30;

function sink(isTTY: boolean): ProgressSink & { text: string } {
  const s = { text: "", isTTY, write(t: string) { s.text += t; } };
  return s;
}

/** A stand-in for the prefault that takes `ms` a call. */
const slow = (ms: number, calls: bigint[][]) => (base: bigint, size: bigint) => {
  calls.push([base, size]);
  Bun.sleepSync(ms);
};

describe("load progress", () => {
  test("under 2 GiB: read in one call a range, nothing said", () => {
    const out = sink(false), calls: bigint[][] = [];
    prefaultRanges([{ base: 4096n, bytes: GiB }, { base: 8n * BigInt(GiB), bytes: GiB / 2 }], "small.gguf", slow(0, calls), out);
    expect(out.text).toBe("");
    expect(calls).toEqual([[4096n, BigInt(GiB)], [8n * BigInt(GiB), BigInt(GiB / 2)]]);
    expect(LOAD_PROGRESS_MIN_BYTES).toBe(2 * GiB);
  });

  test("a 5 GiB model read slowly: 256 MiB calls covering every byte, a line every 2 s and the last at 100%", () => {
    const out = sink(false), calls: bigint[][] = [];
    prefaultRanges([{ base: 0n, bytes: 3 * GiB }, { base: 10n * BigInt(GiB), bytes: 2 * GiB }], "big.gguf", slow(110, calls), out);
    expect(calls.length).toBe(20);
    expect(calls.reduce((a, c) => a + c[1], 0n)).toBe(5n * BigInt(GiB));
    expect(calls[12]).toEqual([10n * BigInt(GiB), 256n * 2n ** 20n]);
    const lines = out.text.trimEnd().split("\n");
    expect(lines.length).toBeGreaterThanOrEqual(2); // 2.2 s: a line on the way (more on a slow machine), one at the end
    expect(lines.length).toBeLessThan(20);
    expect(lines[0]).toMatch(/^load: big\.gguf: \d\.\d GiB of 5\.0 GiB read \(\d+% at \d+\.\d (MiB|GiB)\/s, [2-9]\.\d s\)$/);
    expect(lines.at(-1)).toMatch(/^load: big\.gguf: 5\.0 GiB of 5\.0 GiB read \(100% at .*\)$/);
  });

  test("on a terminal: one line redrawn in place, ended by a newline", () => {
    const out = sink(true), calls: bigint[][] = [];
    prefaultRanges([{ base: 0n, bytes: 3 * GiB }], "big.gguf", slow(60, calls), out);
    const draws = out.text.split("\r").filter(Boolean);
    expect(draws.length).toBeGreaterThanOrEqual(3);
    expect(out.text).toMatch(/100% at [^\r]*\x1b\[K\n$/);
    expect(out.text.split("\n").length).toBe(2);
  });
});

describe("the executable", () => {
  test("the line goes to stderr; --json's stdout holds only JSON events", async () => {
    ensureBuilt();
    const p = Bun.spawn([EXE, "--demo", "--port", "0", "--json"], {
      cwd: ROOT, stdout: "pipe", stderr: "pipe",
      env: { ...process.env, BLOOMERY_LOAD_PROGRESS_MIN_MIB: "1", XDG_CACHE_HOME: mkdtempSync(join(tmpdir(), "bloomery-progress-")) },
    });
    const dec = new TextDecoder();
    let out = "";
    const reader = (p.stdout as ReadableStream<Uint8Array>).getReader();
    const t0 = Date.now();
    while (!out.includes('"event":"ready"') && Date.now() - t0 < 60000) {
      const { value, done } = await reader.read();
      if (done) break;
      out += dec.decode(value, { stream: true });
    }
    p.kill("SIGTERM");
    const err = await new Response(p.stderr).text();
    await p.exited;
    expect(out).toContain('"event":"ready"');
    for (const line of out.trim().split("\n")) expect(() => JSON.parse(line)).not.toThrow();
    expect(out).not.toContain("load: ");
    expect(err).toMatch(/load: \S+bloomery-demo-q8_0\.gguf: 14\.6 MiB of 14\.6 MiB read \(100% at /);
  }, 120000);
});
