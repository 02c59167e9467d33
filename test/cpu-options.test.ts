// The CPU library's options (src/engine/cpu-options.ts, bl_cpu_options): the knobs read as ffi/cpu
// read them, their slots, and no getenv left in ffi/cpu (the library reads no environment).
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { CPU_OPTION_DEFAULTS, cpuOptionSlots, cpuOptionsFromEnv } from "../src/engine/cpu-options.ts";
import { ROOT } from "./paths.ts";

describe("CPU options", () => {
  test("the knobs read as ffi/cpu read them", () => {
    expect(cpuOptionsFromEnv({})).toEqual({ ...CPU_OPTION_DEFAULTS });
    expect(cpuOptionsFromEnv({ BLOOMERY_PIN: "0", BLOOMERY_SPIN_US: "250", BLOOMERY_PROF: "" })).toEqual({ pin: 0, spin_us: 250, profile: 1 });
    expect(cpuOptionsFromEnv({ BLOOMERY_PIN: "00", BLOOMERY_SPIN_US: "" })).toEqual({ pin: 1, spin_us: -1, profile: 0 });
    const s = cpuOptionSlots({ pin: 0, spin_us: 7, profile: 1 });
    expect([...s.i]).toEqual([0n, 7n, 1n]);
  });

  test("ffi/cpu reads no environment", () => {
    const dir = join(ROOT, "ffi", "cpu");
    const bad = readdirSync(dir).filter((f) => /\bgetenv\s*\(/.test(readFileSync(join(dir, f), "utf8")));
    expect(bad).toEqual([]);
  });
});
