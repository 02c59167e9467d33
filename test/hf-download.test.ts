// Tests of `-hf` downloads against a stand-in hub on 127.0.0.1: the hub cache layout, resume
// after a cut (byte-identical), bad checksums refused with the part kept, split sets, gated
// repositories, offline and unreachable-hub fallback, and reuse of files other tools cached.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { HfError, resolveHfModel, planHfModel, listCachedRepos, type DownloadEvent, type HfResolveOptions, type HfModelSpec } from "../src/hf/index.ts";
import { StandInHub, bytes, commitOf, sha256, gitSha1, type HubFile } from "./hf-hub.ts";

const hub = new StandInHub();
const readBytes = (path: string): Uint8Array => new Uint8Array(readFileSync(path));
const FAST = { retries: 0, retryDelayMs: 1, progressIntervalMs: 0 };

beforeAll(() => {
  hub.start();
});
afterAll(() => hub.stop());

function freshCache(): string {
  return mkdtempSync(join(tmpdir(), "hf-cache-"));
}

function addRepo(name: string, files: HubFile[], extra: { token?: string; noRanges?: boolean } = {}): string {
  const commit = commitOf(`${name}-${Math.random()}`);
  hub.repos.set(name, { commit, files, ...extra });
  return commit;
}

function opts(cacheDir: string, events: DownloadEvent[] = [], more: Partial<HfResolveOptions> = {}): HfResolveOptions {
  return { endpoint: hub.url, cacheDir, onProgress: (e) => events.push(e), download: FAST, ...more };
}

async function refusal(p: Promise<unknown>): Promise<HfError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof HfError) return e;
    throw e;
  }
  throw new Error("expected a refusal");
}

function resolveCount(from: number): number {
  return hub.log.slice(from).filter((r) => r.path.includes("/resolve/")).length;
}

describe("download into the hub cache", () => {
  test("layout: blob by sha256, relative snapshot symlink, refs/main; then reused with no file request", async () => {
    const content = bytes(300_000, 1);
    const commit = addRepo("acme/tiny-GGUF", [
      { path: "tiny-Q4_K_M.gguf", content },
      { path: "tiny-Q8_0.gguf", content: bytes(1000, 2) },
      { path: "README.md", content: new TextEncoder().encode("# tiny\n") },
    ]);
    const cache = freshCache();
    const events: DownloadEvent[] = [];
    const r = await resolveHfModel({ repo: "acme/tiny-GGUF" }, opts(cache, events));
    const repoDir = join(cache, "models--acme--tiny-GGUF");
    expect(r.path).toBe(join(repoDir, "snapshots", commit, "tiny-Q4_K_M.gguf"));
    expect(r.files).toEqual([r.path]);
    expect(r.fromCache).toBe(false);
    expect(r.bytesDownloaded).toBe(content.length);
    expect(lstatSync(r.path).isSymbolicLink()).toBe(true);
    expect(readlinkSync(r.path)).toBe(`../../blobs/${sha256(content)}`);
    expect(readBytes(join(repoDir, "blobs", sha256(content)))).toEqual(content);
    expect(readFileSync(join(repoDir, "refs", "main"), "utf8")).toBe(commit);
    expect(existsSync(join(repoDir, "blobs", `${sha256(content)}.incomplete`))).toBe(false);
    const kinds = events.map((e) => e.event);
    expect(kinds[0]).toBe("download_plan");
    expect(kinds).toContain("download_start");
    expect(kinds).toContain("download_progress");
    expect(kinds.at(-1)).toBe("download_done");
    const last = events.at(-1);
    expect(last?.event === "download_done" && !last.cached && last.bytes_total === content.length).toBe(true);

    const before = hub.log.length;
    const again = await resolveHfModel({ repo: "acme/tiny-GGUF", tag: "q4_k_m" }, opts(cache));
    expect(again.path).toBe(r.path);
    expect(again.fromCache).toBe(true);
    expect(resolveCount(before)).toBe(0);
    expect(listCachedRepos(cache).map((x) => x.repo)).toEqual(["acme/tiny-GGUF"]);
  });

  test("a file in a subfolder links back to the blob; a plain git file is checked by its git sha1", async () => {
    const gguf = bytes(5000, 3);
    const plain = bytes(777, 4);
    const commit = addRepo("acme/nested", [
      { path: "Q6_K/deep/m-Q6_K.gguf", content: gguf },
      { path: "small-F16.gguf", content: plain, lfs: false },
    ]);
    const cache = freshCache();
    const a = await resolveHfModel({ repo: "acme/nested", tag: "Q6_K" }, opts(cache));
    expect(readlinkSync(a.path)).toBe(`../../../../blobs/${sha256(gguf)}`);
    expect(readBytes(a.path)).toEqual(gguf);
    const b = await resolveHfModel({ repo: "acme/nested", file: "small-F16.gguf" }, opts(cache));
    expect(readlinkSync(b.path)).toBe(`../../blobs/${gitSha1(plain)}`);
    expect(b.path.includes(commit)).toBe(true);
  });

  test("the tree listing is followed across pages", async () => {
    hub.pageSize = 2;
    try {
      addRepo("acme/paged", [
        { path: "a.txt", content: bytes(10, 5), lfs: false }, { path: "b.txt", content: bytes(10, 6), lfs: false },
        { path: "c.txt", content: bytes(10, 7), lfs: false }, { path: "z-Q4_K_M.gguf", content: bytes(100, 8) },
      ]);
      const r = await resolveHfModel({ repo: "acme/paged" }, opts(freshCache()));
      expect(r.path.endsWith("z-Q4_K_M.gguf")).toBe(true);
    } finally {
      hub.pageSize = 0;
    }
  });
});

describe("resume", () => {
  test("a cut keeps the part; the next run resumes with a Range request and the result is byte-identical", async () => {
    const content = bytes(1_000_000, 11);
    const file: HubFile = { path: "cut-Q4_K_M.gguf", content, cut: { at: 400_000, times: 1, mode: "close" } };
    addRepo("acme/cut", [file]);
    const cache = freshCache();
    const e = await refusal(resolveHfModel({ repo: "acme/cut" }, opts(cache)));
    expect(e.code).toBe("E_HF_NETWORK");
    expect(e.message).toContain("run the same command again to resume");
    const part = join(cache, "models--acme--cut", "blobs", `${sha256(content)}.incomplete`);
    expect(statSync(part).size).toBe(400_000);
    expect(existsSync(join(cache, "models--acme--cut", "refs", "main"))).toBe(false);

    const before = hub.log.length;
    const events: DownloadEvent[] = [];
    const r = await resolveHfModel({ repo: "acme/cut" }, opts(cache, events));
    const gets = hub.log.slice(before).filter((x) => x.path.includes("/resolve/"));
    expect(gets.map((g) => g.range)).toEqual(["bytes=400000-"]);
    expect(readBytes(r.path)).toEqual(content);
    expect(existsSync(part)).toBe(false);
    expect(r.bytesDownloaded).toBe(600_000);
    expect(events.some((x) => x.event === "download_resume" && x.bytes_done === 400_000)).toBe(true);
  });

  test("a reset connection is retried within one run, resuming where it stopped", async () => {
    const content = bytes(800_000, 12);
    addRepo("acme/reset", [{ path: "r-Q4_K_M.gguf", content, cut: { at: 250_000, times: 2, mode: "reset" } }]);
    const cache = freshCache();
    const before = hub.log.length;
    const events: DownloadEvent[] = [];
    const r = await resolveHfModel({ repo: "acme/reset" }, opts(cache, events, { download: { ...FAST, retries: 3 } }));
    expect(readBytes(r.path)).toEqual(content);
    const ranges = hub.log.slice(before).filter((x) => !x.path.startsWith("/api/")).map((x) => `${x.path.startsWith("/cdn/") ? "cdn" : "hub"} ${x.range}`);
    // the hub redirects twice to the CDN stand-in, which resets after 250000 bytes each time
    expect(ranges).toEqual(["hub null", "cdn null", "hub bytes=250000-", "cdn bytes=250000-", "hub bytes=500000-"]);
    expect(events.filter((x) => x.event === "download_warning").length).toBe(2);
  });

  test("a server that ignores Range starts the file again and still ends byte-identical", async () => {
    const content = bytes(500_000, 13);
    addRepo("acme/norange", [{ path: "n-Q4_K_M.gguf", content, cut: { at: 100_000, times: 1, mode: "close" } }], { noRanges: true });
    const cache = freshCache();
    expect((await refusal(resolveHfModel({ repo: "acme/norange" }, opts(cache)))).code).toBe("E_HF_NETWORK");
    const events: DownloadEvent[] = [];
    const r = await resolveHfModel({ repo: "acme/norange" }, opts(cache, events));
    expect(readBytes(r.path)).toEqual(content);
    expect(events.some((x) => x.event === "download_warning" && x.message.includes("ignored the resume request"))).toBe(true);
  });
});

describe("checks", () => {
  test("a bad checksum is refused, the part kept and nothing linked", async () => {
    const content = bytes(200_000, 21);
    const claimed = sha256("something else");
    const commit = addRepo("acme/badsum", [{ path: "b-Q4_K_M.gguf", content, claimSha256: claimed }]);
    const cache = freshCache();
    const e = await refusal(resolveHfModel({ repo: "acme/badsum" }, opts(cache)));
    expect(e.code).toBe("E_DOWNLOAD_CHECKSUM");
    expect(e.message).toContain(sha256(content));
    expect(e.message).toContain(claimed);
    const repoDir = join(cache, "models--acme--badsum");
    expect(statSync(join(repoDir, "blobs", `${claimed}.incomplete`)).size).toBe(content.length);
    expect(existsSync(join(repoDir, "blobs", claimed))).toBe(false);
    expect(existsSync(join(repoDir, "snapshots", commit, "b-Q4_K_M.gguf"))).toBe(false);
    expect(existsSync(join(repoDir, "refs", "main"))).toBe(false);
    // the kept part is checked again on the next run and still refused, without fetching it again
    const before = hub.log.length;
    expect((await refusal(resolveHfModel({ repo: "acme/badsum" }, opts(cache)))).code).toBe("E_DOWNLOAD_CHECKSUM");
    expect(resolveCount(before)).toBe(0);
  });

  test("a cached copy whose size disagrees with the hub is refused, naming it", async () => {
    const content = bytes(1000, 22);
    const commit = addRepo("acme/short", [{ path: "s-Q4_K_M.gguf", content }]);
    const cache = freshCache();
    const dir = join(cache, "models--acme--short", "snapshots", commit);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "s-Q4_K_M.gguf"), content.subarray(0, 10));
    const e = await refusal(resolveHfModel({ repo: "acme/short" }, opts(cache)));
    expect(e.code).toBe("E_DOWNLOAD_SIZE");
    expect(e.message).toContain(join(dir, "s-Q4_K_M.gguf"));
  });

  test("cancelling keeps the part", async () => {
    const content = bytes(600_000, 23);
    addRepo("acme/cancel", [{ path: "c-Q4_K_M.gguf", content, cut: { at: 300_000, times: 1, mode: "close" } }]);
    const cache = freshCache();
    const ctl = new AbortController();
    const p = resolveHfModel({ repo: "acme/cancel" }, opts(cache, [], {
      signal: ctl.signal,
      download: { ...FAST, retries: 5, retryDelayMs: 5000 },
      onProgress: (ev) => {
        if (ev.event === "download_warning") ctl.abort();
      },
    }));
    const e = await refusal(p);
    expect(e.code).toBe("E_DOWNLOAD_ABORTED");
    expect(statSync(join(cache, "models--acme--cancel", "blobs", `${sha256(content)}.incomplete`)).size).toBe(300_000);
  });
});

describe("split sets and tags", () => {
  test("every part of a split set is downloaded, first part first", async () => {
    const parts = [bytes(70_000, 31), bytes(70_000, 32), bytes(12_345, 33)];
    addRepo("acme/split", [
      ...parts.map((content, i) => ({ path: `Q8_0/big-Q8_0-0000${i + 1}-of-00003.gguf`, content })),
      { path: "big-Q4_K_M.gguf", content: bytes(10, 34) },
      { path: "mmproj-big-F16.gguf", content: bytes(10, 35) },
    ]);
    const cache = freshCache();
    const r = await resolveHfModel({ repo: "acme/split", tag: "q8_0" }, opts(cache));
    expect(r.files.length).toBe(3);
    expect(r.path).toBe(r.files[0]);
    expect(r.files.map((p) => p.slice(p.lastIndexOf("/") + 1))).toEqual(["big-Q8_0-00001-of-00003.gguf", "big-Q8_0-00002-of-00003.gguf", "big-Q8_0-00003-of-00003.gguf"]);
    r.files.forEach((p, i) => expect(readBytes(p)).toEqual(parts[i]));
  });

  test("a tag nothing matches is refused with the tags there are", async () => {
    addRepo("acme/tags", [{ path: "t-Q4_K_M.gguf", content: bytes(10, 36) }, { path: "t-Q8_0.gguf", content: bytes(10, 37) }]);
    const e = await refusal(resolveHfModel({ repo: "acme/tags", tag: "Q2_K" }, opts(freshCache())));
    expect(e.code).toBe("E_HF_NO_MATCH");
    expect(e.message).toContain("Q4_K_M, Q8_0");
  });

  test("planHfModel says what would be fetched and downloads nothing", async () => {
    addRepo("acme/plan", [{ path: "p-Q4_K_M.gguf", content: bytes(4321, 38) }]);
    const before = hub.log.length;
    const plan = await planHfModel({ repo: "acme/plan" }, opts(freshCache()));
    expect(plan.files.map((f) => [f.path, f.size, f.cached])).toEqual([["p-Q4_K_M.gguf", 4321, false]]);
    expect(plan.bytesTotal - plan.bytesCached).toBe(4321);
    expect(resolveCount(before)).toBe(0);
  });
});

describe("access", () => {
  test("a gated repository needs the token; with it, every request carries it", async () => {
    const content = bytes(3000, 41);
    addRepo("acme/gated", [{ path: "g-Q4_K_M.gguf", content }], { token: "hf_secret123" });
    const cache = freshCache();
    const e = await refusal(resolveHfModel({ repo: "acme/gated" }, opts(cache)));
    expect(e.code).toBe("E_HF_AUTH");
    expect(e.message).toContain("gated");
    expect(e.message).toContain("HF_TOKEN");
    const wrong = await refusal(resolveHfModel({ repo: "acme/gated" }, opts(cache, [], { token: "hf_wrong" })));
    expect(wrong.code).toBe("E_HF_AUTH");
    const before = hub.log.length;
    const r = await resolveHfModel({ repo: "acme/gated" }, opts(cache, [], { token: "hf_secret123" }));
    expect(readBytes(r.path)).toEqual(content);
    expect(hub.log.slice(before).every((x) => x.auth === "Bearer hf_secret123")).toBe(true);
  });

  test("the token is not passed on to the host a file download redirects to", async () => {
    const content = bytes(50_000, 42);
    addRepo("acme/gated-cdn", [{ path: "g-Q4_K_M.gguf", content, cut: { at: 10_000, times: 1, mode: "reset" } }], { token: "hf_secret456" });
    const before = hub.log.length;
    const r = await resolveHfModel({ repo: "acme/gated-cdn" }, opts(freshCache(), [], { token: "hf_secret456", download: { ...FAST, retries: 1 } }));
    expect(readBytes(r.path)).toEqual(content);
    const seen = hub.log.slice(before);
    expect(seen.filter((x) => x.path.startsWith("/cdn/")).map((x) => x.auth)).toEqual([null]);
    expect(seen.filter((x) => !x.path.startsWith("/cdn/")).every((x) => x.auth === "Bearer hf_secret456")).toBe(true);
  });

  test("an unknown repository is E_HF_NOT_FOUND", async () => {
    const e = await refusal(resolveHfModel({ repo: "acme/nope" }, opts(freshCache())));
    expect(e.code).toBe("E_HF_NOT_FOUND");
    expect(e.message).toContain("acme/nope");
  });
});

describe("offline and the cache of other tools", () => {
  /** Write the hub layout by hand, as huggingface_hub or llama.cpp leaves it. */
  function otherToolCache(repo: string, commit: string, path: string, content: Uint8Array): string {
    const cache = freshCache();
    const dir = join(cache, `models--${repo.replace("/", "--")}`);
    const oid = sha256(content);
    mkdirSync(join(dir, "blobs"), { recursive: true });
    writeFileSync(join(dir, "blobs", oid), content);
    mkdirSync(join(dir, "refs"), { recursive: true });
    writeFileSync(join(dir, "refs", "main"), commit);
    const snap = join(dir, "snapshots", commit);
    mkdirSync(snap, { recursive: true });
    symlinkSync(`../../blobs/${oid}`, join(snap, path));
    return cache;
  }

  test("offline uses the cache with no request at all", async () => {
    const content = bytes(2048, 51);
    const commit = commitOf("other-tool");
    const cache = otherToolCache("other/model-GGUF", commit, "model-Q4_K_M.gguf", content);
    const before = hub.log.length;
    const r = await resolveHfModel({ repo: "other/model-GGUF" }, opts(cache, [], { offline: true }));
    expect(hub.log.length).toBe(before);
    expect(r.fromCache).toBe(true);
    expect(r.path).toBe(join(cache, "models--other--model-GGUF", "snapshots", commit, "model-Q4_K_M.gguf"));
    expect(readBytes(r.path)).toEqual(content);
  });

  test("online, a file another tool cached is reused without a file request", async () => {
    const content = bytes(4096, 52);
    const commit = addRepo("other/online", [{ path: "m-Q4_K_M.gguf", content }]);
    const cache = otherToolCache("other/online", commit, "m-Q4_K_M.gguf", content);
    const before = hub.log.length;
    const r = await resolveHfModel({ repo: "other/online" }, opts(cache));
    expect(r.fromCache).toBe(true);
    expect(resolveCount(before)).toBe(0);
  });

  test("a blob cached under an older commit is linked into the new snapshot, not fetched", async () => {
    const content = bytes(4096, 53);
    const cache = otherToolCache("other/moved", commitOf("old"), "m-Q4_K_M.gguf", content);
    const commit = addRepo("other/moved", [{ path: "m-Q4_K_M.gguf", content }]);
    const before = hub.log.length;
    const r = await resolveHfModel({ repo: "other/moved" }, opts(cache));
    expect(resolveCount(before)).toBe(0);
    expect(r.path).toContain(commit);
    expect(readlinkSync(r.path)).toBe(`../../blobs/${sha256(content)}`);
    expect(readFileSync(join(cache, "models--other--moved", "refs", "main"), "utf8")).toBe(commit);
  });

  test("offline with nothing cached names what is missing", async () => {
    const e = await refusal(resolveHfModel({ repo: "acme/never" }, opts(freshCache(), [], { offline: true })));
    expect(e.code).toBe("E_OFFLINE_NOT_CACHED");
    expect(e.message).toContain("acme/never");
    expect(e.message).toContain("without --offline");
  });

  test("offline with a split set partly cached names the missing part", async () => {
    const commit = commitOf("partial-split");
    const cache = otherToolCache("other/split", commit, "s-Q4_K_M-00001-of-00002.gguf", bytes(100, 54));
    const e = await refusal(resolveHfModel({ repo: "other/split" }, opts(cache, [], { offline: true })));
    expect(e.code).toBe("E_OFFLINE_NOT_CACHED");
    expect(e.message).toContain("s-Q4_K_M-00002-of-00002.gguf");
  });

  test("an unreachable hub falls back to the cache with a warning, or refuses when nothing is cached", async () => {
    const content = bytes(1500, 55);
    const cache = otherToolCache("other/down", commitOf("down"), "d-Q4_K_M.gguf", content);
    const dead = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    const deadUrl = `http://127.0.0.1:${dead.port}`;
    dead.stop(true);
    const events: DownloadEvent[] = [];
    const spec: HfModelSpec = { repo: "other/down" };
    const r = await resolveHfModel(spec, { ...opts(cache, events), endpoint: deadUrl });
    expect(r.fromCache).toBe(true);
    expect(events.some((e) => e.event === "download_warning" && e.message.includes("cannot reach"))).toBe(true);
    const e = await refusal(resolveHfModel({ repo: "other/absent" }, { ...opts(freshCache()), endpoint: deadUrl }));
    expect(e.code).toBe("E_OFFLINE_NOT_CACHED");
    expect(e.message).toContain("other/absent");
  });

  test("a download lock left by a dead process is taken over", async () => {
    const content = bytes(1000, 56);
    addRepo("acme/lock", [{ path: "l-Q4_K_M.gguf", content }]);
    const cache = freshCache();
    const p = Bun.spawnSync(["true"]);
    const deadPid = p.pid;
    const lockDir = join(cache, ".locks", "models--acme--lock");
    mkdirSync(lockDir, { recursive: true });
    writeFileSync(join(lockDir, `${sha256(content)}.bloomery-pid`), String(deadPid));
    const r = await resolveHfModel({ repo: "acme/lock" }, opts(cache));
    expect(readBytes(r.path)).toEqual(content);
    expect(existsSync(join(lockDir, `${sha256(content)}.bloomery-pid`))).toBe(false);
  });
});
