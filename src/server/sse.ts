// bloomery server: server-sent event framing and the streaming response: frames are pulled from
// an async generator as the client reads; a client that goes away cancels the generations.

export function sseData(data: unknown): string {
  return `data: ${JSON.stringify(data)}\n\n`;
}

export function sseEvent(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

export const SSE_DONE = "data: [DONE]\n\n";

const enc = new TextEncoder();

/**
 * A text/event-stream response fed by `frames`. `onGone` runs when the client disconnects or
 * stops reading (the generator is closed too), so the engine stops at once.
 */
export function sseResponse(frames: AsyncGenerator<string, void>, onGone: () => void, signal: AbortSignal): Response {
  let closed = false;
  const gone = () => {
    if (closed) return;
    closed = true;
    onGone();
    void frames.return(undefined).catch(() => {});
  };
  signal.addEventListener("abort", gone, { once: true });
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        for (;;) {
          const r = await frames.next();
          if (r.done) {
            closed = true;
            controller.close();
            return;
          }
          if (r.value !== "") {
            controller.enqueue(enc.encode(r.value));
            return;
          }
        }
      } catch (e) {
        closed = true;
        controller.error(e);
      }
    },
    cancel() {
      gone();
    },
  });
  return new Response(stream, {
    status: 200,
    headers: { "Content-Type": "text/event-stream", "Cache-Control": "no-cache", Connection: "keep-alive" },
  });
}
