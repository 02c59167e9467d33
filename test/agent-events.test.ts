// Agent mode's event stream from the real executable: with --json (or BLOOMERY_JSON_EVENTS=1) and
// --port 0, stdout carries one JSON object a line - download progress, plan, listening, loading,
// ready with the URL, stopped - while the human log stays on stderr; a start by known name.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { ensureBuilt } from "./server-helpers.ts";
import { FIXTURES } from "./paths.ts";
import { StandInHub, commitOf } from "./hf-hub.ts";
import { agentEnv, run, start } from "./agent-helpers.ts";

setDefaultTimeout(90000);
const DEMO = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");
const DEMO_BYTES = new Uint8Array(await Bun.file(DEMO).arrayBuffer());
const hub = new StandInHub();

beforeAll(() => {
  ensureBuilt();
  hub.start();
  hub.repos.set("acme/demo-GGUF", { commit: commitOf("demo-events"), files: [{ path: "demo-Q8_0.gguf", content: DEMO_BYTES }] });
  // a known repository whose Q4_K_M and IQ4_XS files are (small) stand-ins
  hub.repos.set("unsloth/Qwen3-30B-A3B-Instruct-2507-GGUF", {
    commit: commitOf("instruct"),
    files: [
      { path: "Qwen3-30B-A3B-Instruct-2507-IQ4_XS.gguf", content: DEMO_BYTES },
      { path: "Qwen3-30B-A3B-Instruct-2507-Q4_K_M.gguf", content: DEMO_BYTES },
    ],
  });
}, 600000); // may build the tests' executable (build/test/bloomery-serve)
afterAll(() => hub.stop());

const names = (events: Record<string, any>[]) => events.map((e) => e.event);

describe("events on stdout", () => {
  test("--demo --port 0 --json: listening, plan, loading, ready (the URL serves), stopped", async () => {
    const s = start(["--demo", "--port", "0", "--json", "-c", "2048", "-np", "1"]);
    const ready = await s.waitFor("ready");
    expect(ready).toMatchObject({ event: "ready", model: "bloomery-demo", n_slots: 1, n_ctx_slot: 2048 });
    expect(ready.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(ready.urls).toEqual([ready.url]);
    expect(ready.load_seconds).toBeGreaterThanOrEqual(0);
    expect(["CPU", "CUDA"]).toContain(ready.backend);
    expect((await fetch(`${ready.url}/health`)).status).toBe(200);
    const models = (await (await fetch(`${ready.url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data[0].id).toBe("bloomery-demo");
    expect(names(s.events)).toEqual(["listening", "plan", "loading", "ready"]);
    const [listening, plan, loading] = s.events;
    expect(listening.url).toBe(ready.url);
    expect(plan).toMatchObject({ dry_run: false, model: { source: "demo", name: "bloomery-demo" }, context: { n_ctx: 2048, n_slots: 1 }, memory: { fits: true } });
    expect(loading.path).toBe(plan.model.path);
    // the human log is on stderr
    expect(s.stderr()).toContain("server is listening on");
    expect(await s.stop()).toBe(0);
    expect(s.events[s.events.length - 1]).toEqual({ event: "stopped", exit_code: 0 });
  });

  test("BLOOMERY_JSON_EVENTS=1 turns the events on without --json", async () => {
    const s = start(["-m", DEMO, "--port", "0", "-c", "1024", "-np", "1"], agentEnv({ BLOOMERY_JSON_EVENTS: "1" }));
    const ready = await s.waitFor("ready");
    expect(ready.model).toBe("bloomery-demo-q8_0.gguf");
    expect(await s.stop()).toBe(0);
  });

  test("without --json stdout stays empty", async () => {
    const r = await run(["-m", DEMO, "--port", "0", "-c", "999999999999"]); // refused at parse: out of range
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    const s = start(["-m", DEMO, "--port", "0", "-c", "1024", "-np", "1"]);
    const t0 = Date.now();
    while (!/model loaded/.test(s.stderr()) && Date.now() - t0 < 60000) await Bun.sleep(50);
    expect(await s.stop()).toBe(0);
    expect(s.events).toEqual([]);
  });

  test("-hf: download progress precedes the plan; the model is named by the spec", async () => {
    const s = start(["-hf", "acme/demo-GGUF:Q8_0", "--port", "0", "--json", "-c", "1024", "-np", "1"], agentEnv({ HF_ENDPOINT: hub.url }));
    const ready = await s.waitFor("ready");
    expect(ready.model).toBe("acme/demo-GGUF:Q8_0");
    const seq = names(s.events);
    expect(seq[0]).toBe("listening");
    expect(seq.slice(-3)).toEqual(["plan", "loading", "ready"]);
    const dl = s.events.slice(1, -3);
    expect(dl[0]).toMatchObject({ event: "download_plan", repo: "acme/demo-GGUF", bytes_total: DEMO_BYTES.length, bytes_cached: 0, files: [{ path: "demo-Q8_0.gguf", size: DEMO_BYTES.length, cached: false }] });
    expect(dl.map((e) => e.event)).toContain("download_start");
    expect(dl[dl.length - 1]).toMatchObject({ event: "download_done", file: "demo-Q8_0.gguf", bytes_total: DEMO_BYTES.length, cached: false });
    for (const e of dl) expect(e.event).toStartWith("download_");
    const plan = s.events[s.events.length - 3];
    expect(plan.model).toMatchObject({ source: "hf", repo: "acme/demo-GGUF", quant: "Q8_0", sizes_from: "file" });
    expect(plan.model.path).toBe(dl[dl.length - 1].path);
    expect(await s.stop()).toBe(0);
  });
});

describe("-m NAME", () => {
  test("-m bloomery-demo is the built-in demo", async () => {
    const s = start(["-m", "BLOOMERY-DEMO", "--port", "0", "--json", "-c", "1024", "-np", "1"]);
    const ready = await s.waitFor("ready");
    expect(ready.model).toBe("bloomery-demo");
    expect(s.events[1].model.source).toBe("demo");
    expect(await s.stop()).toBe(0);
  });

  test("a known name downloads its repository's recommended quant and serves under its name (or is refused before the download when it does not fit)", async () => {
    const env = agentEnv({ HF_ENDPOINT: hub.url });
    const rec = (await run(["--recommend", "--json"], env)).events[0].models.find((m: { name: string }) => m.name === "Qwen3-30B-A3B-Instruct-2507");
    const from = hub.log.length;
    const s = start(["-m", "qwen3-30b-a3b-instruct", "--port", "0", "--json", "-c", "1024", "-np", "1"], env);
    if (!rec.fits) {
      const err = await s.waitFor("error");
      expect(err.code).toBe("E_DOES_NOT_FIT");
      expect(await s.proc.exited).toBe(5);
      expect(hub.log.slice(from)).toEqual([]);
      console.log("note: Qwen3-30B-A3B does not fit this machine; checked that it is refused before any download");
      return;
    }
    const ready = await s.waitFor("ready");
    expect(ready.model).toBe("Qwen3-30B-A3B-Instruct-2507");
    const file = `Qwen3-30B-A3B-Instruct-2507-${rec.recommended.quant}.gguf`;
    expect(s.events.find((e) => e.event === "download_done")).toMatchObject({ repo: "unsloth/Qwen3-30B-A3B-Instruct-2507-GGUF", file });
    const plan = s.events.find((e) => e.event === "plan")!;
    expect(plan.model).toMatchObject({ source: "known", repo: "unsloth/Qwen3-30B-A3B-Instruct-2507-GGUF", quant: rec.recommended.quant, quant_chosen: "recommended" });
    expect(s.stderr()).toContain(`qwen3-30b-a3b-instruct is unsloth/Qwen3-30B-A3B-Instruct-2507-GGUF:${rec.recommended.quant}`);
    expect(hub.log.slice(from).filter((q) => q.path.includes("/resolve/")).map((q) => q.path.replace(/^.*\//, ""))).toEqual([file]);
    expect(await s.stop()).toBe(0);
  });
});
