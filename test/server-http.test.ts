// The HTTP layer of the real executable: loading state, API keys, CORS, error shapes, validation,
// info routes, limits (context, wait queue, body size) and cancellation.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCli } from "./exe.ts";
import { DEMO_MODEL, type RunningServer, ensureBuilt, post, startServer } from "./server-helpers.ts";


// servers answer slowly when the machine is busy (2 cores shared with other work)
setDefaultTimeout(60000);
let srv: RunningServer;
let keyed: RunningServer | undefined;
const dir = mkdtempSync(join(tmpdir(), "bloomery-http-"));

beforeAll(async () => {
  ensureBuilt();
  srv = await startServer(["-m", DEMO_MODEL, "-np", "2", "-c", "2048", "--metrics", "--alias", "demo-model,alt", "--slot-save-path", dir, "-ngl", "99"], {
    env: { BLOOMERY_MAX_QUEUE: "1", BLOOMERY_MAX_BODY_MB: "1" },
  });
}, 600000); // may include building dist/bloomery-serve (native libraries, CUDA when nvcc is there) on a busy machine

afterAll(async () => {
  await srv?.stop();
  await keyed?.stop();
});

const NOT_FOUND = { error: { code: 404, message: "File Not Found", type: "not_found_error" } };

describe("loading and API keys", () => {
  test("/health is 503 unavailable_error while loading, 200 after; keys from --api-key and --api-key-file; public routes", async () => {
    const keyFile = join(dir, "keys.txt");
    writeFileSync(keyFile, "file-key\n\n");
    keyed = await startServer(["-m", DEMO_MODEL, "-np", "1", "-c", "512", "--api-key", "k1", "--api-key-file", keyFile], {
      env: { BLOOMERY_TEST_LOAD_DELAY_MS: "1500" },
      waitReady: false,
    });
    const loading = await fetch(`${keyed.url}/health`);
    expect(loading.status).toBe(503);
    expect((await loading.json()) as any).toEqual({ error: { code: 503, message: "Loading model", type: "unavailable_error" } });
    const busy = await post(`${keyed.url}/v1/chat/completions`, { messages: [] });
    expect(busy.status).toBe(503);
    let ok: Response | undefined;
    for (let i = 0; i < 200; i++) {
      ok = await fetch(`${keyed.url}/health`);
      if (ok.status === 200) break;
      await Bun.sleep(50);
    }
    expect(ok!.status).toBe(200);
    expect(await ok!.json()).toEqual({ status: "ok" });
    expect(keyed.log()).toContain("2 keys loaded");

    const body = { prompt: "def", n_predict: 2 };
    const none = await post(`${keyed.url}/completion`, body);
    expect(none.status).toBe(401);
    expect(none.json).toEqual({ error: { code: 401, message: "Invalid API Key", type: "authentication_error" } });
    expect((await post(`${keyed.url}/completion`, body, { Authorization: "Bearer wrong" })).status).toBe(401);
    expect((await post(`${keyed.url}/completion`, body, { Authorization: "Bearer k1" })).status).toBe(200);
    expect((await post(`${keyed.url}/completion`, body, { "X-Api-Key": "k1" })).status).toBe(200);
    expect((await post(`${keyed.url}/completion`, body, { Authorization: "Bearer file-key" })).status).toBe(200);
    for (const p of ["/health", "/v1/health", "/models", "/v1/models"]) expect((await fetch(keyed.url + p)).status).toBe(200);
    expect((await fetch(`${keyed.url}/props`)).status).toBe(401);
    const pre = await fetch(`${keyed.url}/v1/chat/completions`, { method: "OPTIONS", headers: { Origin: "http://example.com", "Access-Control-Request-Method": "POST" } });
    expect(pre.status).toBe(200);
  });
});

describe("routes and errors", () => {
  test("unknown route: 404 in llama's exact shape", async () => {
    const r = await fetch(`${srv.url}/no/such/route`);
    expect(r.status).toBe(404);
    expect(await r.json()).toEqual(NOT_FOUND);
    expect((await post(`${srv.url}/v2/chat`, {})).json).toEqual(NOT_FOUND);
  });

  test("CORS: preflight answers with the allowed methods; responses carry Access-Control-Allow-Origin", async () => {
    const pre = await fetch(`${srv.url}/v1/chat/completions`, {
      method: "OPTIONS",
      headers: { Origin: "http://localhost:3000", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type,authorization" },
    });
    expect(pre.status).toBe(200);
    expect(pre.headers.get("access-control-allow-origin")).toBe("http://localhost:3000");
    expect(pre.headers.get("access-control-allow-methods")).toContain("POST");
    expect(pre.headers.get("access-control-allow-headers")).toBe("content-type,authorization");
    const r = await fetch(`${srv.url}/health`, { headers: { Origin: "http://a.example" } });
    expect(r.headers.get("access-control-allow-origin")).toBe("http://a.example");
    const e = await fetch(`${srv.url}/nope`, { headers: { Origin: "http://a.example" } });
    expect(e.headers.get("access-control-allow-origin")).toBe("http://a.example");
  });

  test("malformed JSON, an empty body and wrong field types are 400 invalid_request_error naming the problem", async () => {
    const bad = await post(`${srv.url}/v1/chat/completions`, '{"messages": [');
    expect(bad.status).toBe(400);
    expect(bad.json.error.type).toBe("invalid_request_error");
    expect(bad.json.error.code).toBe(400);
    expect(bad.json.error.message).toContain("not valid JSON");
    const empty = await post(`${srv.url}/completion`, "");
    expect(empty.status).toBe(400);
    const temp = await post(`${srv.url}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }], temperature: "hot" });
    expect(temp.status).toBe(400);
    expect(temp.json.error.message).toBe(`Field 'temperature': expected number, got "hot"`);
    const nested = await post(`${srv.url}/v1/messages`, { max_tokens: 4, messages: [{ role: 5, content: "x" }] });
    expect(nested.status).toBe(400);
    expect(nested.json.error.message).toContain("messages[0].role");
    const missing = await post(`${srv.url}/v1/chat/completions`, { model: "x" });
    expect(missing.status).toBe(400);
    expect(missing.json.error.message).toContain("messages");
    const range = await post(`${srv.url}/completion`, { prompt: "a", n_predict: -5 });
    expect(range.status).toBe(400);
    expect(range.json.error.message).toContain("n_predict");
    const role = await post(`${srv.url}/v1/chat/completions`, { messages: [{ content: "no role" }] });
    expect(role.status).toBe(400);
    expect(role.json.error.message).toContain("messages[0]");
    // a form-encoded body (curl -d) is still read as JSON; unknown fields are ignored
    const form = await fetch(`${srv.url}/completion`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: JSON.stringify({ prompt: "import", n_predict: 2, some_future_field: { a: 1 } }),
    });
    expect(form.status).toBe(200);
    expect(((await form.json()) as any).tokens_predicted).toBe(2);
  });

  test("routes the model cannot serve answer 501 not_supported_error", async () => {
    for (const p of ["/embedding", "/embeddings", "/v1/embeddings", "/rerank", "/v1/rerank", "/infill"]) {
      const r = await post(srv.url + p, { input: "x" });
      expect(r.status).toBe(501);
      expect(r.json.error.type).toBe("not_supported_error");
      expect(r.json.error.code).toBe(501);
    }
    const props = await post(`${srv.url}/props`, {});
    expect(props.status).toBe(501);
    expect(props.json.error.message).toContain("--props");
    expect((await post(`${srv.url}/slots/0?action=save`, { filename: "../x" })).status).toBe(400);
    expect((await post(`${srv.url}/slots/0?action=dance`, {})).json.error.message).toBe("Invalid action");
    expect((await post(`${srv.url}/slots/x?action=erase`, {})).json.error.message).toBe("Invalid slot ID");
  });

  test("/v1/models, /props and /slots describe the model, the alias and the slot split", async () => {
    const m: any = await (await fetch(`${srv.url}/v1/models`)).json();
    expect(m.object).toBe("list");
    // llama-server keeps the aliases in a std::set: the id is the first in byte order, all are listed
    expect(m.data[0].id).toBe("alt");
    expect(m.data[0].aliases).toEqual(["alt", "demo-model"]);
    expect(m.data[0].object).toBe("model");
    expect(m.data[0].meta).toMatchObject({ n_vocab: 8000, n_ctx: 1024, n_ctx_train: 32768, n_embd: 256 });
    expect(m.data[0].meta.n_params).toBeGreaterThan(1e6);
    const p: any = await (await fetch(`${srv.url}/props`)).json();
    expect(p.total_slots).toBe(2);
    expect(p.model_alias).toBe("alt");
    expect(p.default_generation_settings.n_ctx).toBe(1024);
    expect(p.default_generation_settings.params).toMatchObject({ temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, repeat_last_n: 64 });
    expect(p.chat_template).toContain("<|im_start|>");
    expect(p.eos_token).toBe("<|endoftext|>");
    expect(p.modalities).toEqual({ vision: false, video: false, audio: false });
    const s: any = await (await fetch(`${srv.url}/slots`)).json();
    expect(s.length).toBe(2);
    expect(s[0]).toMatchObject({ id: 0, n_ctx: 1024, is_processing: false });
    // -ngl 99 asks for the card: without one, placement says why the CPU runs the model
    expect(srv.log()).toMatch(/placement: no usable CUDA device \(.+\); every layer runs on the CPU|CUDA backend/);
  });

  test("slot save, erase and restore (--slot-save-path); the restored prefix is reused", async () => {
    const prompt = "import os\nimport sys\n\ndef main():\n";
    const first = await post(`${srv.url}/completion`, { prompt, n_predict: 4, id_slot: 1, temperature: 0 });
    expect(first.json.id_slot).toBe(1);
    const save = await post(`${srv.url}/slots/1?action=save`, { filename: "one.bin" });
    expect(save.status).toBe(200);
    expect(save.json).toMatchObject({ id_slot: 1, filename: "one.bin" });
    expect(save.json.n_saved).toBeGreaterThan(5);
    expect(save.json.n_written).toBeGreaterThan(0);
    const erase = await post(`${srv.url}/slots/1?action=erase`, {});
    expect(erase.json).toEqual({ id_slot: 1, n_erased: save.json.n_saved });
    const restore = await post(`${srv.url}/slots/1?action=restore`, { filename: "one.bin" });
    expect(restore.json.n_restored).toBe(save.json.n_saved);
    const again = await post(`${srv.url}/completion`, { prompt, n_predict: 4, id_slot: 1, temperature: 0 });
    expect(again.json.tokens_cached).toBeGreaterThan(5);
    expect(again.json.content).toBe(first.json.content);
    const missing = await post(`${srv.url}/slots/0?action=restore`, { filename: "nope.bin" });
    expect(missing.status).toBeGreaterThanOrEqual(400);
    expect(missing.json.error.message.length).toBeGreaterThan(0);
  });

  test("a request that bans every token is a 400 naming logit_bias, plain or streamed; the server goes on", async () => {
    const ban = Array.from({ length: 8000 }, (_, i) => [i, false]);
    const r = await post(`${srv.url}/completion`, { prompt: "def", n_predict: 3, logit_bias: ban });
    expect(r.status).toBe(400);
    expect(r.json.error.type).toBe("invalid_request_error");
    const s = await post(`${srv.url}/v1/chat/completions`, { messages: [{ role: "user", content: "x" }], max_tokens: 3, logit_bias: ban, stream: true });
    expect(s.status).toBe(400);
    expect(s.json.error.message).toContain("Field 'logit_bias': bans every token");
    expect((await post(`${srv.url}/completion`, { prompt: "def", n_predict: 3 })).status).toBe(200);
  });

  test("/tokenize, /detokenize and /apply-template", async () => {
    const t = await post(`${srv.url}/tokenize`, { content: "def main():\n    return 0" });
    expect(t.status).toBe(200);
    expect(t.json.tokens.length).toBeGreaterThan(3);
    const d = await post(`${srv.url}/detokenize`, { tokens: t.json.tokens });
    expect(d.json.content).toBe("def main():\n    return 0");
    const pieces = await post(`${srv.url}/tokenize`, { content: "<|im_start|>def", with_pieces: true });
    expect(pieces.json.tokens[0].piece).toBe("<|im_start|>");
    expect(pieces.json.tokens.map((x: { piece: string }) => x.piece).join("")).toBe("<|im_start|>def");
    const noSpecial = await post(`${srv.url}/tokenize`, { content: "<|im_start|>", parse_special: false });
    expect(noSpecial.json.tokens.length).toBeGreaterThan(1);
    expect((await post(`${srv.url}/detokenize`, { tokens: [999999] })).status).toBe(400);
    const a = await post(`${srv.url}/apply-template`, { messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }] });
    expect(a.json.prompt).toBe("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  });

  test("/metrics is Prometheus text with llamacpp: names", async () => {
    const g = await post(`${srv.url}/completion`, { prompt: "import os", n_predict: 3 });
    expect(g.status).toBe(200);
    const r = await fetch(`${srv.url}/metrics`);
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toContain("text/plain");
    const text = await r.text();
    expect(text).toContain("# TYPE llamacpp:prompt_tokens_total counter");
    const pred = /llamacpp:tokens_predicted_total (\d+)/.exec(text);
    expect(Number(pred![1])).toBeGreaterThanOrEqual(3);
    expect(text).toMatch(/llamacpp:requests_processing \d+/);
    // a 3-token generation is at least a prompt pass and two decode steps, each serving one slot
    expect(Number(/llamacpp:n_decode_total (\d+)/.exec(text)![1])).toBeGreaterThanOrEqual(3);
    expect(Number(/llamacpp:n_busy_slots_per_decode ([\d.]+)/.exec(text)![1])).toBeGreaterThanOrEqual(1);
    expect(text).toMatch(/bloomery:prompt_cache_card_bytes 0\n/); // the CPU keeps its cache in host RAM
  });
});

describe("limits", () => {
  test("a prompt longer than the slot context is exceed_context_size_error with n_prompt_tokens and n_ctx", async () => {
    const long = "x = 1\n".repeat(600);
    const r = await post(`${srv.url}/completion`, { prompt: long, n_predict: 1 });
    expect(r.status).toBe(400);
    expect(r.json.error.type).toBe("exceed_context_size_error");
    expect(r.json.error.n_ctx).toBe(1024);
    expect(r.json.error.n_prompt_tokens).toBeGreaterThan(1024);
    const c = await post(`${srv.url}/v1/chat/completions`, { messages: [{ role: "user", content: long }], stream: true });
    expect(c.status).toBe(400);
    expect(c.json.error.type).toBe("exceed_context_size_error");
  });

  test("a body over the size limit is refused with 413", async () => {
    const r = await post(`${srv.url}/completion`, { prompt: "a".repeat(1.5 * 1024 * 1024) });
    expect(r.status).toBe(413);
    expect(r.json.error.message).toContain("limit");
  });

  test("past the slots and the wait queue: 503 with Retry-After; dropped streams free their slots at once", async () => {
    const ctls: AbortController[] = [];
    const open = async () => {
      const ctl = new AbortController();
      ctls.push(ctl);
      const r = await fetch(`${srv.url}/completion`, {
        method: "POST",
        body: JSON.stringify({ prompt: "class A:", n_predict: 4000, ignore_eos: true, stream: true }),
        signal: ctl.signal,
      });
      return r;
    };
    // two slots busy and one request waiting fill the server (queue limit 1)
    const a = await open();
    const b = await open();
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    const c = open();
    // wait until the third one waits in the engine's queue
    for (let i = 0; i < 500; i++) {
      const m = await (await fetch(`${srv.url}/metrics`)).text();
      if (/llamacpp:requests_deferred 1\b/.test(m)) break;
      await Bun.sleep(10);
    }
    const refused = await post(`${srv.url}/completion`, { prompt: "x", n_predict: 1 });
    expect(refused.status).toBe(503);
    expect(refused.json.error.type).toBe("unavailable_error");
    expect(refused.headers.get("retry-after")).toBe("1");
    const slotsBusy: any = await (await fetch(`${srv.url}/slots`)).json();
    expect(slotsBusy.every((s: { is_processing: boolean }) => s.is_processing)).toBe(true);
    // read a little of one stream, then drop every connection
    const reader = a.body!.getReader();
    await reader.read();
    for (const ctl of ctls) ctl.abort();
    await c.catch(() => null);
    const t0 = Date.now();
    let idle = false;
    while (Date.now() - t0 < 3000) {
      const s: any = await (await fetch(`${srv.url}/slots`)).json();
      if (s.every((x: { is_processing: boolean }) => !x.is_processing)) {
        idle = true;
        break;
      }
      await Bun.sleep(20);
    }
    expect(idle).toBe(true);
    const m = await (await fetch(`${srv.url}/metrics`)).text();
    // the cancelled generations stopped long before their 4000 tokens
    expect(Number(/llamacpp:tokens_predicted_total (\d+)/.exec(m)![1])).toBeLessThan(4000);
    const after = await post(`${srv.url}/completion`, { prompt: "x", n_predict: 1 });
    expect(after.status).toBe(200);
  });
});

describe("command line", () => {
  test("-hf serves a model from the Hugging Face cache (offline); the model is named by the spec", async () => {
    const cache = join(dir, "hub");
    const commit = "0123456789abcdef0123456789abcdef01234567";
    const repoDir = join(cache, "models--acme--demo-GGUF");
    mkdirSync(join(repoDir, "refs"), { recursive: true });
    mkdirSync(join(repoDir, "snapshots", commit), { recursive: true });
    writeFileSync(join(repoDir, "refs", "main"), commit);
    copyFileSync(DEMO_MODEL, join(repoDir, "snapshots", commit, "demo-Q8_0.gguf"));
    const hf = await startServer(["-hf", "acme/demo-GGUF:q8_0", "--offline", "-c", "512", "-np", "1"], { env: { HF_HUB_CACHE: cache } });
    try {
      const m: any = await (await fetch(`${hf.url}/v1/models`)).json();
      expect(m.data[0].id).toBe("acme/demo-GGUF:q8_0");
      expect((await post(`${hf.url}/completion`, { prompt: "def", n_predict: 2 })).json.tokens_predicted).toBe(2);
    } finally {
      await hf.stop();
    }
  });

  test("an unknown flag is an error naming it (exit 2); a missing model file exits 3 (E_MODEL_NOT_FOUND)", () => {
    const r = runCli(["--no-such-flag"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("--no-such-flag");
    const m = runCli(["-m", join(dir, "missing.gguf"), "--port", "0"]);
    expect(m.code).toBe(3);
    expect(m.stderr).toContain("missing.gguf");
  });
});
