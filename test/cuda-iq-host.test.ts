// The card's readers of the grid quant types (cuda/quants/quants_iq.cuh: dequantization units and int8
// dot products) checked without a card: the headers compiled with g++ against a host stand-in for
// cuda/common.cuh (test/cuda-host/common.cuh) and run on the CPU by test/cuda-host/iq-host.cpp -
// dequantization bit for bit the CPU library's, the dp4a dots within float rounding of the exact
// sum. What this cannot see (launches, shared memory, the warp layout) cuda-iq.test.ts checks on a card.
import { afterAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT } from "./paths.ts";

const dir = mkdtempSync(join(tmpdir(), "bloomery-cuda-iq-host-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the card's grid-type readers, run on the CPU (no card needed)", () => {
  test("every type: dequantization bit for bit the CPU's, the int8 dot within rounding", () => {
    // cuda/'s headers beside the stand-in common.cuh (with cuda/common.cuh's type ids), ffi/cpu/iq_grids.h where they look for it
    mkdirSync(join(dir, "cuda"));
    mkdirSync(join(dir, "ffi", "cpu"), { recursive: true });
    for (const f of ["quants.cuh", "dot8.cuh", "quants_iq.cuh", "dot8_iq.cuh"]) copyFileSync(join(ROOT, "cuda", "quants", f), join(dir, "cuda", f));
    copyFileSync(join(ROOT, "ffi", "cpu", "iq_grids.h"), join(dir, "ffi", "cpu", "iq_grids.h"));
    const real = readFileSync(join(ROOT, "cuda", "common.cuh"), "utf8");
    const ids = /\/\/ ---- ggml type ids[^\n]*\n(enum \{[^}]*\};)/.exec(real);
    expect(ids).not.toBeNull();
    writeFileSync(join(dir, "cuda", "common.cuh"), readFileSync(join(ROOT, "test", "cuda-host", "common.cuh"), "utf8").replace("// @TYPE_IDS@", ids![1]));
    const exe = join(dir, "iq-host");
    const cc = Bun.spawnSync(["g++", "-std=c++17", "-O1", "-mf16c", "-ffp-contract=off", "-Wall", "-Wno-unused-function", "-Wno-unused-variable",
      `-I${join(dir, "cuda")}`, "-o", exe, join(ROOT, "test", "cuda-host", "iq-host.cpp"),
      `-L${join(ROOT, "build")}`, "-lbloomery_cpu", `-Wl,-rpath,${join(ROOT, "build")}`]);
    if (cc.exitCode !== 0) console.error(cc.stderr.toString());
    expect(cc.exitCode).toBe(0);
    const run = Bun.spawnSync([exe]);
    const out = run.stdout.toString();
    console.log(out.trimEnd());
    expect(run.exitCode).toBe(0);
    for (const t of ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]) expect(out).toContain(`${t}: dequant 0 of 12288 elements differ in bits`);
    expect(out).toContain("all ok");
  });
});
