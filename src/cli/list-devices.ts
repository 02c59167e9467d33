// bloomery-serve --list-devices: the devices a model can be offloaded to, as llama-server prints
// them (common_print_available_devices: "Available devices:", then "  CUDA0: <name> (<total> MiB,
// <free> MiB free)" a card, or "  (none)"); a card this build has no code for is said on stderr.
import type { CardInfo } from "./agent-machine.ts";

const MiB = 1024 * 1024;

/** The list's text (stdout) and the notes (stderr) for these cards. */
export function devicesText(cards: readonly CardInfo[]): { text: string; notes: string[] } {
  const lines = ["Available devices:"];
  if (cards.length === 0) lines.push("  (none)");
  for (const c of cards) lines.push(`  CUDA${c.index}: ${c.name} (${Math.floor(c.total_bytes / MiB)} MiB, ${Math.floor(c.free_bytes / MiB)} MiB free)`);
  const notes = cards.filter((c) => !c.supported).map((c) => `CUDA${c.index}: ${c.name} (compute capability ${c.compute_capability}) has no code in this build: a start on it is refused`);
  return { text: `${lines.join("\n")}\n`, notes };
}
