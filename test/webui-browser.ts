// Test helper for the web UI's browser tests: Debian's Chromium (/usr/bin/chromium, or
// BLOOMERY_CHROMIUM) driven by playwright-core - never a downloaded browser - headless, with a
// fresh profile directory a run, and the settings dialog filled as a person would.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";

export const CHROMIUM = process.env.BLOOMERY_CHROMIUM ?? "/usr/bin/chromium";
export const hasChromium = existsSync(CHROMIUM);

const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];

export interface Browser {
  ctx: BrowserContext;
  close(): Promise<void>;
}

/**
 * A headless Chromium with a profile of its own (removed at close). bypassCSP lets the tests'
 * own probes (waitForFunction with text) run beside the page's content security policy, which
 * forbids eval; a test without it checks that the page itself runs under the policy.
 */
export async function launchBrowser(o: { bypassCSP?: boolean } = {}): Promise<Browser> {
  const dir = mkdtempSync(join(tmpdir(), "bloomery-chromium-"));
  const ctx = await chromium.launchPersistentContext(dir, { executablePath: CHROMIUM, headless: true, args: ARGS, viewport: { width: 1280, height: 800 }, bypassCSP: o.bypassCSP ?? true });
  return {
    ctx,
    async close() {
      await ctx.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A page that fails the test on any script error it throws. */
export async function openPage(b: Browser, url: string): Promise<{ page: Page; errors: string[] }> {
  const page = await b.ctx.newPage();
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(url);
  return { page, errors };
}

/** Opens Settings, sets the sampling fields and the custom JSON given ("" clears), saves. */
export async function setSettings(page: Page, fields: Record<string, string>, custom?: string): Promise<void> {
  await page.click("[data-testid=settings-button]");
  const dlg = page.locator("dialog[data-testid=settings]");
  await dlg.waitFor();
  for (const [k, v] of Object.entries(fields)) await dlg.locator(`input[name=${k}]`).fill(v);
  if (custom !== undefined) await dlg.locator("textarea[name=custom]").fill(custom);
  await dlg.locator("[data-testid=settings-save]").click();
  await dlg.waitFor({ state: "detached" });
}

/** Types a message and sends it with Enter. */
export async function send(page: Page, text: string): Promise<void> {
  await page.fill("[data-testid=input]", text);
  await page.press("[data-testid=input]", "Enter");
}

/**
 * The last answer once it ended (its finish reason set, or an error shown); `after`: an answer
 * other than the one with this id (a regenerated one, which may stream for less than a frame).
 * Browser-side code is given as text: the tests are type-checked without the DOM's types.
 */
export async function lastAnswerDone(page: Page, timeout = 60000, after?: string | null): Promise<void> {
  await page.waitForFunction(`(() => {
    const all = document.querySelectorAll("article[data-role=assistant]");
    const last = all[all.length - 1];
    if (!last || last.dataset.id === ${JSON.stringify(after ?? "")}) return false;
    return !last.classList.contains("streaming") && (last.dataset.finish !== "" || !!last.querySelector("[data-testid=message-error]"));
  })()`, undefined, { timeout });
}

/** The id of the last answer shown. */
export async function lastAnswerId(page: Page): Promise<string | null> {
  return page.locator("article[data-role=assistant]").last().getAttribute("data-id");
}
