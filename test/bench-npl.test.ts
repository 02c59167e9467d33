// bloomery tests: `bloomery-serve bench -npl` (llama-batched-bench's tests): the flag and its refusals,
// the test order, the table's columns and arithmetic, real runs on the tiny model (md, jsonl, -tgs),
// and the batched decoder's greedy tokens and logits against each sequence run alone (CPU: same bits).
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { batchedTests } from "../src/cli/bench-batched.ts";
import { BatchedMarkdownPrinter, batchedStats, BatchedJsonlPrinter, type BatchedResult } from "../src/cli/bench-batched-print.ts";
import { BatchedBenchError, BatchedDecoder } from "../src/cli/bench-batched-run.ts";
import { parseBenchArgs } from "../src/cli/bench-flags.ts";
import type { BenchBase } from "../src/cli/bench-run.ts";
import { FlagError } from "../src/cli/flag-types.ts";
import type { Backend } from "../src/engine/backend.ts";
import { Model } from "../src/engine/model.ts";
import { FIXTURES } from "./paths.ts";
import { capture, parse } from "./bench-helpers.ts";

const TINY = join(FIXTURES, "tiny-qwen3moe", "tiny-q8_0.gguf");
const DEMO_Q4 = join(FIXTURES, "demo-model", "bloomery-demo-q4_k_m.gguf");

/** The cells of a markdown row of the batched table. */
const cells = (line: string): string[] => line.split("|").slice(1, -1).map((c) => c.trim());

describe("bench -npl flags", () => {
  test("lists, ranges and repeats; llama-batched-bench's -npp/-ntg spellings; -tgs", () => {
    const p = parse(["-m", "a.gguf", "-npl", "1,2", "-npl", "4-16*2", "-npp", "128", "-ntg", "32,64", "-tgs"]);
    expect(p.npl).toEqual([1, 2, 4, 8, 16]);
    expect(p.nPrompt).toEqual([128]);
    expect(p.nGen).toEqual([32, 64]);
    expect(p.tgSeparate).toBe(true);
    expect(parse(["-m", "a.gguf"]).npl).toEqual([]);
  });

  test("bad values are refused by name", () => {
    const cases: [string[], RegExp][] = [
      [["-npl", "0"], /-npl: 0 .*1\.\.1024/],
      [["-npl", "2,0"], /-npl: 0/],
      [["-npl", "5000"], /-npl: 5000/],
      [["-npl", "x"], /-npl/],
      [["-npl", "-2"], /-npl/],
      [["-npl", "2", "-n", "0"], /decode steps/],
      [["-npl", "2", "-pg", "8,0"], /decode steps/],
      [["-npl", "2", "--membw"], /--membw/],
      [["-npl", "2", "-pps"], /shared prompts are not implemented/],
      [["-tgs"], /-tgs needs -npl/],
    ];
    for (const [args, re] of cases) {
      let err: unknown;
      try {
        parseBenchArgs(["-m", "a.gguf", ...args], {}, 2);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(FlagError);
      expect((err as Error).message).toMatch(re);
    }
  });

  test("tests in llama-batched-bench's order: prompt sizes, then generation sizes, then sequences; -pg pairs after", () => {
    const p = parse(["-m", "a.gguf", "-npl", "1,4", "-p", "16,32", "-n", "8", "-pg", "4,2"]);
    const base = { model: "a.gguf" } as BenchBase;
    const names = batchedTests(p, [base]).map((t) => `${t.nPrompt}/${t.nGen}/${t.nPl}`);
    expect(names).toEqual(["16/8/1", "16/8/4", "32/8/1", "32/8/4", "4/2/1", "4/2/4"]);
  });
});

describe("bench -npl table", () => {
  const r: BatchedResult = {
    buildCommit: "abc", cpuInfo: "", cpuPath: "avx2", backend: "CPU", gpuInfo: "", modelFilename: "m.gguf", modelType: "qwen3moe ?B Q8_0",
    modelSize: 5952000, modelNParams: 5578880, nBatch: 2048, nUbatch: 512, nThreads: 2, nGpuLayers: -1, nCpuMoe: 0, flashAttn: "auto",
    overrides: "none", tgSeparate: false, nDepth: 0, pp: 128, tg: 64, pl: 4, testTime: "",
    ppNs: [1e9, 2e9], tgNs: [2e9, 2e9],
  };

  test("the arithmetic: N_KV, B x TG, aggregate and per-sequence decode speed, mean ± sample stddev", () => {
    const st = batchedStats(r);
    expect(st.nKv).toBe(4 * (128 + 64));
    expect(st.nTg).toBe(256);
    expect(st.tPp.mean).toBeCloseTo(1.5, 9);
    expect(st.tPp.sd).toBeCloseTo(Math.SQRT1_2, 9);
    expect(st.sPp.mean).toBeCloseTo((512 / 1 + 512 / 2) / 2, 6);
    expect(st.sTg.mean).toBeCloseTo(128, 9);
    expect(st.sTg.sd).toBe(0);
    expect(st.sSeq.mean).toBeCloseTo(32, 9);
    expect(st.s.mean).toBeCloseTo(((512 + 256) / 3 + (512 + 256) / 4) / 2, 6);
  });

  test("markdown: llama-batched-bench's ten columns first, in its layout", () => {
    const md = new BatchedMarkdownPrinter("abc");
    const head = BatchedMarkdownPrinter.tableHeader().split("\n");
    expect(cells(head[0])).toEqual(["PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s", "N_TG", "S_SEQ t/s"]);
    expect(head[0].startsWith("|    PP |     TG |    B |   N_KV |")).toBe(true);
    expect(head[1].startsWith("|-------|--------|------|--------|")).toBe(true);
    const out = md.test(r) + md.test({ ...r, pl: 8 });
    const lines = out.split("\n");
    expect(lines[0]).toMatch(/^bench: qwen3moe \?B Q8_0 \(5\.68 MiB, 5\.58 M params\), CPU: n_batch = 2048, n_ubatch = 512, .*is_pp_shared = 0, is_tg_separate = 0, .*n_threads = 2/);
    const rows = lines.filter((l) => /^\|\s+\d/.test(l));
    expect(rows.length).toBe(2); // one table: the second row shares the header
    expect(cells(rows[0])).toEqual(["128", "64", "4", "768", "1.500 ± 0.707", "384.00 ± 181.02", "2.000 ± 0.000", "128.00 ± 0.00",
      "3.500 ± 0.707", "224.00 ± 45.25", "256", "32.00 ± 0.00"]);
    expect(cells(rows[1]).slice(0, 4)).toEqual(["128", "64", "8", "1536"]);
    expect(md.test({ ...r, nThreads: 1 })).toMatch(/^\nbench: .*n_threads = 1.*\n\n\|    PP/); // new parameters: a new table
    expect(md.footer()).toBe("\nbuild: abc (0)\n");
  });

  test("jsonl: llama-batched-bench's keys in its order, then the spreads and samples", () => {
    const o = JSON.parse(new BatchedJsonlPrinter().test(r)) as Record<string, unknown>;
    expect(Object.keys(o).slice(0, 18)).toEqual(["n_kv_max", "n_batch", "n_ubatch", "flash_attn", "is_pp_shared", "n_gpu_layers", "n_threads",
      "n_threads_batch", "pp", "tg", "pl", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg", "t", "speed"]);
    expect(o.n_kv).toBe(768);
    expect(o.speed_tg).toBe(128);
    expect(o.speed_tg_seq).toBe(32);
    expect(o.n_tg).toBe(256);
    expect(o.samples_tg_ns).toEqual([2e9, 2e9]);
  });
});

describe("bench -npl runs (CPU, tiny model)", () => {
  test("markdown: a row per number of sequences with the right counts", async () => {
    const r = await capture(["-m", TINY, "-npl", "1,2,4", "-p", "8", "-n", "4", "-r", "2", "-t", "2", "-ngl", "0"]);
    expect(r.code).toBe(0);
    const rows = r.out.split("\n").filter((l) => /^\|\s+\d/.test(l)).map(cells);
    expect(rows.map((c) => c.slice(0, 4))).toEqual([["8", "4", "1", "12"], ["8", "4", "2", "24"], ["8", "4", "4", "48"]]);
    expect(rows.map((c) => c[10])).toEqual(["4", "8", "16"]);
    for (const c of rows) {
      for (const i of [4, 5, 6, 7, 8, 9, 11]) expect(c[i]).toMatch(/^\d+\.\d+ ± \d+\.\d+$/);
      expect(Number(c[7].split(" ")[0])).toBeGreaterThan(0);
      // per sequence = aggregate / B (rounding of two decimals)
      expect(Math.abs(Number(c[11].split(" ")[0]) * Number(c[2]) - Number(c[7].split(" ")[0]))).toBeLessThan(0.01 * Number(c[2]) + 0.01);
    }
    expect(r.out).toMatch(/is_tg_separate = 0/);
    expect(r.out).toMatch(/\nbuild: \S+ \(0\)\n/);
  }, 60_000);

  test("jsonl with a depth and -tgs: one object per test, the runs' samples", async () => {
    const r = await capture(["-m", TINY, "-npl", "2,3", "-p", "4", "-n", "3", "-d", "5", "-r", "3", "-tgs", "-o", "jsonl", "-ngl", "0"]);
    expect(r.code).toBe(0);
    const objs = r.out.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(objs.length).toBe(2);
    expect(objs.map((o) => [o.pl, o.pp, o.tg, o.n_depth, o.n_kv, o.n_tg, o.is_tg_separate])).toEqual([[2, 4, 3, 5, 24, 6, 1], [3, 4, 3, 5, 36, 9, 1]]);
    for (const o of objs) {
      expect((o.samples_pp_ns as number[]).length).toBe(3);
      expect((o.samples_tg_ns as number[]).length).toBe(3);
      expect(o.speed_tg as number).toBeGreaterThan(0);
      expect(o.backends).toBe("CPU");
    }
  }, 60_000);

  test("a model that cannot load is exit code 1; a bad -npl exit code 2 with the reason", async () => {
    expect((await capture(["-m", "/nonexistent.gguf", "-npl", "2", "-r", "1"])).code).toBe(1);
    const bad = await capture(["-m", TINY, "-npl", "0"]);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/invalid value for -npl: 0/);
  });
});

/** Each sequence alone (a one-slot context of its own, Model.evalSequence): the greedy tokens and every logits row read. */
function alone(m: Model, prompt: Int32Array, steps: number): { tokens: number[]; rows: Float32Array[] } {
  const argmax = (r: Float32Array) => r.reduce((b, x, i) => (x > r[b] ? i : b), 0);
  const rows = [m.evalSequence(prompt, 0).slice()];
  const tokens = [argmax(rows[0])];
  for (let i = 0; i < steps; i++) {
    rows.push(m.evalSequence([tokens[i]], prompt.length + i).slice());
    tokens.push(argmax(rows[i + 1]));
  }
  return { tokens, rows };
}

const sameBits = (a: Float32Array, b: Float32Array): boolean => {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length), y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  return x.length === y.length && x.every((v, i) => v === y[i]);
};

describe("batched decode = each sequence alone (CPU, greedy)", () => {
  for (const [file, N, P, steps, ub, nBatch] of [[TINY, 4, 11, 12, 5, 7], [DEMO_Q4, 3, 40, 8, 64, 2048]] as const) {
    test(`${file.split("/").pop()}: ${N} sequences, prompts of ${P}, ${steps} steps, forwards of ${ub}, decode calls of ${nBatch}`, () => {
      const m = Model.load(file, { nCtx: P + steps + 1, nSlots: 1, nThreads: 2, maxTokens: 64 });
      let be: Backend | undefined;
      try {
        const V = m.hp.nVocab;
        // distinct prompts (a fixed generator; different content per sequence)
        let s = 7;
        const prompts = Array.from({ length: N }, () => Int32Array.from({ length: P }, () => ((s = (s * 48271) % 2147483647), s % V)));
        const refs = prompts.map((p) => alone(m, p, steps));
        for (const separate of [false, true]) {
          be = m.backends.create({ nSlots: N, nCtxSlot: P + steps + 1, maxTokens: ub, nThreads: 2 }, { nGpuLayers: 0 });
          const seen = Array.from({ length: N }, () => [] as Float32Array[]);
          const dec = new BatchedDecoder(be, V, { nSeq: N, nBatch, pick: "greedy", onLogits: (q, pos, row) => {
            expect(pos).toBe(P - 1 + seen[q].length);
            seen[q].push(row.slice());
          } });
          const first = dec.prefill(prompts, 0);
          const made = dec.generate(first, P, steps, separate);
          for (let q = 0; q < N; q++) {
            expect([first[q], ...made[q]]).toEqual(refs[q].tokens);
            expect(seen[q].length).toBe(steps + 1);
            for (let i = 0; i <= steps; i++) expect(sameBits(seen[q][i], refs[q].rows[i])).toBe(true);
          }
          be.close();
          be = undefined;
        }
        // not vacuous: the sequences went different ways
        expect(new Set(refs.map((r) => r.tokens.join(","))).size).toBeGreaterThan(1);
      } finally {
        be?.close();
        m.close();
      }
    }, 120_000);
  }

  test("the decoder refuses more sequences than the context's slots, and mismatched prompts", () => {
    const m = Model.load(TINY, { nCtx: 32, nSlots: 2, nThreads: 1, maxTokens: 8 });
    try {
      expect(() => new BatchedDecoder(m.backend, m.hp.nVocab, { nSeq: 3, nBatch: 8, pick: "random" })).toThrow(BatchedBenchError);
      const dec = new BatchedDecoder(m.backend, m.hp.nVocab, { nSeq: 2, nBatch: 8, pick: "random" });
      expect(() => dec.prefill([Int32Array.of(1)], 0)).toThrow(/1 prompts for 2 sequences/);
      expect(() => dec.step(Int32Array.of(1, 2, 3), 0)).toThrow(/3 tokens for 2 sequences/);
    } finally {
      m.close();
    }
  });
});
