// bloomery hf: `-hf owner/repo[:TAG]` -> local GGUF paths (or, for a repository with no GGUF, its checkpoint folder). Lists the repository (refs, then the
// tree at that commit), picks the files, reuses what the cache holds (a snapshot entry or a blob
// another tool downloaded), downloads the rest, links the snapshot and records refs/<revision>.
// Offline, or when the hub cannot be reached, the same choice is made from the cached snapshot.
import { existsSync, statSync } from "node:fs";
import { HfError } from "./errors.ts";
import { HubClient } from "./api.ts";
import { hubCacheDir, RepoCache } from "./cache.ts";
import { downloadBlob, type BlobDownloadOptions } from "./download.ts";
import { checkSpec, isModelGguf, selectFiles, type HfModelSpec, type RepoFile } from "./spec.ts";
import type { DownloadEvent } from "./events.ts";

export interface HfResolveOptions {
  /** never touch the network; use only what the cache holds (--offline, HF_HUB_OFFLINE) */
  offline?: boolean;
  /** access token (HF_TOKEN / --hf-token) */
  token?: string;
  /** hub base URL (HF_ENDPOINT); default https://huggingface.co */
  endpoint?: string;
  /** hub cache root; default hubCacheDir(process.env) */
  cacheDir?: string;
  onProgress?: (e: DownloadEvent) => void;
  signal?: AbortSignal;
  /** download tuning (retries after a cut, their delay, stall limit, progress interval) */
  download?: Omit<BlobDownloadOptions, "onProgress" | "signal">;
}

export interface HfPlanFile extends RepoFile {
  /** where the file is (or will be) in the snapshot */
  localPath: string;
  /** already on disk (snapshot entry or blob) */
  cached: boolean;
}

export interface HfPlan {
  /** what to load: the model file (the first part of a split set), or the snapshot folder of a checkpoint folder */
  path: string;
  /** a safetensors checkpoint folder (the repository has no GGUF) */
  folder: boolean;
  repo: string;
  revision: string;
  commit: string;
  /** the model files, first part of a split set first */
  files: HfPlanFile[];
  /** true when the choice was made from the cache (offline, or the hub unreachable) */
  fromCacheOnly: boolean;
  bytesTotal: number;
  bytesCached: number;
}

export interface HfResolved {
  /** what to load: the model, the first part of a split set, or a checkpoint folder's snapshot directory */
  path: string;
  /** every local file, in part order */
  files: string[];
  /** true when nothing was downloaded */
  fromCache: boolean;
  repo: string;
  commit: string;
  bytesDownloaded: number;
}

/** Decide which files `spec` means and which of them the cache already has; downloads nothing. */
export async function planHfModel(spec: HfModelSpec, opts: HfResolveOptions = {}): Promise<HfPlan> {
  return (await makePlan(spec, opts)).plan;
}

/** Resolve `spec` to local files, downloading what the cache lacks. */
export async function resolveHfModel(spec: HfModelSpec, opts: HfResolveOptions = {}): Promise<HfResolved> {
  const { plan, client, rc } = await makePlan(spec, opts);
  const emit = opts.onProgress ?? (() => {});
  let downloaded = 0;
  for (const f of plan.files) {
    if (f.cached) {
      if (!existsSync(f.localPath)) rc.linkSnapshot(plan.commit, f.path, f.oid);
      emit({ event: "download_done", repo: plan.repo, file: f.path, path: f.localPath, bytes_total: f.size >= 0 ? f.size : sizeOf(f.localPath), cached: true });
      continue;
    }
    if (!client) throw new HfError("E_OFFLINE_NOT_CACHED", `${plan.repo}/${f.path} is not in the cache`); // unreachable: cache plans hold only cached files
    const got = await downloadBlob(client, rc, plan.commit, f, { ...opts.download, onProgress: opts.onProgress, signal: opts.signal });
    downloaded += got;
    rc.linkSnapshot(plan.commit, f.path, f.oid);
    emit({ event: "download_done", repo: plan.repo, file: f.path, path: f.localPath, bytes_total: f.size, cached: got === 0 });
  }
  if (!plan.fromCacheOnly) rc.writeRef(plan.revision, plan.commit);
  return {
    path: plan.path,
    files: plan.files.map((f) => f.localPath),
    fromCache: downloaded === 0,
    repo: plan.repo,
    commit: plan.commit,
    bytesDownloaded: downloaded,
  };
}

async function makePlan(spec: HfModelSpec, opts: HfResolveOptions): Promise<{ plan: HfPlan; client: HubClient | null; rc: RepoCache }> {
  const s = checkSpec(spec);
  const cacheDir = opts.cacheDir ?? hubCacheDir();
  const rc = new RepoCache(cacheDir, s.repo);
  const emit = opts.onProgress ?? (() => {});
  if (opts.offline) return { plan: cachePlan(rc, s, s.revision, "offline mode"), client: null, rc };

  const client = new HubClient({ endpoint: opts.endpoint, token: opts.token, signal: opts.signal });
  let commit: string;
  let tree: RepoFile[];
  try {
    commit = await client.commit(s.repo, s.revision);
    tree = await client.tree(s.repo, commit);
  } catch (e) {
    if (!(e instanceof HfError) || e.code !== "E_HF_NETWORK") throw e;
    const plan = cachePlan(rc, s, s.revision, `the hub is unreachable (${e.message})`);
    emit({ event: "download_warning", repo: s.repo, message: `${e.message}; using the cached snapshot ${plan.commit.slice(0, 12)}` });
    return { plan, client: null, rc };
  }
  const chosen = selectFiles(tree, s, `${s.repo} (revision ${s.revision})`);
  const files = chosen.map((f): HfPlanFile => {
    const localPath = rc.snapshotPath(commit, f.path);
    return { ...f, localPath, cached: cachedCopy(rc, f, localPath) };
  });
  const plan = summarize(rc, s.repo, s.revision, commit, files, false);
  emit({ event: "download_plan", repo: s.repo, commit, files: files.map((f) => ({ path: f.path, size: f.size, cached: f.cached })), bytes_total: plan.bytesTotal, bytes_cached: plan.bytesCached });
  return { plan, client, rc };
}

/**
 * Is `f` already on disk, as the snapshot entry or as its blob? A copy whose size differs from
 * the hub's listing is refused rather than silently replaced.
 */
function cachedCopy(rc: RepoCache, f: RepoFile, localPath: string): boolean {
  for (const p of [localPath, rc.blobPath(f.oid)]) {
    if (!existsSync(p)) continue;
    const size = sizeOf(p);
    if (size !== f.size) {
      throw new HfError("E_DOWNLOAD_SIZE", `the cached copy ${p} of ${rc.repo}/${f.path} has ${size} bytes, the hub lists ${f.size}`, `delete ${p} to download it again`);
    }
    return true;
  }
  return false;
}

/** The plan from the cache alone: refs/<revision> -> snapshot -> the same file choice. */
function cachePlan(rc: RepoCache, s: HfModelSpec, revision: string, why: string): HfPlan {
  const next = why === "offline mode" ? "run once without --offline to download it" : "connect to the network and run the command again";
  if (!existsSync(rc.dir)) {
    throw new HfError("E_OFFLINE_NOT_CACHED", `${why}: ${s.repo} is not in the Hugging Face cache (${rc.dir} does not exist)`, next);
  }
  const commit = rc.readRef(revision);
  if (!commit) {
    throw new HfError("E_OFFLINE_NOT_CACHED", `${why}: the cache of ${s.repo} has no ref '${revision}' (${rc.dir}/refs/${revision})`, next);
  }
  const cached = rc.listSnapshot(commit);
  let chosen: RepoFile[];
  try {
    chosen = selectFiles(cached, s, `the cached snapshot ${commit.slice(0, 12)} of ${s.repo}`, "E_OFFLINE_NOT_CACHED");
  } catch (e) {
    if (e instanceof HfError) throw new HfError("E_OFFLINE_NOT_CACHED", `${why}: ${e.message}`, next);
    throw e;
  }
  const files = chosen.map((f): HfPlanFile => ({ ...f, localPath: rc.snapshotPath(commit, f.path), cached: true }));
  return summarize(rc, s.repo, revision, commit, files, true);
}

function summarize(rc: RepoCache, repo: string, revision: string, commit: string, files: HfPlanFile[], fromCacheOnly: boolean): HfPlan {
  const folder = !files.some((f) => isModelGguf(f.path));
  let total = 0;
  let cached = 0;
  for (const f of files) {
    const size = f.size >= 0 ? f.size : sizeOf(f.localPath);
    total += size;
    if (f.cached) cached += size;
  }
  return { path: folder ? rc.snapshotDir(commit) : files[0].localPath, folder, repo, revision, commit, files, fromCacheOnly, bytesTotal: total, bytesCached: cached };
}

function sizeOf(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return -1;
  }
}
