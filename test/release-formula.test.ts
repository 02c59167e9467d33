// Tests of the Homebrew formula: the template's shape (install and test blocks), rendering from
// SHA256SUMS (every URL and sha256 filled, a missing archive refused), and Ruby's syntax check
// (ruby -c; skipped with a line when ruby is absent locally, a failure in CI).
import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { FORMULA_TEMPLATE, defaultReleaseUrl, renderFormula, writeFormula } from "../scripts/release-formula.ts";
import { parseSums } from "../scripts/release-archive.ts";

const template = readFileSync(FORMULA_TEMPLATE, "utf8");
const V = "1.2.3";
const sum = (c: string): string => c.repeat(64);
const sums = new Map([
  [`bloomery-${V}-darwin-arm64.tar.gz`, sum("a")],
  [`bloomery-${V}-linux-x64-cuda.tar.gz`, sum("b")],
  [`bloomery-${V}-linux-arm64.tar.gz`, sum("c")],
]);

describe("Homebrew formula", () => {
  test("the template is a Formula with install, caveats and a test block that serves a model", () => {
    expect(template).toMatch(/^class Bloomery < Formula$/m);
    expect(template).toMatch(/^  def install$/m);
    expect(template).toMatch(/^  test do$/m);
    expect(template).toContain('bin.install "bloomery-serve-metal"');
    expect(template).toContain("--version");
    expect(template).toContain("/health");
  });

  test("rendering fills version, URLs and every sha256 from SHA256SUMS", () => {
    const url = defaultReleaseUrl(V);
    const f = renderFormula(template, V, url, sums);
    expect(f).toContain(`version "${V}"`);
    expect(f).toContain(`url "${url}/bloomery-${V}-darwin-arm64.tar.gz"\n    sha256 "${sum("a")}"`);
    expect(f).toContain(`url "${url}/bloomery-${V}-linux-x64-cuda.tar.gz"\n      sha256 "${sum("b")}"`);
    expect(f).toContain(`url "${url}/bloomery-${V}-linux-arm64.tar.gz"\n      sha256 "${sum("c")}"`);
    expect(f).not.toContain("linux-arm64-cuda.tar.gz");
    expect(f).not.toMatch(/@[A-Z]/);
  });

  test("an archive missing from the sums, a bad URL or version is refused", () => {
    const partial = new Map(sums);
    partial.delete(`bloomery-${V}-darwin-arm64.tar.gz`);
    expect(() => renderFormula(template, V, "https://x", partial)).toThrow(`SHA256SUMS has no bloomery-${V}-darwin-arm64.tar.gz`);
    expect(() => renderFormula(template, V, 'https://x/"; system "rm', sums)).toThrow(/not an http/);
    expect(() => renderFormula(template, "1.0; rm", "https://x", sums)).toThrow(/not a release version/);
  });

  test("writeFormula reads the release directory's SHA256SUMS", () => {
    const dir = mkdtempSync(join(tmpdir(), "formula-"));
    writeFileSync(join(dir, "SHA256SUMS"), [...sums].map(([n, s]) => `${s}  ${n}\n`).join(""));
    const out = writeFormula(dir, V, "https://example.test/rel");
    expect(readFileSync(out, "utf8")).toContain(`url "https://example.test/rel/bloomery-${V}-linux-x64-cuda.tar.gz"`);
    expect(parseSums(readFileSync(join(dir, "SHA256SUMS"), "utf8")).size).toBe(3);
  });

  const ruby = Bun.which("ruby");
  const ci = !!process.env.CI;
  if (!ruby && !ci) console.log("formula syntax check skipped: ruby is not installed here (CI installs it: apt-get install -y ruby)");
  test.skipIf(!ruby && !ci)("ruby -c accepts the template and a rendered formula", () => {
    if (!ruby) throw new Error("ruby is required in CI to check the Homebrew formula: add `apt-get install -y ruby` to .ci/run");
    const dir = mkdtempSync(join(tmpdir(), "formula-rb-"));
    const rendered = join(dir, "bloomery.rb");
    writeFileSync(rendered, renderFormula(template, V, defaultReleaseUrl(V), sums));
    for (const file of [FORMULA_TEMPLATE, rendered]) {
      const p = Bun.spawnSync([ruby, "-c", file], { stdout: "pipe", stderr: "pipe" });
      expect(`${p.stdout.toString()}${p.stderr.toString()}`.trim()).toBe("Syntax OK");
      expect(p.exitCode).toBe(0);
    }
    // and a broken formula is caught, so the check is real
    writeFileSync(rendered, template.replace(/^  end\n\s*def install/m, "  def install"));
    expect(Bun.spawnSync([ruby, "-c", rendered], { stdout: "pipe", stderr: "pipe" }).exitCode).not.toBe(0);
  });
});
