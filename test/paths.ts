// bloomery tests: where the shared oracle fixtures and the built artifacts live, and how much
// slower than a native run this one is.
import { join } from "node:path";
import { existsSync } from "node:fs";

export const ROOT = join(import.meta.dir, "..");
/** ../shared/fixtures beside the checkout (oracle data made by outside references). */
export const FIXTURES = join(ROOT, "..", "shared", "fixtures");
export const hasFixtures = existsSync(FIXTURES);
/**
 * How many times slower than a native run this one is: scripts/arm64-tests.ts sets
 * BLOOMERY_TEST_SLOWDOWN when it runs the kernel and model tests under qemu-user. A test's own
 * time limit is multiplied by it; thresholds on results never are.
 */
export const SLOWDOWN = Math.max(1, Number(process.env.BLOOMERY_TEST_SLOWDOWN) || 1);
