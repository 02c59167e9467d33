// bloomery server: GET /placement/state - the live placement picture (src/engine/placement-view.ts)
// as one JSON object, or with ?stream=1 (or Accept: text/event-stream) as server-sent events: one
// `event: placement` a period (?interval_ms=, 250..10000, default 1000) until the client leaves.
// The web UI's placement page reads the stream; scripts read either (docs/api.md).
import { badRequest } from "../errors.ts";
import type { ServerContext } from "../state.ts";

export const DEFAULT_INTERVAL_MS = 1000;
const MIN_INTERVAL_MS = 250;
const MAX_INTERVAL_MS = 10_000;

function wantsStream(req: Request, q: URLSearchParams): boolean {
  const s = q.get("stream");
  if (s !== null) {
    if (s === "1" || s === "true") return true;
    if (s === "0" || s === "false") return false;
    throw badRequest(`Field 'stream': expected true or false, got ${JSON.stringify(s)}`);
  }
  return (req.headers.get("accept") ?? "").includes("text/event-stream");
}

function intervalOf(q: URLSearchParams): number {
  const v = q.get("interval_ms");
  if (v === null) return DEFAULT_INTERVAL_MS;
  const n = Number(v);
  if (!Number.isInteger(n) || n < MIN_INTERVAL_MS || n > MAX_INTERVAL_MS)
    throw badRequest(`Field 'interval_ms': expected a whole number of milliseconds from ${MIN_INTERVAL_MS} to ${MAX_INTERVAL_MS}, got ${JSON.stringify(v)}`);
  return n;
}

export async function placementState(ctx: ServerContext, req: Request): Promise<Response> {
  const q = new URL(req.url).searchParams;
  // --no-slots hides prompts (as /slots does): the prompt cache's entries then come without text
  const previews = ctx.opts.slots;
  const interval = intervalOf(q);
  if (!wantsStream(req, q)) return Response.json(await ctx.engine.placement(previews));
  const enc = new TextEncoder();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let closed = false;
  const stream = new ReadableStream<Uint8Array>({
    start(ctl) {
      const send = (event: string, data: unknown) => {
        if (closed) return;
        try {
          ctl.enqueue(enc.encode(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`));
        } catch {
          closed = true; // the client left between the check and the write
        }
      };
      const tick = async () => {
        if (closed) return;
        try {
          send("placement", await ctx.engine.placement(previews));
        } catch (e) {
          send("error", { error: { code: 500, message: e instanceof Error ? e.message : String(e), type: "server_error" } });
        }
        if (!closed) timer = setTimeout(tick, interval);
      };
      void tick();
    },
    cancel() {
      closed = true;
      if (timer) clearTimeout(timer);
    },
  });
  req.signal.addEventListener("abort", () => {
    closed = true;
    if (timer) clearTimeout(timer);
  }, { once: true });
  return new Response(stream, { headers: { "Content-Type": "text/event-stream", "Cache-Control": "no-cache", Connection: "keep-alive" } });
}
