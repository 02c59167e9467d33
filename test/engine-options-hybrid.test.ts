// The server's engine settings when routed experts stay in host RAM beside a card: a prompt batch
// uploads every host layer's experts once, so -ub grows to HYBRID_UBATCH unless -ub (or a smaller
// -b) is given, and a line says so; nothing changes on the CPU or with every expert on the card;
// --promote-slots reaches the engine.
import { describe, expect, test } from "bun:test";
import { parseArgs, type ServerOptionKey, type ServerOptions } from "../src/cli/flags.ts";
import { HYBRID_UBATCH, planEngine, type AutoSlots } from "../src/server/engine-options.ts";

function plan(argv: string[]) {
  const r = parseArgs(["-m", "x.gguf", "-np", "1", ...argv], {});
  if (r.action !== "serve") throw new Error(`expected serve, got ${r.action}`);
  const auto: AutoSlots = () => ({ nSlots: 1, line: "one" });
  return planEngine(r.options as ServerOptions, r.explicit as ReadonlySet<ServerOptionKey>, 32768, auto);
}

describe("-ub with experts in host RAM beside a card", () => {
  test("--cpu-moe, --n-cpu-moe and -ot ...=CPU on a card: -ub 4096, with a line", () => {
    for (const f of [["--cpu-moe"], ["--n-cpu-moe", "24"], ["-ot", "exps=CPU"]]) {
      const p = plan(["-ngl", "99", ...f]);
      expect(p.engine.ubatchSize).toBe(HYBRID_UBATCH);
      expect(p.notes.some((l) => l.includes(`-ub ${HYBRID_UBATCH}`))).toBe(true);
    }
  });

  test("-ub given, a smaller -b, the CPU, or every expert on the card: as asked", () => {
    expect(plan(["-ngl", "99", "--cpu-moe", "-ub", "256"]).engine.ubatchSize).toBe(256);
    expect(plan(["-ngl", "99", "--cpu-moe", "-b", "1024"]).engine.ubatchSize).toBe(1024);
    expect(plan(["-ngl", "0", "--cpu-moe"]).engine.ubatchSize).toBe(512);
    expect(plan(["-ngl", "99"]).engine.ubatchSize).toBe(512);
    expect(plan(["-ngl", "99", "-ot", "exps=CUDA0"]).engine.ubatchSize).toBe(512);
  });

  test("--promote-slots (and its environment twin) reaches the engine; negative counts are refused", () => {
    expect(plan(["-ngl", "99", "--cpu-moe", "--promote-slots", "43"]).engine.promoteSlots).toBe(43);
    const r = parseArgs(["-m", "x.gguf"], { BLOOMERY_PROMOTE_SLOTS: "8" });
    expect(r.action === "serve" && r.options.promoteSlots).toBe(8);
    expect(() => parseArgs(["-m", "x.gguf", "--promote-slots", "-1"], {})).toThrow(/--promote-slots/);
  });
});
