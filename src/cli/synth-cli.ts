// bloomery CLI: `bloomery-serve synth MODEL[:QUANT] -o FILE [--layers N] [--skew S] [--centered] [--seed N]`.
import type { FlagTable } from "./flag-types.ts";
import { parseWithTable, type Env } from "./flag-parse.ts";
import { tableHelp } from "./flag-help.ts";
import { synth, synthWriter } from "./synth.ts";
import { MIXES, SHAPES } from "./synth-shapes.ts";

const G = "synth";
export const SYNTH_TABLE: FlagTable = {
  program: "bloomery-serve synth",
  groups: [{ id: G, title: "synth: write a GGUF with a real model's tensor names, shapes and quant types, and random weights" }],
  flags: [
    { names: ["-o", "--output"], value: { type: "string", nonEmpty: true }, hint: "FILE", key: "output", help: "the GGUF file to write", group: G, support: "supported" },
    { names: ["--layers"], value: { type: "int", min: 0 }, hint: "N", key: "layers", default: 0, help: "write only the first N layers (0 = all)", group: G, support: "supported" },
    { names: ["--skew"], value: { type: "float", min: 0 }, hint: "S", key: "skew", default: 0, help: "router skew: 0 uniform; 2-8 makes a few experts per layer chosen far more often", group: G, support: "supported" },
    { names: ["--centered"], value: { type: "none" }, key: "centered", default: false, help: "Q4_K/Q5_K blocks of zero mean, so the router's picks vary from token to token as in a trained model (plain random blocks share an offset: every token then picks nearly the same experts)", group: G, support: "supported" },
    { names: ["--seed"], value: { type: "int", min: 0 }, hint: "N", key: "seed", default: 1, help: "random seed (same seed, same file)", group: G, support: "supported" },
    { names: ["--dry-run"], value: { type: "none" }, key: "dryRun", default: false, help: "print the size the file would have and write nothing", group: G, support: "supported" },
    { names: ["-h", "--help"], value: { type: "none" }, key: "help", help: "print this help", group: G, support: "supported", action: "help" },
  ],
};

export async function runSynth(argv: string[], env: Env): Promise<number> {
  const r = parseWithTable(SYNTH_TABLE, argv, env, { allowPositionals: true });
  if (r.action === "help" || r.positionals.length === 0) {
    const known = `models: ${Object.keys(SHAPES).join(", ")}\nquant mixes: ${Object.keys(MIXES).join(", ")}`;
    console.log(`${tableHelp(SYNTH_TABLE, "bloomery-serve synth MODEL[:QUANT] -o FILE [options]")}\n${known}`);
    return r.action === "help" ? 0 : 2;
  }
  if (r.positionals.length > 1) throw new Error(`synth: one model expected, got ${r.positionals.join(" ")}`);
  const [model, quant = "Q4_K_M"] = r.positionals[0].split(":");
  const v = r.values;
  const opts = { model, quant, out: String(v.output ?? ""), layers: Number(v.layers), skew: Number(v.skew), centered: v.centered === true, seed: Number(v.seed) };
  if (v.dryRun) {
    const { writer, params } = synthWriter(opts);
    const bytes = writer.fileBytes();
    console.log(JSON.stringify({ model, quant, bytes, gib: +(bytes / 2 ** 30).toFixed(3), params }));
    return 0;
  }
  if (!v.output) throw new Error("synth: -o FILE is required");
  const res = await synth(opts);
  console.log(JSON.stringify({ path: res.path, bytes: res.bytes, gib: +(res.bytes / 2 ** 30).toFixed(3), params: res.params, seconds: +res.seconds.toFixed(2), gb_per_s: +(res.bytes / res.seconds / 1e9).toFixed(2) }));
  return 0;
}
