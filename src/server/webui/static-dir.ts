// bloomery web UI: --path, llama-server's static files - a directory served under the prefix
// instead of the built-in UI (GET and HEAD; a directory answers with its index.html). Paths are
// decoded and resolved inside the directory: dot segments, NUL bytes and symbolic links that
// lead outside it answer as missing (the API's 404).
import { realpathSync, statSync } from "node:fs";
import { join, sep } from "node:path";

export class StaticDirError extends Error {
  override readonly name = "StaticDirError";
}

/** The directory's real path; throws StaticDirError naming it when it is not a readable directory. */
export function openStaticDir(dir: string): string {
  let real: string;
  try {
    real = realpathSync(dir);
  } catch (e) {
    throw new StaticDirError(`--path: static assets path not found: '${dir}' (${e instanceof Error ? e.message : String(e)})`);
  }
  if (!statSync(real).isDirectory()) throw new StaticDirError(`--path: '${dir}' is not a directory`);
  return real;
}

/** The file a request path names inside root, or undefined (missing, outside it, or not a plain file). */
export function staticFile(root: string, path: string): string | undefined {
  let rel: string;
  try {
    rel = decodeURIComponent(path);
  } catch {
    return undefined;
  }
  if (rel.includes("\0") || !rel.startsWith("/")) return undefined;
  const segs = rel.split("/").filter((s) => s !== "");
  if (segs.some((s) => s === "." || s === ".." || s.includes("\\"))) return undefined;
  let file = join(root, ...segs);
  try {
    if (statSync(file).isDirectory()) file = join(file, "index.html");
    const real = realpathSync(file);
    if (real !== root && !real.startsWith(root + sep)) return undefined;
    return statSync(real).isFile() ? real : undefined;
  } catch {
    return undefined;
  }
}

/** The answer for a file: its bytes (none for HEAD), its type, an ETag from its size and time; 304 when the client has it. */
export function fileResponse(file: string, req: Request): Response {
  const st = statSync(file);
  const etag = `"${st.size.toString(36)}-${Math.floor(st.mtimeMs).toString(36)}"`;
  const f = Bun.file(file);
  const headers = { "Content-Type": f.type, ETag: etag, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff" };
  if (req.headers.get("if-none-match") === etag) return new Response(null, { status: 304, headers });
  return new Response(req.method === "HEAD" ? null : f, { headers: { ...headers, "Content-Length": String(st.size) } });
}
