// The web UI's browser code (src/server/webui/client) is type-checked against the DOM's types in
// a project of its own (the root tsconfig excludes it: the DOM's globals clash with Bun's), so this
// runs that check inside `bun test`, and the bundle build, as CI does them.
import { describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { buildWebui } from "../scripts/build-webui.ts";
import { ROOT } from "./paths.ts";

describe("the web UI's browser code", () => {
  test("type-checks strictly with the DOM's types", () => {
    const tsc = join(ROOT, "node_modules", "typescript", "bin", "tsc");
    const p = Bun.spawnSync([process.execPath, tsc, "--noEmit", "-p", "src/server/webui/client"], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    expect(p.stdout.toString() + p.stderr.toString()).toBe("");
    expect(p.exitCode).toBe(0);
  }, 180000);

  test("bundles into one ES module with no imports left", async () => {
    const path = await buildWebui(ROOT);
    expect(existsSync(path)).toBe(true);
    const js = await Bun.file(path).text();
    expect(js).not.toMatch(/\bimport\s*[{(*"']/);
    expect(js).toContain("placement/state");
    expect(js).toContain("v1/chat/completions");
  });
});
