// bloomery: puts the demo model that ships inside the executable at build/demo.gguf (an empty
// file when ../shared/fixtures is absent; `--demo` then says this build has none).
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export function prepareDemoAsset(root: string): void {
  const src = join(root, "..", "shared", "fixtures", "demo-model", "bloomery-demo-q8_0.gguf");
  const dst = join(root, "build", "demo.gguf");
  mkdirSync(join(root, "build"), { recursive: true });
  if (existsSync(dst)) chmodSync(dst, 0o644);
  if (existsSync(src)) {
    if (!existsSync(dst) || statSync(dst).size !== statSync(src).size) writeFileSync(dst, readFileSync(src), { mode: 0o644 });
  } else {
    console.warn(`build: ${src} is missing: building without the demo model`);
    writeFileSync(dst, "");
  }
}
