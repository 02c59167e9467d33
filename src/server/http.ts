// bloomery server: what runs before and after every route, as llama-server's pre-routing
// handler: CORS (preflight and headers), 503 while the model loads, API keys (Bearer or
// X-Api-Key; health and model listing stay public), the body size limit, and never a crash.
import type { Server } from "bun";
import { ApiError, errorResponse } from "./errors.ts";
import type { ServerContext } from "./state.ts";

/** Routes that answer without an API key (API.md). */
export const PUBLIC_PATHS: ReadonlySet<string> = new Set(["/health", "/v1/health", "/models", "/v1/models"]);

/** Routes that may run for a long time without sending a byte (exempt from the idle timeout). */
const LONG_ROUTES = /^\/(v1\/)?(completions?|chat\/completions|responses|messages)$/;

export interface HttpOptions {
  /** largest request body accepted, in bytes */
  maxBodyBytes: number;
  /** --api-prefix: every route lives under it ("" or absent: none); a path outside it is 404 */
  prefix?: string;
  /**
   * The web UI's pages and static files (webui/routes.ts), given the path within the prefix: they
   * answer before the loading and key checks, as llama-server's frontend paths; undefined: not one
   */
  frontend?: (req: Request, path: string) => Response | undefined | Promise<Response | undefined>;
}

/** The path within the prefix ("" for the prefix itself), or null when it lies outside. */
export function withinPrefix(path: string, prefix: string): string | null {
  if (prefix === "") return path;
  if (path === prefix) return "";
  return path.startsWith(`${prefix}/`) ? path.slice(prefix.length) : null;
}

/** Compares in time independent of where the strings differ. */
function sameKey(a: string, b: string): boolean {
  const ea = new TextEncoder().encode(a);
  const eb = new TextEncoder().encode(b);
  let diff = ea.length ^ eb.length;
  for (let i = 0; i < Math.max(ea.length, eb.length); i++) diff |= (ea[i] ?? 0) ^ (eb[i] ?? 0);
  return diff === 0;
}

/** The key a request carries: Authorization (Bearer prefix optional) or X-Api-Key. */
export function requestKey(req: Request): string {
  let key = req.headers.get("authorization") ?? "";
  if (key === "") key = req.headers.get("x-api-key") ?? "";
  return key.startsWith("Bearer ") ? key.slice("Bearer ".length) : key;
}

function corsHeaders(req: Request): Record<string, string> {
  // llama's default: any origin, with credentials, so the Origin is echoed back
  const origin = req.headers.get("origin");
  return { "Access-Control-Allow-Origin": origin ?? "*", ...(origin ? { Vary: "Origin" } : {}) };
}

function withHeaders(res: Response, headers: Record<string, string>): Response {
  try {
    for (const [k, v] of Object.entries(headers)) res.headers.set(k, v);
    return res;
  } catch {
    const copy = new Response(res.body, res);
    for (const [k, v] of Object.entries(headers)) copy.headers.set(k, v);
    return copy;
  }
}

export type Handler = (req: Request) => Promise<Response> | Response;

/** Wraps the router with llama's middleware; the result is Bun.serve's fetch. */
export function middleware(ctx: ServerContext, route: Handler, o: HttpOptions) {
  return async (req: Request, server: Server<undefined>): Promise<Response> => {
    const cors = corsHeaders(req);
    try {
      if (req.method === "OPTIONS") {
        return new Response("", {
          status: 200,
          headers: {
            ...cors,
            "Access-Control-Allow-Credentials": "true",
            "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
            "Access-Control-Allow-Headers": req.headers.get("access-control-request-headers") ?? "*",
            "Access-Control-Max-Age": "86400",
            "Content-Type": "text/html",
          },
        });
      }
      const url = new URL(req.url);
      const path = withinPrefix(url.pathname, o.prefix ?? "");
      const page = path !== null && o.frontend ? await o.frontend(req, path) : undefined;
      if (page) return withHeaders(page, cors);
      if (!ctx.ready) return errorResponse(new ApiError("unavailable_error", "Loading model"), cors);
      if (ctx.apiKeys.length > 0 && !(path !== null && PUBLIC_PATHS.has(path))) {
        const key = requestKey(req);
        if (!ctx.apiKeys.some((k) => sameKey(k, key))) {
          ctx.log("srv  log_server_r: unauthorized: Invalid API Key");
          return errorResponse(new ApiError("authentication_error", "Invalid API Key"), cors);
        }
      }
      const len = Number(req.headers.get("content-length") ?? "0");
      if (len > o.maxBodyBytes) {
        return errorResponse(new ApiError("invalid_request_error", `the request body (${len} bytes) is larger than the limit of ${o.maxBodyBytes} bytes`, {}, 413), cors);
      }
      if (path === null) return errorResponse(new ApiError("not_found_error", "File Not Found"), cors);
      if (req.method === "POST" && LONG_ROUTES.test(path)) server.timeout(req, 0);
      const res = await route(path === url.pathname ? req : new Request(new URL(path + url.search, url).href, req));
      return withHeaders(res, cors);
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      ctx.log(`srv  error: unexpected failure: ${msg}`);
      return errorResponse(new ApiError("server_error", msg), cors);
    }
  };
}
