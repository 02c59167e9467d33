// bloomery: the web UI's screenshots in docs/ (webui-chat.png, webui-placement.png), taken from
// dist/bloomery-serve with the demo model (the Qwen3.5 chat template from ../shared/fixtures, so
// the answer shows reasoning and a tool call) in Debian's headless Chromium via playwright-core.
//   bun scripts/webui-screenshots.ts [outdir]      (default docs/)
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Page } from "playwright-core";

const root = join(import.meta.dir, "..");
const out = process.argv[2] ?? join(root, "docs");
const tpl = JSON.parse(readFileSync(join(root, "..", "shared", "fixtures", "templates", "renderings.json"), "utf8")).templates["Qwen3.5-4B.jinja"].template as string;
const work = mkdtempSync(join(tmpdir(), "bloomery-shots-"));
writeFileSync(join(work, "qwen35.jinja"), tpl);

const proc = Bun.spawn([join(root, "dist", "bloomery-serve"), "--demo", "-np", "2", "-c", "4096", "--port", "0", "--chat-template-file", join(work, "qwen35.jinja")], { stderr: "pipe" });
let log = "";
// read the server's log to its end (a closed pipe would fail its writes), noting its address
const url = await new Promise<string>((resolve, reject) => {
  void (async () => {
    for await (const chunk of proc.stderr as ReadableStream<Uint8Array>) {
      log += new TextDecoder().decode(chunk);
      const m = /server is listening on (http:\/\/\S+)/.exec(log);
      if (m) resolve(m[1]);
    }
    reject(new Error(`the server stopped:\n${log}`));
  })();
});
for (let i = 0; (await fetch(`${url}/health`).catch(() => null))?.status !== 200; i++) {
  if (i > 600) throw new Error("the server did not become ready");
  await Bun.sleep(100);
}

const WEATHER = { type: "function", function: { name: "get_weather", description: "Weather forecast for a city", parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 7 } }, required: ["city", "days"] } } };

async function settings(page: Page, custom: object): Promise<void> {
  await page.click("[data-testid=settings-button]");
  await page.fill("dialog[data-testid=settings] textarea[name=custom]", JSON.stringify(custom));
  await page.click("[data-testid=settings-save]");
  await page.locator("dialog[data-testid=settings]").waitFor({ state: "detached" });
}

async function ask(page: Page, text: string): Promise<void> {
  const n = await page.locator("article[data-role=assistant]:not(.streaming)").count();
  await page.fill("[data-testid=input]", text);
  await page.press("[data-testid=input]", "Enter");
  await page.locator("article[data-role=assistant]:not(.streaming)").nth(n).waitFor({ timeout: 120000 }).catch(async (e: unknown) => {
    await page.screenshot({ path: join(out, "webui-failed.png") });
    throw e;
  });
}

const profile = mkdtempSync(join(tmpdir(), "bloomery-shots-profile-"));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.BLOOMERY_CHROMIUM ?? "/usr/bin/chromium", headless: true, viewport: { width: 1280, height: 1000 }, deviceScaleFactor: 1,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await ctx.newPage();
  await page.goto(`${url}/`);
  await page.locator("[data-testid=model-name]", { hasText: "bloomery-demo" }).waitFor();
  await settings(page, { temperature: 0, thinking_budget_tokens: 16, max_tokens: 60 });
  await ask(page, "Write a function that reads a JSON file.");
  await settings(page, { temperature: 0, thinking_budget_tokens: 5, max_tokens: 150, tools: [WEATHER], tool_choice: "required", parallel_tool_calls: false });
  await ask(page, "What is the weather in Lima for the next 3 days?");
  await page.locator("[data-testid=messages]").evaluate((m) => m.scrollTo(0, m.scrollHeight));
  await page.screenshot({ path: join(out, "webui-chat.png") });
  await page.setViewportSize({ width: 1280, height: 1120 });
  await page.click("[data-testid=tab-placement]");
  await page.locator(".placement[data-steps]").waitFor();
  await Bun.sleep(1500);
  await page.screenshot({ path: join(out, "webui-placement.png"), fullPage: true });
  console.log(`screenshots: ${join(out, "webui-chat.png")}, ${join(out, "webui-placement.png")}`);
} finally {
  await ctx.close();
  proc.kill("SIGTERM");
  await proc.exited;
  rmSync(profile, { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
}
