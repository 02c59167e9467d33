// Test helper: a stand-in Hugging Face hub on 127.0.0.1 (refs, tree and resolve routes as the
// real hub answers them), with knobs to cut a download midway, lie about a checksum, gate a
// repository behind a token, page the tree listing, and go away (unreachable).
import { CryptoHasher, type TCPSocketListener } from "bun";

export interface HubFile {
  path: string;
  content: Uint8Array;
  /** stored in LFS (listed with lfs.oid = sha256); default true for .gguf */
  lfs?: boolean;
  /** sha256 the listing claims instead of the real one (a bad checksum) */
  claimSha256?: string;
  /**
   * the first `times` downloads of this file stop after sending `at` bytes of their body:
   * "close" ends the body early; "reset" redirects to a CDN stand-in that sends a full
   * content-length, `at` bytes, then resets the connection
   */
  cut?: { at: number; times: number; mode: "close" | "reset" };
}

export interface HubRepo {
  commit: string;
  files: HubFile[];
  /** when set, every request needs `Authorization: Bearer <token>` (answers like a gated repo) */
  token?: string;
  /** when set, answer Range requests with a full 200 (a server without range support) */
  noRanges?: boolean;
}

export interface HubRequest {
  method: string;
  path: string;
  range: string | null;
  auth: string | null;
}

export function sha256(b: Uint8Array | string): string {
  return new CryptoHasher("sha256").update(b).digest("hex");
}

export function gitSha1(b: Uint8Array): string {
  return new CryptoHasher("sha1").update(`blob ${b.length}\0`).update(b).digest("hex");
}

/** Deterministic pseudo-random bytes (so a resumed file that is not byte-identical shows). */
export function bytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = x & 0xff;
  }
  return out;
}

export function commitOf(seed: string): string {
  return new CryptoHasher("sha1").update(seed).digest("hex");
}

export class StandInHub {
  readonly repos = new Map<string, HubRepo>();
  readonly log: HubRequest[] = [];
  /** tree entries per page (0 = all in one answer) */
  pageSize = 0;
  private server: ReturnType<typeof Bun.serve> | null = null;
  private cdn: TCPSocketListener<{ out: Uint8Array; sent: number }> | null = null;
  private readonly cdnPlans: { content: Uint8Array; start: number; stopAt: number }[] = [];

  get url(): string {
    if (!this.server) throw new Error("stand-in hub is not running");
    return `http://127.0.0.1:${this.server.port}`;
  }

  start(): this {
    this.cdn = Bun.listen<{ out: Uint8Array; sent: number }>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open: (sock) => {
          sock.data = { out: new Uint8Array(0), sent: 0 };
        },
        data: (sock, chunk) => {
          if (sock.data.out.length > 0) return;
          const text = new TextDecoder().decode(chunk);
          const m = /^GET \/cdn\/(\d+) /.exec(text);
          const plan = m ? this.cdnPlans[Number(m[1])] : undefined;
          if (!plan) {
            sock.end("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
            return;
          }
          this.log.push({ method: "GET", path: `/cdn/${m?.[1]}`, range: /\r\nrange: *([^\r]*)/i.exec(text)?.[1] ?? null, auth: /\r\nauthorization: *([^\r]*)/i.exec(text)?.[1] ?? null });
          const total = plan.content.length;
          const head = plan.start > 0
            ? `HTTP/1.1 206 Partial Content\r\ncontent-range: bytes ${plan.start}-${total - 1}/${total}\r\n`
            : "HTTP/1.1 200 OK\r\n";
          const headBytes = new TextEncoder().encode(`${head}content-length: ${total - plan.start}\r\naccept-ranges: bytes\r\n\r\n`);
          const body = plan.content.subarray(plan.start, plan.stopAt);
          const out = new Uint8Array(headBytes.length + body.length);
          out.set(headBytes);
          out.set(body, headBytes.length);
          sock.data = { out, sent: 0 };
          pump(sock);
        },
        drain: (sock) => pump(sock),
      },
    });
    this.server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (req) => this.handle(req), error: () => new Response("stand-in hub error", { status: 500 }) });
    return this;
  }

  stop(): void {
    this.cdn?.stop(true);
    this.cdn = null;
    this.server?.stop(true);
    this.server = null;
  }

  requests(kind: "api" | "resolve"): HubRequest[] {
    return this.log.filter((r) => (kind === "api" ? r.path.startsWith("/api/") : r.path.includes("/resolve/")));
  }

  private handle(req: Request): Response {
    const url = new URL(req.url);
    const path = decodeURIComponent(url.pathname);
    this.log.push({ method: req.method, path, range: req.headers.get("range"), auth: req.headers.get("authorization") });
    let m = /^\/api\/models\/([^/]+\/[^/]+)\/refs$/.exec(path);
    if (m) return this.withRepo(req, m[1], (r) => Response.json({ branches: [{ name: "main", ref: "refs/heads/main", targetCommit: r.commit }], tags: [], converts: [] }));
    m = /^\/api\/models\/([^/]+\/[^/]+)\/tree\/([^/]+)$/.exec(path);
    if (m) {
      const rev = m[2];
      return this.withRepo(req, m[1], (r) => {
        if (rev !== r.commit && rev !== "main") return new Response(JSON.stringify({ error: "Invalid rev id" }), { status: 404, headers: { "x-error-code": "RevisionNotFound" } });
        return this.tree(url, r);
      });
    }
    m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(path);
    if (m) {
      const file = m[3];
      return this.withRepo(req, m[1], (r) => {
        const f = r.files.find((x) => x.path === file);
        if (!f) return new Response("Entry not found", { status: 404, headers: { "x-error-code": "EntryNotFound" } });
        return this.serveFile(req, r, f);
      });
    }
    return new Response("Not Found", { status: 404 });
  }

  private withRepo(req: Request, name: string, then: (r: HubRepo) => Response): Response {
    const r = this.repos.get(name);
    if (!r) return new Response(JSON.stringify({ error: "Repository not found" }), { status: 401, headers: { "x-error-code": "RepoNotFound", "content-type": "application/json" } });
    if (r.token !== undefined && req.headers.get("authorization") !== `Bearer ${r.token}`) {
      return new Response(JSON.stringify({ error: `Access to model ${name} is restricted. You must have access to it and be authenticated to access it. Please log in.` }), {
        status: 401,
        headers: { "x-error-code": "GatedRepo", "content-type": "application/json" },
      });
    }
    return then(r);
  }

  private tree(url: URL, r: HubRepo): Response {
    const entries: unknown[] = [];
    const dirs = new Set<string>();
    for (const f of [...r.files].sort((a, b) => (a.path < b.path ? -1 : 1))) {
      const parts = f.path.split("/");
      for (let i = 1; i < parts.length; i++) {
        const d = parts.slice(0, i).join("/");
        if (!dirs.has(d)) {
          dirs.add(d);
          entries.push({ type: "directory", oid: commitOf(d), size: 0, path: d });
        }
      }
      const lfs = f.lfs ?? f.path.endsWith(".gguf");
      entries.push(
        lfs
          ? { type: "file", oid: gitSha1(new TextEncoder().encode(`lfs pointer ${f.path}`)), size: f.content.length, path: f.path, lfs: { oid: f.claimSha256 ?? sha256(f.content), size: f.content.length, pointerSize: 134 } }
          : { type: "file", oid: gitSha1(f.content), size: f.content.length, path: f.path },
      );
    }
    if (this.pageSize <= 0) return Response.json(entries);
    const cursor = Number(url.searchParams.get("cursor") ?? "0");
    const page = entries.slice(cursor, cursor + this.pageSize);
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (cursor + this.pageSize < entries.length) {
      const next = new URL(url);
      next.searchParams.set("cursor", String(cursor + this.pageSize));
      headers.link = `<${next.pathname}${next.search}>; rel="next"`;
    }
    return new Response(JSON.stringify(page), { headers });
  }

  private serveFile(req: Request, r: HubRepo, f: HubFile): Response {
    const total = f.content.length;
    let start = 0;
    const range = req.headers.get("range");
    if (range && !r.noRanges) {
      const m = /^bytes=(\d+)-$/.exec(range);
      if (!m) return new Response("bad range", { status: 400 });
      start = Number(m[1]);
      if (start >= total) return new Response("", { status: 416, headers: { "content-range": `bytes */${total}` } });
    }
    const body = f.content.subarray(start);
    const status = start > 0 ? 206 : 200;
    const headers: Record<string, string> = { "accept-ranges": r.noRanges ? "none" : "bytes", etag: `"${sha256(f.content)}"` };
    if (start > 0) headers["content-range"] = `bytes ${start}-${total - 1}/${total}`;
    if (f.cut && f.cut.times > 0 && start + f.cut.at < total && f.cut.mode === "reset") {
      // like the real hub's LFS files: a redirect to a CDN host, which here resets the connection
      f.cut.times--;
      const token = String(this.cdnPlans.length);
      this.cdnPlans.push({ content: f.content, start, stopAt: start + f.cut.at });
      return new Response(null, { status: 302, headers: { location: `http://127.0.0.1:${this.cdn?.port}/cdn/${token}` } });
    }
    if (f.cut && f.cut.times > 0 && start + f.cut.at < total) {
      f.cut.times--;
      const cut = f.cut;
      const firstPart = f.content.subarray(start, start + cut.at);
      let sent = false;
      const stream = new ReadableStream<Uint8Array>({
        async pull(c) {
          if (!sent) {
            sent = true;
            c.enqueue(firstPart);
            return;
          }
          await Bun.sleep(10);
          c.close();
        },
      });
      return new Response(stream, { status, headers });
    }
    headers["content-length"] = String(body.length);
    return new Response(body, { status, headers });
  }
}

/** Write what is left of the socket's plan; reset the connection once it is all sent. */
function pump(sock: { data: { out: Uint8Array; sent: number }; write(b: Uint8Array): number; terminate(): void }): void {
  const d = sock.data;
  while (d.sent < d.out.length) {
    const n = sock.write(d.out.subarray(d.sent));
    if (n <= 0) return; // wait for drain
    d.sent += n;
  }
  setTimeout(() => sock.terminate(), 10);
}
