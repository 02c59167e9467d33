// bloomery tests: `bloomery-serve bench` - llama-bench's flags (comma lists, ranges, repeats, refusals),
// its test order, its markdown layout, and real runs on the tiny fixture model (md, json, csv).
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { benchInstances } from "../src/cli/bench.ts";
import { parseBenchArgs, parseOverrides } from "../src/cli/bench-flags.ts";
import { MarkdownPrinter, formatParams, formatSize, testName, type BenchResult } from "../src/cli/bench-print.ts";
import { FlagError } from "../src/cli/flag-types.ts";
import { memoryBandwidth } from "../ffi/cpu-kernels.ts";
import { FIXTURES } from "./paths.ts";
import { capture, parse } from "./bench-helpers.ts";

const TINY = join(FIXTURES, "tiny-qwen3moe", "tiny-q8_0.gguf");

describe("bench flags", () => {
  test("llama-bench's defaults", () => {
    const p = parse(["-m", "a.gguf"]);
    expect(p.nPrompt).toEqual([512]);
    expect(p.nGen).toEqual([128]);
    expect(p.nDepth).toEqual([0]);
    expect(p.nBatch).toEqual([2048]);
    expect(p.nUbatch).toEqual([512]);
    expect(p.nThreads).toEqual([2]);
    expect(p.reps).toBe(5);
    expect(p.output).toBe("md");
  });

  test("comma lists, ranges and repeats are test values", () => {
    const p = parse(["-m", "a.gguf,b.gguf", "-m", "c.gguf", "-p", "512,4096", "-p", "16-64*2", "-n", "0-64+32", "-t", "1,2", "-pg", "512,128", "-pg", "64,8", "-d", "0,4096"]);
    expect(p.models).toEqual(["a.gguf", "b.gguf", "c.gguf"]);
    expect(p.nPrompt).toEqual([512, 4096, 16, 32, 64]);
    expect(p.nGen).toEqual([0, 32, 64]);
    expect(p.nThreads).toEqual([1, 2]);
    expect(p.pg).toEqual([[512, 128], [64, 8]]);
    expect(p.nDepth).toEqual([0, 4096]);
  });

  test("bad values and unavailable ones are refused by name", () => {
    const cases: [string[], RegExp][] = [
      [["-p", "512"], /needs a model/],
      [["-m", "a", "-p", "x"], /-p/],
      [["-m", "a", "-pg", "512"], /-pg/],
      [["-m", "a", "-ctk", "q8_0"], /f16/],
      [["-m", "a", "-o", "sql"], /SQL/],
      [["-m", "a", "-mmp", "0"], /always mapped/],
      [["-m", "a", "-ub", "0"], /-ub/],
      [["-m", "a", "--frobnicate"], /unknown flag/],
      [["-m", "a", "-ot", "(=CPU"], /regular expression/],
      [["-m", "a", "-ot", "exps=DISK"], /buffer type/],
      [["-m", "a", "-C", "0x3"], /pins itself/],
    ];
    for (const [args, re] of cases) {
      let err: unknown;
      try {
        parseBenchArgs(args, {}, 2);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(FlagError);
      expect((err as Error).message).toMatch(re);
    }
  });

  test("-ot values: patterns and buffers; each occurrence one test value", () => {
    expect(parseOverrides("blk\\.[0-9]+\\.ffn_.*_exps=CPU;output=CUDA0").map((o) => [o.source, o.buffer])).toEqual([
      ["blk\\.[0-9]+\\.ffn_.*_exps", "CPU"],
      ["output", "CUDA0"],
    ]);
    const p = parse(["-m", "a", "-ot", "exps=CPU", "-ot", "attn=CPU"]);
    expect(p.overrides.map((o) => o.text)).toEqual(["exps=CPU", "attn=CPU"]);
  });
});

describe("bench tests and table", () => {
  test("instances in llama-bench's order: model outermost, depth innermost, pp then tg then pg", () => {
    const p = parse(["-m", "a,b", "-p", "16,32", "-n", "8", "-pg", "4,2", "-t", "1,2", "-d", "0,64"]);
    const names = benchInstances(p).map((i) => `${i.model} t${i.nThreads} ${testName(i)}`);
    expect(names.length).toBe(2 * 2 * 2 * 4);
    expect(names.slice(0, 9)).toEqual([
      "a t1 pp16", "a t1 pp32", "a t1 tg8", "a t1 pp4+tg2",
      "a t1 pp16 @ d64", "a t1 pp32 @ d64", "a t1 tg8 @ d64", "a t1 pp4+tg2 @ d64",
      "a t2 pp16",
    ]);
    expect(names[16]).toBe("b t1 pp16");
  });

  test("the markdown table has llama-bench's columns and widths", () => {
    const r: BenchResult = {
      buildCommit: "abc", cpuInfo: "", cpuPath: "avx512", modelFilename: "m.gguf", modelType: "qwen3moe ?B Q4_K - Medium",
      modelSize: 3450361856, modelNParams: 5607297024, nBatch: 2048, nUbatch: 512, nThreads: 2, nGpuLayers: -1, nCpuMoe: 0,
      splitMode: "layer", mainGpu: 0, noKvOffload: false, flashAttn: "auto", overrides: "none", noOpOffload: false, noHost: false,
      nPrompt: 512, nGen: 0, nDepth: 0, testTime: "", samplesNs: [3e9, 3.2e9], backend: "CPU", gpuInfo: "",
    } as BenchResult;
    const md = new MarkdownPrinter(new Set(), "abc", "");
    // as llama-bench printed it for the same file on this machine
    expect(md.header()).toBe(
      "| model                          |       size |     params | backend    | threads |            test |                  t/s |\n" +
        "| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |\n",
    );
    expect(md.test(r)).toBe("| qwen3moe ?B Q4_K - Medium      |   3.21 GiB |     5.61 B | CPU        |       2 |           pp512 |        165.33 ± 7.54 |\n");
    expect(formatSize(5952000)).toBe("5.68 MiB");
    expect(formatParams(5578880)).toBe("5.58 M");
    const wide = new MarkdownPrinter(new Set(["n_batch", "n_ubatch", "flash_attn"]), "abc", "");
    expect(wide.header().split("\n")[0]).toBe(
      "| model                          |       size |     params | backend    | threads | n_batch | n_ubatch |  fa |            test |                  t/s |",
    );
  });
});

describe("bench runs", () => {
  test("markdown on the tiny model: a row per test, mean and spread", async () => {
    const r = await capture(["-m", TINY, "-r", "2", "-p", "16", "-n", "4", "-ub", "8", "-t", "2"]);
    expect(r.code).toBe(0);
    const rows = r.out.split("\n").filter((l) => l.startsWith("| qwen3moe"));
    expect(rows.length).toBe(2);
    expect(rows[0]).toMatch(/\|\s+8 \|\s+pp16 \|\s+[\d.]+ ± [\d.]+ \|$/);
    expect(rows[1]).toMatch(/tg4 \|\s+[\d.]+ ± [\d.]+ \|$/);
    expect(r.out).toMatch(/\nbuild: \S+ \(0\)\n/);
  }, 30_000);

  test("json and csv carry llama-bench's fields and the samples", async () => {
    const j = await capture(["-m", TINY, "-r", "3", "-p", "8", "-n", "0", "-d", "8", "-o", "json"]);
    expect(j.code).toBe(0);
    const tests = JSON.parse(j.out) as Record<string, unknown>[];
    expect(tests.length).toBe(1);
    const t = tests[0];
    expect(t.n_prompt).toBe(8);
    expect(t.n_depth).toBe(8);
    expect(t.model_n_params).toBe(5578880);
    expect((t.samples_ns as number[]).length).toBe(3);
    expect(t.avg_ts as number).toBeGreaterThan(0);
    for (const k of ["build_commit", "cpu_info", "model_type", "n_threads", "type_k", "flash_attn", "stddev_ts"]) expect(k in t).toBe(true);
    const c = await capture(["-m", TINY, "-r", "1", "-p", "8", "-n", "0", "-o", "csv"]);
    const lines = c.out.trim().split("\n");
    expect(lines[0].startsWith("build_commit,build_number,cpu_info")).toBe(true);
    expect(lines.length).toBe(2);
  }, 30_000);

  test("a missing model file is an error with exit code 1; a bad flag exit code 2", async () => {
    expect((await capture(["-m", "/nonexistent.gguf", "-r", "1"])).code).toBe(1);
    expect((await capture(["-m", TINY, "-q"])).code).toBe(2);
  });

  test("the memory bandwidth probe measures something plausible", () => {
    const gbps = memoryBandwidth(1, 64 << 20, 2);
    expect(gbps).toBeGreaterThan(0.5);
    expect(gbps).toBeLessThan(2000);
  });
});
