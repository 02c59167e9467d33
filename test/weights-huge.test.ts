// bloomery tests: tensors read into huge-page memory (MappedWeights' `huge`, ffi/cpu/hugecopy.c)
// hold the file's bytes exactly, the rest stay in the mapping, and bad ranges get clear errors.
import { describe, expect, test } from "bun:test";
import { ptr } from "bun:ffi";
import { join } from "node:path";
import { cpu, cstr } from "../ffi/cpu.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { MappedWeights } from "../src/engine/weights.ts";
import { FIXTURES } from "./paths.ts";

const DEMO = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");

function bytesAt(addr: bigint, len: number): Uint8Array {
  const out = new Uint8Array(len);
  if (len) expect(Number(cpu().bl_copy_bytes(addr, ptr(out), BigInt(len)))).toBe(0);
  return out;
}

describe("host experts in huge pages", () => {
  test("every tensor's bytes equal the mapping's; the experts live outside it, 2 MiB aligned", () => {
    const f = GgufFile.open(DEMO);
    const isExpert = (t: { name: string }) => /ffn_(gate|up|down)_exps/.test(t.name);
    const plain = new MappedWeights(f, false);
    const huge = new MappedWeights(f, false, isExpert);
    try {
      const h = huge.hugeBytes();
      const experts = [...f.tensors.values()].filter(isExpert);
      expect(experts.length).toBeGreaterThan(0);
      expect(h.bytes).toBeGreaterThanOrEqual(experts.reduce((s, t) => s + t.nbytes, 0));
      let moved = 0;
      for (const t of f.tensors.values()) {
        const a = plain.ref(t), b = huge.ref(t);
        expect(Buffer.from(bytesAt(b.data, t.nbytes)).equals(Buffer.from(bytesAt(a.data, t.nbytes)))).toBe(true);
        // the experts move; a small tensor between two of them (under 2 MiB) moves with them
        if (isExpert(t)) {
          expect(b.data).not.toBe(a.data);
          moved++;
        }
      }
      expect(moved).toBe(experts.length);
      // the first expert tensor starts its region, which is 2 MiB aligned
      const first = experts.sort((x, y) => x.fileOffset - y.fileOffset)[0];
      expect(huge.ref(first).data % BigInt(2 << 20)).toBe(0n);
    } finally {
      huge.close();
      plain.close();
    }
  });

  test("a missing file or an empty range is refused with a message", () => {
    const out = new BigUint64Array(1);
    expect(Number(cpu().bl_huge_copy(cstr("/nonexistent/model.gguf"), 0n, 4096n, 2, ptr(out)))).not.toBe(0);
    expect(Number(cpu().bl_huge_copy(cstr(DEMO), 0n, 0n, 2, ptr(out)))).not.toBe(0);
    // past the end of the file: a short read is an error, not zeros
    expect(Number(cpu().bl_huge_copy(cstr(DEMO), 1n << 40n, 4096n, 2, ptr(out)))).not.toBe(0);
  });
});
