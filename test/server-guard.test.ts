// A server one request cannot freeze, and the small HTTP defects of issue 32, against the real
// executable: a body of 100,000 nested arrays and a 50 MB prompt answer a 4xx fast while another
// stream keeps flowing (the longest gap between its chunks is measured and printed); a client that
// sends headers and no body is closed by -to; the route comes from the path whatever the Host
// header; a request that can never fit is a 400 without Retry-After; a logit_bias that bans every
// token is a 400; slot file names with CR/LF are refused; a client's value in an error is cut and
// escaped; and each request gets its log line.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEMO_MODEL, type RunningServer, post, startServer } from "./server-helpers.ts";

setDefaultTimeout(120000);
let srv: RunningServer;
const slotDir = mkdtempSync(join(tmpdir(), "bloomery-guard-slots-"));

beforeAll(async () => {
  srv = await startServer(["-m", DEMO_MODEL, "-np", "2", "-c", "8192", "-to", "4", "-t", "2", "--slot-save-path", slotDir], { env: { BLOOMERY_MAX_QUEUE: "2" } });
}, 600000);
afterAll(async () => srv?.stop());

/** Waits until no slot is working (a stream the test left is cancelled and its slot released). */
async function idle(): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const slots = (await (await fetch(`${srv.url}/slots`)).json()) as { is_processing: boolean }[];
    if (slots.every((s) => !s.is_processing)) return;
    await Bun.sleep(50);
  }
}

/** A stream that runs while `during` does: the longest gap between its chunks meanwhile (ms). */
async function gapWhile<T>(during: () => Promise<T>): Promise<{ result: T; gapMs: number; ms: number }> {
  const ctl = new AbortController();
  const res = await fetch(`${srv.url}/completion`, {
    method: "POST", signal: ctl.signal,
    body: JSON.stringify({ prompt: "def main():\n", n_predict: 100000, ignore_eos: true, stream: true, temperature: 0.5 }),
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const times: number[] = [];
  const reading = (async () => {
    try {
      for (;;) {
        const r = await reader.read();
        if (r.done) return;
        times.push(performance.now());
      }
    } catch {
      // aborted
    }
  })();
  while (times.length < 3) await Bun.sleep(20); // it flows before the bad request
  const t0 = performance.now();
  let result: T;
  let t1: number;
  try {
    result = await during();
    t1 = performance.now();
    await Bun.sleep(300); // a chunk after it, so a stall that lasts to the end counts
  } finally {
    ctl.abort();
    await reading;
    await idle();
  }
  const inside = [t0, ...times.filter((t) => t > t0), Math.max(t1, times[times.length - 1] ?? t1)];
  let gap = 0;
  for (let i = 1; i < inside.length; i++) gap = Math.max(gap, inside[i] - inside[i - 1]);
  return { result, gapMs: gap, ms: t1 - t0 };
}

function report(what: string, status: number, ms: number, gapMs: number): void {
  console.log(`measure: ${what}: status ${status} in ${ms.toFixed(0)} ms; a concurrent stream's longest gap between chunks ${gapMs.toFixed(0)} ms`);
}

/** Raw HTTP over TCP (what fetch will not send: a Host of one letter, none at all, a body that never comes). */
function raw(request: string, waitMs: number): Promise<{ text: string; closedAfterMs: number | null }> {
  const port = srv.port;
  return new Promise((resolve) => {
    let text = "";
    const t0 = performance.now();
    let closed: number | null = null;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      resolve({ text, closedAfterMs: closed });
    };
    void Bun.connect({
      hostname: "127.0.0.1", port,
      socket: {
        open(s) {
          s.write(request);
          setTimeout(() => {
            s.end();
            finish();
          }, waitMs);
        },
        data(_s, d) {
          text += d.toString();
        },
        close() {
          closed = performance.now() - t0;
          finish();
        },
        error() {
          closed = performance.now() - t0;
          finish();
        },
      },
    });
  });
}

describe("one request cannot freeze the server", () => {
  test("control: the stream's longest gap between chunks over 3 s with nothing else running", async () => {
    const { gapMs, ms } = await gapWhile(() => Bun.sleep(3000));
    report("control (nothing else)", 200, ms, gapMs);
    expect(gapMs).toBeLessThan(3000);
  });

  test("100,000 nested arrays (200 KB) in a field the schema checks: a 400 at once, the other stream keeps flowing", async () => {
    // before: typebox's validation error walked them, 24.8 s and a 500 (Maximum call stack size exceeded)
    const body = `{"prompt":"x","n_predict":1,"stop":${"[".repeat(100000)}${"]".repeat(100000)}}`;
    const { result, gapMs, ms } = await gapWhile(() => post(`${srv.url}/completion`, body));
    report("100,000 nested arrays", result.status, ms, gapMs);
    expect(result.status).toBe(400);
    expect(result.json.error.message).toContain("more than 128 levels deep");
    expect(ms).toBeLessThan(3000);
    expect(gapMs).toBeLessThan(3000);
  });

  test("30,000 nested objects in a chat message: a 400 at once", async () => {
    const body = `{"messages":[{"role":"user","content":"hi"}],"x":${'{"a":'.repeat(30000)}1${"}".repeat(30000)}}`;
    const t0 = performance.now();
    const r = await post(`${srv.url}/v1/chat/completions`, body);
    expect(r.status).toBe(400);
    expect(performance.now() - t0).toBeLessThan(3000);
  });

  test("a 50 MB prompt: exceed_context_size_error at once, the other stream keeps flowing", async () => {
    const body = JSON.stringify({ prompt: "def f(x):\n    return x\n".repeat(2_200_000), n_predict: 1 });
    expect(body.length).toBeGreaterThan(50e6);
    const { result, gapMs, ms } = await gapWhile(() => post(`${srv.url}/completion`, body));
    report("a 50 MB prompt", result.status, ms, gapMs);
    expect(result.status).toBe(400);
    expect(result.json.error.type).toBe("exceed_context_size_error");
    expect(ms).toBeLessThan(10000);
    expect(gapMs).toBeLessThan(3000);
  });

  test("a 1 MB prompt is tokenized off the serving thread: its 400 comes while the stream flows", async () => {
    const body = JSON.stringify({ messages: [{ role: "user", content: "import os\nprint(os.getcwd())\n".repeat(35000) }], max_tokens: 1 });
    const { result, gapMs, ms } = await gapWhile(() => post(`${srv.url}/v1/chat/completions`, body));
    report("a 1 MB chat message", result.status, ms, gapMs);
    expect(result.status).toBe(400);
    expect(result.json.error.type).toBe("exceed_context_size_error");
    expect(gapMs).toBeLessThan(3000);
  });

  test("slowloris: headers of a generation route and no body are closed by -to (4 s)", async () => {
    const r = await raw("POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", 20000);
    console.log(`measure: slowloris (headers, no body) on /completion with -to 4: closed after ${r.closedAfterMs?.toFixed(0)} ms`);
    expect(r.closedAfterMs).not.toBeNull();
    expect(r.closedAfterMs!).toBeLessThan(14000);
    // the server still serves
    expect((await fetch(`${srv.url}/health`)).status).toBe(200);
  });

  test("a generation with its body sent is not timed out by -to however long it runs", async () => {
    const r = await post(`${srv.url}/completion`, { prompt: "def main():\n", n_predict: 40, ignore_eos: true });
    expect(r.status).toBe(200);
    expect(r.json.tokens_predicted).toBe(40);
  });
});

describe("HTTP details", () => {
  test("Host: x routes by the path (/health, /v1/completions in OpenAI's shape); no Host header at all is served", async () => {
    const h = await raw("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5000);
    expect(h.text).toStartWith("HTTP/1.1 200");
    const body = JSON.stringify({ prompt: "def", max_tokens: 2 });
    const c = await raw(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`, 20000);
    expect(c.text).toStartWith("HTTP/1.1 200");
    expect(c.text).toContain('"object":"text_completion"');
    const none = await raw("GET /health HTTP/1.0\r\n\r\n", 5000);
    expect(none.text).toMatch(/^HTTP\/1\.[01] 200/);
    expect(none.text).toContain('"status":"ok"');
  });

  test("more prompts than slots and queue can ever hold: a 400 without Retry-After on an idle server", async () => {
    const r = await post(`${srv.url}/completion`, { prompt: ["a", "b", "c", "d", "e"], n_predict: 1 });
    expect(r.status).toBe(400);
    expect(r.headers.get("retry-after")).toBeNull();
    expect(r.json.error.message).toContain("more than this server can ever hold: 2 slots and 2 queue places");
    // four fit
    expect((await post(`${srv.url}/completion`, { prompt: ["a", "b", "c", "d"], n_predict: 1 })).status).toBe(200);
  });

  test("a logit_bias that bans every token: a 400 naming logit_bias", async () => {
    const r = await post(`${srv.url}/completion`, { prompt: "def", n_predict: 2, logit_bias: Array.from({ length: 8000 }, (_, i) => [i, false]) });
    expect(r.status).toBe(400);
    expect(r.json.error.message).toContain("Field 'logit_bias': bans every token of the vocabulary (8000 of 8000)");
  });

  test("slot file names with CR or LF are refused", async () => {
    for (const filename of ["a\r\nb.bin", "x\n", "bad\u0007.bin"]) {
      const r = await post(`${srv.url}/slots/0?action=save`, { filename });
      expect(r.status).toBe(400);
      expect(r.json.error.message).toBe("Invalid filename");
    }
    expect((await post(`${srv.url}/slots/0?action=save`, { filename: "ok.bin" })).status).toBe(200);
  });

  test("a client's value in an error is cut and its control characters escaped", async () => {
    const evil = `\u001b[31m\r\nsrv  forged line${"A".repeat(100000)}`;
    const r = await post(`${srv.url}/completion`, { prompt: "x", temperature: evil });
    expect(r.status).toBe(400);
    const m = r.json.error.message as string;
    expect(m.length).toBeLessThan(200);
    expect(m).not.toMatch(/[\u0000-\u001f\u007f]/);
    expect(m).toContain("\\u001b[31m\\r\\n");
    const a = await post(`${srv.url}/v1/messages`, { max_tokens: 1, messages: [{ role: `\u001b]0;x\u0007${"B".repeat(50000)}`, content: "hi" }] });
    expect(a.status).toBe(400);
    expect((a.json.error.message as string).length).toBeLessThan(300);
    expect(a.json.error.message).not.toMatch(/[\u0000-\u001f]/);
  });

  test("a log line per request: method, route, client, status, tokens, time; and llama-server's timing lines", async () => {
    const r = await post(`${srv.url}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
    expect(r.status).toBe(200);
    await Bun.sleep(200);
    expect(srv.log()).toMatch(/srv {2}log_server_r: done request: POST \/v1\/chat\/completions 127\.0\.0\.1 200 \| prompt \d+ tokens \(\d+ cached\), generated 3 \(\d+\.\d+ t\/s\) \| \d+\.\d+ ms/);
    expect(srv.log()).toMatch(/slot print_timing: id +\d+ \| task \d+ \| prompt eval time = +\d+\.\d+ ms \/ +\d+ tokens/);
    expect(srv.log()).toMatch(/slot print_timing: id +\d+ \| task \d+ \| +eval time = +\d+\.\d+ ms \/ +3 tokens/);
    // a stream's line comes when it ends
    const s = await fetch(`${srv.url}/completion`, { method: "POST", body: JSON.stringify({ prompt: "def", n_predict: 2, stream: true }) });
    await s.text();
    await Bun.sleep(200);
    expect(srv.log()).toMatch(/done request: POST \/completion 127\.0\.0\.1 200 \| prompt \d+ tokens \(\d+ cached\), generated 2/);
    // errors too; polling routes are not logged
    await post(`${srv.url}/completion`, { prompt: "x", n_predict: "a" });
    await fetch(`${srv.url}/health`);
    await Bun.sleep(100);
    expect(srv.log()).toMatch(/done request: POST \/completion 127\.0\.0\.1 400 \| \d+\.\d+ ms/);
    expect(srv.log()).not.toContain("done request: GET /health");
  });
});
