// The CPU context's memory estimate (agent-sizes.ts cpuWorkBytes: -np auto, --fit and the start plan size
// the host by it) against what the CPU library holds (bl_cpu_work_bytes) after a prompt as large as the
// context's batch, on every family fixture: the batch buffers sized at creation and, for the Qwen
// hybrids, the delta-net layers' work space that grows to the largest batch (it was left out before).
import { describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { cpuWorkBytes } from "../src/cli/agent-sizes.ts";
import type { CpuBackend } from "../src/engine/cpu-backend.ts";
import { Model } from "../src/engine/model.ts";
import { FIXTURES } from "./paths.ts";

const FAMILIES = ["qwen3_5_moe", "qwen3_next", "gpt_oss", "deepseek_v3", "glm4_moe"];

describe("the CPU context's workspace estimate covers what the library allocates", () => {
  for (const fam of FAMILIES) {
    const file = join(FIXTURES, "families", fam, `${fam}.gguf`);
    test.skipIf(!existsSync(file))(`${fam}: bl_cpu_work_bytes after a whole-batch prompt is within the estimate`, () => {
      const s = { nSlots: 2, nCtxSlot: 256, maxTokens: 96, nThreads: 2 };
      const m = Model.load(file, { nCtx: s.nCtxSlot, nSlots: s.nSlots, maxTokens: s.maxTokens, nThreads: s.nThreads });
      try {
        const be = m.backend as CpuBackend;
        const before = be.workBytes();
        const V = m.hp.nVocab;
        m.evalSequence(Array.from({ length: s.maxTokens }, (_, i) => (i * 37 + 11) % V), 0, 1);
        const after = be.workBytes();
        const est = cpuWorkBytes(m.hp, s) - s.maxTokens * V * 4; // less the logits rows (JavaScript's)
        console.log(`${fam}: workspace ${before} bytes at creation, ${after} after the prompt; estimate ${est}${m.hp.deltanet ? " (with the delta-net work space)" : ""}`);
        expect(after).toBeGreaterThan(0);
        if (m.hp.deltanet) expect(after).toBeGreaterThan(before);
        else expect(after).toBe(before);
        expect(est).toBeGreaterThanOrEqual(after);
        expect(est).toBeLessThan(after * 1.1);
      } finally {
        m.close();
      }
    });
  }
});
