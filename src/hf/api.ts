// bloomery hf: the hub's HTTP API as llama.cpp uses it: GET /api/models/{repo}/refs (the commit a
// branch or tag points at), GET /api/models/{repo}/tree/{commit}?recursive=true (the files, with
// lfs.oid = sha256 and lfs.size; pages followed through the Link header), and file URLs
// {endpoint}/{repo}/resolve/{commit}/{path}. Maps hub refusals onto HfError codes.
import { HfError } from "./errors.ts";
import { checkRepoPath, type RepoFile } from "./spec.ts";

export const DEFAULT_ENDPOINT = "https://huggingface.co";

export interface HubClientOptions {
  /** hub base URL (HF_ENDPOINT); default https://huggingface.co */
  endpoint?: string;
  /** access token sent as `Authorization: Bearer` */
  token?: string;
  signal?: AbortSignal;
  /** per-request time limit for API calls in ms (default 30000) */
  timeoutMs?: number;
  userAgent?: string;
}

const COMMIT_RE = /^[0-9a-f]{40}$/;
const SHA1_RE = /^[0-9a-f]{40}$/;
const SHA256_RE = /^[0-9a-f]{64}$/;

export class HubClient {
  readonly endpoint: string;
  private readonly token: string;
  private readonly signal: AbortSignal | undefined;
  private readonly timeoutMs: number;
  private readonly userAgent: string;

  constructor(opts: HubClientOptions = {}) {
    const ep = opts.endpoint && opts.endpoint !== "" ? opts.endpoint : DEFAULT_ENDPOINT;
    let url: URL;
    try {
      url = new URL(ep);
    } catch {
      throw new HfError("E_HF_BAD_SPEC", `hub endpoint '${ep}' is not a URL`, "set HF_ENDPOINT to e.g. https://huggingface.co");
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new HfError("E_HF_BAD_SPEC", `hub endpoint '${ep}' must be an http(s) URL`);
    }
    this.endpoint = ep.replace(/\/+$/, "");
    this.token = opts.token ?? "";
    if (/[\s\0-\x1f\x7f]/.test(this.token)) {
      throw new HfError("E_HF_AUTH", "the Hugging Face token holds spaces or control characters", "copy the token again from https://huggingface.co/settings/tokens");
    }
    this.signal = opts.signal;
    this.timeoutMs = opts.timeoutMs ?? 30000;
    this.userAgent = opts.userAgent ?? "bloomery";
  }

  /** Headers every hub request carries (the token when one is set). */
  headers(extra: Record<string, string> = {}): Record<string, string> {
    const h: Record<string, string> = { "User-Agent": this.userAgent, ...extra };
    if (this.token !== "") h.Authorization = `Bearer ${this.token}`;
    return h;
  }

  hasToken(): boolean {
    return this.token !== "";
  }

  fileUrl(repo: string, commit: string, path: string): string {
    checkRepoPath(path);
    return `${this.endpoint}/${repo}/resolve/${commit}/${path.split("/").map(encodeURIComponent).join("/")}`;
  }

  /** The commit `revision` (branch, tag or commit hash) of `repo` points at. */
  async commit(repo: string, revision: string): Promise<string> {
    if (COMMIT_RE.test(revision)) return revision;
    const body = await this.getJson(`${this.endpoint}/api/models/${repo}/refs`, repo, `the refs of ${repo}`);
    if (!isObject(body)) throw protocol(repo, "refs answer is not an object");
    for (const kind of ["branches", "tags"] as const) {
      const list = body[kind];
      if (list === undefined) continue;
      if (!Array.isArray(list)) throw protocol(repo, `refs.${kind} is not an array`);
      for (const ref of list) {
        if (!isObject(ref) || ref.name !== revision) continue;
        const c = ref.targetCommit;
        if (typeof c !== "string" || !COMMIT_RE.test(c)) throw protocol(repo, `ref '${revision}' has no valid targetCommit`);
        return c;
      }
    }
    throw new HfError("E_HF_NOT_FOUND", `${repo} has no branch or tag '${revision}'`);
  }

  /** Every file of `repo` at `commit` (directories left out), following the listing's pages. */
  async tree(repo: string, commit: string): Promise<RepoFile[]> {
    const files: RepoFile[] = [];
    let url: string | null = `${this.endpoint}/api/models/${repo}/tree/${commit}?recursive=true`;
    for (let page = 0; url !== null; page++) {
      if (page > 10000) throw protocol(repo, "the file listing does not end");
      const res = await this.request(url, repo, `the file list of ${repo}`);
      const body = await readJson(res, repo);
      if (!Array.isArray(body)) throw protocol(repo, "tree answer is not an array");
      for (const item of body) {
        const f = treeEntry(item, repo);
        if (f) files.push(f);
      }
      url = nextLink(res.headers.get("link"), url);
    }
    return files;
  }

  private async getJson(url: string, repo: string, what: string): Promise<unknown> {
    return readJson(await this.request(url, repo, what), repo);
  }

  /** GET `url`, mapping transport failures and refusals to HfError. */
  async request(url: string, repo: string, what: string): Promise<Response> {
    const signals = [AbortSignal.timeout(this.timeoutMs)];
    if (this.signal) signals.push(this.signal);
    let res: Response;
    try {
      res = await fetch(url, { headers: this.headers({ Accept: "application/json" }), signal: AbortSignal.any(signals), redirect: "follow" });
    } catch (e) {
      if (this.signal?.aborted) throw new HfError("E_DOWNLOAD_ABORTED", `${what}: cancelled`);
      throw new HfError("E_HF_NETWORK", `cannot reach ${this.endpoint} for ${what}: ${errText(e)}`, "check the network or HF_ENDPOINT; --offline uses the cache only");
    }
    if (res.ok) return res;
    throw await this.refusal(res, repo, what);
  }

  /** The HfError for a non-2xx hub answer (reads X-Error-Code / X-Error-Message / the JSON error). */
  async refusal(res: Response, repo: string, what: string): Promise<HfError> {
    const code = res.headers.get("x-error-code") ?? "";
    let message = res.headers.get("x-error-message") ?? "";
    if (!message) {
      try {
        const text = (await res.text()).slice(0, 2000);
        try {
          const j: unknown = JSON.parse(text);
          if (isObject(j) && typeof j.error === "string") message = j.error;
        } catch {
          message = text.trim().split("\n")[0] ?? "";
        }
      } catch {
        message = "";
      }
    }
    const said = message ? ` (hub: ${message.slice(0, 300)})` : "";
    const tokenHint = this.hasToken()
      ? "the token in HF_TOKEN (or --hf-token) has no access: check it at https://huggingface.co/settings/tokens"
      : "set HF_TOKEN (or pass --hf-token) to a token with access";
    if (code === "GatedRepo") {
      return new HfError("E_HF_AUTH", `${repo} is a gated repository${said}`, `accept its terms at ${this.endpoint}/${repo}, then ${tokenHint}`);
    }
    if (code === "RepoNotFound" || code === "RepositoryNotFound") {
      return new HfError("E_HF_NOT_FOUND", `repository ${repo} was not found${said}`, this.hasToken() ? "check the name" : "check the name; a private repository also needs HF_TOKEN");
    }
    if (code === "RevisionNotFound" || code === "EntryNotFound" || res.status === 404) {
      return new HfError("E_HF_NOT_FOUND", `${what}: not found (HTTP ${res.status})${said}`, "check the repository name and --hf-file");
    }
    if (res.status === 401 || res.status === 403) {
      return new HfError("E_HF_AUTH", `${what}: HTTP ${res.status}${said}`, tokenHint);
    }
    if (res.status === 429 || res.status >= 500) {
      return new HfError("E_HF_NETWORK", `${what}: the hub answered HTTP ${res.status}${said}`, "try again later; --offline uses the cache only");
    }
    return new HfError("E_HF_PROTOCOL", `${what}: unexpected HTTP ${res.status}${said}`);
  }
}

function treeEntry(item: unknown, repo: string): RepoFile | null {
  if (!isObject(item) || item.type !== "file") return null;
  const path = item.path;
  if (typeof path !== "string") throw protocol(repo, "a tree entry has no path");
  try {
    checkRepoPath(path);
  } catch {
    throw protocol(repo, `tree entry path '${path.slice(0, 200)}' leaves the repository`);
  }
  const lfs = item.lfs;
  if (isObject(lfs)) {
    const oid = lfs.oid;
    const size = lfs.size;
    if (typeof oid !== "string" || !SHA256_RE.test(oid)) throw protocol(repo, `${path}: lfs.oid is not a sha256`);
    if (!isSize(size)) throw protocol(repo, `${path}: lfs.size is not a byte count`);
    return { path, size, oid, sha256: oid };
  }
  const oid = item.oid;
  const size = item.size;
  if (typeof oid !== "string" || !SHA1_RE.test(oid)) throw protocol(repo, `${path}: oid is not a git sha1`);
  if (!isSize(size)) throw protocol(repo, `${path}: size is not a byte count`);
  return { path, size, oid };
}

/** The rel="next" target of a Link header, resolved against the current URL; null when none. */
export function nextLink(link: string | null, current: string): string | null {
  if (!link) return null;
  for (const part of link.split(",")) {
    const m = /<([^>]*)>\s*;\s*rel="?next"?/i.exec(part.trim());
    if (m) {
      const next = new URL(m[1], current);
      if (next.origin !== new URL(current).origin) return null;
      return next.toString();
    }
  }
  return null;
}

async function readJson(res: Response, repo: string): Promise<unknown> {
  const text = await res.text();
  try {
    return JSON.parse(text);
  } catch {
    throw protocol(repo, `answer from ${res.url || "the hub"} is not JSON`);
  }
}

function isSize(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function protocol(repo: string, detail: string): HfError {
  return new HfError("E_HF_PROTOCOL", `${repo}: ${detail}`, "check HF_ENDPOINT points at a Hugging Face hub");
}

export function errText(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}
