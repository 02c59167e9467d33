// bloomery CLI: the demo model built into the executable (assets/demo/, committed to the repository;
// docs/demo-model.md; scripts/build.ts checks it is whole). Native code maps files, so inside a
// compiled executable the embedded copy is written once to the user's cache and served from there.
import demoEmbedded from "../../assets/demo/bloomery-demo-q8_0.gguf" with { type: "file" };
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

const NAME = "bloomery-demo-q8_0.gguf";
const NONE = "this build has no demo model (it was built with --no-demo); pass a model with -m, or build without --no-demo";

function cacheDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "bloomery");
}

/** A real file path of the demo model; throws a clear error when this build has none. */
export function demoModelPath(): string {
  const size = Bun.file(demoEmbedded).size;
  if (!size) throw new Error(NONE);
  if (!demoEmbedded.startsWith("/$bunfs/")) return demoEmbedded; // a checkout: already a real file
  const dir = cacheDir();
  const path = join(dir, `${size}-${NAME}`);
  if (existsSync(path) && statSync(path).size === size) return path;
  mkdirSync(dir, { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, readFileSync(demoEmbedded));
  renameSync(tmp, path);
  return path;
}
