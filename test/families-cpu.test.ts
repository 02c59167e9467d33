// The family conformance table (test/conformance/families.ts) on the CPU: each tiny model against
// transformers on the exact path (f32 activations), and with ggml's numerics on every CPU path this
// machine runs (scalar, AVX2, AVX-512), with the table's thresholds.
import { describe, expect, test } from "bun:test";
import { cpuPaths } from "../ffi/cpu-kernels.ts";
import { Model } from "../src/engine/model.ts";
import { hasFixtures } from "./paths.ts";
import { argmax, greedy, maxAbsDiff, onPath } from "./model-fixtures.ts";
import { FAMILY_CASES, familyRefs, greedyAgreement, llamaRefs } from "./conformance/families.ts";

describe.skipIf(!hasFixtures)("family conformance on the CPU", () => {
  for (const c of FAMILY_CASES) {
    test(`${c.name}: exact path: logits within ${c.exactTol}, greedy equal wherever the margin is clear`, async () => {
      const m = Model.load(c.gguf, { nCtx: 256, nThreads: 2, exact: true });
      try {
        for (const r of await familyRefs(c)) {
          const d = maxAbsDiff(m.evalSequence(r.prompt, 0), r.last_logits);
          const same = greedyAgreement(greedy(m, r.prompt, r.greedy.length), r);
          console.log(`${c.name} exact prompt ${r.prompt.length}: max |dlogit| ${d.toExponential(2)}, greedy ${same}/${r.greedy.length}`);
          expect(d).toBeLessThan(c.exactTol);
          if (same < r.greedy.length) expect(r.margins[same]).toBeLessThan(c.clear);
        }
      } finally {
        m.close();
      }
    });

    for (const path of cpuPaths()) {
      test(`${c.name}: ggml numerics on the ${path} path: logits within ${c.ggmlTol}, teacher-forced top-1 agrees at clear margins`, async () => {
        const refs = await familyRefs(c), lrefs = await llamaRefs(c);
        await onPath(path, async () => {
          const m = Model.load(c.gguf, { nCtx: 256, nThreads: 2 });
          try {
            let clear = 0, agree = 0, worst = 0, worstLlama = 0;
            for (const [k, r] of refs.entries()) {
              const lg = m.evalSequence(r.prompt, 0);
              const d = maxAbsDiff(lg, r.last_logits);
              worst = Math.max(worst, d);
              expect(d).toBeLessThan(c.ggmlTol);
              if (lrefs && c.llamaTol !== undefined) {
                const dl = maxAbsDiff(lg, lrefs[k].last_logits);
                worstLlama = Math.max(worstLlama, dl);
                expect(dl).toBeLessThan(c.llamaTol);
              }
              const all = m.evalSequence([...r.prompt, ...r.greedy], 0, 0, true);
              const V = m.hp.nVocab;
              for (let s = 0; s < r.greedy.length; s++) {
                if (r.margins[s] < 0.1) continue;
                clear++;
                if (argmax(all.subarray((r.prompt.length - 1 + s) * V, (r.prompt.length + s) * V)) === r.greedy[s]) agree++;
              }
            }
            const vsLlama = lrefs ? `, ${worstLlama.toExponential(2)} from llama.cpp's` : "";
            console.log(`${c.name} ${path}: max |dlogit| ${worst.toExponential(2)}${vsLlama}, teacher-forced top-1 ${agree}/${clear} at margins >= 0.1`);
            expect(agree / clear).toBeGreaterThanOrEqual(c.agree);
          } finally {
            m.close();
          }
        });
      });
    }
  }
});
