// The web UI's HTTP side against the real executable with the demo model (no browser): the pages
// and assets at / and /placement, GET /placement/state (JSON and SSE), --no-ui, --path,
// --api-prefix and API keys as llama-server treats its frontend paths. The page itself is driven
// in a real browser by test/webui-browser.test.ts.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FlagError, parseArgs } from "../src/cli/flags.ts";
import { EXE } from "./exe.ts";
import { ensureBuilt, post, startServer, type RunningServer } from "./server-helpers.ts";
import type { PlacementState } from "../src/engine/placement-types.ts";

setDefaultTimeout(60000);
let ui: RunningServer, off: RunningServer, pre: RunningServer, dir: RunningServer;
const KEY = "sekrit-key";
const site = mkdtempSync(join(tmpdir(), "bloomery-static-"));
mkdirSync(join(site, "sub"));
writeFileSync(join(site, "index.html"), "<h1>mine</h1>");
writeFileSync(join(site, "sub", "a.txt"), "hello");
writeFileSync(join(tmpdir(), "bloomery-outside.txt"), "outside");
symlinkSync(join(tmpdir(), "bloomery-outside.txt"), join(site, "leak.txt"));

beforeAll(async () => {
  [ui, off, pre, dir] = await Promise.all([
    startServer(["--demo", "-np", "2"]),
    startServer(["--demo", "-np", "1", "--no-ui"]),
    startPrefixed(["--demo", "-np", "1", "--api-prefix", "/llm/", "--api-key", KEY]),
    startServer(["--demo", "-np", "1", "--path", site, "--api-key", KEY]),
  ]);
}, 600000);
afterAll(async () => {
  await Promise.all([ui?.stop(), off?.stop(), pre?.stop(), dir?.stop()]);
});

/** startServer waits for /health, which lives under the prefix here. */
async function startPrefixed(args: string[]): Promise<RunningServer> {
  const s = await startServer(args, { waitReady: false });
  const t0 = Date.now();
  while ((await fetch(`${s.url}/llm/health`).catch(() => null))?.status !== 200) {
    if (s.proc.exitCode !== null || Date.now() - t0 > 60000) throw new Error(`the prefixed server did not become ready:\n${s.log()}`);
    await Bun.sleep(50);
  }
  return s;
}

const auth = { Authorization: `Bearer ${KEY}` };
/** The fields these tests read of an answer: llama's error, /props' ui and model_alias. */
interface Body {
  error: { message: string; type: string };
  ui: boolean;
  model_alias: string;
}
const body = async (r: Response) => (await r.json()) as Body;
const state = async (base: string, headers: Record<string, string> = {}) => (await (await fetch(`${base}/placement/state`, { headers })).json()) as PlacementState;

describe("the built-in pages", () => {
  test("/, /index.html and /placement answer the page; its script and style sheet are embedded", async () => {
    for (const p of ["/", "/index.html", "/placement"]) {
      const r = await fetch(`${ui.url}${p}`);
      expect(r.status).toBe(200);
      expect(r.headers.get("content-type")).toBe("text/html; charset=utf-8");
      expect(r.headers.get("content-security-policy")).toContain("script-src 'self'");
      const html = await r.text();
      expect(html).toContain('src="webui/app.js"');
      expect(html).toContain('href="webui/style.css"');
    }
    const js = await fetch(`${ui.url}/webui/app.js`);
    expect(js.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    expect((await js.text()).length).toBeGreaterThan(5000);
    const css = await fetch(`${ui.url}/webui/style.css`);
    expect(css.headers.get("content-type")).toBe("text/css; charset=utf-8");
    expect(await css.text()).toContain(".heatmap");
  });

  test("ETags answer 304; HEAD has no body; other methods and unknown assets are the API's 404", async () => {
    const first = await fetch(`${ui.url}/webui/app.js`);
    const etag = first.headers.get("etag")!;
    expect(etag).toMatch(/^"[0-9a-z]+"$/);
    expect((await fetch(`${ui.url}/webui/app.js`, { headers: { "If-None-Match": etag } })).status).toBe(304);
    const head = await fetch(`${ui.url}/`, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe("");
    const nope = await fetch(`${ui.url}/webui/nope.js`);
    expect(nope.status).toBe(404);
    expect((await body(nope)).error.type).toBe("not_found_error");
    expect((await post(`${ui.url}/`, {})).status).toBe(404);
  });

  test("/props says the UI is on; --no-ui turns the pages off and keeps /placement/state", async () => {
    expect((await body(await fetch(`${ui.url}/props`))).ui).toBe(true);
    expect((await body(await fetch(`${off.url}/props`))).ui).toBe(false);
    for (const p of ["/", "/placement", "/webui/app.js"]) {
      const r = await fetch(`${off.url}${p}`);
      expect(r.status).toBe(404);
      expect((await body(r)).error.message).toBe("File Not Found");
    }
    expect((await state(off.url)).object).toBe("bloomery.placement");
    expect(off.log()).toContain("the web UI is disabled");
  });

  test("the page answers while the model loads; the API answers 503; SIGTERM then still exits", async () => {
    const slow = await startServer(["--demo", "-np", "1"], { env: { BLOOMERY_TEST_LOAD_DELAY_MS: "3000" }, waitReady: false });
    try {
      expect((await fetch(`${slow.url}/`)).status).toBe(200);
      expect((await fetch(`${slow.url}/webui/app.js`)).status).toBe(200);
      const props = await fetch(`${slow.url}/props`);
      expect(props.status).toBe(503);
      expect((await body(props)).error.message).toBe("Loading model");
    } finally {
      // a stop during the load used to leave the loaded engine worker holding the process open
      slow.proc.kill("SIGTERM");
      const code = await Promise.race([slow.proc.exited, Bun.sleep(20000).then(() => "still running")]);
      if (code === "still running") slow.proc.kill("SIGKILL");
      expect(code).toBe(0);
    }
  });
});

describe("GET /placement/state", () => {
  test("per layer the tier and the demo model's 8 experts; the CPU's router picks counted, two a token a layer", async () => {
    const s = await state(ui.url);
    expect(s.object).toBe("bloomery.placement");
    expect(s.backend).toBe("CPU");
    expect(s.layers.map((l) => l.layer)).toEqual([0, 1, 2, 3]);
    for (const l of s.layers) {
      expect(l.tier).toBe("host");
      expect(l.n_expert).toBe(8);
    }
    expect(s.n_expert_used).toBe(2);
    expect(s.plan?.line).toStartWith("placement: host:");
    expect(s.promotion).toBeNull();
    expect(s.expert_cache).toBeNull();
    // the CPU router counts its picks (bl_cpu_expert_picks): each layer's are n_expert_used a token routed so far
    expect(s.picks.available).toBe(true);
    expect(s.picks.reason).toBeUndefined();
    const sums = s.layers.map((l) => l.picks!.reduce((a, b) => a + b, 0));
    expect(new Set(sums).size).toBe(1);
    expect(sums[0] % s.n_expert_used).toBe(0);
    expect(s.picks.total).toBe(sums[0] * s.layers.length);
  });

  test("each forward pass is a step with its tokens and time (all on the CPU here); prompt cache entries appear", async () => {
    const before = await state(ui.url);
    const words = ["alpha", "bravo", "charlie"];
    for (const w of words) {
      const prompt = `def ${w}_handler(request, response, context, settings, logger):\n    `;
      const r = await post(`${ui.url}/completion`, { prompt, n_predict: 4, temperature: 0 });
      expect(r.status).toBe(200);
    }
    const after = await state(ui.url);
    expect(after.steps.total).toBeGreaterThanOrEqual(before.steps.total + 3 * 4);
    expect(after.engine.n_decode).toBeGreaterThan(before.engine.n_decode);
    const last = after.steps.recent.at(-1)!;
    expect(last.tokens).toBeGreaterThan(0);
    expect(last.ms).toBeGreaterThan(0);
    expect(last.cpu_ms).toBe(last.ms);
    expect(last.card_ms).toBe(0);
    expect(last.copy_ms).toBe(0);
    expect(after.steps.recent.some((r) => r.prompt_tokens > 10)).toBe(true);
    // two slots, three prompts: the third took a slot whose prompt went to the cache
    expect(after.prompt_cache.entries.length).toBeGreaterThanOrEqual(1);
    const e = after.prompt_cache.entries[0];
    expect(e.n_tokens).toBeGreaterThanOrEqual(16);
    expect(e.where).toBe("host");
    expect(words.some((w) => e.preview?.includes(`def ${w}_handler`))).toBe(true);
  });

  test("?stream=1 sends one placement event a period until the client leaves", async () => {
    const ctl = new AbortController();
    const r = await fetch(`${ui.url}/placement/state?stream=1&interval_ms=250`, { signal: ctl.signal });
    expect(r.headers.get("content-type")).toBe("text/event-stream");
    const reader = r.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    const t0 = Date.now();
    while ((text.match(/\n\n/g) ?? []).length < 3 && Date.now() - t0 < 20000) text += (await reader.read()).value ?? "";
    ctl.abort();
    const events = text.split("\n\n").filter((b) => b.startsWith("event: placement\ndata: "));
    expect(events.length).toBeGreaterThanOrEqual(3);
    for (const ev of events) expect((JSON.parse(ev.slice(ev.indexOf("data: ") + 6)) as PlacementState).object).toBe("bloomery.placement");
    const accept = await fetch(`${ui.url}/placement/state?interval_ms=250`, { headers: { Accept: "text/event-stream" }, signal: AbortSignal.timeout(3000) });
    expect(accept.headers.get("content-type")).toBe("text/event-stream");
    await accept.body?.cancel();
  });

  test("bad parameters are 400s naming the field", async () => {
    const a = await fetch(`${ui.url}/placement/state?interval_ms=5`);
    expect(a.status).toBe(400);
    expect((await body(a)).error.message).toContain("interval_ms");
    const b = await fetch(`${ui.url}/placement/state?stream=maybe`);
    expect(b.status).toBe(400);
    expect((await body(b)).error.message).toContain("'stream'");
  });

  test("--no-slots hides the prompt cache entries' text", async () => {
    const s = await startServer(["--demo", "-np", "1", "--no-slots"]);
    try {
      for (const w of ["one", "two"]) await post(`${s.url}/completion`, { prompt: `class ${w.toUpperCase()}Service(BaseService, Mixin, Other, More):\n    `, n_predict: 2 });
      const st = await state(s.url);
      expect(st.prompt_cache.entries.length).toBeGreaterThanOrEqual(1);
      expect(st.prompt_cache.entries.every((e) => e.preview === undefined)).toBe(true);
    } finally {
      await s.stop();
    }
  });
});

describe("--api-prefix and --api-key", () => {
  test("every route lives under the prefix; outside it is 404 (401 first without a key)", async () => {
    expect((await fetch(`${pre.url}/llm/health`)).status).toBe(200);
    expect((await fetch(`${pre.url}/llm/props`)).status).toBe(401);
    const props = await fetch(`${pre.url}/llm/props`, { headers: auth });
    expect(props.status).toBe(200);
    expect((await body(props)).model_alias).toBe("bloomery-demo");
    expect((await fetch(`${pre.url}/props`)).status).toBe(401);
    expect((await fetch(`${pre.url}/props`, { headers: auth })).status).toBe(404);
    expect((await fetch(`${pre.url}/llmx/props`, { headers: auth })).status).toBe(404);
    const chat = await post(`${pre.url}/llm/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }], max_tokens: 3 }, auth);
    expect(chat.status).toBe(200);
    expect(chat.json.choices[0].message.role).toBe("assistant");
    expect((await fetch(`${pre.url}/llm/placement/state`)).status).toBe(401);
    expect((await state(`${pre.url}/llm`, auth)).layers.length).toBe(4);
    expect(pre.log()).toContain("at /llm/");
  });

  test("the pages are public under the prefix (they ask for the key); the prefix alone redirects to it with a slash", async () => {
    for (const p of ["/llm/", "/llm/placement", "/llm/index.html", "/llm/webui/app.js", "/llm/webui/style.css"]) expect((await fetch(`${pre.url}${p}`)).status).toBe(200);
    expect((await fetch(`${pre.url}/`)).status).toBe(401);
    const bare = await fetch(`${pre.url}/llm`, { redirect: "manual" });
    expect(bare.status).toBe(308);
    expect(bare.headers.get("location")).toBe("/llm/");
  });

  test("the agent events' url includes the prefix", async () => {
    ensureBuilt();
    const proc = Bun.spawn([EXE, "--demo", "-np", "1", "--port", "0", "--json", "--api-prefix", "/llm"], { stdout: "pipe", stderr: "pipe" });
    try {
      let out = "";
      let ready: { url: string } | undefined;
      const t0 = Date.now();
      const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
      const dec = new TextDecoder();
      while (!ready && Date.now() - t0 < 60000) {
        const { value, done } = await reader.read();
        if (done) break;
        out += dec.decode(value, { stream: true });
        ready = out.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as { event: string; url: string }).find((e) => e.event === "ready");
      }
      expect(ready?.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/llm$/);
      expect((await fetch(`${ready!.url}/health`)).status).toBe(200);
    } finally {
      proc.kill("SIGTERM");
      await proc.exited;
    }
  });

  test("a prefix that is not a path is refused at the start", () => {
    const prefixOf = (p: string) => {
      const r = parseArgs(["--api-prefix", p], {});
      return r.action === "serve" ? r.options.apiPrefix : undefined;
    };
    expect(prefixOf("llm/")).toBe("/llm");
    expect(prefixOf("/a/b")).toBe("/a/b");
    expect(prefixOf("/")).toBe("");
    for (const bad of ["/a/../b", "/a?b", "/a b", "/a//b"]) {
      let err: unknown;
      try {
        parseArgs(["--api-prefix", bad], {});
      } catch (e) {
        err = e;
      }
      expect((err as FlagError).flag).toBe("--api-prefix");
      expect((err as FlagError).message).toContain("not a path prefix");
    }
  });
});

describe("--path", () => {
  test("serves the directory instead of the built-in UI (public, as the UI is); the API stays", async () => {
    const index = await fetch(`${dir.url}/`);
    expect(index.status).toBe(200);
    expect(await index.text()).toBe("<h1>mine</h1>");
    expect(index.headers.get("content-type")).toStartWith("text/html");
    const a = await fetch(`${dir.url}/sub/a.txt`);
    expect(await a.text()).toBe("hello");
    expect((await fetch(`${dir.url}/sub/a.txt`, { headers: { "If-None-Match": a.headers.get("etag")! } })).status).toBe(304);
    expect((await fetch(`${dir.url}/webui/app.js`)).status).toBe(401);
    expect((await fetch(`${dir.url}/webui/app.js`, { headers: auth })).status).toBe(404);
    expect((await fetch(`${dir.url}/health`)).status).toBe(200);
    expect((await fetch(`${dir.url}/props`, { headers: auth })).status).toBe(200);
  });

  test("nothing outside the directory: dot segments, encoded ones and symbolic links out of it", async () => {
    for (const p of ["/../bloomery-outside.txt", "/%2e%2e/bloomery-outside.txt", "/sub/..%2f..%2fbloomery-outside.txt", "/leak.txt", "/%00"]) {
      const r = await fetch(`${dir.url}${p}`, { headers: auth });
      expect(r.status).toBe(404);
      expect(await r.text()).not.toContain("outside");
    }
  });

  test("a --path that is not a directory is refused before anything loads", () => {
    ensureBuilt();
    const p = Bun.spawnSync([EXE, "--demo", "--port", "0", "--path", join(site, "missing")], { stderr: "pipe" });
    expect(p.exitCode).toBe(2);
    expect(p.stderr.toString()).toContain("static assets path not found");
    const f = Bun.spawnSync([EXE, "--demo", "--port", "0", "--path", join(site, "index.html")], { stderr: "pipe" });
    expect(f.exitCode).toBe(2);
    expect(f.stderr.toString()).toContain("is not a directory");
  });
});
