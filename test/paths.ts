// bloomery tests: where the shared oracle fixtures and the built artifacts live.
import { join } from "node:path";
import { existsSync } from "node:fs";

export const ROOT = join(import.meta.dir, "..");
/** ../shared/fixtures beside the checkout (oracle data made by outside references). */
export const FIXTURES = join(ROOT, "..", "shared", "fixtures");
export const hasFixtures = existsSync(FIXTURES);
