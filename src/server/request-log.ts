// bloomery server: the log lines of each request at the default verbosity, as llama-server prints
// them: a generation's timings per slot ("slot print_timing: id  0 | task 3 | prompt eval time =
// ..."), and a line when a request is done with its method, route, client, status, tokens and
// time (a stream's when it ends). Polling routes (/health, /models, /props, /metrics) are not
// logged, as in llama-server.
import type { DoneEvent } from "../engine/protocol.ts";

/** Routes polled often enough that a line each would bury the rest (llama-server skips them too). */
const QUIET = new Set(["/health", "/v1/health", "/models", "/v1/models", "/props", "/metrics"]);

/** What a request did, gathered while it runs. */
export interface RequestTrace {
  t0: number;
  done: DoneEvent[];
  /** the request's generations, settled when every one is done */
  running: Promise<void>[];
}

function f(n: number, width: number, digits = 2): string {
  return n.toFixed(digits).padStart(width);
}

/** llama-server's print_timings for one generation. */
export function timingLines(d: DoneEvent): string[] {
  const t = d.timings;
  const head = `slot print_timing: id ${String(d.idSlot).padStart(2)} | task ${d.id} | `;
  return [
    `${head}prompt eval time = ${f(t.prompt_ms, 10)} ms / ${String(t.prompt_n).padStart(5)} tokens (${f(t.prompt_per_token_ms, 8)} ms per token, ${f(t.prompt_per_second, 8)} tokens per second)`,
    `${head}       eval time = ${f(t.predicted_ms, 10)} ms / ${String(t.predicted_n).padStart(5)} tokens (${f(t.predicted_per_token_ms, 8)} ms per token, ${f(t.predicted_per_second, 8)} tokens per second)`,
    `${head}      total time = ${f(t.prompt_ms + t.predicted_ms, 10)} ms / ${String(t.prompt_n + t.predicted_n).padStart(5)} tokens`,
  ];
}

/** The line for a finished request, or null for the quiet routes (when it succeeded). */
export function requestLine(method: string, path: string, client: string, status: number, trace: RequestTrace): string | null {
  if (QUIET.has(path) && status < 400) return null;
  const ms = performance.now() - trace.t0;
  let line = `srv  log_server_r: done request: ${method} ${path} ${client} ${status}`;
  if (trace.done.length > 0) {
    const sum = (k: "tokensEvaluated" | "tokensCached" | "tokensPredicted") => trace.done.reduce((a, d) => a + d[k], 0);
    const gen = trace.done.reduce((a, d) => a + d.timings.predicted_ms, 0);
    const nPred = sum("tokensPredicted");
    line += ` | prompt ${sum("tokensEvaluated")} tokens (${sum("tokensCached")} cached), generated ${nPred}` +
      (gen > 0 ? ` (${((nPred * 1000) / gen).toFixed(2)} t/s)` : "");
  }
  return `${line} | ${ms.toFixed(2)} ms`;
}

/**
 * The response with its log line written when it is done: at once for a plain response, when the
 * last byte is read (or the client goes away) for a stream.
 */
export function loggedResponse(res: Response, write: () => void, running: Promise<void>[] = []): Response {
  const body = res.body;
  if (!body || !(res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    write();
    return res;
  }
  let written = false;
  const once = () => {
    if (!written) {
      written = true;
      write();
    }
  };
  /** a stream the client left: its generations are cancelled; the line waits for what they did */
  const afterGenerations = (running: Promise<void>[]) => {
    void Promise.race([Promise.all(running), Bun.sleep(5000)]).then(once);
  };
  const reader = body.getReader();
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const r = await reader.read();
        if (r.done) {
          controller.close();
          once();
        } else controller.enqueue(r.value);
      } catch (e) {
        controller.error(e);
        once();
      }
    },
    cancel(reason) {
      afterGenerations(running);
      return reader.cancel(reason);
    },
  });
  return new Response(stream, { status: res.status, statusText: res.statusText, headers: res.headers });
}
