// bloomery tests: what the bench tests share - parsed flags and runBench with its output captured.
import { runBench } from "../src/cli/bench.ts";
import { parseBenchArgs } from "../src/cli/bench-flags.ts";

/** bench's flags parsed (throws when they do not give a run). */
export function parse(args: string[]) {
  const r = parseBenchArgs(args, {}, 2);
  if (!r.params) throw new Error("no params");
  return r.params;
}

/** Runs runBench with stdout and stderr captured. */
export async function capture(args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = "", err = "";
  const w1 = process.stdout.write.bind(process.stdout), w2 = process.stderr.write.bind(process.stderr);
  const e1 = console.error;
  process.stdout.write = ((s: string | Uint8Array) => ((out += String(s)), true)) as typeof process.stdout.write;
  process.stderr.write = ((s: string | Uint8Array) => ((err += String(s)), true)) as typeof process.stderr.write;
  console.error = (...a: unknown[]) => void (err += a.join(" ") + "\n");
  try {
    const code = await runBench(args);
    return { code, out, err };
  } finally {
    process.stdout.write = w1;
    process.stderr.write = w2;
    console.error = e1;
  }
}
