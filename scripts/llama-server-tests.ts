// bloomery: runs llama.cpp's own server test suite (tools/server/tests, pytest) against
// dist/bloomery-serve with the demo model. The suite is fetched at test time from the llama.cpp
// source that npm's node-llama-cpp ships (llama/gitRelease.bundle); nothing of it is kept in this
// repository. Every server preset is pointed at the demo GGUF (scripts/llama-server-tests/
// bloomery_presets.py). A failing test is a failure unless docs/llama-server-tests.md lists it
// with its reason (a documented choice, or a test llama-server itself fails with this model).
// Prints "N passed, N failed" last and exits 1 on any failure that is not listed.
//
//   bun scripts/llama-server-tests.ts [pytest args, e.g. unit/test_basic.py -k models]
//
// Needs python3 with pytest, requests, aiohttp, wget, prometheus_client, filelock (Debian:
// python3-pytest python3-requests python3-aiohttp python3-wget python3-prometheus-client
// python3-filelock python3-pytest-timeout; .ci/run installs them); the `openai` package comes from
// the machine's pip index when it has one, else the tests that import it cannot run (said so).
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..");
/** node-llama-cpp's version whose llama.cpp source the suite comes from (its bundle's commit below). */
const NODE_LLAMA_CPP = "3.22.1";
const LLAMA_COMMIT = "de3ff815ea7d559ee917f063901b8986f038abc6";
const CACHE = process.env.LLAMA_SERVER_TESTS_CACHE ?? join(ROOT, "node_modules", ".cache", "llama-server-tests");
/** The executable: the given one, else the tests' own (npm test builds it), else dist/'s. */
const EXE =
  process.env.LLAMA_SERVER_BIN_PATH ??
  process.env.BLOOMERY_TEST_EXE ??
  [join(ROOT, "build", "test", "bloomery-serve"), join(ROOT, "dist", "bloomery-serve")].find((p) => existsSync(p)) ??
  join(ROOT, "dist", "bloomery-serve");
const DEMO = process.env.LLAMA_SERVER_TEST_MODEL ?? [join(ROOT, "assets", "demo", "bloomery-demo-q8_0.gguf"), join(ROOT, "..", "shared", "fixtures", "demo-model", "bloomery-demo-q8_0.gguf")].find((p) => existsSync(p));
const PYTHON = process.env.LLAMA_SERVER_TESTS_PYTHON ?? (existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3");
const EXPECTED = join(ROOT, "docs", "llama-server-tests.md");
const PY_MODULES = ["pytest", "requests", "aiohttp", "wget", "prometheus_client", "filelock"];

function run(cmd: string[], opts: { cwd?: string; env?: Record<string, string> } = {}): { code: number; out: string } {
  const p = Bun.spawnSync(cmd, { cwd: opts.cwd ?? ROOT, env: { ...process.env, ...opts.env }, stdout: "pipe", stderr: "pipe" });
  return { code: p.exitCode ?? -1, out: p.stdout.toString() + p.stderr.toString() };
}

function fail(line: string): never {
  console.log(`llama-server tests: ${line}`);
  console.log("0 passed, 1 failed");
  process.exit(1);
}

/** The suite's directory: node-llama-cpp from npm, its bundle cloned at the pinned commit. */
function fetchSuite(): string {
  const src = join(CACHE, `llama.cpp-${LLAMA_COMMIT.slice(0, 12)}`);
  const tests = join(src, "tools", "server", "tests");
  if (existsSync(join(tests, "utils.py"))) return tests;
  mkdirSync(CACHE, { recursive: true });
  const pack = run(["npm", "pack", `node-llama-cpp@${NODE_LLAMA_CPP}`, "--pack-destination", CACHE, "--silent"]);
  if (pack.code !== 0) fail(`npm pack node-llama-cpp@${NODE_LLAMA_CPP} failed:\n${pack.out}`);
  const tgz = join(CACHE, `node-llama-cpp-${NODE_LLAMA_CPP}.tgz`);
  const untar = run(["tar", "xzf", tgz, "-C", CACHE, "package/llama/gitRelease.bundle"]);
  if (untar.code !== 0) fail(`cannot unpack ${tgz}:\n${untar.out}`);
  rmSync(src, { recursive: true, force: true });
  const clone = run(["git", "clone", "-q", join(CACHE, "package", "llama", "gitRelease.bundle"), src]);
  if (clone.code !== 0) fail(`cannot clone the llama.cpp bundle:\n${clone.out}`);
  const head = run(["git", "-C", src, "rev-parse", "HEAD"]).out.trim();
  if (head !== LLAMA_COMMIT) fail(`node-llama-cpp@${NODE_LLAMA_CPP} carries llama.cpp ${head}, not ${LLAMA_COMMIT}`);
  rmSync(join(CACHE, "package"), { recursive: true, force: true });
  rmSync(tgz, { force: true });
  return tests;
}

/** A directory with the openai package for PYTHONPATH (from the machine's own pip index), or null. */
function openaiPath(): string | null {
  if (run([PYTHON, "-c", "import openai"]).code === 0) return "";
  const dir = join(CACHE, "py-openai");
  if (existsSync(join(dir, "openai"))) return dir;
  // only the indexes this machine's pip is set up with that are local (file:), never the network
  const conf = (k: string) => run(["python3", "-m", "pip", "config", "get", k]).out.split(/\s+/).filter((u) => u.startsWith("file:") || u.startsWith("/"));
  const local = [...conf("global.index-url"), ...conf("global.extra-index-url")];
  if (local.length === 0) {
    console.log("llama-server tests: the openai Python package is not installed and this machine's pip has no local index; the test files that import it cannot run");
    return null;
  }
  const pip = run(["python3", "-m", "pip", "install", "-q", "--no-cache-dir", "--target", dir, "--index-url", local[0], ...local.slice(1).flatMap((u) => ["--extra-index-url", u]), "openai<3"]);
  if (pip.code === 0 && existsSync(join(dir, "openai"))) return dir;
  console.log(`llama-server tests: the openai Python package is not installed and the machine's pip index has none; the test files that import it cannot run\n${pip.out.slice(-400)}`);
  return null;
}

interface Expected {
  /** test id or a prefix ending in "*" */
  pattern: string;
  reason: string;
}

/** The listed tests of docs/llama-server-tests.md: table rows whose first cell is a test id (or a prefix and "*") in backticks. */
function readExpected(): Expected[] {
  if (!existsSync(EXPECTED)) return [];
  const out: Expected[] = [];
  for (const line of readFileSync(EXPECTED, "utf8").split("\n")) {
    const m = /^\|\s*`([^`]+)`\s*\|\s*(.*?)\s*\|\s*$/.exec(line);
    if (m) out.push({ pattern: m[1].replace(/\\\|/g, "|"), reason: m[2] }); // a "|" in a test id is written "\|" in the table
  }
  return out;
}

function listed(id: string, exp: Expected[]): Expected | undefined {
  return exp.find((e) => (e.pattern.endsWith("*") ? id.startsWith(e.pattern.slice(0, -1)) : e.pattern === id));
}

interface Case {
  id: string;
  outcome: "passed" | "failed" | "skipped";
  message: string;
}

/** pytest's JUnit XML: one case per test (classname unit.test_x -> unit/test_x.py). */
function readJunit(path: string): Case[] {
  const xml = readFileSync(path, "utf8");
  const cases: Case[] = [];
  const re = /<testcase\b([^>]*?)(\/>|>([\s\S]*?)<\/testcase>)/g;
  const attr = (s: string, k: string) => new RegExp(`\\b${k}="([^"]*)"`).exec(s)?.[1] ?? "";
  const unescape = (s: string) => s.replace(/&quot;/g, '"').replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&apos;/g, "'").replace(/&#10;/g, "\n").replace(/&amp;/g, "&");
  for (let m = re.exec(xml); m; m = re.exec(xml)) {
    const a = m[1];
    const body = m[3] ?? "";
    const file = `${attr(a, "classname").replace(/\./g, "/")}.py`;
    const id = `${file}::${unescape(attr(a, "name"))}`;
    const bad = /<(failure|error)\b([^>]*)>/.exec(body);
    if (bad) cases.push({ id, outcome: "failed", message: unescape(attr(bad[2], "message")).split("\n")[0].slice(0, 300) });
    else if (/<skipped\b/.test(body)) cases.push({ id, outcome: "skipped", message: unescape(attr(/<skipped\b([^>]*)>/.exec(body)?.[1] ?? "", "message")).slice(0, 200) });
    else cases.push({ id, outcome: "passed", message: "" });
  }
  return cases;
}

function main(): void {
  if (!DEMO) fail("the demo model is not found (assets/demo/ or ../shared/fixtures/demo-model/); set LLAMA_SERVER_TEST_MODEL");
  if (!existsSync(EXE)) fail(`${EXE} is missing: run npm test (the tests' executable) or npm run build first`);
  const missing = PY_MODULES.filter((m) => run([PYTHON, "-c", `import ${m}`]).code !== 0);
  if (missing.length) fail(`${PYTHON} lacks ${missing.join(", ")} (Debian: apt-get install python3-pytest python3-requests python3-aiohttp python3-wget python3-prometheus-client python3-filelock python3-pytest-timeout)`);
  const tests = fetchSuite();
  const oai = openaiPath();
  // pytest-timeout loads itself through its entry point (Debian's package has one); naming it with
  // -p as well registers it twice and pytest stops before any test
  const timeout = run([PYTHON, "-c", "import pytest_timeout"]).code === 0 ? ["-o", "timeout=300"] : [];
  const junit = join(CACHE, "junit.xml");
  rmSync(junit, { force: true });
  const work = join(CACHE, "work");
  mkdirSync(join(work, "hf"), { recursive: true });
  const args = process.argv.slice(2);
  const pyPath = [join(ROOT, "scripts", "llama-server-tests"), oai ?? "", process.env.PYTHONPATH ?? ""].filter((p) => p !== "").join(":");
  const t0 = performance.now();
  console.log(`llama-server tests: llama.cpp ${LLAMA_COMMIT.slice(0, 12)} (node-llama-cpp ${NODE_LLAMA_CPP}) tools/server/tests against ${EXE} with ${DEMO}`);
  const p = Bun.spawnSync(
    [PYTHON, "-m", "pytest", "-p", "bloomery_presets", ...timeout, "-q", "-rN", "--junitxml", junit, "-o", `cache_dir=${join(work, ".pytest_cache")}`, "-m", "not slow", ...(args.length ? args : ["unit"])],
    {
      cwd: tests,
      env: {
        ...process.env, PYTHONPATH: pyPath, LLAMA_SERVER_BIN_PATH: EXE, LLAMA_SERVER_TEST_MODEL: DEMO, LLAMA_CACHE: join(work, "hf"),
        HF_HUB_OFFLINE: "1", PYTHONDONTWRITEBYTECODE: "1", XDG_CACHE_HOME: join(work, "xdg"),
      },
      stdout: "pipe", stderr: "pipe",
    },
  );
  writeFileSync(join(CACHE, "pytest.log"), p.stdout.toString() + p.stderr.toString());
  if (!existsSync(junit)) fail(`pytest wrote no results (exit ${p.exitCode}); its output is in ${join(CACHE, "pytest.log")}:\n${(p.stdout.toString() + p.stderr.toString()).slice(-3000)}`);
  const exp = readExpected();
  const cases = readJunit(junit);
  let passed = 0, failed = 0, documented = 0, skipped = 0;
  const unexpected: Case[] = [];
  const nowPassing: string[] = [];
  for (const c of cases) {
    const e = listed(c.id, exp);
    if (c.outcome === "passed") {
      passed++;
      if (e && !e.pattern.endsWith("*")) nowPassing.push(c.id);
    } else if (c.outcome === "skipped") skipped++;
    else if (e) documented++;
    else {
      failed++;
      unexpected.push(c);
    }
  }
  for (const c of unexpected) console.log(`FAIL ${c.id}: ${c.message}`);
  for (const id of nowPassing) console.log(`note: ${id} passes; docs/llama-server-tests.md still lists it`);
  const secs = ((performance.now() - t0) / 1000).toFixed(0);
  console.log(`llama-server tests: ${passed} passed, ${documented} failed as docs/llama-server-tests.md says (${exp.length} entries), ${failed} failed unlisted, ${skipped} skipped; ${secs} s (log: ${join(CACHE, "pytest.log")})`);
  // the listed failures are expected ones (pytest's xfail): counted with the skipped
  console.log(`${passed} passed, ${failed} failed, ${skipped + documented} skipped`);
  process.exit(failed > 0 ? 1 : 0);
}

if (import.meta.main) main();
export { readJunit, readExpected, listed };
