// bloomery hf: one file from the hub into blobs/<oid>: bytes go to blobs/<oid>.incomplete (as
// huggingface_hub names it), a cut resumes with an HTTP Range request, the size and hash are
// checked (LFS sha256, else the git blob sha1) before the part becomes the blob. A mismatch is
// refused and the part kept. One process downloads a blob at a time (a pid lock under .locks/).
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { dirname } from "node:path";
import { CryptoHasher } from "bun";
import { HfError } from "./errors.ts";
import { errText, type HubClient } from "./api.ts";
import { ioError, type RepoCache } from "./cache.ts";
import type { RepoFile } from "./spec.ts";
import type { DownloadEvent } from "./events.ts";

export interface BlobDownloadOptions {
  onProgress?: (e: DownloadEvent) => void;
  signal?: AbortSignal;
  /** extra attempts after a cut connection, each resuming where the last stopped (default 3) */
  retries?: number;
  /** wait before the first retry, doubled each time (default 1000 ms) */
  retryDelayMs?: number;
  /** a connection that delivers nothing for this long counts as cut (default 60000 ms) */
  stallMs?: number;
  /** least time between two progress events of one file (default 200 ms) */
  progressIntervalMs?: number;
}

/** A cut that a retry may resume from (as opposed to a refusal). */
class CutError extends Error {}

/**
 * Download `file` of `repo` at `commit` into its blob unless the blob is already there.
 * Returns the number of bytes fetched over the network in this call.
 */
export async function downloadBlob(client: HubClient, rc: RepoCache, commit: string, file: RepoFile, opts: BlobDownloadOptions = {}): Promise<number> {
  const blob = rc.blobPath(file.oid);
  if (existsSync(blob)) return 0;
  const release = await acquireLock(rc.lockPath(file.oid), file, rc.repo, opts);
  try {
    if (existsSync(blob)) return 0; // another process finished it while we waited
    return await fetchIntoBlob(client, rc, commit, file, opts);
  } finally {
    release();
  }
}

async function fetchIntoBlob(client: HubClient, rc: RepoCache, commit: string, file: RepoFile, opts: BlobDownloadOptions): Promise<number> {
  const emit = opts.onProgress ?? (() => {});
  const repo = rc.repo;
  const part = rc.partPath(file.oid);
  const url = client.fileUrl(repo, commit, file.path);
  const retries = opts.retries ?? 3;
  let delay = opts.retryDelayMs ?? 1000;
  const interval = opts.progressIntervalMs ?? 200;
  try {
    mkdirSync(dirname(part), { recursive: true });
  } catch (e) {
    throw ioError(`cannot create ${dirname(part)}`, e);
  }

  let done = fileSize(part);
  if (done > file.size) {
    emit({ event: "download_warning", repo, file: file.path, message: `partial download ${part} is larger than the file (${done} > ${file.size} bytes); starting again` });
    done = 0;
  }
  let hasher = newHasher(file);
  if (done > 0) {
    emit({ event: "download_resume", repo, file: file.path, bytes_done: done, bytes_total: file.size });
    await hashPrefix(part, done, hasher, opts.signal);
  }
  let fh = await openPart(part, done === 0 ? "w" : "r+", done);
  let fetched = 0;
  emit({ event: "download_start", repo, file: file.path, bytes_done: done, bytes_total: file.size, resumed: done > 0 });
  const started = performance.now();
  const startDone = done;
  let lastEmit = 0;
  const progress = (force: boolean): void => {
    const now = performance.now();
    if (!force && now - lastEmit < interval) return;
    lastEmit = now;
    const secs = (now - started) / 1000;
    emit({ event: "download_progress", repo, file: file.path, bytes_done: done, bytes_total: file.size, bytes_per_s: secs > 0 ? Math.round((done - startDone) / secs) : 0 });
  };

  try {
    for (let attempt = 0; done < file.size; attempt++) {
      try {
        const got = await pullOnce(client, url, repo, file, done, fh, hasher, opts, (n) => {
          done += n;
          fetched += n;
          progress(false);
        });
        if (got === "restart") {
          emit({ event: "download_warning", repo, file: file.path, message: "the server ignored the resume request; starting the file again" });
          await fh.close();
          done = 0;
          hasher = newHasher(file);
          fh = await openPart(part, "w", 0);
          attempt--; // a restart is not a failed attempt
        }
      } catch (e) {
        if (!(e instanceof CutError)) throw e;
        if (opts.signal?.aborted) throw aborted(file, part);
        if (attempt >= retries) {
          throw new HfError("E_HF_NETWORK", `download of ${repo}/${file.path} was cut at ${done} of ${file.size} bytes (${e.message})`, `the part is kept at ${part}; run the same command again to resume`);
        }
        emit({ event: "download_warning", repo, file: file.path, message: `connection cut at ${done} of ${file.size} bytes (${e.message}); resuming in ${delay} ms` });
        await sleep(delay, opts.signal);
        if (opts.signal?.aborted) throw aborted(file, part);
        delay *= 2;
      }
    }
    await fh.sync();
  } finally {
    await fh.close().catch(() => {});
  }
  progress(true);

  const have = fileSize(part);
  if (have !== file.size) {
    throw new HfError("E_DOWNLOAD_SIZE", `${repo}/${file.path}: downloaded ${have} bytes, the hub lists ${file.size}`, `the part is kept at ${part}; delete it to download again`);
  }
  const digest = hasher.digest("hex");
  const want = file.sha256 ?? file.oid;
  if (digest !== want) {
    const kind = file.sha256 ? "sha256" : "git sha1";
    throw new HfError(
      "E_DOWNLOAD_CHECKSUM",
      `${repo}/${file.path}: ${kind} of the downloaded bytes is ${digest}, the hub lists ${want}; refused`,
      `the part is kept at ${part}; delete it to download the file again`,
    );
  }
  try {
    renameSync(part, rc.blobPath(file.oid));
  } catch (e) {
    throw ioError(`cannot move ${part} into place`, e);
  }
  return fetched;
}

/**
 * One GET of the rest of the file (a Range request when `from` > 0), appending to `fh`.
 * Resolves when the body ends; throws CutError for a connection problem worth a retry.
 */
async function pullOnce(
  client: HubClient,
  url: string,
  repo: string,
  file: RepoFile,
  from: number,
  fh: FileHandle,
  hasher: CryptoHasher,
  opts: BlobDownloadOptions,
  onBytes: (n: number) => void,
): Promise<"ok" | "restart"> {
  const stallMs = opts.stallMs ?? 60000;
  const ctl = new AbortController();
  const onAbort = (): void => ctl.abort();
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  let stall: ReturnType<typeof setTimeout> | undefined;
  const arm = (): void => {
    clearTimeout(stall);
    stall = setTimeout(() => ctl.abort(), stallMs);
  };
  try {
    arm();
    let res: Response;
    try {
      res = await fetch(url, { headers: client.headers(from > 0 ? { Range: `bytes=${from}-` } : {}), signal: ctl.signal, redirect: "follow" });
    } catch (e) {
      throw new CutError(opts.signal?.aborted ? "cancelled" : errText(e));
    }
    if (res.status === 416 || (!res.ok && res.status !== 206)) {
      const err = await client.refusal(res, repo, `download of ${repo}/${file.path}`);
      if (err.code === "E_HF_NETWORK") throw new CutError(err.message);
      throw err;
    }
    if (from > 0) {
      if (res.status === 200) {
        await res.body?.cancel().catch(() => {});
        return "restart";
      }
      const start = /^bytes (\d+)-/.exec(res.headers.get("content-range") ?? "");
      if (!start || Number(start[1]) !== from) {
        await res.body?.cancel().catch(() => {});
        return "restart";
      }
    }
    const len = res.headers.get("content-length");
    if (len !== null && /^\d+$/.test(len) && from + Number(len) !== file.size && !res.headers.get("content-encoding")) {
      await res.body?.cancel().catch(() => {});
      throw new HfError("E_DOWNLOAD_SIZE", `${repo}/${file.path}: the server sends ${from + Number(len)} bytes, the hub's listing says ${file.size}`, "the repository may have changed while downloading; run the command again");
    }
    if (!res.body) throw new CutError("empty response body");
    const reader = res.body.getReader();
    let pos = from;
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (e) {
        throw new CutError(opts.signal?.aborted ? "cancelled" : errText(e));
      }
      if (chunk.done) break;
      arm();
      let bytes = chunk.value;
      if (pos + bytes.length > file.size) {
        bytes = bytes.subarray(0, file.size - pos);
        await writeAll(fh, bytes, pos, file);
        hasher.update(bytes);
        onBytes(bytes.length);
        await reader.cancel().catch(() => {});
        throw new HfError("E_DOWNLOAD_SIZE", `${repo}/${file.path}: the server sent more than the ${file.size} bytes the hub lists; refused`, "the repository may have changed while downloading; run the command again");
      }
      await writeAll(fh, bytes, pos, file);
      hasher.update(bytes);
      pos += bytes.length;
      onBytes(bytes.length);
    }
    if (pos < file.size) throw new CutError(`the connection ended after ${pos} bytes`);
    return "ok";
  } finally {
    clearTimeout(stall);
    opts.signal?.removeEventListener("abort", onAbort);
  }
}

async function writeAll(fh: FileHandle, bytes: Uint8Array, pos: number, file: RepoFile): Promise<void> {
  try {
    let off = 0;
    while (off < bytes.length) {
      const { bytesWritten } = await fh.write(bytes, off, bytes.length - off, pos + off);
      off += bytesWritten;
    }
  } catch (e) {
    throw ioError(`cannot write the download of ${file.path}`, e);
  }
}

function newHasher(file: RepoFile): CryptoHasher {
  if (file.sha256) return new CryptoHasher("sha256");
  const h = new CryptoHasher("sha1");
  h.update(`blob ${file.size}\0`); // git's blob id: sha1 over this header and the content
  return h;
}

/** Feed the first `n` bytes of the part already on disk to the hasher (a resumed download). */
async function hashPrefix(part: string, n: number, hasher: CryptoHasher, signal: AbortSignal | undefined): Promise<void> {
  const fh = await open(part, "r");
  try {
    const buf = new Uint8Array(8 << 20);
    let pos = 0;
    while (pos < n) {
      if (signal?.aborted) throw new HfError("E_DOWNLOAD_ABORTED", `download cancelled while checking ${part}`);
      const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, n - pos), pos);
      if (bytesRead <= 0) break;
      hasher.update(buf.subarray(0, bytesRead));
      pos += bytesRead;
    }
  } finally {
    await fh.close();
  }
}

async function openPart(part: string, mode: "w" | "r+", keep: number): Promise<FileHandle> {
  try {
    const fh = await open(part, mode);
    if (mode === "r+") await fh.truncate(keep);
    return fh;
  } catch (e) {
    throw ioError(`cannot open ${part}`, e);
  }
}

function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

function aborted(file: RepoFile, part: string): HfError {
  return new HfError("E_DOWNLOAD_ABORTED", `download of ${file.path} cancelled`, `the part is kept at ${part}; run the command again to resume`);
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * Take the download lock of one blob: a file holding our pid, created exclusively. A lock
 * left by a process that no longer runs is taken over; a live owner is waited for.
 */
async function acquireLock(path: string, file: RepoFile, repo: string, opts: BlobDownloadOptions): Promise<() => void> {
  try {
    mkdirSync(dirname(path), { recursive: true });
  } catch (e) {
    throw ioError(`cannot create ${dirname(path)}`, e);
  }
  let told = false;
  for (;;) {
    try {
      writeFileSync(path, String(process.pid), { flag: "wx" });
      return () => {
        try {
          unlinkSync(path);
        } catch {
          // already gone
        }
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw ioError(`cannot create the lock ${path}`, e);
    }
    const owner = Number.parseInt(readText(path), 10);
    if (!Number.isSafeInteger(owner) || owner <= 0 || !alive(owner)) {
      try {
        unlinkSync(path);
      } catch {
        // another waiter removed it first
      }
      continue;
    }
    if (!told) {
      told = true;
      opts.onProgress?.({ event: "download_warning", repo, file: file.path, message: `process ${owner} is downloading ${file.path}; waiting for it` });
    }
    await sleep(500, opts.signal);
    if (opts.signal?.aborted) throw new HfError("E_DOWNLOAD_ABORTED", `cancelled while waiting for process ${owner} to download ${file.path}`);
  }
}

function readText(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
