// The Qwen hybrids (qwen35moe, qwen3next: gated delta-net layers with a recurrent state a slot, gated
// attention, a shared expert under its scalar gate) on the card, beyond the conformance table
// (test/cuda-families.test.ts): against the CPU's exact path a prompt whole (the prefill kernels), in
// batches of 24, of 7 (the decode-batch paths) and token by token (graphs), the same greedy text; two
// sequences interleaved in one batch each as alone; the slot's recurrent state in the CPU's layout
// (saved on the card, loaded on the CPU, the same continuation) and the card's snapshots; ngram-simple
// speculation on the card giving the tokens without it; Qwen3.6-35B-A3B's and Qwen3-Next-80B's real
// shapes (synth, cut to 4 layers) against the CPU's exact path. The fusion pass's refusal of heads it has no
// kernel for is checked wherever the CUDA library is built. Skips with a line where no card is.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaFast, CudaOption, cudaLib, cudaStatus } from "../ffi/cuda.ts";
import { synth } from "../src/cli/synth.ts";
import { OpKind } from "../ffi/layout.ts";
import { type CudaBackend, cudaUnsupported } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { encodeProgram } from "../src/engine/program.ts";
import type { DoneEvent, TokenEvent } from "../src/engine/protocol.ts";
import { makeSampler } from "../src/engine/sampler-bridge.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import type { SpecConfig } from "../src/engine/spec-ngram.ts";
import { MappedWeights } from "../src/engine/weights.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { familyFor } from "../src/models/registry.ts";
import { argmax, greedy, maxAbsDiff, oneBatch } from "./model-fixtures.ts";
import { std } from "./logit-math.ts";
import { FIXTURES } from "./paths.ts";

setDefaultTimeout(300000);
const st = cudaStatus();
if (!st.ok) console.log(`cuda-qwen-hybrid: GPU tests skipped (${st.reason})`);
const FAM = join(process.env.BLOOMERY_FIXTURES ?? FIXTURES, "families");
const DIRS = ["qwen3_5_moe", "qwen3_next"].filter((d) => existsSync(join(FAM, d, `${d}.gguf`)));
const gguf = (d: string) => join(FAM, d, `${d}.gguf`);

const models: Model[] = [];
afterAll(() => models.forEach((m) => m.close()));
function load(path: string, o: Parameters<typeof Model.load>[1] = {}): Model {
  const m = Model.load(path, { nCtx: 256, nThreads: 2, log: () => {}, ...o });
  models.push(m);
  return m;
}
const card = (path: string, o: Parameters<typeof Model.load>[1] = {}) => load(path, { nGpuLayers: "all", ...o });

function stateOf(m: Model, slot: number): Float32Array {
  const b = new Uint8Array(m.backend.rsBytes!());
  m.backend.rsSave!(slot, b);
  return new Float32Array(b.buffer);
}

async function prompts(dir: string): Promise<number[][]> {
  return (await Bun.file(join(FAM, dir, "ref.json")).json()).refs.map((r: { prompt: number[] }) => r.prompt);
}

describe.skipIf(cudaLib() === null || DIRS.length === 0)("what the card takes of the Qwen hybrids (no card needed)", () => {
  test("a delta-net of k heads wider than the card's kernel (256) is refused naming the op and its sizes", () => {
    const f = GgufFile.open(gguf(DIRS[0]));
    const fam = familyFor(f), hp = fam.hparams(f);
    const ops = fam.program(f, hp).map((op) => (op.kind === OpKind.Deltanet ? { ...op, params: { ...op.params, head_k: 256 } } : op));
    const w = new MappedWeights(f, false);
    try {
      expect(cudaUnsupported(encodeProgram(ops, (n) => w.tensor(n), hp.nEmbd, hp.nVocab))).toMatch(
        /op \d+ \(gated delta-net\): k heads of 256 and v heads of \d+ with a conv of \d+ taps are not implemented on the card \(heads of at most 128/,
      );
    } finally {
      w.close();
    }
  });
});

// The real shapes cut to 4 layers (3 delta-net, then a gated attention): Qwen3.6-35B-A3B's 32 v heads over
// 16 k heads of 128, attention heads of 256 (the prefill kernel's Q from shared memory) and Q4_K_M's
// types; Qwen3-Next-80B-A3B's fused ba and grouped heads.
const CUTS = [
  { model: "qwen3.6-35b-a3b", quant: "Q4_K_M" },
  { model: "qwen3-next-80b-a3b", quant: "Q4_K_M" },
];

describe.skipIf(!st.ok)("the real shapes on the card against the CPU's exact path", () => {
  const dir = mkdtempSync(join(tmpdir(), "bloomery-q35cut-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  for (const c of CUTS) {
    test(`${c.model}:${c.quant} (4 layers): a prompt of 300 and decode steps, one token and a batch of two slots`, async () => {
      const file = (await synth({ model: c.model, quant: c.quant, out: join(dir, `${c.model}.gguf`), layers: 4, seed: 7 })).path;
      const cardM = Model.load(file, { nCtx: 1024, nSlots: 2, nThreads: 8, nGpuLayers: "all" });
      const exact = Model.load(file, { nCtx: 1024, nSlots: 2, nThreads: 8, exact: true });
      models.push(cardM, exact);
      (cardM.backend as CudaBackend).setOption(CudaOption.fast, CudaFast.default & ~CudaFast.int8);
      const V = cardM.hp.nVocab;
      const prompt = Array.from({ length: 300 }, (_, i) => (i * 7919 + 13) % V);
      const b = exact.evalSequence(prompt, 0), s = std(b);
      const dPrompt = maxAbsDiff(cardM.evalSequence(prompt, 0), b) / s;
      let dDecode = 0;
      for (let k = 0; k < 6; k++) {
        const t = (k * 131 + 7) % V;
        dDecode = Math.max(dDecode, maxAbsDiff(cardM.evalSequence([t], prompt.length + k), exact.evalSequence([t], prompt.length + k)) / s);
      }
      // slot 1 from a short prompt, then a decode batch of both slots
      const p1 = prompt.slice(0, 40);
      cardM.evalSequence(p1, 0, 1);
      exact.evalSequence(p1, 0, 1);
      const rows = [{ tok: 11, pos: prompt.length + 6, seq: 0 }, { tok: 12, pos: 40, seq: 1 }];
      const dBatch = maxAbsDiff(oneBatch(cardM, rows, [0, 1]), oneBatch(exact, rows, [0, 1])) / s;
      console.log(`${c.model}:${c.quant} (4 layers) on the card against the CPU's exact path: max |dlogit| / std prompt of 300 ${dPrompt.toExponential(2)}, 6 decode steps ${dDecode.toExponential(2)}, a batch of two slots ${dBatch.toExponential(2)}`);
      expect(dPrompt).toBeLessThan(3e-2);
      expect(dDecode).toBeLessThan(3e-2);
      expect(dBatch).toBeLessThan(3e-2);
    }, 600_000);
  }
});

for (const dir of DIRS) {
  describe.skipIf(!st.ok)(`${dir} on the card`, () => {
    test("a prompt whole, in batches of 24, of 7 and token by token: the same greedy text, within the bound of the CPU's exact path", async () => {
      const exact = load(gguf(dir), { exact: true });
      for (const p of (await prompts(dir)).slice(2)) { // 40 and 120 ids
        const whole = card(gguf(dir)), by24 = card(gguf(dir), { maxTokens: 24 }), by7 = card(gguf(dir), { maxTokens: 7 });
        const want = exact.evalSequence(p, 0), s = std(want);
        const a = greedy(whole, p, 16);
        expect(greedy(by24, p, 16)).toEqual(a);
        expect(greedy(by7, p, 16)).toEqual(a);
        expect(greedy(exact, p, 16)).toEqual(a);
        let lg: Float32Array = new Float32Array(0);
        for (let i = 0; i < p.length; i++) lg = whole.evalSequence([p[i]], i);
        const d = [whole.evalSequence(p, 0), by24.evalSequence(p, 0), by7.evalSequence(p, 0), lg].map((x) => maxAbsDiff(x, want) / s);
        console.log(`${dir} card prompt ${p.length}: whole, batches of 24, of 7, token by token against the CPU's exact path: max |dlogit| / std ${d.map((x) => x.toExponential(2)).join(", ")}`);
        for (const x of d) expect(x).toBeLessThan(3e-2);
        const seq: number[] = [];
        for (let k = 0, pos = p.length; k < 16; k++) {
          const t = argmax(lg);
          seq.push(t);
          lg = whole.evalSequence([t], pos++);
        }
        expect(seq).toEqual(a);
      }
    });

    test("two sequences interleaved in one batch each as alone; a slot reused from position 0 as fresh", async () => {
      const ps = await prompts(dir);
      const A = ps[1], B = ps[2].slice(0, A.length);
      for (const maxTokens of [512, 8]) { // the prefill kernels, and decode-batch steps of 8 (4 tokens of each)
        const m = card(gguf(dir), { nSlots: 2, maxTokens });
        const alone = card(gguf(dir));
        const la = alone.evalSequence(A, 0), lb = alone.evalSequence(B, 0);
        const rows = A.flatMap((t, i) => [{ tok: t, pos: i, seq: 0 }, { tok: B[i], pos: i, seq: 1 }]);
        const V = m.hp.nVocab;
        let both: Float32Array;
        if (maxTokens >= rows.length) both = oneBatch(m, rows, [rows.length - 2, rows.length - 1]);
        else {
          both = new Float32Array(2 * V);
          for (let i = 0; i < rows.length; i += maxTokens) {
            const part = rows.slice(i, i + maxTokens), last = i + maxTokens >= rows.length;
            const lg = oneBatch(m, part, last ? [part.length - 2, part.length - 1] : []);
            if (last) both.set(lg);
          }
        }
        const d = [maxAbsDiff(both.subarray(0, V), la), maxAbsDiff(both.subarray(V), lb)].map((x) => x / std(la));
        console.log(`${dir} card, two sequences interleaved (steps of ${Math.min(maxTokens, rows.length)}): against each alone ${d.map((x) => x.toExponential(2)).join(", ")} of the std`);
        // (the prompt kernels' f16 activations: their rows' attention tiles and products differ with the batch)
        for (const x of d) expect(x).toBeLessThan(3e-2);
      }
    });

    test("the slot's state in the CPU's layout: saved on the card, loaded on the CPU, the same continuation; card snapshots taken and put back", async () => {
      const ps = await prompts(dir);
      const A = ps[1];
      const m = card(gguf(dir), { nSlots: 2 }), cpu = load(gguf(dir), { exact: true });
      const be = m.backend;
      m.evalSequence(A, 0);
      cpu.evalSequence(A, 0);
      expect(be.rsBytes!()).toBe(cpu.backend.rsBytes!());
      const want = stateOf(cpu, 0), got = stateOf(m, 0);
      let scale = 0;
      for (const x of want) scale = Math.max(scale, Math.abs(x));
      console.log(`${dir}: the card's recurrent state after ${A.length} tokens against the CPU's exact path: max |d| ${maxAbsDiff(got, want).toExponential(2)} of a largest ${scale.toExponential(2)}`);
      expect(maxAbsDiff(got, want)).toBeLessThan(1e-2 * scale);
      // the card's state and KV carried to the CPU: its continuation is the card's within the bound
      const kv = new Uint8Array(A.length * be.kvPosBytes());
      be.kvSave(0, A.length, kv);
      const rs = new Uint8Array(be.rsBytes!());
      be.rsSave!(0, rs);
      const cont = [7, 8, 9];
      const onCard = m.evalSequence(cont, A.length);
      cpu.evalSequence(ps[3], 0); // the CPU's slot used by another sequence first
      cpu.backend.rsLoad!(0, rs);
      cpu.backend.kvLoad(0, A.length, kv);
      expect(maxAbsDiff(cpu.evalSequence(cont, A.length), onCard) / std(onCard)).toBeLessThan(3e-2);
      // snapshots on the card
      expect(() => be.rsSnapTake!(0)).toThrow(/no room reserved/);
      be.rsSnapReserve!();
      expect(() => be.rsSnapBack!(1)).toThrow(/took no snapshot/);
      be.rsLoad!(0, rs);
      be.rsSnapTake!(0);
      const other = stateOf(m, 1);
      m.evalSequence([11, 12, 13], A.length);
      expect(maxAbsDiff(stateOf(m, 0), new Float32Array(rs.buffer))).toBeGreaterThan(0);
      be.rsSnapBack!(0);
      expect(stateOf(m, 0)).toEqual(new Float32Array(rs.buffer));
      expect(stateOf(m, 1)).toEqual(other);
    });

    test("ngram-simple speculation on the card: the tokens without drafts, four slots at once", async () => {
      const ps = await prompts(dir);
      const rep = ps.map((p) => [...p.slice(0, 20), ...p.slice(0, 20), ...p.slice(0, 20)]);
      const m = card(gguf(dir), { nSlots: 4, nCtx: 512 });
      const want = run(m, rep, 32), got = run(m, rep, 32, { type: "ngram-simple", sizeN: 1, sizeM: 6 });
      for (const [i, r] of got.runs.entries()) expect(r).toEqual(want.runs[i]);
      const s = got.sched.stats();
      console.log(`${dir} card ngram-simple: ${s.specAccepted} of ${s.specDrafted} draft tokens accepted, ${s.specRollbacks} rollbacks`);
      expect(s.specDrafted).toBeGreaterThan(0);
    });
  });
}

/** Greedy runs of the prompts through the scheduler (four slots), with the speculation given. */
function run(model: Model, prompts: number[][], nPredict: number, spec?: SpecConfig): { runs: number[][]; sched: Scheduler } {
  const runs: number[][] = prompts.map(() => []);
  const sched = new Scheduler(model, {
    tokens: (evs: TokenEvent[]) => { for (const e of evs) runs[e.id].push(e.token); },
    done: (_d: DoneEvent) => {},
  }, makeSampler, 64, 0, spec);
  prompts.forEach((prompt, id) => sched.submit({ id, prompt, nPredict, stop: [], ignoreEos: true, nProbs: 0, idSlot: -1, cachePrompt: false, params: { temperature: 0 } }));
  while (sched.step()) { /* run */ }
  return { runs, sched };
}
