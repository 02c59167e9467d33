// bloomery: the demo model that ships inside the executable: assets/demo/bloomery-demo-q8_0.gguf,
// committed to the repository (docs/demo-model.md: what it is and how it was trained). The build
// checks it is whole before embedding it (src/cli/demo.ts imports it), and says how to restore it
// when a checkout lacks it, holds a Git LFS pointer in its place, or has it changed.
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

export const DEMO_ASSET = join("assets", "demo", "bloomery-demo-q8_0.gguf");
export const DEMO_BYTES = 15_520_864;
export const DEMO_SHA256 = "7d16b47532eada8e4b6a24a948fbe1ce006cd25a2c2816b27fedea32621ca562";

export class DemoAssetError extends Error {}

/** The demo model's path in the checkout, checked whole (size and sha256); throws DemoAssetError saying what to do. */
export function checkDemoAsset(root: string): string {
  const path = join(root, DEMO_ASSET);
  const restore = `restore it with: git checkout -- ${DEMO_ASSET}`;
  if (!existsSync(path)) throw new DemoAssetError(`${DEMO_ASSET} is missing (the demo model every executable carries); ${restore}`);
  const size = statSync(path).size;
  if (size !== DEMO_BYTES) {
    const head = readFileSync(path).subarray(0, 64).toString("latin1");
    if (head.startsWith("version https://git-lfs")) throw new DemoAssetError(`${DEMO_ASSET} is a Git LFS pointer, not the model: the repository stores it as a plain file; ${restore}`);
    throw new DemoAssetError(`${DEMO_ASSET} has ${size} bytes, the demo model has ${DEMO_BYTES}; ${restore}`);
  }
  const sum = new Bun.CryptoHasher("sha256").update(readFileSync(path)).digest("hex");
  if (sum !== DEMO_SHA256) throw new DemoAssetError(`${DEMO_ASSET} has sha256 ${sum}, the demo model ${DEMO_SHA256}; ${restore}`);
  return path;
}

/** Kept for scripts/release.ts: the demo must be whole before an executable embeds it. */
export function prepareDemoAsset(root: string): void {
  checkDemoAsset(root);
}
