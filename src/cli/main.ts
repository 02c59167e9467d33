#!/usr/bin/env bun
// bloomery-serve: the executable's entry point. `bloomery-serve [server flags]` serves a model
// (llama-server's flags); subcommands: synth, generate, bench, perplexity, version (listed in --help: flags.ts).
import { FlagError } from "./flag-types.ts";
import { GgufError } from "../gguf/errors.ts";

const VERSION = "0.1.0";

async function main(argv: string[]): Promise<number> {
  const env = process.env;
  switch (argv[0]) {
    case "synth":
      return (await import("./synth-cli.ts")).runSynth(argv.slice(1), env);
    case "generate":
      return (await import("./generate.ts")).runGenerate(argv.slice(1), env);
    case "bench":
      return (await import("./bench.ts")).runBench(argv.slice(1));
    case "perplexity":
      return (await import("./perplexity.ts")).runPerplexity(argv.slice(1), env);
    case "--version":
    case "version":
      console.log(`bloomery-serve ${VERSION}`);
      return 0;
    default:
      return (await import("../server/serve.ts")).runServe(argv, env);
  }
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (e) {
  if (e instanceof FlagError) console.error(`error: ${e.message}`);
  else console.error(`error: ${e instanceof Error ? e.message : String(e)}`);
  // the subcommands' exit codes for a model that cannot be read, as the server's (docs/agents.md)
  process.exitCode = e instanceof FlagError ? 2 : e instanceof GgufError ? (e.fault === "missing" ? 3 : 6) : 1;
}
