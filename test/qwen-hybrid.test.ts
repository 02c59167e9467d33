// The Qwen hybrids (qwen35moe, qwen3next: gated delta-net layers with a recurrent state per slot) on the CPU,
// beyond the conformance table: the converter's own fixture file against llama.cpp's answer on it; the hf/
// folder (transformers' values: bit for bit the conformance row's file); a prompt
// whole (the chunked delta rule), in batches and token by token giving the same greedy text; two sequences batched in one forward each
// as alone (their states apart); a slot's recurrent state saved and loaded back; a sequence started again at
// position 0 from a slot another sequence used; the refusals of a file the family cannot run.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cpuPaths } from "../ffi/cpu-kernels.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { openHfFolder } from "../src/safetensors/model.ts";
import { Model } from "../src/engine/model.ts";
import { FIXTURES } from "./paths.ts";
import { argmax, greedy, maxAbsDiff, onPath, oneBatch } from "./model-fixtures.ts";
import { familyRefs, FAMILY_CASES, llamaRefs, type FamilyCase } from "./conformance/families.ts";

const FAM = join(FIXTURES, "families");
const FAMILIES = [
  // llama.cpp's last logits on the converter's file: ours within 7.1e-3 (qwen35moe) and 5.2e-3 (qwen3next)
  { dir: "qwen3_5_moe", row: "qwen35moe", llamaTol: 1e-2 },
  { dir: "qwen3_next", row: "qwen3next", llamaTol: 1e-2 },
].filter((f) => existsSync(join(FAM, f.dir, `${f.dir}.gguf`)));

const models: Model[] = [];
afterAll(() => models.forEach((m) => m.close()));
function load(path: string, o: Parameters<typeof Model.load>[1] = {}): Model {
  const m = Model.load(path, { nCtx: 256, nThreads: 2, log: () => {}, ...o });
  models.push(m);
  return m;
}

describe.skipIf(FAMILIES.length === 0)("the Qwen hybrids on the CPU", () => {
  for (const F of FAMILIES) {
    const gguf = join(FAM, F.dir, `${F.dir}.gguf`);
    const c = FAMILY_CASES.find((x) => x.name.startsWith(F.row)) as FamilyCase;

    for (const path of cpuPaths()) {
      test(`${F.row}: the converter's file on the ${path} path: last logits within ${F.llamaTol} of llama.cpp's`, async () => {
        const lrefs = (await llamaRefs({ ...c, llamacpp: join(FAM, F.dir, "llamacpp-ref.json") }))!;
        const refs = await familyRefs(c);
        await onPath(path, async () => {
          const m = load(gguf);
          let worst = 0;
          for (const [k, r] of refs.entries()) worst = Math.max(worst, maxAbsDiff(m.evalSequence(r.prompt, 0), lrefs[k].last_logits));
          console.log(`${F.row} ${path}: the converter's file, max |dlogit| from llama.cpp's ${worst.toExponential(2)}`);
          expect(worst).toBeLessThan(F.llamaTol);
        });
      });
    }

    test(`${F.row}: its hf/ folder: the converter's metadata, and bit for bit the logits of the file with transformers' values (exact and ggml paths)`, async () => {
      const dir = join(FAM, F.dir, "hf");
      if (!existsSync(dir)) return;
      const h = openHfFolder(dir), g = GgufFile.open(gguf);
      for (const [k, v] of g.kv) {
        // the folder's config has no mrope_section (the converter writes its default [11, 11, 10, 0]; text rotates the same)
        if (k.startsWith("general.") || k.startsWith("tokenizer.") || k.endsWith(".rope.dimension_sections")) continue;
        const list = (x: unknown) => (typeof x === "object" ? Array.from(x as ArrayLike<unknown>) : [x]);
        expect(h.kv.get(k), k).toBeDefined();
        expect(list(h.kv.get(k)!.value), k).toEqual(list(v.value));
      }
      for (const exact of [true, false]) {
        const a = load(dir, { exact }), b = load(c.gguf, { exact });
        for (const r of await familyRefs(c)) {
          const la = a.evalSequence(r.prompt, 0);
          expect(maxAbsDiff(la, b.evalSequence(r.prompt, 0))).toBe(0);
          expect(maxAbsDiff(la, r.last_logits)).toBeLessThan(exact ? c.exactTol : c.ggmlTol);
        }
      }
    });

    // The delta rule takes a sequence's run of 8 or more tokens in a batch in its chunked form (chunks of 64),
    // shorter runs a token at a time: the forms add in different orders. On the exact path the logits of a prompt
    // whole, in batches of 24, of 7 and token by token are within 2e-4 of each other (the whole prompt's the
    // closer to transformers'); on the ggml paths the f16 activations round those differences up to 5.6e-3 (the
    // family's bounds from transformers' are 4e-2 and 0.1, from llama.cpp's 1e-2).
    for (const exact of [false, true]) {
      const tol = exact ? 5e-4 : 1e-2;
      test(`${F.row}${exact ? ", exact path" : ""}: a prompt whole (the chunked rule), in batches of 24 (chunks cut elsewhere), of 7 (a token at a time) and token by token: the same greedy text, the last logits within ${tol}`, async () => {
        const refs = await familyRefs(c);
        for (const r of [refs[2], refs[3]]) { // 40 and 120 ids
          const whole = load(c.gguf, { exact }), by24 = load(c.gguf, { exact, maxTokens: 24 }), by7 = load(c.gguf, { exact, maxTokens: 7 });
          const a = greedy(whole, r.prompt, 16);
          expect(greedy(by24, r.prompt, 16)).toEqual(a);
          expect(greedy(by7, r.prompt, 16)).toEqual(a);
          const last = whole.evalSequence(r.prompt, 0);
          // token by token: each prompt token its own forward
          let lg: Float32Array = new Float32Array(0);
          for (let i = 0; i < r.prompt.length; i++) lg = whole.evalSequence([r.prompt[i]], i);
          const d = [maxAbsDiff(by24.evalSequence(r.prompt, 0), last), maxAbsDiff(by7.evalSequence(r.prompt, 0), last), maxAbsDiff(lg, last)];
          const seq: number[] = [];
          for (let s = 0, pos = r.prompt.length; s < 16; s++) {
            const t = argmax(lg);
            seq.push(t);
            lg = whole.evalSequence([t], pos++);
          }
          console.log(`${F.row}${exact ? " exact" : ""} prompt ${r.prompt.length}: whole against batches of 24, of 7, token by token: last logits ${d.map((x) => x.toExponential(2)).join(", ")} apart`);
          expect(seq).toEqual(a);
          for (const x of d) expect(x).toBeLessThan(tol);
        }
      });
    }

    test(`${F.row}: two sequences in one batch each as alone (slot states apart), a slot reused from position 0 as fresh`, async () => {
      const refs = await familyRefs(c);
      const A = refs[1].prompt, B = refs[2].prompt.slice(0, A.length); // 17 ids each
      const m = load(c.gguf, { nSlots: 2 });
      const alone = load(c.gguf);
      const la = alone.evalSequence(A, 0), lb = alone.evalSequence(B, 0); // slot 0 reused by B from position 0
      const rows = A.flatMap((t, i) => [{ tok: t, pos: i, seq: 0 }, { tok: B[i], pos: i, seq: 1 }]);
      const both = oneBatch(m, rows, [rows.length - 2, rows.length - 1]);
      const V = m.hp.nVocab;
      expect(maxAbsDiff(both.subarray(0, V), la)).toBeLessThan(1e-4);
      expect(maxAbsDiff(both.subarray(V), lb)).toBeLessThan(1e-4);
      expect(maxAbsDiff(lb, load(c.gguf).evalSequence(B, 0))).toBe(0);
    });

    test(`${F.row}: a slot's recurrent state and KV saved, the slot used by another sequence, loaded back: the sequence goes on as if never left`, async () => {
      const refs = await familyRefs(c);
      const A = refs[1].prompt, B = refs[3].prompt;
      const m = load(c.gguf);
      const be = m.backend;
      const straight = load(c.gguf);
      straight.evalSequence(A, 0);
      const want = straight.evalSequence([7, 8, 9], A.length);
      m.evalSequence(A, 0);
      expect(be.rsBytes!()).toBeGreaterThan(0);
      const rs = new Uint8Array(be.rsBytes!()), kv = new Uint8Array(A.length * be.kvPosBytes());
      be.rsSave!(0, rs);
      be.kvSave(0, A.length, kv);
      m.evalSequence(B, 0);
      be.rsLoad!(0, rs);
      be.kvLoad(0, A.length, kv);
      expect(maxAbsDiff(m.evalSequence([7, 8, 9], A.length), want)).toBe(0);
    });
  }

  test("a file with an MTP layer appended (block_count one more, nextn_predict_layers 1): the same logits, the layer named as not run", async () => {
    const { withMtp } = await import("./mtp-edit.ts");
    const src = join(FAM, "qwen3_5_moe", "qwen3_5_moe.gguf");
    if (!existsSync(src)) return;
    const out = withMtp(src, "qwen35moe", join(tmpdir(), `bloomery-qwen35moe-mtp-${process.pid}.gguf`));
    const said: string[] = [];
    const m = load(out, { log: (l) => said.push(l) });
    expect(m.hp.nLayer).toBe(4);
    expect(said.join("\n")).toContain("qwen35moe: the file's 1 MTP layer(s) are not part of the forward pass; --spec-type draft-mtp runs them");
    const p = [1, 2, 3, 4, 5, 6, 7];
    expect(maxAbsDiff(m.evalSequence(p, 0), load(src).evalSequence(p, 0))).toBe(0);
  });

  test("an older Qwen3-Next file (q, k, v and z fused in ssm_in, grouped by k head) gives the split file's logits bit for bit", async () => {
    const { editGguf } = await import("./gguf-edit.ts");
    const src = join(FAM, "qwen3_next", "qwen3_next.gguf");
    if (!existsSync(src)) return;
    const f = GgufFile.open(src);
    const nk = f.u32("qwen3next.ssm.group_count"), hk = f.u32("qwen3next.ssm.state_size"), nv = f.u32("qwen3next.ssm.time_step_rank");
    const hv = f.u32("qwen3next.ssm.inner_size") / nv, r = nv / nk, qk = nk * hk, E = f.u32("qwen3next.embedding_length");
    const qkv = new Map<number, Uint8Array>(), gate = new Map<number, Uint8Array>();
    const rowBytes = E * 2; // F16 rows
    const out = editGguf(src, join(tmpdir(), `bloomery-qwen3next-qkvz-${process.pid}.gguf`), {
      tensor: (t) => {
        const m = /^blk\.(\d+)\.attn_(qkv|gate)\.weight$/.exec(t.name);
        if (!m) return t;
        expect(t.type).toBe(1);
        (m[2] === "qkv" ? qkv : gate).set(Number(m[1]), t.data);
        return null;
      },
      get extra() {
        return [...qkv.keys()].map((l) => {
          const a = qkv.get(l)!, z = gate.get(l)!, rows: Uint8Array[] = [];
          const take = (b: Uint8Array, r0: number, n: number) => rows.push(b.subarray(r0 * rowBytes, (r0 + n) * rowBytes));
          for (let kh = 0; kh < nk; kh++) {
            take(a, kh * hk, hk);
            take(a, qk + kh * hk, hk);
            take(a, 2 * qk + kh * r * hv, r * hv);
            take(z, kh * r * hv, r * hv);
          }
          const data = new Uint8Array(rows.reduce((n, x) => n + x.length, 0));
          rows.reduce((at, x) => (data.set(x, at), at + x.length), 0);
          return { name: `blk.${l}.ssm_in.weight`, type: 1, ne: [E, 2 * qk + 2 * nv * hv], data };
        });
      },
    });
    const p = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5];
    expect(maxAbsDiff(load(out).evalSequence(p, 0), load(src).evalSequence(p, 0))).toBe(0);
    expect(maxAbsDiff(load(out, { exact: true }).evalSequence(p, 0), load(src, { exact: true }).evalSequence(p, 0))).toBe(0);
  });
});
