// Real coding agents' first turn on the default `--demo` start, driven offline against the
// executable: Claude Code (print mode, and a short interactive session under tmux), Codex CLI
// (Responses API) and OpenCode (chat completions), their binaries from the npm packages pinned in
// package.json. Each is pointed at 127.0.0.1 only, with a throwaway HOME and its telemetry and
// update checks off. Their first turns are long (Claude Code ~17,000 tokens of system prompt and
// tools, Codex and OpenCode ~8,000-9,000): they must fit the default slots (4096 tokens each before
// issue 32). The demo model writes Python and never ends a chat turn by itself, so each answer is
// bounded: -n on the server (Codex sends no limit), the agents' own output caps where they have one;
// a first turn "works" when the agent shows the model's text and the server answered 200.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT } from "./paths.ts";
import { type RunningServer, startServer } from "./server-helpers.ts";

setDefaultTimeout(300000);
const BIN = join(ROOT, "node_modules", ".bin");
let srv: RunningServer;
const cache = mkdtempSync(join(tmpdir(), "bloomery-agents-cache-"));

beforeAll(async () => {
  // the default start (-np auto, -c 0), answers bounded to 48 tokens
  srv = await startServer(["--demo", "-n", "48"], { env: { XDG_CACHE_HOME: cache } });
}, 600000);
afterAll(async () => srv?.stop());

/** Why an agent's binary cannot run here, or null when it can. */
function cannotRun(name: string): string | null {
  const exe = join(BIN, name);
  if (!existsSync(exe)) return `node_modules/.bin/${name} is missing (npm ci installs claude and codex; .ci/run installs opencode: npm install --no-save opencode-ai@1.18.33)`;
  const p = Bun.spawnSync([exe, "--version"], { stdout: "pipe", stderr: "pipe", env: { PATH: process.env.PATH ?? "", HOME: tmpdir() } });
  return p.exitCode === 0 ? null : `${name} --version exited ${p.exitCode}: ${p.stderr.toString().slice(0, 200)}`;
}

/** A fresh HOME and an environment with nothing of the user's but PATH (no real keys reach an agent). */
function agentEnv(extra: Record<string, string>): { home: string; env: Record<string, string> } {
  const home = mkdtempSync(join(tmpdir(), "bloomery-agent-home-"));
  mkdirSync(join(home, "work"));
  return {
    home,
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, TERM: "xterm-256color", LANG: "C.UTF-8",
      XDG_CONFIG_HOME: join(home, ".config"), XDG_DATA_HOME: join(home, ".local", "share"), XDG_CACHE_HOME: join(home, ".cache"), XDG_STATE_HOME: join(home, ".local", "state"),
      NO_PROXY: "127.0.0.1,localhost", ...extra,
    },
  };
}

async function runAgent(cmd: string[], env: Record<string, string>, cwd: string, ms = 240000): Promise<{ code: number; out: string }> {
  const p = Bun.spawn(cmd, { cwd, env, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const timer = setTimeout(() => p.kill("SIGKILL"), ms);
  const [out, err] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
  await p.exited;
  clearTimeout(timer);
  return { code: p.exitCode ?? -1, out: out + err };
}

/** The server's log lines for a route since `from`: status and prompt tokens. */
function served(route: string, from: number): { status: number; prompt: number }[] {
  const re = new RegExp(`done request: POST ${route.replace(/\//g, "\\/")} \\S+ (\\d+) \\| prompt (\\d+) tokens`, "g");
  return [...srv.log().slice(from).matchAll(re)].map((m) => ({ status: Number(m[1]), prompt: Number(m[2]) }));
}

const CLAUDE_ENV = {
  ANTHROPIC_API_KEY: "sk-ant-local-bloomery-key-000000000000",
  DISABLE_TELEMETRY: "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1", DISABLE_AUTOUPDATER: "1", DISABLE_ERROR_REPORTING: "1",
  DISABLE_BUG_COMMAND: "1", CLAUDE_CODE_MAX_OUTPUT_TOKENS: "32",
};

describe("Claude Code (@anthropic-ai/claude-code, Anthropic Messages)", () => {
  test("claude -p: the first turn is answered with the model's text", async () => {
    const why = cannotRun("claude");
    if (why) return void console.log(`skip: Claude Code cannot run here: ${why}`);
    const { home, env } = agentEnv({ ...CLAUDE_ENV, ANTHROPIC_BASE_URL: srv.url });
    const from = srv.log().length;
    const r = await runAgent([join(BIN, "claude"), "-p", "Say hello", "--output-format", "stream-json", "--verbose"], env, join(home, "work"));
    const events = r.out.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, any>);
    const answers = events.filter((e) => e.type === "assistant" && e.message?.model === "bloomery-demo");
    expect(answers.length).toBeGreaterThan(0);
    expect(answers[0].message.content.find((b: { type: string }) => b.type === "text")?.text.length).toBeGreaterThan(0);
    expect(r.out).not.toContain("API Error: 400");
    const lines = served("/v1/messages", from);
    console.log(`measure: claude -p: ${lines.length} requests, first prompt ${lines[0]?.prompt} tokens`);
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.every((l) => l.status === 200)).toBe(true);
    expect(Math.max(...lines.map((l) => l.prompt))).toBeGreaterThan(10000); // far past the old 4096-token slot
  });

  test("an interactive session under tmux: the prompt is typed, the model's text shows on the screen", async () => {
    const why = cannotRun("claude") ?? (Bun.spawnSync(["tmux", "-V"]).exitCode === 0 ? null : "tmux is not installed");
    if (why) return void console.log(`skip: the interactive Claude Code session cannot run here: ${why}`);
    const { home, env } = agentEnv({ ...CLAUDE_ENV, ANTHROPIC_BASE_URL: srv.url });
    const work = join(home, "work");
    // onboarding, the folder's trust and the key's approval answered beforehand, as after a first run
    writeFileSync(join(home, ".claude.json"), JSON.stringify({
      hasCompletedOnboarding: true, theme: "dark", numStartups: 1, autoUpdates: false,
      projects: { [work]: { hasTrustDialogAccepted: true, hasCompletedProjectOnboarding: true, allowedTools: [] } },
      customApiKeyResponses: { approved: [CLAUDE_ENV.ANTHROPIC_API_KEY.slice(-20)], rejected: [] },
    }));
    const session = `bloomery-claude-${process.pid}`;
    const envArgs = Object.entries(env).map(([k, v]) => `${k}=${v}`);
    const tmux = (...a: string[]) => Bun.spawnSync(["tmux", ...a], { stdout: "pipe", stderr: "pipe" });
    const screen = () => tmux("capture-pane", "-t", session, "-p").stdout.toString();
    const waitFor = async (ok: (s: string) => boolean, ms: number) => {
      const t0 = Date.now();
      while (Date.now() - t0 < ms) {
        if (ok(screen())) return true;
        await Bun.sleep(500);
      }
      return false;
    };
    const from = srv.log().length;
    expect(tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "45", "-c", work, "env", "-i", ...envArgs, join(BIN, "claude")).exitCode).toBe(0);
    try {
      expect(await waitFor((s) => s.includes("❯"), 60000)).toBe(true);
      tmux("send-keys", "-t", session, "-l", "Say hello");
      await Bun.sleep(500);
      tmux("send-keys", "-t", session, "Enter");
      // the model's answer: a "●" block that is not an API error
      const answered = await waitFor((s) => s.split("\n").some((l) => l.startsWith("●") && !l.includes("API Error")), 180000);
      const shown = screen();
      console.log(`measure: interactive claude screen:\n${shown.split("\n").filter((l) => l.trim() !== "").slice(0, 14).join("\n")}`);
      expect(answered).toBe(true);
      expect(shown).toContain("Say hello");
      expect(shown).not.toContain("API Error: 400");
      // the streamed request's log line comes when its stream ends
      const t0 = Date.now();
      while (!served("/v1/messages", from).some((l) => l.status === 200 && l.prompt > 10000) && Date.now() - t0 < 120000) await Bun.sleep(500);
      expect(served("/v1/messages", from).some((l) => l.status === 200 && l.prompt > 10000)).toBe(true);
      tmux("send-keys", "-t", session, "-l", "/exit");
      tmux("send-keys", "-t", session, "Enter");
      await Bun.sleep(1000);
    } finally {
      tmux("kill-session", "-t", session);
    }
  });
});

describe("Codex CLI (@openai/codex, Responses API)", () => {
  test("codex exec: the first turn (8,000 tokens) is answered with the model's text", async () => {
    const why = cannotRun("codex");
    if (why) return void console.log(`skip: Codex CLI cannot run here: ${why}`);
    const { home, env } = agentEnv({ CODEX_HOME: "" });
    const codexHome = join(home, ".codex");
    mkdirSync(codexHome);
    env.CODEX_HOME = codexHome;
    writeFileSync(join(codexHome, "config.toml"), [
      'model = "bloomery-demo"', 'model_provider = "bloomery"', "check_for_update_on_startup = false", "",
      "[model_providers.bloomery]", 'name = "bloomery"', `base_url = "${srv.url}/v1"`, 'wire_api = "responses"', "",
      "[analytics]", "enabled = false", "", "[otel]", 'exporter = "none"', "",
    ].join("\n"));
    const from = srv.log().length;
    const r = await runAgent([join(BIN, "codex"), "exec", "--skip-git-repo-check", "--json", "Say hello"], env, join(home, "work"));
    const events = r.out.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, any>);
    const message = events.find((e) => e.type === "item.completed" && e.item?.type === "agent_message");
    expect(message?.item.text.length).toBeGreaterThan(0);
    expect(r.out).not.toContain("exceeds the available context size");
    const lines = served("/v1/responses", from);
    console.log(`measure: codex exec: ${lines.length} requests, first prompt ${lines[0]?.prompt} tokens`);
    expect(lines.length).toBeGreaterThan(0);
    expect(lines[0]).toMatchObject({ status: 200 });
    expect(lines[0].prompt).toBeGreaterThan(4096);
  });
});

describe("OpenCode (opencode-ai, OpenAI-compatible chat)", () => {
  test("opencode run: the first turn (~9,000 tokens) is answered with the model's text", async () => {
    const why = cannotRun("opencode");
    if (why) return void console.log(`skip: OpenCode cannot run here: ${why}`);
    const config = {
      $schema: "https://opencode.ai/config.json", autoupdate: false, share: "disabled", model: "bloomery/bloomery-demo",
      provider: { bloomery: { npm: "@ai-sdk/openai-compatible", name: "bloomery", options: { baseURL: `${srv.url}/v1`, apiKey: "sk-local" }, models: { "bloomery-demo": { name: "bloomery demo", limit: { context: 32768, output: 32 } } } } },
    };
    const { home, env } = agentEnv({
      OPENCODE_CONFIG_CONTENT: JSON.stringify(config), OPENCODE_DISABLE_AUTOUPDATE: "1", OPENCODE_DISABLE_MODELS_FETCH: "1", OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
      OPENCODE_DISABLE_LSP_DOWNLOAD: "1", OPENCODE_DISABLE_SHARE: "1", OPENCODE_DISABLE_CLAUDE_CODE: "1", OPENCODE_DISABLE_EXTERNAL_SKILLS: "1", OPENCODE_DISABLE_EMBEDDED_WEB_UI: "1",
    });
    const from = srv.log().length;
    const r = await runAgent([join(BIN, "opencode"), "run", "--format", "json", "Say hello"], env, join(home, "work"));
    const events = r.out.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, any>);
    const text = events.find((e) => e.type === "text" && typeof e.part?.text === "string");
    expect(text?.part.text.length).toBeGreaterThan(0);
    const lines = served("/v1/chat/completions", from);
    console.log(`measure: opencode run: ${lines.length} requests, first prompt ${lines[0]?.prompt} tokens`);
    expect(lines.some((l) => l.status === 200 && l.prompt > 4096)).toBe(true);
  });
});
