// bloomery web UI: what answers the UI's paths (the middleware's frontend hook, http.ts) - the
// chat page at / (and /index.html), the placement page at /placement, their style sheet and
// script under /webui/, or with --path a directory's files instead (llama-server's static
// path). As llama-server's frontend paths, they answer while the model loads and without an
// API key: the page itself asks for the key and sends it with its API calls. --no-ui: none.
import type { Asset } from "./assets.ts";
import { fileResponse, openStaticDir, staticFile } from "./static-dir.ts";

/** Pages that load the UI (the script picks the view from the path). */
export const UI_PAGES: ReadonlySet<string> = new Set(["/", "/index.html", "/placement"]);

/** The page's content security policy: its own script and style only, calls to its own origin. */
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

export interface FrontendOptions {
  /** --ui / --no-ui */
  ui: boolean;
  /** --path */
  staticPath?: string;
  /** --api-prefix ("" for none) */
  prefix: string;
}

export type Frontend = (req: Request, path: string) => Response | undefined | Promise<Response | undefined>;

let assets: Promise<ReadonlyMap<string, Asset>> | undefined;

/** The embedded files, loaded once; a checkout without the built bundle says how to build it. */
function loadAssets(): Promise<ReadonlyMap<string, Asset>> {
  assets ??= import("./assets.ts").then((m) => m.ASSETS);
  return assets;
}

function assetResponse(a: Asset, req: Request, page: boolean): Response {
  const headers: Record<string, string> = { "Content-Type": a.type, ETag: a.etag, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff" };
  if (page) {
    headers["Content-Security-Policy"] = CSP;
    headers["Referrer-Policy"] = "no-referrer";
  }
  if (req.headers.get("if-none-match") === a.etag) return new Response(null, { status: 304, headers });
  return new Response(req.method === "HEAD" ? null : a.body, { headers });
}

/**
 * The hook for the middleware, or undefined with --no-ui. Throws StaticDirError when --path does
 * not name a directory (the start is refused, as llama-server refuses it).
 */
export function frontend(o: FrontendOptions): Frontend | undefined {
  if (!o.ui) return undefined;
  const readable = (req: Request) => req.method === "GET" || req.method === "HEAD";
  if (o.staticPath !== undefined) {
    const root = openStaticDir(o.staticPath);
    return (req, path) => {
      if (!readable(req)) return undefined;
      const file = staticFile(root, path === "" ? "/" : path);
      return file ? fileResponse(file, req) : undefined;
    };
  }
  return async (req, path) => {
    if (!readable(req)) return undefined;
    // the prefix alone: its pages' relative links need the trailing slash
    if (path === "") return new Response(null, { status: 308, headers: { Location: `${o.prefix}/` } });
    const page = UI_PAGES.has(path);
    if (!page && !path.startsWith("/webui/")) return undefined;
    let files: ReadonlyMap<string, Asset>;
    try {
      files = await loadAssets();
    } catch (e) {
      assets = undefined;
      const why = e instanceof Error ? e.message : String(e);
      return Response.json({ error: { code: 500, message: `the web UI was not built into this program (build/webui-app.js: ${why}); run \`npm run build\``, type: "server_error" } }, { status: 500 });
    }
    const a = files.get(page ? "/" : path);
    return a ? assetResponse(a, req, page) : undefined;
  };
}
