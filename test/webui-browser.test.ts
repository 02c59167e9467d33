// The web UI in a real browser: Debian's headless Chromium driven by playwright-core against the
// executable with the demo model - a message sent and its answer seen streaming, stopped, the
// conversations found again after a reload, an answer regenerated and a message edited, the
// placement page following the engine's steps after a request, reasoning folded apart and a tool
// call shown (the Qwen3.5 template), and the page under --api-prefix with --api-key. Skips with a
// line saying so where Chromium is missing; CI (.ci/run) installs it and fails without it.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { Page } from "playwright-core";
import { hasChromium, CHROMIUM, launchBrowser, lastAnswerDone, lastAnswerId, openPage, send, setSettings, type Browser } from "./webui-browser.ts";
import { post, startServer, templateFile, type RunningServer } from "./server-helpers.ts";
import type { PlacementState } from "../src/engine/placement-types.ts";

setDefaultTimeout(120000);
if (!hasChromium) {
  const why = `test/webui-browser.test.ts: skipped: no Chromium at ${CHROMIUM} (apt-get install chromium, or set BLOOMERY_CHROMIUM)`;
  if (process.env.CI) throw new Error(`${why}; CI must install it (.ci/run)`);
  console.log(why);
}

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather", description: "Weather forecast for a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 7 } }, required: ["city", "days"], additionalProperties: false },
  },
};

let demo: RunningServer, qwen35: RunningServer, guarded: RunningServer;
let browser: Browser;
let page: Page;
let errors: string[];

describe.skipIf(!hasChromium)("the web UI in Chromium", () => {
  beforeAll(async () => {
    const KEY = "browser-key";
    [demo, qwen35, guarded, browser] = await Promise.all([
      startServer(["--demo", "-np", "2", "-c", "4096"]),
      startServer(["--demo", "-np", "1", "-c", "4096", "--chat-template-file", templateFile("Qwen3.5-4B.jinja")]),
      startServer(["--demo", "-np", "1", "-c", "2048", "--api-prefix", "/llm", "--api-key", KEY], { waitReady: false }),
      launchBrowser(),
    ]);
    ({ page, errors } = await openPage(browser, `${demo.url}/`));
    await page.waitForFunction(`document.querySelector("[data-testid=model-name]")?.textContent.includes("bloomery-demo")`);
  }, 600000);

  afterAll(async () => {
    await browser?.close();
    await Promise.all([demo?.stop(), qwen35?.stop(), guarded?.stop()]);
  });

  test("a message sent: its answer streams in, then shows its tokens and the context in use", async () => {
    await setSettings(page, { max_tokens: "120" }, '{"ignore_eos": true, "temperature": 0}');
    // every text the streaming answer shows, in order
    await page.evaluate(`(() => {
      window.__seen = [];
      new MutationObserver(() => {
        const m = document.querySelector("article.streaming [data-testid=content]");
        if (m) window.__seen.push(m.textContent.length);
      }).observe(document.querySelector("[data-testid=messages]"), { childList: true, subtree: true, characterData: true });
    })()`);
    await send(page, "def read_json(path):");
    await lastAnswerDone(page);
    const seen = (await page.evaluate("window.__seen")) as number[];
    expect(new Set(seen.filter((n) => n > 0)).size).toBeGreaterThanOrEqual(3); // it grew in several steps, not at once (120 tokens: many frames even on a loaded machine)
    const answer = page.locator("article[data-role=assistant]").last();
    expect(await answer.getAttribute("data-finish")).toBe("length");
    expect(await answer.locator("[data-testid=meta]").textContent()).toContain("120 tokens");
    expect(await page.locator("[data-testid=context]").textContent()).toMatch(/^context \d+ \/ 2048 \(\d+%\)$/);
    // the same request to the API gives the same text (greedy)
    const api = await post(`${demo.url}/v1/chat/completions`, { messages: [{ role: "user", content: "def read_json(path):" }], max_tokens: 120, ignore_eos: true, temperature: 0 });
    const shown = (await answer.locator("[data-testid=content]").textContent()) ?? "";
    expect(shown.replace(/\s+/g, "")).toBe((api.json.choices[0].message.content as string).replace(/\s+/g, ""));
    expect(await page.locator("[data-testid=conversation]").count()).toBe(1);
  });

  test("Stop ends the answer at once, keeps its text and frees the server's slot", async () => {
    await setSettings(page, { max_tokens: "" }, '{"ignore_eos": true}');
    await page.click("[data-testid=new-chat]");
    await send(page, "class Cache:");
    await page.waitForFunction(`(document.querySelector("article.streaming [data-testid=content]")?.textContent.length ?? 0) > 20`);
    expect(await page.locator("[data-testid=send]").textContent()).toBe("Stop");
    await page.click("[data-testid=send]");
    await lastAnswerDone(page, 10000);
    const answer = page.locator("article[data-role=assistant]").last();
    expect(await answer.getAttribute("data-finish")).toBe("stopped");
    expect(((await answer.locator("[data-testid=content]").textContent()) ?? "").length).toBeGreaterThan(20);
    expect(await page.locator("[data-testid=send]").textContent()).toBe("Send");
    const t0 = Date.now();
    let busy = true;
    while (busy && Date.now() - t0 < 5000) {
      busy = ((await (await fetch(`${demo.url}/slots`)).json()) as { is_processing: boolean }[]).some((s) => s.is_processing);
      if (busy) await Bun.sleep(100);
    }
    expect(busy).toBe(false);
  });

  test("after a reload both conversations are there, the last one open with its stopped answer", async () => {
    const stopped = await page.locator("article[data-role=assistant]").last().locator("[data-testid=content]").textContent();
    await page.reload();
    await page.waitForSelector("[data-testid=conversation]");
    const titles = await page.locator("[data-testid=conversation] .conv-title").allTextContents();
    expect(titles).toEqual(["class Cache:", "def read_json(path):"]);
    await page.waitForSelector("article[data-role=assistant]");
    const answer = page.locator("article[data-role=assistant]").last();
    expect(await answer.getAttribute("data-finish")).toBe("stopped");
    expect(await answer.locator("[data-testid=content]").textContent()).toBe(stopped);
    await page.locator("[data-testid=conversation]", { hasText: "def read_json" }).click();
    await page.waitForFunction(`document.querySelector("[data-testid=messages] article[data-role=user]")?.textContent.includes("def read_json(path):")`);
    expect(await page.locator("[data-testid=messages] article").count()).toBe(2);
  });

  test("Regenerate replaces the answer; an edited message is sent again with the rest of the conversation dropped", async () => {
    await setSettings(page, { max_tokens: "12" }, '{"ignore_eos": true, "temperature": 0}');
    const before = await page.locator("article[data-role=assistant] [data-testid=content]").textContent();
    const first = await lastAnswerId(page);
    await page.click("article[data-role=assistant] [data-testid=regenerate]");
    await lastAnswerDone(page, 60000, first);
    expect(await page.locator("[data-testid=messages] article").count()).toBe(2);
    const again = await page.locator("article[data-role=assistant] [data-testid=content]").textContent();
    expect(again).not.toBe(before); // 12 tokens now, 40 before
    expect(await page.locator("article[data-role=assistant] [data-testid=meta]").textContent()).toContain("12 tokens");
    const second = await lastAnswerId(page);
    await page.click("article[data-role=user] [data-testid=edit]");
    await page.fill("[data-testid=edit-box]", "def write_json(path, data):");
    await page.click("[data-testid=edit-save]");
    await lastAnswerDone(page, 60000, second);
    expect(await page.locator("[data-testid=messages] article").count()).toBe(2);
    expect(await page.locator("article[data-role=user]").textContent()).toContain("def write_json(path, data):");
    await page.waitForFunction(`[...document.querySelectorAll("[data-testid=conversation] .conv-title")].some((e) => e.textContent === "def write_json(path, data):")`);
    const api = await post(`${demo.url}/v1/chat/completions`, { messages: [{ role: "user", content: "def write_json(path, data):" }], max_tokens: 12, ignore_eos: true, temperature: 0 });
    const shown = (await page.locator("article[data-role=assistant] [data-testid=content]").textContent()) ?? "";
    expect(shown.replace(/\s+/g, "")).toBe((api.json.choices[0].message.content as string).replace(/\s+/g, ""));
  });

  test("an attached text file goes with the message; a conversation is deleted on a second click", async () => {
    await page.click("[data-testid=new-chat]");
    await page.setInputFiles("[data-testid=attach-input]", { name: "notes.py", mimeType: "text/x-python", buffer: Buffer.from("def helper():\n    return 42\n") });
    await page.waitForSelector(".composer .chip");
    expect(await page.locator(".composer .chip").textContent()).toContain("notes.py");
    const sent = page.waitForRequest((r) => r.url().endsWith("/v1/chat/completions") && r.method() === "POST");
    await send(page, "Explain this file.");
    const body = JSON.parse((await sent).postData() ?? "{}") as { messages: { role: string; content: string }[] };
    expect(body.messages.at(-1)!.content).toBe("Explain this file.\n\n--- notes.py ---\ndef helper():\n    return 42\n");
    await lastAnswerDone(page);
    expect(await page.locator("article[data-role=user] .chip").textContent()).toBe("notes.py");
    expect(await page.locator(".composer .chip").count()).toBe(0);
    const n = await page.locator("[data-testid=conversation]").count();
    const row = page.locator("[data-testid=conversation]", { hasText: "Explain this file." });
    await row.locator("[data-testid=delete-chat]").click();
    await page.waitForFunction(`[...document.querySelectorAll("[data-testid=delete-chat]")].some((b) => b.textContent === "delete?")`);
    expect(await page.locator("[data-testid=conversation]").count()).toBe(n); // the first click only asks
    await page.locator("[data-testid=conversation]", { hasText: "Explain this file." }).locator("[data-testid=delete-chat]").click();
    await page.waitForFunction(`document.querySelectorAll("[data-testid=conversation]").length === ${n - 1}`);
    expect(await page.locator("[data-testid=messages] article").count()).toBe(0);
    await page.reload();
    await page.waitForSelector("[data-testid=conversation]");
    expect(await page.locator("[data-testid=conversation]", { hasText: "Explain this file." }).count()).toBe(0);
  });

  test("the placement page: every layer's experts and tier, and the map follows a request", async () => {
    await page.click("[data-testid=tab-placement]");
    expect(new URL(page.url()).pathname).toBe("/placement");
    await page.waitForSelector(".placement[data-steps]");
    expect(await page.locator("[data-testid=heatmap] .heat-row").count()).toBe(4);
    expect(await page.locator("[data-testid=heatmap] .cell.tier-host").count()).toBe(32);
    const stepsBefore = Number(await page.locator(".placement").getAttribute("data-steps"));
    const heatBefore = await page.locator("[data-testid=heatmap] .cell").evaluateAll((cs) => cs.map((c) => c.getAttribute("data-heat") ?? ""));
    const r = await post(`${demo.url}/v1/chat/completions`, { messages: [{ role: "user", content: "import os\n" }], max_tokens: 16, ignore_eos: true });
    expect(r.status).toBe(200);
    await page.waitForFunction(`Number(document.querySelector(".placement").dataset.steps) >= ${stepsBefore + 16}`, undefined, { timeout: 15000 });
    expect(await page.locator("[data-testid=step-chart] .bar").count()).toBeGreaterThan(0);
    const s = (await (await fetch(`${demo.url}/placement/state`)).json()) as PlacementState;
    // the CPU backend counts its routers' picks (bl_cpu_expert_picks): the request's picks warm some cells
    expect(s.picks.available).toBe(true);
    await page.waitForFunction(`[...document.querySelectorAll("[data-testid=heatmap] .cell")].some((c, i) => Number(c.dataset.heat) > Number(${JSON.stringify(heatBefore)}[i] || 0))`, undefined, { timeout: 15000 });
    expect(await page.locator("[data-testid=heat-unavailable]").isVisible()).toBe(false);
    await page.click("[data-testid=tab-chat]");
    expect(new URL(page.url()).pathname).toBe("/");
    await page.waitForSelector("[data-testid=input]");
    expect(errors).toEqual([]);
  });

  test("the heat map colours each expert by its recent picks when a backend reports them", async () => {
    // the CPU backend does not count picks yet: the page is fed the server's own state with picks
    // filled in, as a backend with a counter reports them (the endpoint's shape: webui-placement.test.ts)
    const real = (await (await fetch(`${demo.url}/placement/state`)).json()) as PlacementState;
    const layers = real.layers.map((l) => ({ ...l, picks: new Array<number>(l.n_expert).fill(0), heat: new Array<number>(l.n_expert).fill(0) }));
    layers[0].picks[3] = layers[0].heat[3] = 10;
    layers[1].picks[5] = layers[1].heat[5] = 4;
    const fed: PlacementState = { ...real, layers, picks: { available: true, heat_half_life_ms: 10000, total: 14 } };
    const p = await browser.ctx.newPage();
    try {
      await p.route("**/placement/state?**", (route) => route.fulfill({ status: 200, headers: { "Content-Type": "text/event-stream" }, body: `event: placement\ndata: ${JSON.stringify(fed)}\n\n` }));
      await p.goto(`${demo.url}/placement`);
      await p.waitForSelector("[data-testid=heatmap][data-available=true]");
      expect(await p.locator("[data-testid=heat-unavailable]").isVisible()).toBe(false);
      const sel = (layer: number, e: number) => `.heat-row[data-layer="${layer}"] .cell[data-expert="${e}"]`;
      const cell = (layer: number, e: number) => p.locator(sel(layer, e));
      const style = (layer: number, e: number, prop: string) => p.evaluate(`getComputedStyle(document.querySelector(${JSON.stringify(sel(layer, e))})).getPropertyValue(${JSON.stringify(prop)})`);
      expect(await cell(0, 3).getAttribute("data-heat")).toBe("10");
      expect(await style(0, 3, "--heat")).toBe("1.000");
      expect(await style(1, 5, "--heat")).toBe(Math.sqrt(0.4).toFixed(3));
      expect(await style(2, 0, "--heat")).toBe("0.000");
      expect(await style(0, 3, "background-color")).not.toBe(await style(2, 0, "background-color"));
      expect(await cell(0, 3).getAttribute("title")).toBe("layer 0, expert 3: host RAM; 10.0 recent picks, 10 since load");
    } finally {
      await p.close();
    }
  });

  test("the pages run under their own content security policy (no eval, no inline code)", async () => {
    const strict = await launchBrowser({ bypassCSP: false });
    try {
      const p = await strict.ctx.newPage();
      const logged: string[] = [];
      p.on("console", (m) => logged.push(m.text()));
      const errs: string[] = [];
      p.on("pageerror", (e) => errs.push(e.message));
      await p.goto(`${demo.url}/placement`);
      await p.locator(".placement[data-steps]").waitFor();
      await p.locator("[data-testid=tab-chat]").click();
      await p.locator("[data-testid=model-name]", { hasText: "bloomery-demo" }).waitFor();
      await p.locator("[data-testid=input]").waitFor();
      expect(logged.filter((t) => t.includes("Content Security Policy"))).toEqual([]);
      expect(errs).toEqual([]);
    } finally {
      await strict.close();
    }
  });

  test("reasoning is folded apart and a tool call is shown (Qwen3.5 template)", async () => {
    const { page: p, errors: errs } = await openPage(browser, `${qwen35.url}/`);
    try {
      await p.waitForFunction(`document.querySelector("[data-testid=model-name]")?.textContent.includes("bloomery-demo")`);
      const custom = JSON.stringify({ tools: [WEATHER], tool_choice: "required", parallel_tool_calls: false, temperature: 0, thinking_budget_tokens: 5, max_tokens: 150 });
      await setSettings(p, {}, custom);
      await send(p, "Weather in Lima?");
      await lastAnswerDone(p);
      const answer = p.locator("article[data-role=assistant]").last();
      expect(await answer.getAttribute("data-finish")).toBe("tool_calls");
      const reasoning = answer.locator("details[data-testid=reasoning]");
      expect(await reasoning.count()).toBe(1);
      expect(await reasoning.getAttribute("open")).toBeNull(); // folded once the answer is done
      expect(await reasoning.locator("summary").textContent()).toMatch(/^Reasoning \(\d+ characters\)$/);
      const thought = (await reasoning.locator(".reasoning-text").textContent()) ?? "";
      expect(thought.length).toBeGreaterThan(0);
      expect((await answer.locator("[data-testid=content]").textContent()) ?? "").not.toContain(thought);
      const call = answer.locator("[data-testid=tool-call]");
      expect(await call.count()).toBe(1);
      expect(await call.locator("summary").textContent()).toBe("tool call get_weather");
      const args = JSON.parse((await call.locator("pre").textContent()) ?? "") as { city: unknown; days: unknown };
      expect(typeof args.city).toBe("string");
      expect(Number.isInteger(args.days)).toBe(true);
      expect(errs).toEqual([]);
    } finally {
      await p.close();
    }
  });

  test("under --api-prefix with --api-key: the page asks for the key, then chats and follows the placement", async () => {
    const t0 = Date.now();
    while ((await fetch(`${guarded.url}/llm/health`).catch(() => null))?.status !== 200 && Date.now() - t0 < 60000) await Bun.sleep(100);
    const { page: p, errors: errs } = await openPage(browser, `${guarded.url}/llm/`);
    try {
      await p.waitForSelector("[data-testid=key-input]");
      await p.fill("[data-testid=key-input]", "browser-key");
      await p.click("[data-testid=key-save]");
      await p.waitForFunction(`document.querySelector("[data-testid=model-name]")?.textContent.includes("bloomery-demo")`);
      await setSettings(p, { max_tokens: "6" }, '{"ignore_eos": true}');
      await send(p, "def main():");
      await lastAnswerDone(p);
      expect(await p.locator("article[data-role=assistant]").last().getAttribute("data-finish")).toBe("length");
      await p.click("[data-testid=tab-placement]");
      expect(new URL(p.url()).pathname).toBe("/llm/placement");
      await p.waitForFunction(`Number(document.querySelector(".placement")?.dataset.steps) >= 6`, undefined, { timeout: 15000 });
      expect(await p.locator("[data-testid=heatmap] .heat-row").count()).toBe(4);
      expect(errs).toEqual([]);
    } finally {
      await p.close();
    }
  });
});
