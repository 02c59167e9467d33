// The sigmoid-router MoE families through the real executable: `bloomery-serve -m` on the DeepSeek V3
// (MLA) and GLM-4.5 fixtures, each with an MTP layer appended as the real files carry one. /completion's
// greedy tokens of a token-id prompt equal transformers', chat completions (plain and streamed) answer,
// and the log says once that the MTP layer is not used.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { withMtp } from "./mtp-edit.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";
import { parseSse, post, type RunningServer, startServer } from "./server-helpers.ts";

// servers answer slowly when the machine is busy (2 cores shared with other work)
setDefaultTimeout(60000);

const CASES = [
  // the prompts whose transformers greedy has no stop token and clear margins (DeepSeek's 120 ids: 0.05; GLM's 5 ids: 0.03)
  { arch: "deepseek2", dir: "deepseek_v3", file: "deepseek_v3.gguf", prompt: 120 },
  { arch: "glm4moe", dir: "glm4_moe", file: "glm4_moe.gguf", prompt: 5 },
] as const;

const tmp = mkdtempSync(join(tmpdir(), "bloomery-srvfam-"));
const servers = new Map<string, RunningServer>();

beforeAll(async () => {
  if (!hasFixtures) return;
  for (const c of CASES) {
    const gguf = withMtp(join(FIXTURES, "families", c.dir, c.file), c.arch, join(tmp, `${c.arch}-mtp.gguf`));
    servers.set(c.arch, await startServer(["-m", gguf, "-c", "512", "-np", "1", "-t", "2"]));
  }
}, 600000); // may include building the tests' executable on a busy machine

afterAll(async () => {
  for (const s of servers.values()) await s.stop();
  rmSync(tmp, { recursive: true, force: true });
});

describe.skipIf(!hasFixtures)("deepseek2 and glm4moe through the server", () => {
  for (const c of CASES) {
    test(`${c.arch}: /completion's greedy tokens of a token-id prompt equal transformers'`, async () => {
      const srv = servers.get(c.arch)!;
      const ref = ((await Bun.file(join(FIXTURES, "families", c.dir, "ref.json")).json()).refs as { prompt: number[]; greedy: number[] }[])
        .find((r) => r.prompt.length === c.prompt)!;
      const r = await post(`${srv.url}/completion`, { prompt: ref.prompt, n_predict: ref.greedy.length, temperature: 0, return_tokens: true });
      expect(r.status).toBe(200);
      expect(r.json.tokens).toEqual(ref.greedy);
      expect(r.json).toMatchObject({ stop: true, stop_type: "limit", tokens_predicted: ref.greedy.length, tokens_evaluated: ref.prompt.length });
    });

    test(`${c.arch}: a chat completion answers, plain and streamed alike`, async () => {
      const srv = servers.get(c.arch)!;
      const body = { model: "x", messages: [{ role: "user", content: "Hello, who are you?" }], max_tokens: 8, temperature: 0 };
      const r = await post(`${srv.url}/v1/chat/completions`, body);
      expect(r.status).toBe(200);
      expect(r.json.object).toBe("chat.completion");
      const ch = r.json.choices[0];
      expect(ch.message.role).toBe("assistant");
      expect(typeof ch.message.content).toBe("string");
      expect(r.json.usage.completion_tokens).toBeGreaterThan(0);
      expect(r.json.usage.completion_tokens).toBeLessThanOrEqual(8);
      expect(["length", "stop"]).toContain(ch.finish_reason);
      const res = await fetch(`${srv.url}/v1/chat/completions`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ...body, stream: true }) });
      expect(res.status).toBe(200);
      const events = parseSse(await res.text()).map((e) => e.data);
      expect(events[events.length - 1]).toBe("[DONE]");
      const text = events.slice(0, -1).map((e) => e.choices?.[0]?.delta?.content ?? "").join("");
      expect(text).toBe(ch.message.content);
    });

    test(`${c.arch}: the log says once that the MTP layer is not used`, () => {
      const said = servers.get(c.arch)!.log().split("\n").filter((l) => l.includes("MTP (next-token prediction) layer"));
      expect(said).toHaveLength(1);
      expect(said[0]).toContain(`${c.arch}: the file's MTP (next-token prediction) layer blk.3`);
    });
  }
});
