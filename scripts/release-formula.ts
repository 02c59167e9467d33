// bloomery release: renders the Homebrew formula (scripts/homebrew/bloomery.rb, a template) for
// one release: version, download URL and each archive's sha256 taken from SHA256SUMS.
// Usage: bun scripts/release-formula.ts [--dir dist/release] [--version V] [--url BASE]
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseSums, ReleaseError } from "./release-archive.ts";

const root = resolve(import.meta.dir, "..");
export const FORMULA_TEMPLATE = join(root, "scripts", "homebrew", "bloomery.rb");
/** Where a version's archives are published (GitHub releases of the project). */
export function defaultReleaseUrl(version: string): string {
  return `https://github.com/bloomery/bloomery/releases/download/v${version}`;
}

/** Fill the template; refuses when SHA256SUMS lacks an archive the formula points at. */
export function renderFormula(template: string, version: string, url: string, sums: Map<string, string>): string {
  if (!/^[0-9A-Za-z][0-9A-Za-z.+-]*$/.test(version)) throw new ReleaseError(`formula: version '${version}' is not a release version`);
  if (!/^https?:\/\/[^\s"#{}]+$/.test(url)) throw new ReleaseError(`formula: '${url}' is not an http(s) URL`);
  const missing: string[] = [];
  const out = template
    .replaceAll("@VERSION@", version)
    .replaceAll("@URL@", url.replace(/\/+$/, ""))
    .replace(/@SHA256:([a-z0-9-]+)@/g, (_, suffix: string) => {
      const name = `bloomery-${version}-${suffix}.tar.gz`;
      const sum = sums.get(name);
      if (!sum) {
        missing.push(name);
        return "";
      }
      return sum;
    });
  if (missing.length > 0) throw new ReleaseError(`formula: SHA256SUMS has no ${missing.join(", ")}`);
  const left = /@[A-Z0-9:a-z-]+@/.exec(out);
  if (left) throw new ReleaseError(`formula: template token ${left[0]} was not filled`);
  return out;
}

/** Render the formula for the release in `dir` and write it to dir/bloomery.rb. */
export function writeFormula(dir: string, version: string, url = defaultReleaseUrl(version)): string {
  const sumsPath = join(dir, "SHA256SUMS");
  if (!existsSync(sumsPath)) throw new ReleaseError(`formula: ${sumsPath} does not exist; run scripts/release.ts first`);
  const text = renderFormula(readFileSync(FORMULA_TEMPLATE, "utf8"), version, url, parseSums(readFileSync(sumsPath, "utf8")));
  const out = join(dir, "bloomery.rb");
  writeFileSync(out, text);
  return out;
}

if (import.meta.main) {
  try {
    const argv = process.argv.slice(2);
    const arg = (name: string): string | undefined => {
      const i = argv.indexOf(name);
      return i >= 0 ? argv[i + 1] : undefined;
    };
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string };
    const version = arg("--version") ?? pkg.version;
    const dir = resolve(arg("--dir") ?? join(root, "dist", "release"));
    console.log(`formula: ${writeFormula(dir, version, arg("--url") ?? defaultReleaseUrl(version))}`);
  } catch (e) {
    console.error(`release-formula: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  }
}
