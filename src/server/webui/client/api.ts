// bloomery web UI (browser): calls to the server the page came from - URLs relative to the page's
// directory (so any --api-prefix works), the API key from the settings as a Bearer token, llama's
// error shape turned into ApiError, and a reader of server-sent events over fetch (EventSource
// cannot send the key).
import { settings } from "./settings.ts";

/** The directory of the page: "/" for /placement, "/llm/" for /llm/ and /llm/placement. */
export function base(): URL {
  return new URL(".", location.href);
}

export function apiUrl(path: string): string {
  return new URL(path.replace(/^\/+/, ""), base()).href;
}

export class ApiError extends Error {
  constructor(message: string, readonly status: number, readonly type: string) {
    super(message);
    this.name = "ApiError";
  }
}

function headers(extra: HeadersInit | undefined, json: boolean): Headers {
  const h = new Headers(extra);
  const key = settings().apiKey.trim();
  if (key !== "") h.set("Authorization", `Bearer ${key}`);
  if (json) h.set("Content-Type", "application/json");
  return h;
}

/** The error a failed answer carries (llama's {"error":{message,type,code}} or its text). */
export async function errorOf(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => "");
  try {
    const e = (JSON.parse(text) as { error?: { message?: string; type?: string } }).error;
    if (e?.message) return new ApiError(e.message, res.status, e.type ?? "");
  } catch {
    // not JSON
  }
  return new ApiError(text.trim() || `HTTP ${res.status}`, res.status, "");
}

/** fetch with the key; throws ApiError for an answer that is not 2xx. */
export async function api(path: string, init: RequestInit = {}): Promise<Response> {
  const json = typeof init.body === "string";
  const res = await fetch(apiUrl(path), { ...init, headers: headers(init.headers, json) });
  if (!res.ok) throw await errorOf(res);
  return res;
}

export async function getJson<T>(path: string): Promise<T> {
  return (await (await api(path)).json()) as T;
}

export interface SseEvent {
  event: string;
  data: string;
}

/** The events of a text/event-stream body, as they arrive. */
export async function* sseEvents(res: Response): AsyncGenerator<SseEvent> {
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let cut: number;
      while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut).replace(/^\r?\n\r?\n/, "");
        let event = "message", data = "";
        for (const line of block.split(/\r?\n/)) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data += (data ? "\n" : "") + line.slice(5).replace(/^ /, "");
        }
        if (data !== "") yield { event, data };
      }
    }
  } finally {
    reader.releaseLock();
  }
}
