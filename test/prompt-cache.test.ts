// The prompt cache's bookkeeping (src/engine/prompt-cache.ts): the budget counts card and host
// states alike, evicted and covered states are freed (card memory goes back), an entry about to
// be restored is never evicted to make room for the slot's old state.
import { describe, expect, test } from "bun:test";
import { PromptCache, type SavedKv } from "../src/engine/prompt-cache.ts";

const POS = 10;
function state(n: number, where: "card" | "host", log: string[], name: string): SavedKv {
  return { bytes: n * POS, where, restore: () => log.push(`restore ${name}`), free: () => log.push(`free ${name}`) };
}

describe("prompt cache", () => {
  test("LRU eviction within the budget frees what it drops; card bytes are counted apart", () => {
    const log: string[] = [];
    const c = new PromptCache(100, POS);
    expect(c.save([1, 2, 3, 4], () => state(4, "card", log, "a"))).toBe(true);
    expect(c.save([5, 6, 7, 8], () => state(4, "host", log, "b"))).toBe(true);
    expect(c.bytes).toBe(80);
    expect(c.cardBytes).toBe(40);
    c.touch(c.best([1, 2, 3]).entry!); // a used last: b goes first
    expect(c.save([9, 9, 9], () => state(3, "card", log, "c"))).toBe(true);
    expect(log).toEqual(["free b"]);
    expect(c.best([5, 6]).n).toBe(0);
    expect(c.best([1, 2, 3, 4, 5]).n).toBe(4);
  });

  test("a longer state replaces (and frees) the prefix it covers; a covered state is not saved twice", () => {
    const log: string[] = [];
    const c = new PromptCache(-1, POS);
    c.save([1, 2], () => state(2, "card", log, "short"));
    c.save([1, 2, 3], () => state(3, "card", log, "long"));
    expect(log).toEqual(["free short"]);
    let made = false;
    c.save([1, 2], () => { made = true; return state(2, "card", log, "again"); });
    expect(made).toBe(false);
    expect(c.size).toBe(1);
  });

  test("the entry about to be restored is kept even when it is the oldest; no room left means no save", () => {
    const log: string[] = [];
    const c = new PromptCache(100, POS);
    c.save([1, 1, 1, 1, 1], () => state(5, "card", log, "old"));
    const { entry } = c.best([1, 1, 1]);
    expect(c.save([2, 2, 2, 2], () => state(4, "host", log, "slot"), entry)).toBe(true);
    expect(log).toEqual([]);
    expect(c.save([3, 3, 3, 3, 3, 3], () => state(6, "host", log, "too big"), entry)).toBe(false);
    c.clear();
    expect(log.sort()).toEqual(["free old", "free slot"]);
  });
});
