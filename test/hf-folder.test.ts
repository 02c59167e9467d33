// `-hf org/repo` for a repository with no GGUF file: its checkpoint folder (root .safetensors files and
// the side files the loader reads) downloaded into the standard Hugging Face cache from a stand-in hub
// on 127.0.0.1 (no network): resumed after a cut, sha256-checked, served from the cache offline, and
// served by the real executable as `-m <folder>` serves the same folder.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HfError, planHfModel, resolveHfModel, type DownloadEvent, type HfResolveOptions } from "../src/hf/index.ts";
import { openHfFolder } from "../src/safetensors/model.ts";
import { StandInHub, commitOf, sha256, type HubFile } from "./hf-hub.ts";
import { FIXTURES, hasFixtures, ROOT } from "./paths.ts";
import { EXE } from "./exe.ts";
import { ensureBuilt, post, startServer } from "./server-helpers.ts";

const HF = join(FIXTURES, "families", "gpt_oss", "hf");
const hub = new StandInHub();
const dir = mkdtempSync(join(tmpdir(), "bloomery-hf-folder-"));
beforeAll(() => {
  hub.start();
  ensureBuilt();
}, 600000);
afterAll(() => {
  hub.stop();
  rmSync(dir, { recursive: true, force: true });
});
const FAST = { retries: 2, retryDelayMs: 1, progressIntervalMs: 0 };
let n = 0;
const freshCache = () => join(dir, `cache-${n++}`);
const opts = (cacheDir: string, events: DownloadEvent[] = [], more: Partial<HfResolveOptions> = {}): HfResolveOptions => ({ endpoint: hub.url, cacheDir, onProgress: (e) => events.push(e), download: FAST, ...more });

/** The fixture folder as a hub repository (the weights in LFS), with a README and a subfolder the loader does not read. */
function folderRepo(name: string, edit: (f: HubFile) => HubFile = (f) => f): string {
  const files: HubFile[] = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"].map((p) => ({
    path: p, content: new Uint8Array(readFileSync(join(HF, p))), lfs: p.endsWith(".safetensors"),
  }));
  files.push({ path: "README.md", content: new TextEncoder().encode("# a folder\n") });
  files.push({ path: "original/model.safetensors", content: new Uint8Array(1000), lfs: true });
  const commit = commitOf(`${name}-${Math.random()}`);
  hub.repos.set(name, { commit, files: files.map(edit) });
  return commit;
}

describe.skipIf(!hasFixtures)("-hf of a checkpoint folder (no GGUF in the repository)", () => {
  test("the folder's files into the cache's snapshot (not the README, not original/), resumed after a cut, loadable as -m <folder>", async () => {
    const commit = folderRepo("acme/tiny-oss", (f) => (f.path === "model.safetensors" ? { ...f, cut: { at: 100_000, times: 1, mode: "close" } } : f));
    const cache = freshCache();
    const plan = await planHfModel({ repo: "acme/tiny-oss" }, opts(cache));
    expect(plan.folder).toBe(true);
    expect(plan.files.map((f) => f.path)).toEqual(["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]);
    expect(plan.bytesTotal).toBe(plan.files.reduce((a, f) => a + statSync(join(HF, f.path)).size, 0));
    const events: DownloadEvent[] = [];
    const r = await resolveHfModel({ repo: "acme/tiny-oss" }, opts(cache, events));
    const snap = join(cache, "models--acme--tiny-oss", "snapshots", commit);
    expect(r.path).toBe(snap);
    expect(statSync(r.path).isDirectory()).toBe(true);
    expect(existsSync(join(snap, "README.md"))).toBe(false);
    expect(existsSync(join(snap, "original"))).toBe(false);
    expect(sha256(new Uint8Array(readFileSync(join(snap, "model.safetensors"))))).toBe(sha256(new Uint8Array(readFileSync(join(HF, "model.safetensors")))));
    // the cut download was resumed from where it stopped (a Range request)
    expect(hub.log.some((q) => q.path.endsWith("/model.safetensors") && q.range?.startsWith("bytes=100000-"))).toBe(true);
    const a = openHfFolder(r.path, { copies: false }), b = openHfFolder(HF, { copies: false });
    expect(a.tensors.size).toBe(b.tensors.size);
    // offline: the same folder from the cache, nothing downloaded
    const again = await resolveHfModel({ repo: "acme/tiny-oss" }, opts(cache, [], { offline: true }));
    expect(again.path).toBe(snap);
    expect(again.fromCache).toBe(true);
  });

  test("a bad checksum of a shard is refused; a tag on a folder repository is refused naming the fix", async () => {
    folderRepo("acme/badsum-oss", (f) => (f.path === "model.safetensors" ? { ...f, claimSha256: "0".repeat(64) } : f));
    const e = await resolveHfModel({ repo: "acme/badsum-oss" }, opts(freshCache())).then(() => undefined, (x: unknown) => x);
    expect(e).toBeInstanceOf(HfError);
    expect((e as HfError).code).toBe("E_DOWNLOAD_CHECKSUM");
    folderRepo("acme/tagged-oss");
    const t = await planHfModel({ repo: "acme/tagged-oss", tag: "Q4_K_M" }, opts(freshCache())).then(() => undefined, (x: unknown) => x);
    expect((t as HfError).code).toBe("E_HF_NO_MATCH");
    expect((t as HfError).message).toContain("is a safetensors checkpoint folder with no GGUF file");
  });

  test("--dry-run --json plans the folder's download: its files and bytes, then (cached) its architecture", async () => {
    folderRepo("acme/plan-oss");
    const cache = freshCache();
    const env = { ...process.env, HF_ENDPOINT: hub.url, HF_HUB_CACHE: cache, HF_TOKEN: "" };
    // (spawned, not spawnSync: the stand-in hub answers from this process's event loop)
    const run = async () => {
      const p = Bun.spawn([EXE, "-hf", "acme/plan-oss", "--dry-run", "--json"], { cwd: ROOT, env, stdout: "pipe", stderr: "pipe" });
      const killer = setTimeout(() => p.kill("SIGKILL"), 30000);
      const out = await new Response(p.stdout as ReadableStream<Uint8Array>).text();
      await p.exited;
      clearTimeout(killer);
      return JSON.parse(out.trim().split("\n").pop()!) as { model: { files: { path: string }[]; bytes_total: number; bytes_to_download: number; architecture: string | null } };
    };
    const size = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"].reduce((a, f) => a + statSync(join(HF, f)).size, 0);
    const before = await run();
    expect(before.model.files.map((f) => f.path)).toContain("model.safetensors");
    expect(before.model.bytes_total).toBe(size);
    expect(before.model.bytes_to_download).toBe(size);
    await resolveHfModel({ repo: "acme/plan-oss" }, opts(cache));
    const after = await run();
    expect(after.model.bytes_to_download).toBe(0);
    expect(after.model.architecture).toBe("gpt-oss");
  }, 120000);

  test("bloomery-serve -hf org/repo serves the folder as -m <folder> does (greedy, 8 tokens)", async () => {
    folderRepo("acme/serve-oss");
    const cache = freshCache();
    const a = await startServer(["-hf", "acme/serve-oss", "-np", "1", "-c", "256"], { env: { HF_ENDPOINT: hub.url, HF_HUB_CACHE: cache, HF_TOKEN: "" } });
    const b = await startServer(["-m", HF, "-np", "1", "-c", "256"]);
    try {
      const req = { prompt: "Hello world", n_predict: 8, temperature: 0, cache_prompt: false, return_tokens: true };
      const ra = await post(`${a.url}/completion`, req), rb = await post(`${b.url}/completion`, req);
      expect(ra.status).toBe(200);
      expect(ra.json.tokens).toEqual(rb.json.tokens);
      expect(existsSync(join(cache, "models--acme--serve-oss", "refs", "main"))).toBe(true);
    } finally {
      await a.stop();
      await b.stop();
    }
  }, 180000);
});
