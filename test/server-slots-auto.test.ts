// -np auto and --slot-ctx through the real executable on the demo model (CPU, -ngl 0): the slot
// count memory allows (the cap of 8 with ample RAM; 3 under a --host-budget sized for 3, with the
// prompt cache's --cache-ram counted in it), the training context shared by the slots when -c is
// left to the model, each slot's n_ctx in /props and /slots, the start's line saying why, and the
// refusals at start.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { GgufFile } from "../src/gguf/index.ts";
import { autoSlotFit, geometryFromGguf } from "../src/cli/agent-sizes.ts";
import { runCli } from "./exe.ts";
import { DEMO_MODEL, ensureBuilt, post, startServer, type RunningServer } from "./server-helpers.ts";

setDefaultTimeout(120000);
const MiB = 1024 ** 2;
const running: RunningServer[] = [];

// may include building dist/bloomery-serve (native libraries) on a busy machine
beforeAll(() => ensureBuilt(), 600000);

afterAll(async () => {
  for (const s of running) await s.stop();
});

async function slotsOf(url: string): Promise<{ props: any; slots: any[] }> {
  const props: any = await (await fetch(`${url}/props`)).json();
  const slots: any = await (await fetch(`${url}/slots`)).json();
  return { props, slots };
}

describe("-np auto through the executable", () => {
  test("--parallel auto --slot-ctx 512 with ample RAM: 8 slots (the most) of 512 tokens each in /props and /slots", async () => {
    const srv = await startServer(["-m", DEMO_MODEL, "-ngl", "0", "--parallel", "auto", "--slot-ctx", "512", "-t", "2", "-ub", "64", "-b", "64"]);
    running.push(srv);
    const { props, slots } = await slotsOf(srv.url);
    expect(props.total_slots).toBe(8);
    expect(props.default_generation_settings.n_ctx).toBe(512);
    expect(slots.length).toBe(8);
    for (const s of slots) expect(s.n_ctx).toBe(512);
    expect(srv.log()).toMatch(/-np auto: 8 slots of 512 tokens \(KV 8\.0 MiB of .* left on host RAM .*8 is the most -np auto gives\)/);
    expect(srv.log()).toContain("8 slots, 512 tokens each");
    // a prompt past a slot's 512 tokens is refused with the slot's n_ctx
    const long = await post(`${srv.url}/completion`, { prompt: "hello ".repeat(600), n_predict: 1 });
    expect(long.status).toBe(400);
    expect(long.json.error).toMatchObject({ type: "exceed_context_size_error", n_ctx: 512 });
  });

  test("-np -1 under a --host-budget with room for 3 slots: 3 slots, and they serve", async () => {
    const g = geometryFromGguf(GgufFile.open(DEMO_MODEL));
    // the weights and the buffers as the plan counts them under a host budget (no margin: the budget is the room)
    const room = autoSlotFit(g, "host", 512, { available: 1e15, margin: 0, loadPlanBuffers: true }, { nParallel: -1, maxTokens: 64, nThreads: 2, exact: false }).roomBytes;
    const budgetMiB = Math.ceil((1e15 - room) / MiB) + 3; // 3 slots of 1 MiB fit, a 4th does not
    const srv = await startServer(["-m", DEMO_MODEL, "-ngl", "0", "-np", "-1", "--slot-ctx", "512", "--host-budget", String(budgetMiB), "-t", "2", "-ub", "64", "-b", "64", "--cache-ram", "0"]);
    running.push(srv);
    const { props, slots } = await slotsOf(srv.url);
    expect(props.total_slots).toBe(3);
    expect(props.default_generation_settings.n_ctx).toBe(512);
    expect(slots.map((s) => s.n_ctx)).toEqual([512, 512, 512]);
    expect(srv.log()).toContain(`-np auto: 3 slots of 512 tokens (KV 3.0 MiB of `);
    expect(srv.log()).toContain(`MiB --host-budget; a 4th would need`);
    const rs = await Promise.all([0, 1, 2].map((i) => post(`${srv.url}/completion`, { prompt: `Story ${i}:`, n_predict: 4, temperature: 0 })));
    for (const r of rs) expect(r.status).toBe(200);
    expect(new Set(rs.map((r) => r.json.id_slot)).size).toBe(3);
  });

  test("no -c: 4 slots that each hold the training context (32768), so one long request fits (llama-server's -np auto: 4 slots on one unified cache)", async () => {
    const srv = await startServer(["-m", DEMO_MODEL, "-ngl", "0", "-t", "2", "-ub", "64", "-b", "64"]);
    running.push(srv);
    const { props, slots } = await slotsOf(srv.url);
    expect(props.total_slots).toBe(4);
    expect(props.default_generation_settings.n_ctx).toBe(32768);
    expect(slots.map((s) => s.n_ctx)).toEqual(new Array(4).fill(32768));
    expect(srv.log()).toMatch(/-np auto: 4 slots of 32768 tokens each holding the whole training context \(KV 256\.0 MiB of .* left on host RAM after weights .*, prompt cache 8\.00 GiB \(--cache-ram\) and 1\.00 GiB kept free, .*; 4 is the most -np auto gives a context this short\)/);
    expect(srv.log()).toContain("4 slots, 32768 tokens each");
  });

  test("the prompt cache's --cache-ram counts in the room under a --host-budget: 3 slots beside 16 MiB of it", async () => {
    const g = geometryFromGguf(GgufFile.open(DEMO_MODEL));
    const room = autoSlotFit(g, "host", 512, { available: 1e15, margin: 0, loadPlanBuffers: true }, { nParallel: -1, maxTokens: 64, nThreads: 2, exact: false }).roomBytes;
    const budgetMiB = Math.ceil((1e15 - room) / MiB) + 16 + 3; // the cache's 16 MiB, then 3 slots of 1 MiB and less than a 4th
    const srv = await startServer(["-m", DEMO_MODEL, "-ngl", "0", "--slot-ctx", "512", "--host-budget", String(budgetMiB), "-t", "2", "-ub", "64", "-b", "64", "--cache-ram", "16"]);
    running.push(srv);
    const { props } = await slotsOf(srv.url);
    expect(props.total_slots).toBe(3);
    expect(srv.log()).toContain("-np auto: 3 slots of 512 tokens (KV 3.0 MiB of ");
    expect(srv.log()).toContain("prompt cache 16.0 MiB (--cache-ram) and 0.0 MiB kept free");
  });

  test("refused at start: -c and --slot-ctx that disagree (exit 2), and a slot that fits nowhere (exit 5, every term)", () => {
    const a = runCli(["-m", DEMO_MODEL, "-ngl", "0", "-np", "2", "--slot-ctx", "512", "-c", "4096", "--port", "0"]);
    expect(a.code).toBe(2);
    expect(a.stderr).toContain("-c 4096 and --slot-ctx 512 disagree: -np 2 slots of 512 tokens make a context of 1024");
    const b = runCli(["-m", DEMO_MODEL, "-ngl", "0", "--slot-ctx", "1000000000", "--port", "0"]);
    expect(b.code).toBe(5);
    expect(b.stderr).toMatch(/-np auto: the model does not fit host RAM with even 1 slot of 1000000000 tokens: weights \S+ MiB \+ KV cache 1907\.35 GiB \(1000000000 positions of 2048 bytes\) \+ buffers \S+ GiB \+ 1\.00 GiB kept free = \S+ GiB > \S+ GiB usable/);
    expect(b.stderr).toMatch(/next: bloomery-serve -m \S+ -ngl 0 --port 0 --slot-ctx \d+/);
    expect(b.stderr).not.toContain("loading model");
  });
});
