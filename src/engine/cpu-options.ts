// bloomery engine: the CPU library's options of a context (ffi/bloomery.h bl_cpu_options) from the
// environment knobs docs/cpu.md lists - the one place they are read (the native library reads no
// environment; BLOOMERY_CPU_PATH, process-wide, is handed over by ffi/cpu.ts when it opens the library).
import { CPU_OPTION_FIELDS, Slots, type CpuOptionName } from "../../ffi/layout.ts";

export type CpuOptions = { [K in CpuOptionName]: number };

export const CPU_OPTION_DEFAULTS: Readonly<CpuOptions> = { pin: 1, spin_us: -1, profile: 0 };

/** The knobs as ffi/cpu read them before: BLOOMERY_PIN=0 unpinned, BLOOMERY_SPIN_US=<us>, BLOOMERY_PROF set (any value) profiles. */
export function cpuOptionsFromEnv(env: Record<string, string | undefined> = process.env): CpuOptions {
  const o: CpuOptions = { ...CPU_OPTION_DEFAULTS };
  if (env.BLOOMERY_PIN === "0") o.pin = 0;
  const spin = env.BLOOMERY_SPIN_US;
  if (spin) {
    const n = Number.parseInt(spin.trim(), 10);
    o.spin_us = Number.isFinite(n) ? Math.max(0, n) : 0;
  }
  if (env.BLOOMERY_PROF !== undefined) o.profile = 1;
  return o;
}

/** The options laid out as bl_cpu_options. */
export function cpuOptionSlots(o: CpuOptions = cpuOptionsFromEnv()): Slots {
  const s = new Slots(CPU_OPTION_FIELDS.length);
  CPU_OPTION_FIELDS.forEach(([name], i) => s.setInt(i, Math.trunc(o[name])));
  return s;
}
