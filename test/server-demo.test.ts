// `bloomery-serve --demo`: the demo model built into the executable serves with no download.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServer, type RunningServer } from "./server-helpers.ts";
import { EXE } from "./exe.ts";
import { FIXTURES } from "./paths.ts";

let srv: RunningServer;
const cache = mkdtempSync(join(tmpdir(), "bloomery-demo-cache-"));

beforeAll(async () => {
  srv = await startServer(["--demo"], { env: { XDG_CACHE_HOME: cache } });
});
afterAll(async () => srv?.stop());

describe("--demo", () => {
  test("serves the built-in model under its alias, extracted once to the cache", async () => {
    const models = (await (await fetch(`${srv.url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data[0].id).toBe("bloomery-demo");
    expect(readdirSync(join(cache, "bloomery"))).toEqual(["15520864-bloomery-demo-q8_0.gguf"]);
  });

  test("it writes Python: greedy completion equals transformers' tokens", async () => {
    const ref = (await Bun.file(join(FIXTURES, "demo-model", "demo-ref.json")).json()).refs[4];
    const r = (await (await fetch(`${srv.url}/completion`, { method: "POST", body: JSON.stringify({ prompt: ref.prompt, n_predict: 16, temperature: 0, return_tokens: true }) })).json()) as { tokens: number[]; content: string };
    expect(r.tokens).toEqual(ref.greedy.slice(0, 16));
    expect(r.content).toContain("as f:");
  });

  test("--demo with -m is refused", async () => {
    const p = Bun.spawnSync([EXE, "--demo", "-m", "x.gguf"], { stderr: "pipe" });
    expect(p.exitCode).toBe(2);
    expect(p.stderr.toString()).toContain("--demo serves the built-in demo model");
  });
});
