// splitPieces (src/engine/cuda-backend.ts): how a batch of 9..CUDA_SPLIT_MAX tokens is cut into
// decode steps of at most 8 with its output rows; runs without a card.
import { describe, expect, test } from "bun:test";
import { CUDA_SPLIT_MAX, splitPieces } from "../src/engine/cuda-backend.ts";

const rows = (...r: number[]) => Int32Array.from(r);

describe("splitPieces", () => {
  test("8 tokens or fewer, or more than the cap: one forward", () => {
    expect(splitPieces(8, rows(7), CUDA_SPLIT_MAX)).toBeNull();
    expect(splitPieces(CUDA_SPLIT_MAX + 1, rows(0), CUDA_SPLIT_MAX)).toBeNull();
    expect(splitPieces(14, rows(13), 8)).toBeNull();
  });
  test("near-equal pieces of at most 8, each with its run of output rows", () => {
    expect(splitPieces(14, rows(13), 24)).toEqual([[0, 7, 0, 0], [7, 14, 0, 1]]);
    expect(splitPieces(17, rows(0, 5, 6, 16), 24)).toEqual([[0, 6, 0, 2], [6, 12, 2, 3], [12, 17, 3, 4]]);
    const all = Int32Array.from({ length: 24 }, (_, i) => i);
    const p = splitPieces(24, all, 24)!;
    expect(p.map(([a, b]) => b - a)).toEqual([8, 8, 8]);
    expect(p.map(([, , o0, o1]) => o1 - o0)).toEqual([8, 8, 8]);
  });
  test("output rows out of order: one forward (their logits rows would not be runs)", () => {
    expect(splitPieces(12, rows(11, 2), 24)).toBeNull();
    expect(splitPieces(12, rows(2, 2), 24)).toBeNull();
  });
});
