// The command line: `generate` (prompt or token ids in, tokens out) and `synth` (real shapes,
// random weights), run as a user runs them.
import { describe, expect, test, beforeAll } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FIXTURES } from "./paths.ts";
import { runCli } from "./exe.ts";
import { GgufFile, GgmlType } from "../src/gguf/index.ts";
import { Tokenizer, vocabFromMetadata } from "../src/tokenizer/index.ts";

const demo = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");
let dir: string;
beforeAll(() => { dir = mkdtempSync(join(tmpdir(), "bloomery-cli-")); });

function json(r: { code: number; stdout: string; stderr: string }) {
  if (r.code !== 0) throw new Error(`exit ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split("\n").pop()!);
}

describe("generate", () => {
  test("greedy token ids equal transformers' continuation of the demo model", async () => {
    const ref = (await Bun.file(join(FIXTURES, "demo-model", "demo-ref.json")).json()).refs[0];
    const out = json(runCli(["generate", "-m", demo, "--tokens", ref.prompt.join(","), "-n", "32", "--temp", "0", "--json"]));
    expect(out.tokens).toEqual(ref.greedy.slice(0, 32));
    expect(out.stop_type).toBe("limit");
    expect(out.timings.predicted_n).toBe(32);
  });

  test("a text prompt is tokenized as the token-id prompt; text output streams to stdout", async () => {
    const ref = (await Bun.file(join(FIXTURES, "demo-model", "demo-ref.json")).json()).refs[0];
    const out = json(runCli(["generate", "-m", demo, "-p", ref.text, "-n", "8", "--temp", "0", "--json"]));
    expect(out.prompt_tokens).toEqual(ref.prompt);
    expect(out.tokens).toEqual(ref.greedy.slice(0, 8));
    const plain = runCli(["generate", "-m", demo, "-p", ref.text, "-n", "8", "--temp", "0"]);
    expect(plain.code).toBe(0);
    expect(plain.stdout.trimEnd()).toBe(out.text.trimEnd());
    expect(plain.stderr).toContain("generated at");
  });

  test("seeded sampling repeats with the same seed and differs with another", () => {
    const a = json(runCli(["generate", "-m", demo, "-p", "import ", "-n", "24", "--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0", "-s", "7", "--json"]));
    const b = json(runCli(["generate", "-m", demo, "-p", "import ", "-n", "24", "--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0", "-s", "7", "--json"]));
    const c = json(runCli(["generate", "-m", demo, "-p", "import ", "-n", "24", "--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0", "-s", "8", "--json"]));
    expect(a.tokens).toEqual(b.tokens);
    expect(c.tokens).not.toEqual(a.tokens);
  });

  test("a stop string ends generation and is not printed", () => {
    const out = json(runCli(["generate", "-m", demo, "-p", "import os\nimport sys\n\n\ndef main(", "-n", "64", "--temp", "0", "--stop", "sys.argv", "--json"]));
    expect(out.stop_type).toBe("word");
    expect(out.stopping_word).toBe("sys.argv");
    expect(out.text).toBe("main):\n    return ");
  });

  test("bad input: missing model, unknown flag, malformed file", () => {
    const a = runCli(["generate", "-p", "x"]);
    expect(a.code).not.toBe(0);
    expect(a.stderr).toContain("-m FILE is required");
    const b = runCli(["generate", "-m", demo, "-p", "x", "--bogus"]);
    expect(b.code).toBe(2);
    expect(b.stderr).toContain("--bogus");
    const c = runCli(["generate", "-m", join(FIXTURES, "demo-model", "heldout.txt"), "-p", "x"]);
    expect(c.code).toBe(6); // E_BAD_MODEL, as the server exits (it was 1)
    expect(c.stderr).toContain("bad magic");
  });
});

describe("synth", () => {
  test("qwen3-30b-a3b:Q4_K_M has llama-bench's size (17.28 GiB, 30.53 B parameters)", () => {
    const out = json(runCli(["synth", "qwen3-30b-a3b:Q4_K_M", "--dry-run"]));
    expect(out.bytes).toBe(18556542400);
    expect(out.gib).toBe(17.282);
    expect(out.params).toBe(30532122624);
    const big = json(runCli(["synth", "qwen3-235b-a22b:Q4_K_M", "--dry-run"]));
    expect(big.params).toBeGreaterThan(235e9);
  });

  test("a small synthetic model has Q4_K_M's types, a loadable vocabulary, and generates", () => {
    const path = join(dir, "tm.gguf");
    const out = json(runCli(["synth", "test-moe-wide:Q4_K_M", "-o", path, "--skew", "4"]));
    expect(out.path).toBe(path);
    const f = GgufFile.open(path);
    expect(f.u32("general.file_type")).toBe(15);
    expect(f.requireTensor("output.weight").type).toBe(GgmlType.Q6_K);
    // llama's more-bits rule with integer division: of 3 layers only layer 2 (>= 7*3/8 = 2)
    expect(f.requireTensor("blk.2.attn_v.weight").type).toBe(GgmlType.Q6_K);
    expect(f.requireTensor("blk.2.ffn_down_exps.weight").type).toBe(GgmlType.Q6_K);
    expect(f.requireTensor("blk.0.attn_v.weight").type).toBe(GgmlType.Q4_K);
    expect(f.requireTensor("blk.1.ffn_down_exps.weight").type).toBe(GgmlType.Q4_K);
    expect(f.requireTensor("blk.0.ffn_gate_exps.weight").type).toBe(GgmlType.Q4_K);
    expect(f.requireTensor("blk.0.ffn_gate_inp.weight").type).toBe(GgmlType.F32);
    const tok = Tokenizer.fromVocab(vocabFromMetadata((k) => f.raw(k)));
    const text = "def main():\n    return 42 # ünïcödé";
    expect(tok.decode(tok.encode(text))).toBe(text);
    const gen = json(runCli(["generate", "-m", path, "-p", text, "-n", "16", "--temp", "0", "--json", "--ignore-eos"]));
    expect(gen.tokens.length).toBe(16);
    // the same seed writes the same bytes
    const again = join(dir, "tm2.gguf");
    json(runCli(["synth", "test-moe-wide:Q4_K_M", "-o", again, "--skew", "4"]));
    expect(Bun.hash(require("node:fs").readFileSync(again))).toBe(Bun.hash(require("node:fs").readFileSync(path)));
  });

  test("unknown model or quant names the known ones", () => {
    const a = runCli(["synth", "llama-9000:Q4_K_M", "--dry-run"]);
    expect(a.code).toBe(1);
    expect(a.stderr).toContain("unknown model 'llama-9000'");
    expect(a.stderr).toContain("qwen3-30b-a3b");
    const b = runCli(["synth", "qwen3-30b-a3b:Q9_K", "--dry-run"]);
    expect(b.stderr).toContain("unknown quantization 'Q9_K'");
  });
});
