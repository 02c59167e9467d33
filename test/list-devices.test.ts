// bloomery-serve --list-devices: llama-server's list (common_print_available_devices) from the cards
// the machine probe reads; the flag is an action that stops parsing; the CLI prints the list and exits 0.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { devicesText } from "../src/cli/list-devices.ts";
import { parseArgs } from "../src/cli/flags.ts";
import { cudaStatus } from "../ffi/cuda.ts";
import type { CardInfo } from "../src/cli/agent-machine.ts";

const card = (index: number, name: string, totalMiB: number, freeMiB: number, supported = true): CardInfo => ({
  index, name, compute_capability: supported ? "9.0" : "5.2", sm_count: 132, total_bytes: totalMiB * 2 ** 20 + 123, free_bytes: freeMiB * 2 ** 20 + 7, supported,
});

describe("--list-devices", () => {
  test("llama-server's lines: a card each, MiB rounded down; (none) without; a card without code said on stderr", () => {
    expect(devicesText([]).text).toBe("Available devices:\n  (none)\n");
    const two = devicesText([card(0, "NVIDIA H200", 143771, 142000), card(1, "NVIDIA GeForce GTX 980", 4096, 4000, false)]);
    expect(two.text).toBe("Available devices:\n  CUDA0: NVIDIA H200 (143771 MiB, 142000 MiB free)\n  CUDA1: NVIDIA GeForce GTX 980 (4096 MiB, 4000 MiB free)\n");
    expect(two.notes).toEqual(["CUDA1: NVIDIA GeForce GTX 980 (compute capability 5.2) has no code in this build: a start on it is refused"]);
  });

  test("an action: parsing stops there, whatever follows", () => {
    expect(parseArgs(["--list-devices"], {}).action).toBe("list-devices");
    expect(parseArgs(["-m", "x.gguf", "--list-devices", "--no-such-flag"], {}).action).toBe("list-devices");
  });

  test("the CLI prints the list of this machine's cards and exits 0", () => {
    const p = Bun.spawnSync([process.execPath, join(import.meta.dir, "..", "src", "cli", "main.ts"), "--list-devices"], { stdout: "pipe", stderr: "pipe" });
    expect(p.exitCode).toBe(0);
    const out = p.stdout.toString();
    expect(out.startsWith("Available devices:\n")).toBe(true);
    const rows = out.trimEnd().split("\n").slice(1);
    if (cudaStatus().devices === 0) expect(rows).toEqual(["  (none)"]);
    else {
      expect(rows.length).toBe(cudaStatus().devices);
      for (const r of rows) expect(r).toMatch(/^ {2}CUDA\d+: .+ \(\d+ MiB, \d+ MiB free\)$/);
    }
  });
});
