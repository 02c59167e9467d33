// A GGUF on a tmpfs is RAM already (src/engine/tmpfs.ts): the plans count its mapped tensors as
// available host memory. onTmpfs against /proc/mounts' own word for /dev/shm; tmpfsResidentBytes of a
// synthesized file there (every tensor, and a subset) and of its copy on a disk; the start plan's
// available memory and its note.
import { afterAll, describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { synth } from "../src/cli/synth.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { onTmpfs, tmpfsResidentBytes } from "../src/engine/tmpfs.ts";
import { planStart } from "../src/cli/agent-plan.ts";
import { parseArgs } from "../src/cli/flags.ts";
import { geometryFromGguf } from "../src/cli/agent-sizes.ts";
import type { Machine } from "../src/cli/agent-machine.ts";

/** The filesystem type /proc/mounts gives the mount point `dir` (its last entry), or undefined. */
function mountType(dir: string): string | undefined {
  if (!existsSync("/proc/mounts")) return undefined;
  const rows = readFileSync("/proc/mounts", "utf8").split("\n").map((l) => l.split(" ")).filter((r) => r[1] === dir);
  return rows.at(-1)?.[2];
}

const shm = mountType("/dev/shm") === "tmpfs" && statfsSync("/dev/shm").bavail * statfsSync("/dev/shm").bsize > 256 * 2 ** 20;
if (!shm) console.log("tmpfs: skipped (no tmpfs at /dev/shm with 256 MiB free on this machine)");
const maybe = shm ? describe : describe.skip;
const dir = shm ? mkdtempSync("/dev/shm/bloomery-tmpfs-") : "";
const disk = mkdtempSync(join(tmpdir(), "bloomery-tmpfs-disk-"));
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  rmSync(disk, { recursive: true, force: true });
});

maybe("a model file on a tmpfs", () => {
  test("onTmpfs says what /proc/mounts says; the resident bytes are the tensors' own there, none on a disk", async () => {
    expect(onTmpfs("/dev/shm")).toBe(true);
    expect(onTmpfs(join(dir, "missing"))).toBe(false);
    const file = join(dir, "m.gguf");
    await synth({ model: "test-moe", quant: "Q8_0", out: file, seed: 3 });
    const f = GgufFile.open(file);
    const all = [...f.tensors.values()].reduce((a, t) => a + t.nbytes, 0);
    expect(all).toBeGreaterThan(0);
    expect(tmpfsResidentBytes(f)).toBe(all);
    const exps = (n: string) => /_exps\./.test(n);
    expect(tmpfsResidentBytes(f, exps)).toBe([...f.tensors.values()].filter((t) => exps(t.name)).reduce((a, t) => a + t.nbytes, 0));
    const copy = join(disk, "m.gguf");
    copyFileSync(file, copy);
    if (!onTmpfs(disk)) expect(tmpfsResidentBytes(GgufFile.open(copy))).toBe(0);
  });

  test("the start plan counts the file's bytes as available host memory, and says so", () => {
    const file = join(dir, "m.gguf");
    const ram = 8 * 2 ** 30;
    const m: Machine = {
      os: "linux", arch: "x64", cuda: { usable: false, reason: "no NVIDIA driver", devices: 0, driver_version: 0 }, cards: [],
      ram: { total_bytes: ram, available_bytes: ram, cgroup_limit_bytes: null, cgroup_available_bytes: null, usable_bytes: ram },
      cpu: { model: "test", cores: 2, logical_cpus: 2, avx2: true, avx512: false, kernel_path: "avx2" },
    };
    const argv = ["-m", file, "-ngl", "0", "-c", "256", "-np", "1"];
    const p = parseArgs(argv, {});
    if (p.action !== "serve") throw new Error("not a start");
    const f = GgufFile.open(file);
    const r = planStart({ o: p.options, explicit: p.explicit, argv, source: { kind: "file", path: file, byName: false }, machine: m, dryRun: true, geometry: geometryFromGguf(f), path: file });
    expect(r.refusal).toBeUndefined();
    expect(r.event.memory.available_bytes).toBe(ram + tmpfsResidentBytes(f));
    expect(r.event.notes.some((n) => /lies on a tmpfs \(RAM already\)/.test(n))).toBe(true);
  });
});
