// A Hugging Face checkpoint folder served as downloaded: each family fixture's hf/ folder gives the
// same metadata, tokenizer and weight values as its GGUF twin, the same logits bit for bit, and its
// transformers reference within the conformance table's bound.
import { afterAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { openHfFolder } from "../src/safetensors/model.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";
import { maxAbsDiff } from "./model-fixtures.ts";
import { FAMILY_CASES, familyRefs } from "./conformance/families.ts";

const FAM = join(FIXTURES, "families");

/** A tensor's values as f32, whatever its type (F32, F16). */
function values(f: GgufFile, name: string): Float32Array {
  const t = f.tensor(name)!;
  const b = readFileSync(t.file).subarray(t.fileOffset, t.fileOffset + t.nbytes);
  if (t.type === 0) return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  const h = new Uint16Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  return Float32Array.from(h, (x) => {
    const s = x & 0x8000 ? -1 : 1, e = (x >> 10) & 0x1f, m = x & 0x3ff;
    return e === 0 ? s * m * 2 ** -24 : e === 31 ? (m ? NaN : s * Infinity) : s * (1 + m / 1024) * 2 ** (e - 15);
  });
}

// each family with an hf/ fixture: its folder, its GGUF twin, its conformance row, and the twin's keys the
// folder cannot give (llama.cpp's converter guesses GLM's end-of-turn tokens from their text)
const FOLDERS: { fam: string; gguf: string; row: string; notFromFolder: string[] }[] = [
  { fam: "gpt_oss", gguf: "gpt_oss.gguf", row: "gpt-oss", notFromFolder: [] },
  { fam: "deepseek_v3", gguf: "deepseek_v3.gguf", row: "deepseek2", notFromFolder: [] },
  { fam: "glm4_moe", gguf: "glm4_moe.gguf", row: "glm4moe", notFromFolder: ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id", "tokenizer.ggml.unknown_token_id"] },
];

for (const F of FOLDERS) describe.skipIf(!hasFixtures)(`${F.fam}: the hf/ folder against its GGUF twin`, () => {
  const dir = join(FAM, F.fam, "hf");
  const gguf = join(FAM, F.fam, F.gguf);

  test("the same hparams keys, tokenizer data and tensor values (shapes and types as the twin's)", () => {
    const left = () => readdirSync(tmpdir()).filter((n) => n.startsWith("bloomery-hf-")).length;
    const before = left();
    const h = openHfFolder(dir), g = GgufFile.open(gguf);
    // the copies made at load are in an unlinked file, named by its descriptor: nothing left in /tmp
    expect(left()).toBe(before);
    for (const [k, v] of g.kv) {
      if (k.startsWith("general.") || k === "tokenizer.ggml.pre" || F.notFromFolder.includes(k)) continue;
      const mine = h.kv.get(k);
      expect(mine, k).toBeDefined();
      expect(mine!.type, k).toBe(v.type);
      const list = (x: unknown) => (typeof x === "object" ? Array.from(x as ArrayLike<unknown>) : [x]);
      expect(list(mine!.value), k).toEqual(list(v.value));
    }
    expect(h.tensors.size).toBe(g.tensors.size);
    const plan = openHfFolder(dir, { copies: false }); // types and shapes alone (a plan), no copies
    for (const t of g.tensors.values()) {
      const m = h.tensor(t.name)!;
      expect(m, t.name).toBeDefined();
      expect(plan.tensor(t.name)!.ne, t.name).toEqual(t.ne);
      expect(plan.tensor(t.name)!.nbytes, t.name).toBe(t.nbytes);
      expect(m.ne, t.name).toEqual(t.ne);
      expect(m.type, t.name).toBe(t.type);
      const a = values(h, t.name), b = values(g, t.name);
      expect(maxAbsDiff(a, b), t.name).toBe(0);
    }
  });

  const c = FAMILY_CASES.find((x) => x.name.startsWith(F.row))!;
  const models: Model[] = [];
  afterAll(() => models.forEach((m) => m.close()));
  for (const exact of [true, false]) {
    test(`${exact ? "exact" : "ggml"} path: the folder's logits equal the twin's bit for bit, within the table's bound of transformers`, async () => {
      const a = Model.load(dir, { nCtx: 256, nThreads: 2, exact });
      models.push(a);
      const b = Model.load(gguf, { nCtx: 256, nThreads: 2, exact });
      models.push(b);
      for (const r of await familyRefs(c)) {
        const la = a.evalSequence(r.prompt, 0), lb = b.evalSequence(r.prompt, 0);
        expect(maxAbsDiff(la, lb)).toBe(0);
        const d = maxAbsDiff(la, r.last_logits);
        console.log(`${F.fam} hf/ ${exact ? "exact" : "ggml"} prompt ${r.prompt.length}: max |dlogit| vs transformers ${d.toExponential(2)}`);
        expect(d).toBeLessThan(exact ? c.exactTol : c.ggmlTol);
      }
    });
  }
});
