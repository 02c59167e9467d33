// bloomery: bundles the web UI's browser code (src/server/webui/client, TypeScript) into one
// minified ES module, build/webui-app.js, which the server embeds as text (src/server/webui/assets.ts).
// Run by scripts/build.ts before the executable is compiled; `bun scripts/build-webui.ts` alone too.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export async function buildWebui(root: string): Promise<string> {
  const out = await Bun.build({
    entrypoints: [join(root, "src/server/webui/client/main.ts")],
    target: "browser",
    format: "esm",
    minify: true,
    sourcemap: "none",
  });
  if (!out.success || out.outputs.length !== 1) {
    throw new Error(`build: the web UI's bundle failed:\n${out.logs.map((l) => String(l)).join("\n")}`);
  }
  const js = await out.outputs[0].text();
  mkdirSync(join(root, "build"), { recursive: true });
  const path = join(root, "build", "webui-app.js");
  writeFileSync(path, js);
  return path;
}

if (import.meta.main) {
  const path = await buildWebui(join(import.meta.dir, ".."));
  console.log(`build: ${path}`);
}
