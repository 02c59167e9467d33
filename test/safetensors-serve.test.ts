// bloomery-serve -m <checkpoint folder>: the real executable serves the gpt-oss fixture's hf/ folder
// (greedy completions and tokenization equal to its GGUF twin's) and an mlx-community 8-bit folder (greedy
// completions equal to its dequantized twin's), and refuses folders it cannot serve
// clearly with exit 6 (no safetensors inside, a bad header, no config.json), never EISDIR or "bad magic".
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EXE } from "./exe.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { mlxFolders } from "./mlx-fixtures.ts";
import { exportFolder } from "./qwen3moe-folder.ts";
import { ensureBuilt, post, startServer } from "./server-helpers.ts";
import { FIXTURES, hasFixtures, ROOT } from "./paths.ts";

const FAM = join(FIXTURES, "families", "gpt_oss");
const HF = join(FAM, "hf");
const dir = mkdtempSync(join(tmpdir(), "bloomery-st-serve-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
beforeAll(() => ensureBuilt(), 600000);

/** Run the server on `model` until it exits (a refusal) or 30 s pass. */
async function refusal(model: string): Promise<{ code: number | null; stderr: string }> {
  const p = Bun.spawn([EXE, "-m", model, "--port", "0"], { cwd: ROOT, stdout: "ignore", stderr: "pipe" });
  const killer = setTimeout(() => p.kill("SIGKILL"), 30000);
  const stderr = await new Response(p.stderr as ReadableStream<Uint8Array>).text();
  const code = await p.exited;
  clearTimeout(killer);
  return { code: p.signalCode ? null : code, stderr };
}

/** A copy of the fixture folder with `edit` applied to it. */
function folder(name: string, edit: (d: string) => void): string {
  const d = join(dir, name);
  mkdirSync(d, { recursive: true });
  for (const f of ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(HF, f), join(d, f));
  edit(d);
  return d;
}

describe.skipIf(!hasFixtures)("bloomery-serve -m <safetensors folder>", () => {
  test("the folder answers /completion and /tokenize as its GGUF twin does (greedy, 12 tokens)", async () => {
    const a = await startServer(["-m", HF, "-np", "1", "-c", "512"]);
    const b = await startServer(["-m", join(FAM, "gpt_oss.gguf"), "-np", "1", "-c", "512"]);
    try {
      const req = { prompt: "Hello world, the quick brown fox", n_predict: 12, temperature: 0, cache_prompt: false, return_tokens: true };
      const ra = await post(`${a.url}/completion`, req), rb = await post(`${b.url}/completion`, req);
      expect(ra.status).toBe(200);
      expect(ra.json.tokens_predicted).toBe(12);
      expect(ra.json.tokens).toEqual(rb.json.tokens);
      expect(ra.json.content).toBe(rb.json.content);
      const ta = await post(`${a.url}/tokenize`, { content: "Hello world, the quick brown fox" });
      const tb = await post(`${b.url}/tokenize`, { content: "Hello world, the quick brown fox" });
      expect(ta.json.tokens).toEqual(tb.json.tokens);
      const props = await fetch(`${a.url}/props`).then((r) => r.json());
      expect(JSON.stringify(props)).toContain("hf");
    } finally {
      await a.stop();
      await b.stop();
    }
  }, 120000);

  test("an mlx-community 8-bit folder of qwen3moe (router 8-bit, experts as switch_mlp) answers as its dequantized twin does", async () => {
    const src = join(dir, "qwen3moe-hf");
    exportFolder(GgufFile.open(join(FIXTURES, "tiny-qwen3moe", "tiny.gguf")), src);
    const { q, twin } = mlxFolders(src, "qwen3_moe", { bits: 8, group: 64 }, join(dir, "qwen3moe-mlx8"));
    const a = await startServer(["-m", q, "-np", "1", "-c", "512"]);
    const b = await startServer(["-m", twin, "-np", "1", "-c", "512"]);
    try {
      const req = { prompt: "Hello world, the quick brown fox", n_predict: 12, temperature: 0, cache_prompt: false, return_tokens: true };
      const ra = await post(`${a.url}/completion`, req), rb = await post(`${b.url}/completion`, req);
      expect(ra.status).toBe(200);
      expect(ra.json.tokens_predicted).toBe(12);
      expect(ra.json.tokens).toEqual(rb.json.tokens);
      expect(ra.json.content).toBe(rb.json.content);
    } finally {
      await a.stop();
      await b.stop();
    }
  }, 120000);

  const cases: [string, () => string, RegExp][] = [
    ["a folder with no safetensors inside", () => { const d = join(dir, "empty"); mkdirSync(d, { recursive: true }); writeFileSync(join(d, "config.json"), "{}"); return d; },
      /is a directory with no \.safetensors file and no model\.safetensors\.index\.json/],
    ["a .safetensors with a bad header (the folder)", () => folder("badhdr", (d) => { const b = readFileSync(join(d, "model.safetensors")); b[8] = 0x78; writeFileSync(join(d, "model.safetensors"), b); }),
      /model\.safetensors: the JSON header at offset 8 does not start with '\{' \(starts with 'x/],
    ["a .safetensors with a bad header (the file itself)", () => join(folder("badhdr2", (d) => { const b = readFileSync(join(d, "model.safetensors")); b[3] = 0x40; writeFileSync(join(d, "model.safetensors"), b); }), "model.safetensors"),
      /model\.safetensors: header length at offset 0 is \d+ bytes, over the 100000000-byte limit/],
    ["a folder without config.json", () => folder("nocfg", (d) => rmSync(join(d, "config.json"))), /has no config\.json/],
    ["an architecture no family reads from a folder", () => folder("arch", (d) => writeFileSync(join(d, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], model_type: "llama" }))),
      /architecture 'LlamaForCausalLM' is not supported in a safetensors folder yet \(supported: [^)]*GptOssForCausalLM[^)]*\)/],
    ["a weight of a dtype not served yet", () => folder("fp8", (d) => {
      const b = readFileSync(join(d, "model.safetensors"));
      const n = Number(b.readBigUInt64LE(0));
      const h = JSON.parse(b.subarray(8, 8 + n).toString());
      const t = h["model.norm.weight"];
      h["model.norm.weight"] = { dtype: "F8_E4M3", shape: [256], data_offsets: t.data_offsets };
      const hb = Buffer.from(JSON.stringify(h).padEnd(n, " "));
      writeFileSync(join(d, "model.safetensors"), Buffer.concat([b.subarray(0, 8), hb, b.subarray(8 + n)]));
    }), /tensor 'model\.norm\.weight' is F8_E4M3: FP8 E4M3 weights are not implemented yet/],
  ];
  for (const [what, make, msg] of cases) {
    test(`refused: ${what}: exit 6, a clear error`, async () => {
      const r = await refusal(make());
      expect(r.code).toBe(6);
      expect(r.stderr).toMatch(msg);
      expect(r.stderr).not.toContain("EISDIR");
      expect(r.stderr).not.toContain("bad magic");
    }, 60000);
  }
});
