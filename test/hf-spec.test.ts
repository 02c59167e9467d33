// Tests of the `-hf` spec rules: repo ids, quant-tag matching, file choice (companions skipped,
// split sets whole), cache-root and environment precedence, Link paging, progress output.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import {
  parseHfRepo, selectFiles, pathHasTag, isModelGguf, splitInfo, fileTag, hubCacheDir, hfOptionsFromEnv, HfError,
  jsonProgress, barProgress, repoFolderName, checkSpec, type RepoFile,
} from "../src/hf/index.ts";
import { nextLink } from "../src/hf/api.ts";
import { folderRepoName } from "../src/hf/cache.ts";

const f = (path: string, size = 10): RepoFile => ({ path, size, oid: "a".repeat(64), sha256: "a".repeat(64) });

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    if (e instanceof HfError) return e.code;
    throw e;
  }
  return "none";
}

describe("parseHfRepo", () => {
  test("repo and optional tag", () => {
    expect(parseHfRepo("unsloth/Qwen3-30B-A3B-GGUF")).toEqual({ repo: "unsloth/Qwen3-30B-A3B-GGUF" });
    expect(parseHfRepo("unsloth/Qwen3-30B-A3B-GGUF:q4_k_m")).toEqual({ repo: "unsloth/Qwen3-30B-A3B-GGUF", tag: "q4_k_m" });
    expect(parseHfRepo("ggml-org/models:UD-Q4_K_XL")).toEqual({ repo: "ggml-org/models", tag: "UD-Q4_K_XL" });
    expect(parseHfRepo("a_b/c.d:")).toEqual({ repo: "a_b/c.d" });
  });
  test("malformed specs are refused with E_HF_BAD_SPEC", () => {
    for (const bad of ["model", "a/b/c", "/b", "a/", "a//b", "a/-b", "a/b-", "a/b..c", "a/b:c:d", "a/b:c d", "a/b:../x", "a b/c"]) {
      expect(codeOf(() => parseHfRepo(bad))).toBe("E_HF_BAD_SPEC");
    }
  });
  test("checkSpec refuses paths that leave the repository and bad revisions", () => {
    expect(codeOf(() => checkSpec({ repo: "a/b", file: "../x.gguf" }))).toBe("E_HF_BAD_SPEC");
    expect(codeOf(() => checkSpec({ repo: "a/b", file: "/etc/passwd" }))).toBe("E_HF_BAD_SPEC");
    expect(codeOf(() => checkSpec({ repo: "a/b", file: "x//y.gguf" }))).toBe("E_HF_BAD_SPEC");
    expect(codeOf(() => checkSpec({ repo: "a/b", revision: "../main" }))).toBe("E_HF_BAD_SPEC");
    expect(checkSpec({ repo: "a/b" }).revision).toBe("main");
  });
});

describe("tag matching", () => {
  test("at separator boundaries, ignoring case", () => {
    expect(pathHasTag("Qwen3-30B-A3B-Q4_K_M.gguf", "q4_k_m")).toBe(true);
    expect(pathHasTag("model.Q8_0.gguf", "Q8_0")).toBe(true);
    expect(pathHasTag("Q8_0/model-Q8_0-00001-of-00002.gguf", "q8_0")).toBe(true);
    expect(pathHasTag("BF16/model-00001-of-00002.gguf", "bf16")).toBe(true);
    expect(pathHasTag("model-IQ4_XS.gguf", "Q4_XS")).toBe(false); // IQ4_XS is another quant
    expect(pathHasTag("model-Q4_K_M.gguf", "Q4_K")).toBe(false); // Q4_K is a prefix, not the tag
    expect(pathHasTag("model-Q4_K_M.gguf", "K_M")).toBe(false);
    expect(pathHasTag("model-UD-Q4_K_XL.gguf", "Q4_K_XL")).toBe(true);
    expect(pathHasTag("model-Q4_K_Mx.gguf", "Q4_K_M")).toBe(false);
  });
  test("companion files are not models", () => {
    expect(isModelGguf("mmproj-model-f16.gguf")).toBe(false);
    expect(isModelGguf("imatrix.gguf")).toBe(false);
    expect(isModelGguf("model-draft-Q4_K_M.gguf")).toBe(false);
    expect(isModelGguf("mtp-model-Q8_0.gguf")).toBe(false);
    expect(isModelGguf("model-Q4_K_M.gguf")).toBe(true);
    expect(isModelGguf("README.md")).toBe(false);
  });
  test("split info and file tags", () => {
    expect(splitInfo("x/M-Q4_K_M-00002-of-00005.gguf")).toEqual({ prefix: "x/M-Q4_K_M", index: 2, count: 5 });
    expect(splitInfo("M-Q4_K_M.gguf")).toEqual({ prefix: "M-Q4_K_M", index: 1, count: 1 });
    expect(fileTag("x/M-q4_k_m-00001-of-00002.gguf")).toBe("Q4_K_M");
    expect(fileTag("model.Q8_0.gguf")).toBe("Q8_0");
  });
});

describe("selectFiles", () => {
  const repo = [
    f("README.md"), f("mmproj-M-F16.gguf"), f("M-Q4_K_M-imatrix.gguf"), f("M-draft-Q4_K_M.gguf"),
    f("M-IQ4_XS.gguf"), f("M-Q8_0.gguf"), f("M-Q4_K_M.gguf"),
    f("BF16/M-BF16-00002-of-00003.gguf"), f("BF16/M-BF16-00001-of-00003.gguf"), f("BF16/M-BF16-00003-of-00003.gguf"),
  ];
  test("default tag is Q4_K_M, skipping companions", () => {
    expect(selectFiles(repo, { repo: "o/r" }).map((x) => x.path)).toEqual(["M-Q4_K_M.gguf"]);
  });
  test("then Q8_0, then the first model", () => {
    expect(selectFiles(repo.filter((x) => x.path !== "M-Q4_K_M.gguf"), { repo: "o/r" }).map((x) => x.path)).toEqual(["M-Q8_0.gguf"]);
    expect(selectFiles([f("a-F16.gguf"), f("b-Q6_K.gguf")], { repo: "o/r" }).map((x) => x.path)).toEqual(["a-F16.gguf"]);
  });
  test("a tag picks its file, case-insensitive", () => {
    expect(selectFiles(repo, { repo: "o/r", tag: "iq4_xs" }).map((x) => x.path)).toEqual(["M-IQ4_XS.gguf"]);
  });
  test("a split set comes whole, first part first", () => {
    expect(selectFiles(repo, { repo: "o/r", tag: "bf16" }).map((x) => x.path)).toEqual([
      "BF16/M-BF16-00001-of-00003.gguf", "BF16/M-BF16-00002-of-00003.gguf", "BF16/M-BF16-00003-of-00003.gguf",
    ]);
  });
  test("--hf-file picks exactly; a later part still brings the whole set", () => {
    expect(selectFiles(repo, { repo: "o/r", file: "M-Q8_0.gguf", tag: "Q4_K_M" }).map((x) => x.path)).toEqual(["M-Q8_0.gguf"]);
    expect(selectFiles(repo, { repo: "o/r", file: "BF16/M-BF16-00003-of-00003.gguf" })[0].path).toBe("BF16/M-BF16-00001-of-00003.gguf");
  });
  test("a split set with a part missing is refused, naming the part", () => {
    const broken = repo.filter((x) => !x.path.includes("00002-of"));
    expect(() => selectFiles(broken, { repo: "o/r", tag: "BF16" })).toThrow(/M-BF16-00002-of-00003\.gguf/);
    expect(codeOf(() => selectFiles(broken, { repo: "o/r", tag: "BF16" }))).toBe("E_HF_NOT_FOUND");
  });
  test("no match names the tags there are", () => {
    expect(codeOf(() => selectFiles(repo, { repo: "o/r", tag: "Q2_K" }))).toBe("E_HF_NO_MATCH");
    expect(() => selectFiles(repo, { repo: "o/r", tag: "Q2_K" }, "o/r")).toThrow(/available quant tags: .*Q4_K_M.*Q8_0/);
    expect(codeOf(() => selectFiles([f("README.md")], { repo: "o/r" }))).toBe("E_HF_NO_MATCH");
    expect(codeOf(() => selectFiles(repo, { repo: "o/r", file: "nope.gguf" }))).toBe("E_HF_NOT_FOUND");
  });
});

describe("cache root and environment", () => {
  test("LLAMA_CACHE first, then the hub variables, then HOME", () => {
    const all = { LLAMA_CACHE: "/l", HF_HUB_CACHE: "/h", HUGGINGFACE_HUB_CACHE: "/g", HF_HOME: "/hh", XDG_CACHE_HOME: "/x", HOME: "/home/u" };
    expect(hubCacheDir(all)).toBe("/l");
    expect(hubCacheDir({ ...all, LLAMA_CACHE: "" })).toBe("/h");
    expect(hubCacheDir({ ...all, LLAMA_CACHE: undefined, HF_HUB_CACHE: undefined })).toBe("/g");
    expect(hubCacheDir({ HF_HOME: "/hh", XDG_CACHE_HOME: "/x", HOME: "/home/u" })).toBe("/hh/hub");
    expect(hubCacheDir({ XDG_CACHE_HOME: "/x", HOME: "/home/u" })).toBe("/x/huggingface/hub");
    expect(hubCacheDir({ HOME: "/home/u" })).toBe("/home/u/.cache/huggingface/hub");
  });
  test("folder names", () => {
    expect(repoFolderName("unsloth/Qwen3-GGUF")).toBe("models--unsloth--Qwen3-GGUF");
    expect(folderRepoName("models--unsloth--Qwen3-GGUF")).toBe("unsloth/Qwen3-GGUF");
    expect(folderRepoName("datasets--a--b")).toBe("");
  });
  test("endpoint, token and offline from the environment", () => {
    const home = mkdtempSync(join(tmpdir(), "hf-env-"));
    expect(hfOptionsFromEnv({ HOME: home })).toEqual({ endpoint: "https://huggingface.co", token: "", offline: false, cacheDir: join(home, ".cache/huggingface/hub") });
    const e = hfOptionsFromEnv({ HOME: home, HF_ENDPOINT: "http://mirror", MODEL_ENDPOINT: "http://model", HF_TOKEN: " hf_abc ", HF_HUB_OFFLINE: "1" });
    expect(e.endpoint).toBe("http://model");
    expect(e.token).toBe("hf_abc");
    expect(e.offline).toBe(true);
    mkdirSync(join(home, ".cache/huggingface"), { recursive: true });
    writeFileSync(join(home, ".cache/huggingface/token"), "hf_fromfile\n");
    expect(hfOptionsFromEnv({ HOME: home }).token).toBe("hf_fromfile");
    expect(hfOptionsFromEnv({ HOME: home, HF_TOKEN: "hf_env" }).token).toBe("hf_env");
  });
});

describe("helpers", () => {
  test("Link rel=next stays on the hub's origin", () => {
    expect(nextLink('<https://hf.co/api/models/a/b/tree/c?cursor=xyz>; rel="next"', "https://hf.co/api/models/a/b/tree/c")).toBe("https://hf.co/api/models/a/b/tree/c?cursor=xyz");
    expect(nextLink("</api/x?cursor=2>; rel=next", "http://127.0.0.1:9/api/x")).toBe("http://127.0.0.1:9/api/x?cursor=2");
    expect(nextLink('<https://evil.example/x>; rel="next"', "https://hf.co/api/x")).toBeNull();
    expect(nextLink(null, "https://hf.co/")).toBeNull();
  });
  test("JSON progress is one object a line; the bar redraws one line", () => {
    let out = "";
    const sink = { write: (s: string) => (out += s) };
    const j = jsonProgress(sink);
    j({ event: "download_progress", repo: "o/r", file: "m.gguf", bytes_done: 5, bytes_total: 10, bytes_per_s: 1 });
    j({ event: "download_done", repo: "o/r", file: "m.gguf", path: "/p", bytes_total: 10, cached: false });
    const lines = out.trim().split("\n").map((l) => JSON.parse(l));
    expect(lines.map((l) => l.event)).toEqual(["download_progress", "download_done"]);
    out = "";
    const b = barProgress(sink, 80);
    b({ event: "download_progress", repo: "o/r", file: "m.gguf", bytes_done: 512, bytes_total: 1024, bytes_per_s: 1024 });
    expect(out.startsWith("\rm.gguf [")).toBe(true);
    expect(out).toContain(" 50%");
    b({ event: "download_done", repo: "o/r", file: "m.gguf", path: "/p", bytes_total: 1024, cached: false });
    expect(out).toContain("\r\x1b[Kdownloaded m.gguf (1.0 KiB)\n");
  });
});
