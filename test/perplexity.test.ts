// `bloomery-serve perplexity` as a user runs it, on the demo model: llama.cpp's perplexity of
// heldout.txt at -c 512 (every chunk, both quantizations, within 0.5% of llama-perplexity's
// figures in llamacpp-ref.json), a base logits file and --kl-divergence against it (itself: no
// divergence; Q4_K_M: a small one), and the errors a user meets.
import { describe, expect, test, beforeAll } from "bun:test";
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FIXTURES } from "./paths.ts";
import { runCli, type RunResult } from "./exe.ts";

const D = join(FIXTURES, "demo-model");
const Q8 = join(D, "bloomery-demo-q8_0.gguf"), Q4 = join(D, "bloomery-demo-q4_k_m.gguf");
const TEXT = join(D, "heldout.txt");
const ref = JSON.parse(readFileSync(join(D, "llamacpp-ref.json"), "utf8")).files as Record<string, { ppl: number; ppl_err: number; chunks: number }>;

let dir: string;
beforeAll(() => { dir = mkdtempSync(join(tmpdir(), "bloomery-ppl-")); });

function ok(r: RunResult): RunResult {
  if (r.code !== 0) throw new Error(`exit ${r.code}: ${r.stderr}`);
  return r;
}
const json = (r: RunResult) => JSON.parse(ok(r).stdout.trim());
const rel = (a: number, b: number) => Math.abs(a / b - 1);

describe("perplexity of heldout.txt at -c 512 (llama.cpp's figures)", () => {
  test("Q8_0: llama's text output, every chunk, final estimate within 0.5%", () => {
    const t0 = performance.now();
    const r = ok(runCli(["perplexity", "-m", Q8, "-f", TEXT, "-c", "512"]));
    const want = ref["bloomery-demo-q8_0.gguf"];
    expect(r.stderr).toContain(`perplexity: calculating perplexity over ${want.chunks} chunks, n_ctx=512, batch_size=2048, n_seq=4\n`);
    expect(r.stderr).toMatch(/perplexity: tokenization took [\d.]+ ms\n/);
    // stdout: the ETA's minutes, then the running figure a chunk, as llama prints them
    const running = [...r.stdout.matchAll(/\[(\d+)\](\d+\.\d{4}),/g)];
    expect(running.map((m) => Number(m[1]))).toEqual(Array.from({ length: want.chunks }, (_, i) => i + 1));
    expect(r.stdout).toMatch(/^\d+\.\d\d minutes\n\[1\]\d+\.\d{4},\[2\]/);
    const m = /Final estimate: PPL = (\d+\.\d{4}) \+\/- (\d+\.\d{5})\n/.exec(r.stderr);
    expect(m).not.toBeNull();
    const ppl = Number(m![1]), err = Number(m![2]);
    expect(Number(running.at(-1)![2])).toBe(ppl);
    expect(rel(ppl, want.ppl)).toBeLessThan(0.005);
    expect(rel(err, want.ppl_err)).toBeLessThan(0.005);
    console.log(`perplexity Q8_0: ${ppl} +/- ${err} (llama.cpp ${want.ppl} +/- ${want.ppl_err}) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  });

  test("Q4_K_M: --json, every chunk, within 0.5%", () => {
    const t0 = performance.now();
    const o = json(runCli(["perplexity", "-m", Q4, "-f", TEXT, "-c", "512", "--json"]));
    const want = ref["bloomery-demo-q4_k_m.gguf"];
    expect(o).toMatchObject({ mode: "perplexity", n_ctx: 512, n_batch: 2048, n_seq: 4, n_chunk: want.chunks, scored: want.chunks * 255, add_bos: false, backend: "CPU" });
    expect(o.chunks.length).toBe(want.chunks);
    expect(o.chunks.at(-1)).toBeCloseTo(o.ppl, 10);
    expect(rel(o.ppl, want.ppl)).toBeLessThan(0.005);
    expect(rel(o.ppl_err, want.ppl_err)).toBeLessThan(0.005);
    expect(o.timings.tokens).toBe(want.chunks * 512);
    console.log(`perplexity Q4_K_M: ${o.ppl.toFixed(4)} +/- ${o.ppl_err.toFixed(5)} (llama.cpp ${want.ppl} +/- ${want.ppl_err}) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  });
});

describe("--kl-divergence against a base logits file", () => {
  const CHUNKS = 24;
  let base: string, basePpl: number;
  beforeAll(() => {
    base = join(dir, "q8.kld");
    const o = json(runCli(["perplexity", "-m", Q8, "-f", TEXT, "--chunks", String(CHUNKS), "--kl-divergence-base", base, "--json"]));
    basePpl = o.ppl;
  });

  test("the base file is llama's layout: header, the chunks' tokens, 255 packed rows a chunk", () => {
    const b = readFileSync(base);
    expect(b.subarray(0, 8).toString()).toBe("_logits_");
    expect([b.readInt32LE(8), b.readInt32LE(12), b.readInt32LE(16)]).toEqual([512, 8000, CHUNKS]);
    expect(statSync(base).size).toBe(20 + 4 * 512 * CHUNKS + 2 * (8000 + 4) * 255 * CHUNKS);
  });

  test("the same model against its own logits: no divergence, the same top token everywhere", () => {
    const o = json(runCli(["perplexity", "-m", Q8, "--kl-divergence-base", base, "--kl-divergence", "--json"]));
    expect(o).toMatchObject({ mode: "kl-divergence", n_ctx: 512, n_chunk: CHUNKS, scored: CHUNKS * 255, same_top: CHUNKS * 255 });
    expect(Math.abs(o.kld.value)).toBeLessThan(1e-5);
    expect(o.kld.percentiles.max).toBeLessThan(1e-3);
    expect(o.same_top_p.value).toBe(1);
    expect(o.rms_delta_p.value).toBeLessThan(1e-4);
    expect(rel(o.ppl.value, basePpl)).toBeLessThan(1e-9);
    expect(rel(o.ppl_base.value, basePpl)).toBeLessThan(1e-3);
  });

  test("Q4_K_M against Q8_0's logits: llama's table and statistics, a small positive KL divergence", () => {
    const r = ok(runCli(["perplexity", "-m", Q4, "--kl-divergence-base", base, "--kl-divergence"]));
    expect(r.stderr).toContain(`kl_divergence: computing over ${CHUNKS} chunks, n_ctx=512, batch_size=2048, n_seq=4\n`);
    expect(r.stdout).toContain("\nchunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n");
    const rows = [...r.stdout.matchAll(/^ +(\d+) +\d+\.\d{4} ± +\d+\.\d{4} +-?\d+\.\d{5} ± +\d+\.\d{5} +(-?\d+\.\d{5}) ± +\d+\.\d{5} +\d+\.\d{3} ± +\d+\.\d{3} % +(\d+\.\d{3}) ± +\d+\.\d{3} %$/gm)];
    expect(rows.map((m) => Number(m[1]))).toEqual(Array.from({ length: CHUNKS }, (_, i) => i + 1));
    const kld = Number(/\nMean    KLD: +(-?\d+\.\d{6}) ± +\d+\.\d{6}\n/.exec(r.stdout)![1]);
    const top = Number(/\nSame top p: +(\d+\.\d{3}) ± +\d+\.\d{3} %\n/.exec(r.stdout)![1]);
    expect(kld).toBeGreaterThan(0.001);
    expect(kld).toBeLessThan(0.05);
    expect(Number(rows.at(-1)![2])).toBeCloseTo(kld, 5);
    expect(top).toBeGreaterThan(85);
    expect(top).toBeLessThan(100);
    for (const line of ["Mean PPL(Q)                   : ", "Cor(ln(PPL(Q)), ln(PPL(base))): ", "Maximum KLD: ", "99.9%   KLD: ", "Median  KLD: ", " 0.1%   KLD: ", "Mean    Δp: ", "75.0%   Δp: ", "RMS Δp    : "])
      expect(r.stdout).toContain(`\n${line}`);
    console.log(`KL divergence Q4_K_M vs Q8_0 (${CHUNKS} chunks): mean KLD ${kld}, same top p ${top}%`);
  });

  test("a base file cut short, of another vocabulary or with a token outside it is refused before any evaluation", () => {
    const full = readFileSync(base);
    const cut = join(dir, "cut.kld");
    writeFileSync(cut, full.subarray(0, full.length - 1000));
    const r = runCli(["perplexity", "-m", Q4, "--kl-divergence-base", cut, "--kl-divergence"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`holds the rows of ${CHUNKS - 1} of its ${CHUNKS} chunks (cut short?); --chunks ${CHUNKS - 1} compares those`);
    const other = join(dir, "other.kld");
    const h = Buffer.alloc(20 + 4 * 512 + 2 * (7 + 1 + 4) * 255);
    h.write("_logits_");
    h.writeInt32LE(512, 8);
    h.writeInt32LE(7, 12);
    h.writeInt32LE(1, 16);
    writeFileSync(other, h);
    const v = runCli(["perplexity", "-m", Q4, "--kl-divergence-base", other, "--kl-divergence"]);
    expect(v.code).toBe(1);
    expect(v.stderr).toContain("kl_divergence: inconsistent vocabulary (7 in");
    const badTok = join(dir, "badtok.kld");
    const t = Buffer.alloc(20 + 4 * 512 + 2 * (8000 + 4) * 255);
    t.write("_logits_");
    t.writeInt32LE(512, 8);
    t.writeInt32LE(8000, 12);
    t.writeInt32LE(1, 16);
    t.writeInt32LE(8000, 20 + 4 * 3);
    writeFileSync(badTok, t);
    const bt = runCli(["perplexity", "-m", Q4, "--kl-divergence-base", badTok, "--kl-divergence"]);
    expect(bt.code).toBe(1);
    expect(bt.stderr).toContain("token 3 is 8000, outside the vocabulary of 8000");
  });
});

describe("what a user gets wrong", () => {
  test("a text shorter than two chunks: llama's message, exit 1", () => {
    const short = join(dir, "short.txt");
    writeFileSync(short, "def main():\n    return 0\n");
    const r = runCli(["perplexity", "-m", Q8, "-f", short]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("perplexity: you need at least 1024 tokens to evaluate perplexity with a context of 512\n");
    expect(r.stderr).toMatch(/perplexity: the data file you provided tokenizes to only \d+ tokens/);
  });

  test("flags: no text, --kl-divergence without a base file, the task modes, a missing file", () => {
    const noText = runCli(["perplexity", "-m", Q8]);
    expect(noText.code).toBe(2);
    expect(noText.stderr).toContain("-f FILE");
    const noBase = runCli(["perplexity", "-m", Q8, "--kl-divergence"]);
    expect(noBase.code).toBe(2);
    expect(noBase.stderr).toContain("--kl-divergence-base FILE");
    const task = runCli(["perplexity", "-m", Q8, "-f", TEXT, "--hellaswag"]);
    expect(task.code).toBe(2);
    expect(task.stderr).toContain("only the perplexity and KL-divergence modes are implemented");
    const missing = runCli(["perplexity", "-m", Q8, "-f", join(dir, "nope.txt")]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("failed to open file");
    const help = runCli(["perplexity", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("--kl-divergence-base");
    expect(help.stdout).toContain("--cpu-moe");
  });

  test("--ppl-output-type 1: a line a chunk", () => {
    const r = ok(runCli(["perplexity", "-m", Q8, "-f", TEXT, "--chunks", "5", "-b", "512", "--ppl-output-type", "1"]));
    const lines = [...r.stdout.matchAll(/^ +(\d+)  (\d+\.\d{4})  (\d+\.\d{6})  (\d+\.\d{6})$/gm)];
    expect(lines.map((m) => Number(m[1]))).toEqual([0, 512, 1024, 1536, 2048]);
    expect(Math.log(Number(lines[4][2]))).toBeCloseTo(Number(lines[4][3]), 3);
  });
});
