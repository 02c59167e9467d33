// bloomery server: what runs before and after every route, as llama-server's pre-routing
// handler: CORS (preflight and headers), 503 while the model loads, API keys (Bearer or
// X-Api-Key; health and model listing stay public), --api-prefix and the web UI's pages before
// them, the body read under the idle timeout and the size limit, the route from the path alone
// (whatever the Host header), and never a crash.
import type { Server } from "bun";
import { ApiError, errorResponse, safeMessage } from "./errors.ts";
import { loggedResponse, requestLine, type RequestTrace } from "./request-log.ts";
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

/** llama-server's CORS settings (--cors-origins, --cors-methods, --cors-headers, --cors-credentials). */
export interface CorsPolicy {
  /** "*", "localhost" (reflect only a localhost Origin), or the value to send */
  origins: string;
  methods: string;
  headers: string;
  credentials: boolean;
}

/** An Origin whose host is this machine (llama-server's origin_is_localhost). */
export function originIsLocalhost(origin: string): boolean {
  try {
    const h = new URL(origin).hostname;
    return h === "localhost" || h === "127.0.0.1" || h === "[::1]" || h === "::1";
  } catch {
    return false;
  }
}

function corsHeaders(req: Request, p: CorsPolicy, log: (line: string) => void): Record<string, string> {
  const origin = req.headers.get("origin");
  if (p.origins === "*" && p.credentials) {
    // llama's default: any origin, with credentials, so the Origin is echoed back
    return { "Access-Control-Allow-Origin": origin ?? "*", ...(origin ? { Vary: "Origin" } : {}) };
  }
  if (p.origins === "localhost") {
    if (origin && originIsLocalhost(origin)) return { "Access-Control-Allow-Origin": origin, Vary: "Origin" };
    if (origin) log(`srv  log_server_r: (CORS) skip non-localhost origin: ${safeMessage(origin.slice(0, 200))}`);
    return {};
  }
  return { "Access-Control-Allow-Origin": p.origins };
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

/** A request body as the middleware parsed it: its JSON, or why it is not JSON. */
export type ParsedBody = { value: unknown; error?: undefined } | { error: unknown; value?: undefined };

/** A body larger than the limit: 413 (before more of it is read). */
function tooLarge(size: number | string, max: number): ApiError {
  return new ApiError("invalid_request_error", `the request body (${size} bytes) is larger than the limit of ${max} bytes`, {}, 413);
}

/**
 * Reads the body (while the connection's idle timeout still applies: a client that sends headers
 * and no body is closed by -to), refusing it once it passes `max` bytes.
 */
async function readBody(req: Request, max: number): Promise<Uint8Array> {
  if (!req.body) return new Uint8Array(0);
  const parts: Uint8Array[] = [];
  let n = 0;
  const reader = req.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.byteLength;
    if (n > max) {
      void reader.cancel().catch(() => {});
      throw tooLarge(`more than ${max}`, max);
    }
    parts.push(value);
  }
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/**
 * The path and query of a request URL, read after the authority by hand: Elysia's router reads it
 * by position (a Host of under 4 characters throws it off), and WHATWG URL parsing takes the path
 * of "http:///health" (a request with no Host header) for the host.
 */
export function pathOf(url: string): { path: string; search: string } {
  // Bun gives a request without a Host header its path alone ("/health")
  const m = /^(?:[a-z][a-z0-9+.-]*:\/\/[^/?#]*)?([^?#]*)(\?[^#]*)?/i.exec(url);
  if (!m) return { path: "/", search: "" };
  return { path: m[1] || "/", search: m[2] ?? "" };
}

/** Wraps the router with llama's middleware; the result is Bun.serve's fetch. */
export function middleware(ctx: ServerContext, route: Handler, o: HttpOptions) {
  return async (req: Request, server: Server<undefined>): Promise<Response> => {
    const cors = corsHeaders(req, ctx.cors, ctx.log);
    const trace: RequestTrace = { t0: performance.now(), done: [], running: [] };
    const { path, search } = pathOf(req.url);
    const client = (() => {
      try {
        return server.requestIP(req)?.address ?? "-";
      } catch {
        return "-";
      }
    })();
    const done = (res: Response): Response =>
      loggedResponse(res, () => {
        const line = requestLine(req.method, path, client, res.status, trace);
        if (line) ctx.log(line);
      }, trace.running);
    try {
      if (req.method === "OPTIONS") {
        return new Response("", {
          status: 200,
          headers: {
            ...cors,
            "Access-Control-Allow-Credentials": ctx.cors.credentials ? "true" : "false",
            "Access-Control-Allow-Methods": ctx.cors.methods,
            // "*" echoes what the browser asks for: a wildcard does not cover Authorization (the Fetch standard)
            "Access-Control-Allow-Headers": ctx.cors.headers === "*" ? (req.headers.get("access-control-request-headers") ?? "*") : ctx.cors.headers,
            "Access-Control-Max-Age": "86400",
            "Content-Type": "text/html",
          },
        });
      }
      // the path within --api-prefix (null: outside it); the web UI's pages answer first
      const inner = withinPrefix(path, o.prefix ?? "");
      const page = inner !== null && o.frontend ? await o.frontend(req, inner) : undefined;
      if (page) return withHeaders(page, cors);
      if (!ctx.ready) return errorResponse(new ApiError("unavailable_error", "Loading model"), cors);
      if (ctx.apiKeys.length > 0 && !(inner !== null && PUBLIC_PATHS.has(inner))) {
        const key = requestKey(req);
        if (!ctx.apiKeys.some((k) => sameKey(k, key))) {
          ctx.log("srv  log_server_r: unauthorized: Invalid API Key");
          return done(errorResponse(new ApiError("authentication_error", "Invalid API Key"), cors));
        }
      }
      const len = Number(req.headers.get("content-length") ?? "0");
      if (len > o.maxBodyBytes) return done(errorResponse(tooLarge(len, o.maxBodyBytes), cors));
      if (inner === null) return done(errorResponse(new ApiError("not_found_error", "File Not Found"), cors));
      const hasBody = req.method !== "GET" && req.method !== "HEAD";
      const body = hasBody ? await readBody(req, o.maxBodyBytes) : undefined;
      // the body is in: a generation may now run long without sending a byte
      if (req.method === "POST" && LONG_ROUTES.test(inner)) server.timeout(req, 0);
      // the router sees a canonical URL: the path alone decides the route
      // the JSON is parsed here (past a few KiB in the body worker, the bytes moved there, not
      // copied); the router's request carries a stand-in and the route reads what was parsed
      const parsed: ParsedBody | undefined = body && body.length > 0 ? await ctx.body.parse(body).then((value): ParsedBody => ({ value }), (e: unknown): ParsedBody => ({ error: e })) : undefined;
      const routed = new Request(`http://bloomery${inner}${search}`, { method: req.method, headers: req.headers, body: parsed ? "0" : body, signal: req.signal });
      if (parsed) ctx.parsedBodies.set(routed.signal, parsed);
      ctx.traces.set(routed.signal, trace);
      const res = await route(routed);
      return done(withHeaders(res, cors));
    } catch (e) {
      if (e instanceof ApiError) return done(errorResponse(e, cors));
      const msg = e instanceof Error ? e.message : String(e);
      if (req.signal.aborted) return new Response(null, { status: 499 }); // the client went away while its body was read
      ctx.log(`srv  error: unexpected failure: ${msg}`);
      return done(errorResponse(new ApiError("server_error", msg), cors));
    }
  };
}
