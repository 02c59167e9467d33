// The agent interface of the real executable: `--recommend --json`, `--dry-run --json` (file, known
// name, -hf against a stand-in hub), -m NAME, and every named exit code with the next command, in
// the message on stderr and in the JSON error event on stdout.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureBuilt } from "./server-helpers.ts";
import { FIXTURES } from "./paths.ts";
import { StandInHub, bytes, commitOf } from "./hf-hub.ts";
import { agentEnv, run } from "./agent-helpers.ts";
import { EXIT_CODES, HF_EXIT, AgentError, engineLoadError, toAgentError, shellQuote, withoutFlags } from "../src/cli/agent-exit.ts";
import { HF_ERROR_CODES, HfError } from "../src/hf/index.ts";
import { GgufError, GgufWriter } from "../src/gguf/index.ts";
import { KNOWN_MODELS } from "../src/cli/known-models.ts";

setDefaultTimeout(60000);
const DEMO = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");
const DEMO_BYTES = new Uint8Array(await Bun.file(DEMO).arrayBuffer());
const hub = new StandInHub();
const dir = mkdtempSync(join(tmpdir(), "bloomery-agent-cli-"));

beforeAll(() => {
  ensureBuilt();
  hub.start();
  hub.repos.set("acme/demo-GGUF", { commit: commitOf("demo"), files: [{ path: "demo-Q8_0.gguf", content: DEMO_BYTES }] });
  hub.repos.set("acme/badsum-GGUF", { commit: commitOf("badsum"), files: [{ path: "m-Q4_K_M.gguf", content: bytes(4096, 3), claimSha256: "0".repeat(64) }] });
  hub.repos.set("acme/gated-GGUF", { commit: commitOf("gated"), files: [{ path: "m-Q4_K_M.gguf", content: bytes(4096, 4) }], token: "hf_secret" });
  hub.repos.set("unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF", {
    commit: commitOf("coder"),
    files: [
      { path: "Qwen3-Coder-30B-A3B-Instruct-IQ4_XS.gguf", content: bytes(2048, 5) },
      { path: "Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf", content: bytes(3000, 6) },
      { path: "Qwen3-Coder-30B-A3B-Instruct-Q8_0.gguf", content: bytes(5000, 7) },
    ],
  });
}, 600000); // may build the tests' executable (build/test/bloomery-serve)
afterAll(() => hub.stop());

const hubEnv = (extra: Record<string, string> = {}) => agentEnv({ HF_ENDPOINT: hub.url, ...extra });

/** The stderr lines every refusal ends with, and the JSON error event (the last stdout line with --json). */
function expectRefusal(r: { code: number; stderr: string; events: Record<string, any>[] }, code: keyof typeof EXIT_CODES, cause?: string): Record<string, any> {
  expect(r.code).toBe(EXIT_CODES[code]);
  expect(r.stderr).toMatch(new RegExp(`\\nnext: .+\\nexit: ${EXIT_CODES[code]} ${code}${cause ? ` \\(${cause}\\)` : ""}\\n?$`));
  const last = r.events[r.events.length - 1];
  const err = last.event === "error" ? last : last.refusal;
  expect(err).toMatchObject({ event: "error", code, exit_code: EXIT_CODES[code] });
  expect(typeof err.message).toBe("string");
  expect(err.next).toMatch(/^(bloomery-serve |HF_TOKEN=|HF_ENDPOINT=|HF_HUB_CACHE=)/);
  if (cause) expect(err.cause).toBe(cause);
  expect(r.stderr).toContain(`error: ${err.message}`);
  expect(r.stderr).toContain(`next: ${err.next}`);
  return err;
}

describe("--recommend", () => {
  test("--json: one object with this machine and every known model, each with a fit and a command", async () => {
    const r = await run(["--recommend", "--json"]);
    expect(r.code).toBe(0);
    expect(r.events.length).toBe(1);
    const rep = r.events[0];
    const m = rep.machine;
    expect(m.cpu.cores).toBeGreaterThan(0);
    expect(typeof m.cpu.avx2).toBe("boolean");
    expect(m.ram.total_bytes).toBeGreaterThan(0);
    expect(m.ram.usable_bytes).toBeLessThanOrEqual(m.ram.available_bytes);
    expect(Array.isArray(m.cards)).toBe(true);
    expect(typeof m.cuda.usable).toBe("boolean");
    if (!m.cuda.usable) expect(m.cuda.reason.length).toBeGreaterThan(0);
    // experts in host RAM beside a card work (README): what is not implemented is dense tensors there
    expect(rep.not_implemented.dense_tensors_on_host).toContain("routed experts in host RAM beside a card are (--cpu-moe, --n-cpu-moe N");
    expect(JSON.stringify(rep)).not.toContain("experts_in_host_ram");
    expect(rep.models.map((x: { name: string }) => x.name)).toEqual(KNOWN_MODELS.map((k) => k.name));
    for (const x of rep.models) {
      expect(x.fits).toBe(x.recommended !== null);
      expect(x.why.length).toBeGreaterThan(0);
      if (x.recommended) {
        expect(x.recommended.need_bytes).toBeLessThanOrEqual(x.recommended.available_bytes);
        expect(x.recommended.command).toMatch(/^bloomery-serve (--demo|-hf unsloth\/\S+:\S+) -ngl (0|all)( -dev CUDA\d+)?( --cpu-moe| --n-cpu-moe \d+)? -c \d+$/);
        const q = x.quants.find((y: { quant: string }) => y.quant === x.recommended.quant);
        expect(q.placements.find((p: { placement: string }) => p.placement === x.recommended.placement).fits).toBe(true);
      }
    }
    const demo = rep.models.find((x: { name: string }) => x.name === "bloomery-demo");
    expect(demo.fits).toBe(true);
    expect(demo.recommended.command).toStartWith("bloomery-serve --demo ");
  });

  test("without --json: a short table on stdout", async () => {
    const r = await run(["--recommend"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^CPU: \d+ cores/);
    expect(r.stdout).toMatch(/\nmodel +fits +quant +where +context +needs\n/);
    for (const k of KNOWN_MODELS) expect(r.stdout).toContain(k.name);
    expect(r.stdout).toContain("note: dense tensors (attention, norms, the output) on the host beside a card");
    expect(r.stdout).not.toContain("keeping experts in host RAM beside the card (--cpu-moe, --n-cpu-moe, -ot) is not implemented yet");
  });
});

describe("--dry-run", () => {
  test("a file: the plan, one JSON object; nothing loads", async () => {
    const r = await run(["--dry-run", "--json", "-m", DEMO, "-c", "4096", "-np", "2"]);
    expect(r.code).toBe(0);
    expect(r.events.length).toBe(1);
    const p = r.events[0];
    expect(p).toMatchObject({
      event: "plan", dry_run: true,
      model: { source: "file", name: "bloomery-demo-q8_0.gguf", path: DEMO, architecture: "qwen3moe", n_layer: 4, n_expert: 8, n_expert_used: 2, n_ctx_train: 32768, sizes_from: "file", bytes_to_download: 0 },
      context: { n_ctx: 4096, n_slots: 2, n_ctx_slot: 2048, fitted: false, n_ubatch: 512 },
      memory: { fits: true },
      command: `bloomery-serve --json -m ${DEMO} -c 4096 -np 2`,
    });
    expect(p.memory.kv_bytes).toBe(2 * 4 * 4096 * 2 * 64 * 2); // K and V, 4 layers, 4096 positions, 2 KV heads of 64, f16
    expect(p.memory.total_bytes).toBe(p.memory.weights_bytes + p.memory.kv_bytes + p.memory.work_bytes);
    expect(["cpu", "cuda"]).toContain(p.backend.kind);
    expect(r.stderr).not.toContain("loading model");
  });

  test("text: the plan in a few lines", async () => {
    const r = await run(["--dry-run", "-m", DEMO]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("context: 131072 tokens, 4 slot(s) of 32768"); // -np auto with -c 0: 4 slots that each hold the training context
    expect(r.stdout).toContain(`start:   bloomery-serve -m ${DEMO}`);
  });

  test("a context that cannot fit: the plan with its refusal, exit 5 (E_DOES_NOT_FIT)", async () => {
    const r = await run(["--dry-run", "--json", "-m", DEMO, "-c", "2000000000"]);
    const err = expectRefusal(r, "E_DOES_NOT_FIT");
    expect(r.events.length).toBe(1);
    expect(r.events[0].memory.fits).toBe(false);
    expect(err.message).toContain("does not fit");
    expect(err.next).toMatch(/^bloomery-serve --dry-run --json -m \S+ -c \d+$/);
  });

  test("-hf: the files the hub lists, their sizes and what is cached; nothing is downloaded", async () => {
    const env = hubEnv();
    const from = hub.log.length;
    const r = await run(["--dry-run", "--json", "-hf", "acme/demo-GGUF:q8_0"], env);
    expect(r.code).toBe(0);
    const p = r.events[0];
    expect(p.model).toMatchObject({ source: "hf", repo: "acme/demo-GGUF", quant: "q8_0", path: null, files: [{ path: "demo-Q8_0.gguf", size: DEMO_BYTES.length, cached: false }], bytes_to_download: DEMO_BYTES.length, sizes_from: "file_list" });
    expect(p.memory.fits).toBeNull(); // an unknown repository's shape is in the file
    expect(hub.log.slice(from).filter((q) => q.path.includes("/resolve/"))).toEqual([]);
    expect(existsSync(join(env.HF_HUB_CACHE, "models--acme--demo-GGUF", "blobs")) ? readdirSync(join(env.HF_HUB_CACHE, "models--acme--demo-GGUF", "blobs")) : []).toEqual([]);
  });

  test("-hf once cached: the plan reads the downloaded file", async () => {
    const env = hubEnv();
    const warm = await run(["--dry-run", "--json", "-hf", "acme/demo-GGUF:Q8_0"], env);
    expect(warm.code).toBe(0);
    // download it with a start that is refused after the download (a context that cannot fit)
    const got = await run(["-hf", "acme/demo-GGUF:Q8_0", "--port", "0", "-c", "2000000000"], env);
    expect(got.code).toBe(5);
    const r = await run(["--dry-run", "--json", "-hf", "acme/demo-GGUF:Q8_0"], env);
    expect(r.code).toBe(0);
    expect(r.events[0].model).toMatchObject({ sizes_from: "file", bytes_cached: DEMO_BYTES.length, bytes_to_download: 0, architecture: "qwen3moe" });
    expect(r.events[0].model.path).toContain("models--acme--demo-GGUF/snapshots/");
    expect(r.events[0].memory.fits).toBe(true);
  });

  test("-m NAME: the known model's repository and quant; sizes from its shape before any download", async () => {
    const from = hub.log.length;
    const r = await run(["--dry-run", "--json", "-m", "QWEN3-CODER"], hubEnv());
    const p = r.events[0];
    expect(p.model).toMatchObject({ source: "known", name: "Qwen3-Coder-30B-A3B-Instruct", repo: "unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF", sizes_from: "known_shape", n_layer: 48, n_expert: 128 });
    expect(["recommended", "default"]).toContain(p.model.quant_chosen);
    expect(["Q4_K_M", "IQ4_XS"]).toContain(p.model.quant);
    const listed = { Q4_K_M: 3000, IQ4_XS: 2048 }[p.model.quant as "Q4_K_M" | "IQ4_XS"];
    expect(p.model.files).toEqual([{ path: `Qwen3-Coder-30B-A3B-Instruct-${p.model.quant}.gguf`, size: listed, cached: false }]);
    const fileBytes = KNOWN_MODELS.find((k) => k.name === "Qwen3-Coder-30B-A3B-Instruct")!.quants.find((q) => q.name === p.model.quant)!.bytes;
    // the host maps the file; a card's arena rounds each of the 579 tensors up to 256 bytes
    if (p.memory.where === "host") expect(p.memory.weights_bytes).toBe(fileBytes);
    else expect(p.memory.weights_bytes).toBe(fileBytes + 256 * 579);
    // fits this machine or is refused naming why: the exit code says which
    expect(r.code).toBe(p.memory.fits ? 0 : 5);
    if (!p.memory.fits) expect(p.refusal.code).toBe("E_DOES_NOT_FIT");
    expect(hub.log.slice(from).filter((q) => q.path.includes("/resolve/"))).toEqual([]);
  });

  test("-m NAME:QUANT takes that quant", async () => {
    const r = await run(["--dry-run", "--json", "-m", "qwen3-coder:q8_0"], hubEnv());
    expect(r.events[0].model).toMatchObject({ quant: "Q8_0", quant_chosen: "given", files: [{ path: "Qwen3-Coder-30B-A3B-Instruct-Q8_0.gguf", size: 5000, cached: false }] });
  });
});

describe("exit codes", () => {
  test("2 E_USAGE: an unknown flag, a bad -hf spec, an address that is not this machine's", async () => {
    const a = await run(["--no-such-flag", "--json"]);
    const e = expectRefusal(a, "E_USAGE");
    expect(e.message).toContain("--no-such-flag");
    expect(e.next).toBe("bloomery-serve --help");
    const b = await run(["-hf", "not a repo", "--json"]);
    expect(expectRefusal(b, "E_USAGE", "E_HF_BAD_SPEC").message).toContain("expected <owner>/<model>[:quant]");
    const c = await run(["-m", DEMO, "--host", "192.0.2.1", "--port", "0", "--json"]);
    expect(expectRefusal(c, "E_USAGE", "EADDRNOTAVAIL").next).toBe(`bloomery-serve -m ${DEMO} --port 0 --json --host 127.0.0.1`);
    // the same through BLOOMERY_JSON_EVENTS instead of --json
    const d = await run(["--no-such-flag"], agentEnv({ BLOOMERY_JSON_EVENTS: "1" }));
    expectRefusal(d, "E_USAGE");
  });

  test("3 E_MODEL_NOT_FOUND: a missing file (close known names suggested), an unknown repository, an absent quant", async () => {
    const a = await run(["-m", "qwen3-coder-30b-a3b-instrct", "--json"]);
    const e = expectRefusal(a, "E_MODEL_NOT_FOUND");
    expect(e.message).toStartWith("-m: model file 'qwen3-coder-30b-a3b-instrct' does not exist; it is not a known model name either - did you mean Qwen3-Coder-30B-A3B-Instruct");
    expect(e.next).toBe("bloomery-serve -m Qwen3-Coder-30B-A3B-Instruct");
    const b = await run(["-m", join(dir, "missing.gguf"), "--json"]);
    expect(expectRefusal(b, "E_MODEL_NOT_FOUND").next).toStartWith("bloomery-serve --recommend");
    const c = await run(["-hf", "acme/nothing-GGUF", "--port", "0", "--json"], hubEnv());
    expectRefusal(c, "E_MODEL_NOT_FOUND", "E_HF_NOT_FOUND");
    const d = await run(["-hf", "acme/demo-GGUF:Q9_K", "--port", "0", "--json"], hubEnv());
    expect(expectRefusal(d, "E_MODEL_NOT_FOUND", "E_HF_NO_MATCH").message).toContain("Q8_0");
  });

  test("4 E_DOWNLOAD: a bad checksum, a gated repository without a token, offline without the files", async () => {
    const a = await run(["-hf", "acme/badsum-GGUF", "--port", "0", "--json"], hubEnv());
    expectRefusal(a, "E_DOWNLOAD", "E_DOWNLOAD_CHECKSUM");
    const b = await run(["-hf", "acme/gated-GGUF", "--port", "0", "--json"], hubEnv());
    expect(expectRefusal(b, "E_DOWNLOAD", "E_HF_AUTH").next).toBe("HF_TOKEN=<your token> bloomery-serve -hf acme/gated-GGUF --port 0 --json");
    const c = await run(["-hf", "acme/demo-GGUF", "--offline", "--port", "0", "--json"], hubEnv());
    expect(expectRefusal(c, "E_DOWNLOAD", "E_OFFLINE_NOT_CACHED").next).toBe("bloomery-serve -hf acme/demo-GGUF --port 0 --json");
    // the download events came before the error, on stdout
    expect(a.events.map((x) => x.event)).toContain("download_plan");
  });

  test("5 E_DOES_NOT_FIT: a start whose context cannot fit is refused before it loads", async () => {
    const r = await run(["-m", DEMO, "-c", "2000000000", "--port", "0", "--json"]);
    const e = expectRefusal(r, "E_DOES_NOT_FIT");
    expect(e.next).toMatch(/^bloomery-serve -m \S+ --port 0 --json -c \d+$/);
    expect(r.events.map((x) => x.event)).toEqual(["listening", "plan", "error"]);
    expect(r.stderr).not.toContain("loading model");
  });

  test("5 E_DOES_NOT_FIT before any download: a known model too large for this machine", async () => {
    const rec = (await run(["--recommend", "--json"])).events[0];
    const big = rec.models.find((x: { name: string }) => x.name === "Qwen3-235B-A22B-Instruct-2507");
    if (big.fits) {
      console.log("skip: Qwen3-235B-A22B fits this machine; the refusal before download is checked where it does not");
      return;
    }
    hub.repos.set("unsloth/Qwen3-235B-A22B-Instruct-2507-GGUF", { commit: commitOf("235b"), files: [{ path: "Q4_K_M/Qwen3-235B-A22B-Instruct-2507-Q4_K_M-00001-of-00003.gguf", content: bytes(100, 8) }] });
    const from = hub.log.length;
    const r = await run(["-m", "qwen3-235b", "--port", "0", "--json"], hubEnv());
    const e = expectRefusal(r, "E_DOES_NOT_FIT");
    expect(e.message).toContain("even with -c 4096");
    expect(hub.log.slice(from)).toEqual([]); // not even the file list was asked for
  });

  test("6 E_BAD_MODEL: a file that is not a GGUF, an architecture bloomery does not run", async () => {
    const a = await run(["-m", join(FIXTURES, "demo-model", "heldout.txt"), "--port", "0", "--json"]);
    expect(expectRefusal(a, "E_BAD_MODEL").message).toContain("bad magic");
    const llama = join(dir, "llama.gguf");
    const w = new GgufWriter();
    w.str("general.architecture", "llama");
    w.write(llama);
    const b = await run(["-m", llama, "--port", "0", "--json"]);
    expect(expectRefusal(b, "E_BAD_MODEL").message).toContain("architecture 'llama' is not supported");
    const c = await run(["--dry-run", "--json", "-m", llama]);
    expectRefusal(c, "E_BAD_MODEL");
  });

  test("7 E_PORT_IN_USE: the port is taken; the next command asks for any free port", async () => {
    const taken = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("busy") });
    try {
      const r = await run(["-m", DEMO, "--port", String(taken.port), "--json"]);
      const e = expectRefusal(r, "E_PORT_IN_USE", "EADDRINUSE");
      expect(e.next).toStartWith(`bloomery-serve -m ${DEMO} --json --port 0`);
    } finally {
      taken.stop(true);
    }
  });

  test("1 E_INTERNAL and the mapping of every other error", () => {
    const argv = ["-hf", "acme/x", "--offline"];
    const internal = toAgentError(new Error("something broke"), argv);
    expect(internal).toMatchObject({ code: "E_INTERNAL", exitCode: 1, message: "something broke" });
    expect(internal.next).toContain("-v");
    expect(toAgentError(new GgufError("/m.gguf", "bad magic"), argv).code).toBe("E_BAD_MODEL");
    expect(engineLoadError(new Error("the model does not fit NVIDIA H200: weights 200 GiB"), ["-m", "x.gguf", "-ngl", "all"]))
      .toMatchObject({ code: "E_DOES_NOT_FIT", next: "bloomery-serve -m x.gguf -ngl 0" });
    expect(engineLoadError(new Error("CUDA error 700"), argv).code).toBe("E_INTERNAL");
    // every download refusal has an exit code and a next command
    for (const c of HF_ERROR_CODES) {
      const a = toAgentError(new HfError(c, "refused"), argv);
      expect(a.code).toBe(HF_EXIT[c]);
      expect(a.detail).toBe(c);
      expect(a.next.length).toBeGreaterThan(0);
    }
    expect(toAgentError(new HfError("E_OFFLINE_NOT_CACHED", "x"), argv).next).toBe("bloomery-serve -hf acme/x");
    const e = new AgentError("E_USAGE", "bad", "bloomery-serve --help");
    expect(e.toText()).toBe("error: bad\nnext: bloomery-serve --help\nexit: 2 E_USAGE");
    expect(Object.values(EXIT_CODES).sort()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  test("commands are quoted for a shell", () => {
    expect(shellQuote("a b")).toBe("'a b'");
    expect(shellQuote("it's")).toBe("'it'\\''s'");
    expect(shellQuote("unsloth/X-GGUF:Q4_K_M")).toBe("unsloth/X-GGUF:Q4_K_M");
    expect(withoutFlags(["-m", "x", "-c", "5", "--ctx-size=7", "--json"], { "-c": true, "--ctx-size": true, "--json": false })).toEqual(["-m", "x"]);
  });
});
