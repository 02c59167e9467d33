// An error in the middle of a stream, through the real executable: the demo model served with its
// routed experts on the disk tier (--host-budget), the file cut while a streamed completion runs.
// The stream ends with an error event naming the file (no crash, no hang), and the server serves
// the next request once the file is whole again.
import { afterAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdtempSync, rmSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { FIXTURES } from "./paths.ts";
import { parseSse, post, startServer } from "./server-helpers.ts";

const tmp = mkdtempSync(join(tmpdir(), "bloomery-midstream-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const MiB = 1024 ** 2;

describe("an error in the middle of a stream", () => {
  test("the stream ends with an error event, and the server serves the next request", async () => {
    const orig = join(FIXTURES, "demo-model", "bloomery-demo-q4_k_m.gguf");
    const file = join(tmp, "demo.gguf");
    copyFileSync(orig, file);
    // the budget: what the plan needs for the dense weights and the context, and about a MiB for experts
    const settings = { nCtx: 4096, nSlots: 1, maxTokens: 64 };
    const probe = Model.load(orig, { ...settings, nThreads: 1, placement: {}, log: () => {} });
    const plan = probe.plan!;
    const last = [...probe.gguf.tensors.values()].sort((a, b) => b.fileOffset - a.fileOffset)[0];
    probe.close();
    const budgetMiB = Math.ceil((plan.host.dense + plan.host.context) / MiB) + 1;
    const srv = await startServer(["-m", file, "--host-budget", String(budgetMiB), "-c", "4096", "-np", "1", "-ub", "64", "-b", "64", "-t", "2", "--cache-ram", "0"],
      { env: { BLOOMERY_EXPERT_PREFETCH: "0" } });
    try {
      expect(srv.log()).toMatch(/placement: host: .*; disk: 32 experts/);
      const res = await fetch(`${srv.url}/completion`, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ prompt: "def main():\n", n_predict: 3000, ignore_eos: true, stream: true, temperature: 0 }),
      });
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      const dec = new TextDecoder();
      let text = "";
      // a few tokens arrive, then the file is cut under the running generation
      while (!/"content"/.test(text)) {
        const { value, done } = await reader.read();
        if (done) break;
        text += dec.decode(value, { stream: true });
      }
      truncateSync(file, last.fileOffset + 1000);
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += dec.decode(value, { stream: true });
      }
      const events = parseSse(text);
      const tokens = events.filter((e) => typeof e.data?.content === "string" && e.data.content.length > 0).length;
      const err = events.find((e) => e.data?.error);
      expect(tokens).toBeGreaterThan(0);
      expect(tokens).toBeLessThan(3000);
      expect(err).toBeDefined();
      expect(err!.data.error.message).toContain(file);
      expect(err!.data.error.message).toMatch(/short read/);
      // the file whole again: the same server answers
      copyFileSync(orig, file);
      const again = await post(`${srv.url}/completion`, { prompt: "def main():\n", n_predict: 8, temperature: 0 });
      expect(again.status).toBe(200);
      expect(again.json.tokens_predicted).toBe(8);
      expect((await fetch(`${srv.url}/health`)).status).toBe(200);
    } finally {
      await srv.stop();
    }
  }, 120000);
});
