// The NVMe tier of routed experts on the CPU path (src/engine/expert-store.ts, ffi/cpu/expert_cache.c):
// with every expert, a quarter of them or the smallest capacity in RAM, a prompt's logits and 16
// greedy steps are the same bits as the all-mapped model on every SIMD path; the counters move as
// they should; split sets, normal reads and no prefetch work; a capacity below the minimum, a
// truncated file and a file cut while serving give clear errors.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Model, type LoadOptions } from "../src/engine/model.ts";
import { ExpertStore, ExpertStoreError, routedExpertTensors, type ExpertStats, type ExpertTierSizes } from "../src/engine/expert-store.ts";
import { GgufFile, GgufValueType, GgufWriter } from "../src/gguf/index.ts";
import { cpuPath, cpuPaths, setCpuPath } from "../ffi/cpu-kernels.ts";
import { FIXTURES } from "./paths.ts";
import { argmax, maxAbsDiff } from "./model-fixtures.ts";

const demo = (f: string) => join(FIXTURES, "demo-model", f);
const files = ["bloomery-demo-q4_k_m.gguf", "bloomery-demo-q8_0.gguf"];
const OPTS: LoadOptions = { nCtx: 256, nThreads: 2, maxTokens: 64 };
const A = "import os\nimport sys\n\n\ndef main(argv):\n    parser = argparse.ArgumentParser(description=\"tool\")\n    parser.add_argument(\"--verbose\", action=\"store_true\")\n    args = parser.parse_args(argv)\n    return run(args)\n";
const STEPS = 16;

/** Every row's logits of the prompt (one forward), then 16 greedy one-token steps' logits. */
function run(m: Model, prompt: number[]): Float32Array {
  const V = m.hp.nVocab;
  const out = new Float32Array((prompt.length + STEPS) * V);
  const all = m.evalSequence(prompt, 0, 0, true);
  out.set(all);
  let last = all.subarray((prompt.length - 1) * V);
  for (let s = 0; s < STEPS; s++) {
    last = m.evalSequence([argmax(last)], prompt.length + s);
    out.set(last, (prompt.length + s) * V);
  }
  return out;
}

function sizesOf(path: string): ExpertTierSizes {
  const m = Model.load(path, OPTS);
  try {
    const s = ExpertStore.sizes(m.gguf, m.family.program(m.gguf, m.hp));
    if (!s) throw new Error("the demo model has no routed experts");
    return s;
  } finally {
    m.close();
  }
}

function withEnv<T>(env: Record<string, string>, f: () => T): T {
  const was = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  try {
    return f();
  } finally {
    for (const [k, v] of Object.entries(was)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

function expectConsistent(s: ExpertStats, sz: ExpertTierSizes): void {
  expect(s.lookups).toBe(s.hits + s.misses);
  expect(s.prefetchHits).toBeLessThanOrEqual(s.prefetchReads);
  expect(s.readErrors).toBe(0);
  const lo = Math.min(...sz.unitBytes), hi = Math.max(...sz.unitBytes);
  expect(s.bytesRead).toBeGreaterThanOrEqual(s.misses * lo);
  expect(s.bytesRead).toBeLessThanOrEqual(s.misses * hi);
  expect(s.resident).toBeLessThanOrEqual(s.slots);
}

const start = cpuPath();
const tmp = mkdtempSync(join(tmpdir(), "bloomery-xs-"));
afterAll(() => {
  setCpuPath(start);
  rmSync(tmp, { recursive: true, force: true });
});

for (const file of files) {
  describe(`expert tier: ${file}`, () => {
    let sz: ExpertTierSizes;
    beforeAll(() => {
      sz = sizesOf(demo(file));
    });

    for (const path of cpuPaths()) {
      test(`${path}: every expert, a quarter, the minimum in RAM: the same logits bits as the mapped model`, () => {
        setCpuPath(path);
        const plain = Model.load(demo(file), OPTS);
        let prompt: number[], ref: Float32Array;
        try {
          prompt = plain.tokenizer.encode(A);
          expect(prompt.length).toBeGreaterThan(40);
          expect(plain.expertStats()).toBeUndefined();
          ref = run(plain, prompt);
        } finally {
          plain.close();
        }
        const caps = { every: sz.units * sz.slotBytes, quarter: Math.ceil(sz.units / 4) * sz.slotBytes, minimum: sz.minBytes };
        for (const [what, cap] of Object.entries(caps)) {
          const m = Model.load(demo(file), { ...OPTS, expertRamBytes: cap });
          try {
            expect({ what, d: maxAbsDiff(run(m, prompt), ref) }).toEqual({ what, d: 0 });
            const s = m.expertStats()!;
            expectConsistent(s, sz);
            expect(s.slots).toBe(Math.floor(cap / sz.slotBytes));
            expect(s.misses).toBeGreaterThan(0);
            if (what === "every") {
              expect(s.evictions).toBe(0);
              expect(s.misses + s.prefetchReads).toBeLessThanOrEqual(sz.units);
            }
            if (what === "minimum") expect(s.evictions).toBeGreaterThan(0);
            if (new Set(sz.unitBytes).size === 1) expect(s.bytesRead).toBe(s.misses * sz.unitBytes[0]);
            if (what !== "minimum") {
              // the same prompt again (another slot's positions): experts still resident are hits
              const again = m.evalSequence(prompt, 0, 0, true);
              expect(maxAbsDiff(again, ref.subarray(0, again.length))).toBe(0);
              const t = m.expertStats()!;
              expect(t.hits).toBeGreaterThan(s.hits);
              if (what === "every") expect(t.misses).toBe(s.misses);
            }
          } finally {
            m.close();
          }
        }
      }, 120_000); // the scalar path under a loaded machine takes seconds
    }

    test("normal reads (no O_DIRECT) and no prefetch give the same bits; the counters say so", () => {
      const plain = Model.load(demo(file), OPTS);
      const prompt = plain.tokenizer.encode(A);
      const ref = run(plain, prompt);
      plain.close();
      const m = withEnv({ BLOOMERY_EXPERT_IO: "buffered", BLOOMERY_EXPERT_PREFETCH: "0" }, () =>
        Model.load(demo(file), { ...OPTS, expertRamBytes: Math.ceil(sz.units / 4) * sz.slotBytes }));
      try {
        expect(maxAbsDiff(run(m, prompt), ref)).toBe(0);
        const s = m.expertStats()!;
        expectConsistent(s, sz);
        expect(s.directFiles).toBe(0);
        expect(s.prefetchReads).toBe(0);
        expect(s.evictions).toBeGreaterThan(0);
      } finally {
        m.close();
      }
    });

    test("a cache smaller than one step's experts: the prefetch reads the next layer's previous experts; same bits", () => {
      const plain = Model.load(demo(file), OPTS);
      const prompt = plain.tokenizer.encode(A);
      const ref = run(plain, prompt);
      const nLayers = plain.hp.nLayer, k = plain.hp.nExpertUsed;
      plain.close();
      // slots for one layer and a half of decode: every step evicts what the next layers need
      const m = Model.load(demo(file), { ...OPTS, expertRamBytes: Math.ceil(1.5 * k) * sz.slotBytes });
      try {
        expect(m.expertStats()!.slots).toBeLessThan(nLayers * k);
        expect(maxAbsDiff(run(m, prompt), ref)).toBe(0);
        const s = m.expertStats()!;
        expectConsistent(s, sz);
        console.log(`${file}: ${s.slots} slots: ${s.lookups} lookups, ${s.hits} hits, ${s.misses} misses, ${s.prefetchReads} prefetch reads, ${s.prefetchHits} prefetch hits`);
        expect(s.prefetchReads).toBeGreaterThan(0);
      } finally {
        m.close();
      }
    });

    test("a capacity below the minimum is refused naming the sizes", () => {
      for (const cap of [sz.minBytes - 1, 0]) {
        expect(() => Model.load(demo(file), { ...OPTS, expertRamBytes: cap })).toThrow(ExpertStoreError);
        expect(() => Model.load(demo(file), { ...OPTS, expertRamBytes: cap }))
          .toThrow(new RegExp(`capacity of ${cap} bytes .* below the minimum of ${sz.minBytes} bytes .*2 experts used per token x ${sz.slotBytes} bytes a slot`));
      }
      expect(() => Model.load(demo(file), { ...OPTS, expertRamBytes: -5 })).toThrow(ExpertStoreError);
      expect(() => Model.load(demo(file), { ...OPTS, expertRamBytes: Number.NaN })).toThrow(/capacity of NaN bytes/);
      // the smallest allowed loads
      Model.load(demo(file), { ...OPTS, expertRamBytes: sz.minBytes }).close();
    });
  });
}

describe("expert tier: files", () => {
  test("a host budget that keeps the first layers' experts in memory and reads the others from disk (the CPU plan's layer split): the mapped model's bits; the store takes the disk layers alone", () => {
    const file = demo(files[1]);
    const plain = Model.load(file, OPTS);
    let prompt: number[], ref: Float32Array, perLayer: number, nLayer: number;
    try {
      prompt = plain.tokenizer.encode(A);
      ref = run(plain, prompt);
      nLayer = plain.hp.nLayer;
      perLayer = ["gate", "up", "down"].reduce((s2, r) => s2 + plain.gguf.tensor(`blk.0.ffn_${r}_exps.weight`)!.nbytes, 0);
    } finally {
      plain.close();
    }
    // the budget: what the plan gives dense weights and the context with every expert in memory, less all but
    // two layers' experts (one layer in memory, and room for the smallest cache of the others)
    const probe = Model.load(file, { ...OPTS, placement: {} });
    const need = probe.plan!.host.dense + probe.plan!.host.context;
    probe.close();
    const m = Model.load(file, { ...OPTS, placement: { hostBudgetBytes: need + 2 * perLayer } });
    try {
      const where = Array.from({ length: nLayer }, (_, l) => m.plan!.where.get(`blk.${l}.ffn_up_exps.weight`));
      expect(where[0]).toBe("host");
      expect(where[nLayer - 1]).toBe("disk");
      expect(maxAbsDiff(run(m, prompt), ref)).toBe(0);
      const s = m.expertStats()!;
      expect(s.misses).toBeGreaterThan(0);
      // the store looks up the disk layers' experts alone: fewer than every layer's behind the same cache
      const all = Model.load(file, { ...OPTS, expertRamBytes: m.plan!.expertRamBytes });
      try {
        expect(maxAbsDiff(run(all, prompt), ref)).toBe(0);
        expect(s.lookups).toBeLessThan(all.expertStats()!.lookups);
      } finally {
        all.close();
      }
    } finally {
      m.close();
    }
  }, 120_000);

  test("a split set (experts of one layer across both shards) gives the single file's bits", () => {
    const src = GgufFile.open(demo("bloomery-demo-q8_0.gguf"));
    const bytes = readFileSync(src.path);
    // shard 2: layers 2 and 3 whole, and layer 1's up and down (its gate stays in shard 1)
    const second = (n: string) => /^blk\.[23]\./.test(n) || n === "blk.1.ffn_up_exps.weight" || n === "blk.1.ffn_down_exps.weight";
    const tensors = [...src.tensors.values()].sort((a, b) => a.fileOffset - b.fileOffset);
    for (let shard = 0; shard < 2; shard++) {
      const w = new GgufWriter();
      if (shard === 0) {
        for (const [k, v] of src.kv) {
          if (v.type === GgufValueType.ARRAY) w.setArray(k, v.elemType!, v.value as ArrayLike<number | bigint | boolean | string>);
          else w.set(k, v.type, v.value as number | bigint | boolean | string);
        }
      }
      w.set("split.no", GgufValueType.U16, shard).set("split.count", GgufValueType.U16, 2).set("split.tensors.count", GgufValueType.I32, tensors.length);
      for (const t of tensors) if (second(t.name) === (shard === 1)) w.addTensor(t.name, t.type, t.ne, bytes.subarray(t.fileOffset, t.fileOffset + t.nbytes));
      w.write(join(tmp, `split-0000${shard + 1}-of-00002.gguf`));
    }
    const plain = Model.load(demo("bloomery-demo-q8_0.gguf"), OPTS);
    const prompt = plain.tokenizer.encode(A);
    const ref = run(plain, prompt);
    const sz = ExpertStore.sizes(plain.gguf, plain.family.program(plain.gguf, plain.hp))!;
    plain.close();
    const m = Model.load(join(tmp, "split-00001-of-00002.gguf"), { ...OPTS, expertRamBytes: 8 * sz.slotBytes });
    try {
      expect(m.gguf.paths.length).toBe(2);
      expect(m.gguf.tensor("blk.1.ffn_gate_exps.weight")!.file).not.toBe(m.gguf.tensor("blk.1.ffn_up_exps.weight")!.file);
      expect(maxAbsDiff(run(m, prompt), ref)).toBe(0);
      expect(m.expertStats()!.misses).toBeGreaterThan(0);
    } finally {
      m.close();
    }
  });

  test("a truncated copy is refused at load with the tensor and the file named", () => {
    const p = join(tmp, "cut-at-load.gguf");
    copyFileSync(demo("bloomery-demo-q4_k_m.gguf"), p);
    const f = GgufFile.open(p);
    const last = [...f.tensors.values()].sort((a, b) => b.fileOffset - a.fileOffset)[0];
    truncateSync(p, last.fileOffset + Math.floor(last.nbytes / 2));
    expect(() => Model.load(p, { ...OPTS, expertRamBytes: 1 << 30 })).toThrow(new RegExp(`${p}.*'${last.name.replace(/\./g, "\\.")}'.*runs past the end of the file`));
  });

  test("a file cut while serving: the forward fails naming the file and offset, and works again once the file is whole", () => {
    const p = join(tmp, "cut-later.gguf");
    const orig = demo("bloomery-demo-q4_k_m.gguf");
    copyFileSync(orig, p);
    const plain = Model.load(orig, OPTS);
    const prompt = plain.tokenizer.encode(A);
    const ref = plain.evalSequence(prompt, 0, 0, true);
    const routed = routedExpertTensors(plain.family.program(plain.gguf, plain.hp));
    plain.close();
    const m = withEnv({ BLOOMERY_EXPERT_PREFETCH: "0" }, () => Model.load(p, { ...OPTS, expertRamBytes: 1 << 30 }));
    try {
      // the last tensor of the file is a routed expert's; cut into it (every dense page stays whole)
      const last = [...m.gguf.tensors.values()].sort((a, b) => b.fileOffset - a.fileOffset)[0];
      expect(routed.has(last.name)).toBe(true);
      truncateSync(p, last.fileOffset + 1000);
      expect(() => m.evalSequence(prompt, 0, 0, true)).toThrow(new RegExp(`expert store: reading layer \\d+ expert \\d+ \\(\\w+ slab\\) from ${p} at offset \\d+: short read`));
      expect(m.expertStats()!.readErrors).toBeGreaterThan(0);
      copyFileSync(orig, p);
      expect(maxAbsDiff(m.evalSequence(prompt, 0, 0, true), ref)).toBe(0);
    } finally {
      m.close();
    }
  });
});
