// bloomery hf: the Hugging Face hub cache on disk, shared with huggingface_hub and llama.cpp:
// <cache>/models--owner--name/{blobs/<oid>, refs/<revision>, snapshots/<commit>/<path>}, where
// snapshot entries are relative symlinks into blobs/ (a plain file where symlinks fail).
// Cache root, as llama.cpp's common/hf-cache.cpp chooses it: LLAMA_CACHE, HF_HUB_CACHE,
// HUGGINGFACE_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync, copyFileSync, unlinkSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { homedir } from "node:os";
import { HfError } from "./errors.ts";
import { checkRepoPath, type RepoFile } from "./spec.ts";

export type Env = Record<string, string | undefined>;

const COMMIT_RE = /^[0-9a-f]{40}$/;

/** The hub cache root the environment selects (see the header for the order). */
export function hubCacheDir(env: Env = process.env): string {
  const pick = (name: string): string | undefined => {
    const v = env[name];
    return v !== undefined && v !== "" ? v : undefined;
  };
  const direct = pick("LLAMA_CACHE") ?? pick("HF_HUB_CACHE") ?? pick("HUGGINGFACE_HUB_CACHE");
  if (direct) return direct;
  const hfHome = pick("HF_HOME");
  if (hfHome) return join(hfHome, "hub");
  const xdg = pick("XDG_CACHE_HOME");
  if (xdg) return join(xdg, "huggingface", "hub");
  const home = pick("HOME") ?? homedir();
  if (!home) throw new HfError("E_DOWNLOAD_IO", "cannot find the Hugging Face cache: HOME is not set", "set HF_HUB_CACHE to a writable directory");
  return join(home, ".cache", "huggingface", "hub");
}

/** "owner/name" -> "models--owner--name" (the hub's folder name for a model repository). */
export function repoFolderName(repo: string): string {
  return `models--${repo.replaceAll("/", "--")}`;
}

/** "models--owner--name" -> "owner/name", or "" when the folder is not a model repository. */
export function folderRepoName(folder: string): string {
  if (!folder.startsWith("models--")) return "";
  const rest = folder.slice("models--".length).split("--");
  return rest.length === 2 ? `${rest[0]}/${rest[1]}` : "";
}

/** One repository's corner of the cache. */
export class RepoCache {
  readonly dir: string;

  constructor(
    readonly cacheDir: string,
    readonly repo: string,
  ) {
    this.dir = join(cacheDir, repoFolderName(repo));
  }

  blobPath(oid: string): string {
    if (!/^[0-9a-f]{40}$|^[0-9a-f]{64}$/.test(oid)) throw new HfError("E_HF_PROTOCOL", `${this.repo}: blob id '${oid}' is not a sha1 or sha256 hex digest`);
    return join(this.dir, "blobs", oid);
  }

  partPath(oid: string): string {
    return `${this.blobPath(oid)}.incomplete`;
  }

  snapshotDir(commit: string): string {
    return join(this.dir, "snapshots", commit);
  }

  snapshotPath(commit: string, path: string): string {
    checkRepoPath(path);
    return join(this.snapshotDir(commit), ...path.split("/"));
  }

  /** Where an in-flight download of `oid` records the process that owns it. */
  lockPath(oid: string): string {
    return join(this.cacheDir, ".locks", repoFolderName(this.repo), `${oid}.bloomery-pid`);
  }

  /** The commit refs/<revision> names, or "" when the cache has no such ref (a commit hash names itself). */
  readRef(revision: string): string {
    if (COMMIT_RE.test(revision)) return revision;
    const file = join(this.dir, "refs", ...revision.split("/"));
    let text: string;
    try {
      text = readFileSync(file, "utf8").trim();
    } catch {
      return "";
    }
    return COMMIT_RE.test(text) ? text : "";
  }

  /** Record that `revision` points at `commit` (written atomically, no newline, as huggingface_hub does). */
  writeRef(revision: string, commit: string): void {
    if (COMMIT_RE.test(revision)) return;
    const file = join(this.dir, "refs", ...revision.split("/"));
    writeAtomic(file, commit);
  }

  /**
   * Files present in the snapshot of `commit` (paths relative to it; a dangling symlink is
   * left out). Sizes are read from disk; oids from the blob a symlink names.
   */
  listSnapshot(commit: string): RepoFile[] {
    const root = this.snapshotDir(commit);
    const out: RepoFile[] = [];
    const walk = (dir: string): void => {
      let names: string[];
      try {
        names = readdirSync(dir);
      } catch {
        return;
      }
      for (const name of names) {
        const full = join(dir, name);
        let st;
        try {
          st = statSync(full); // follows the symlink: a dangling one throws and is skipped
        } catch {
          continue;
        }
        if (st.isDirectory()) walk(full);
        else if (st.isFile()) out.push({ path: relative(root, full).split("\\").join("/"), size: st.size, oid: linkedOid(full) });
      }
    };
    walk(root);
    return out;
  }

  /**
   * Make snapshots/<commit>/<path> name blobs/<oid>: a relative symlink, or (where the file
   * system refuses symlinks) the blob moved into place. Replaces a dangling link.
   */
  linkSnapshot(commit: string, path: string, oid: string): string {
    const target = this.snapshotPath(commit, path);
    const blob = this.blobPath(oid);
    try {
      mkdirSync(dirname(target), { recursive: true });
      if (isDanglingLink(target)) unlinkSync(target);
      if (existsSync(target)) return target;
      try {
        symlinkSync(relative(dirname(target), blob), target);
      } catch {
        try {
          renameSync(blob, target);
        } catch {
          copyFileSync(blob, target);
        }
      }
    } catch (e) {
      throw ioError(`cannot link ${target} to its blob`, e);
    }
    return target;
  }
}

/** Every cached model repository and the model files its refs/main snapshot holds (for listings). */
export function listCachedRepos(cacheDir: string, revision = "main"): { repo: string; commit: string; files: RepoFile[] }[] {
  let names: string[];
  try {
    names = readdirSync(cacheDir);
  } catch {
    return [];
  }
  const out: { repo: string; commit: string; files: RepoFile[] }[] = [];
  for (const name of names.sort()) {
    const repo = folderRepoName(name);
    if (!repo) continue;
    const rc = new RepoCache(cacheDir, repo);
    const commit = rc.readRef(revision);
    if (!commit) continue;
    out.push({ repo, commit, files: rc.listSnapshot(commit) });
  }
  return out;
}

function linkedOid(path: string): string {
  try {
    if (!lstatSync(path).isSymbolicLink()) return "";
    const name = readlinkName(path);
    return /^[0-9a-f]{40}$|^[0-9a-f]{64}$/.test(name) ? name : "";
  } catch {
    return "";
  }
}

function readlinkName(path: string): string {
  const t = readlinkSync(path);
  return t.slice(t.lastIndexOf("/") + 1);
}

function isDanglingLink(path: string): boolean {
  try {
    if (!lstatSync(path).isSymbolicLink()) return false;
  } catch {
    return false;
  }
  return !existsSync(path);
}

/** Write `text` to `file` through a temporary file and a rename. */
export function writeAtomic(file: string, text: string): void {
  const tmp = `${file}.tmp${process.pid}`;
  try {
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(tmp, text);
    renameSync(tmp, file);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw ioError(`cannot write ${file}`, e);
  }
}

export function ioError(what: string, e: unknown): HfError {
  const detail = e instanceof Error ? e.message : String(e);
  return new HfError("E_DOWNLOAD_IO", `${what}: ${detail}`, "check that the cache directory is writable and has free space, or set HF_HUB_CACHE");
}
