// bloomery: `bun run build`: builds the native libraries, then compiles dist/bloomery-serve (one
// executable with the libraries and the engine worker embedded).
import { join } from "node:path";
import { mkdirSync } from "node:fs";
import { prepareDemoAsset } from "./demo-asset.ts";

const root = join(import.meta.dir, "..");
const bun = process.execPath;

function run(cmd: string[]): void {
  const p = Bun.spawnSync(cmd, { cwd: root, stdout: "inherit", stderr: "inherit" });
  if (p.exitCode !== 0) {
    console.error(`build: failed: ${cmd.join(" ")}`);
    process.exit(1);
  }
}

run([bun, "scripts/build-native.ts", ...process.argv.slice(2)]);

prepareDemoAsset(root);
mkdirSync(join(root, "dist"), { recursive: true });
run([bun, "build", "--compile", "src/cli/main.ts", "src/engine/worker.ts", "src/server/body-worker.ts", "--outfile", "dist/bloomery-serve"]);
console.log("build: dist/bloomery-serve");
