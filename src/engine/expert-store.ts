// bloomery engine: the NVMe tier of routed experts on the CPU path - builds the native expert
// store (ffi/cpu/expert_cache.c, bl_expert_store_* in ffi/bloomery.h) for a model's EXPERTS ops,
// points those ops of the encoded program at it, and reads its counters.
import { ptr } from "bun:ffi";
import { check, cpu, cstr, NativeError } from "../../ffi/cpu.ts";
import { Slots } from "../../ffi/layout.ts";
import { GgufError, type GgufFile } from "../gguf/index.ts";
import { expertTensors, OpKind, type OpSpec } from "../models/ops.ts";
import type { EncodedProgram } from "./program.ts";
import { nativeTensor } from "./weights.ts";

export class ExpertStoreError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ExpertStoreError";
  }
}

/** The store's counters (bl_expert_store_stats). */
export interface ExpertStats {
  /** experts the MoE blocks needed (hits + misses) */
  lookups: number;
  hits: number;
  /** units the blocks read themselves */
  misses: number;
  /** payload bytes those reads brought in (the misses' units) */
  bytesRead: number;
  evictions: number;
  /** prefetched units a block then used */
  prefetchHits: number;
  prefetchReads: number;
  prefetchBytes: number;
  slots: number;
  slotBytes: number;
  /** slots holding a unit now */
  resident: number;
  /** files read with O_DIRECT (the rest with normal reads and fadvise DONTNEED) */
  directFiles: number;
  readErrors: number;
}

const STAT_KEYS: (keyof ExpertStats)[] = ["lookups", "hits", "misses", "bytesRead", "evictions", "prefetchHits", "prefetchReads",
  "prefetchBytes", "slots", "slotBytes", "resident", "directFiles", "readErrors"];

/** Sizes of a model's tier: the smallest capacity, a slot, the units (every (layer, expert)), each layer's unit payload. */
export interface ExpertTierSizes {
  minBytes: number;
  slotBytes: number;
  units: number;
  unitBytes: number[];
}

export interface ExpertStoreOptions {
  /** O_DIRECT reads (default: on, unless BLOOMERY_EXPERT_IO=buffered) */
  direct?: boolean;
  /** the background prefetch reader (default: on, unless BLOOMERY_EXPERT_PREFETCH=0) */
  prefetch?: boolean;
  /** the EXPERTS ops (program index) the store holds (default: every one; beside a card, those on the disk tier) */
  blocks?: (index: number) => boolean;
}

const LAYER_SLOTS = 10, PARAM_SLOTS = 7;
const XS_NO_DIRECT = 1, XS_NO_PREFETCH = 2;

/** The names of the routed-expert tensors of a program's EXPERTS ops (never prefaulted with a store). */
export function routedExpertTensors(ops: readonly OpSpec[]): Set<string> {
  return new Set(ops.flatMap(expertTensors));
}

/** The native params of a model's store: files, one layer per EXPERTS op (in program order). */
class StoreParams {
  readonly slots = new Slots(PARAM_SLOTS);
  readonly layers: Slots;
  /** the program op of each store layer */
  readonly blockOf: number[] = [];
  readonly unitBytes: number[] = [];
  private readonly pathBufs: Buffer[];
  private readonly pathPtrs: BigUint64Array;

  constructor(gguf: GgufFile, specs: readonly OpSpec[], capacityBytes: number, flags: number, take: (index: number) => boolean = () => true) {
    const files = [...gguf.paths];
    this.pathBufs = files.map((p) => cstr(p));
    this.pathPtrs = BigUint64Array.from(this.pathBufs.map((b) => BigInt(ptr(b))));
    const rows: number[][] = [];
    let used = 0;
    specs.forEach((b, bi) => {
      if (b.kind !== OpKind.Experts || !take(bi)) return;
      const nExpert = b.params.n_expert ?? 0;
      used = Math.max(used, b.params.n_used ?? 0);
      const row = [nExpert, 0, 0, 0, 0, 0, 0, 0, 0, 0];
      let unit = 0;
      const names = (b as OpSpec<OpKind.Experts>).tensors;
      (["gate", "up", "down"] as const).forEach((role, k) => {
        const name = names[role];
        const t = name ? gguf.tensor(name) : undefined;
        if (!name || !t) throw new GgufError(gguf.path, `required tensor '${name ?? `role ${role} of block ${bi}`}' is missing`);
        const slab = nativeTensor(0n, t).nb2;
        if ((t.ne[2] ?? 1) !== nExpert || slab * nExpert !== t.nbytes)
          throw new ExpertStoreError(`expert store: '${t.name}' (${t.ne.join("x")}, ${t.nbytes} bytes) is not ${nExpert} expert slabs`);
        const fi = files.indexOf(t.file);
        if (fi < 0) throw new ExpertStoreError(`internal: '${t.name}' lies in ${t.file}, not a file of the model`);
        row[1 + k] = fi;
        row[4 + k] = t.fileOffset;
        row[7 + k] = slab;
        unit += slab;
      });
      rows.push(row);
      this.blockOf.push(bi);
      this.unitBytes.push(unit);
    });
    this.layers = new Slots(Math.max(1, rows.length) * LAYER_SLOTS);
    rows.forEach((r, l) => r.forEach((v, k) => this.layers.setInt(l * LAYER_SLOTS + k, v)));
    const vals = [capacityBytes, files.length, BigInt(ptr(this.pathPtrs)), rows.length, BigInt(ptr(this.layers.i)), used, flags];
    vals.forEach((v, i) => this.slots.setInt(i, v));
  }

  get nLayers(): number {
    return this.blockOf.length;
  }
}

function envFlags(o: ExpertStoreOptions): number {
  const direct = o.direct ?? process.env.BLOOMERY_EXPERT_IO !== "buffered";
  const prefetch = o.prefetch ?? process.env.BLOOMERY_EXPERT_PREFETCH !== "0";
  return (direct ? 0 : XS_NO_DIRECT) | (prefetch ? 0 : XS_NO_PREFETCH);
}

/** Rethrows a native failure of the store as ExpertStoreError (same message). */
function storeCheck(status: number | bigint, what: string): void {
  try {
    check(status, what);
  } catch (e) {
    if (e instanceof NativeError) throw new ExpertStoreError(e.message);
    throw e;
  }
}

function program0(program: EncodedProgram, bi: number): void {
  program.set(bi, "store", 0);
  program.set(bi, "store_layer", 0);
}

export class ExpertStore {
  private handle: bigint;

  private constructor(handle: bigint, readonly capacityBytes: number, readonly unitBytes: readonly number[],
    private readonly program: EncodedProgram, private readonly blockOf: readonly number[]) {
    this.handle = handle;
  }

  /** The tier's sizes for a model's program (undefined when it has no routed experts). */
  static sizes(gguf: GgufFile, specs: readonly OpSpec[]): ExpertTierSizes | undefined {
    const p = new StoreParams(gguf, specs, 0, 0);
    if (p.nLayers === 0) return undefined;
    const out = new BigInt64Array(3);
    storeCheck(cpu().bl_expert_store_sizes(ptr(p.slots.i), ptr(out), ptr(out, 8), ptr(out, 16)), "expert store sizes");
    return { minBytes: Number(out[0]), slotBytes: Number(out[1]), units: Number(out[2]), unitBytes: [...p.unitBytes] };
  }

  /**
   * A store of `capacityBytes` for the program's EXPERTS ops (or those `o.blocks` takes), and those
   * ops pointed at it (every backend made from the program then reads their experts there: the
   * CPU backend, and beside a card the host experts' CPU context, host-hook.ts). Undefined when no
   * such block has routed experts. A capacity below the minimum is refused naming the sizes.
   */
  static attach(gguf: GgufFile, specs: readonly OpSpec[], program: EncodedProgram, capacityBytes: number,
    o: ExpertStoreOptions = {}): ExpertStore | undefined {
    if (!Number.isSafeInteger(capacityBytes) || capacityBytes < 0)
      throw new ExpertStoreError(`expert store: a capacity of ${capacityBytes} bytes (a whole number of bytes, at least 0, expected)`);
    const p = new StoreParams(gguf, specs, capacityBytes, envFlags(o), o.blocks);
    if (p.nLayers === 0) return undefined;
    if (program.nOps !== specs.length) throw new ExpertStoreError("internal: the program was not encoded from these ops");
    const out = new BigUint64Array(1);
    storeCheck(cpu().bl_expert_store_new(ptr(p.slots.i), ptr(out)), `expert store for ${gguf.path}`);
    p.blockOf.forEach((bi, l) => {
      program.set(bi, "store", out[0]);
      program.set(bi, "store_layer", l);
    });
    return new ExpertStore(out[0], capacityBytes, p.unitBytes, program, p.blockOf);
  }

  stats(): ExpertStats {
    if (!this.handle) throw new ExpertStoreError("expert store: closed");
    const a = new BigInt64Array(STAT_KEYS.length);
    storeCheck(cpu().bl_expert_store_stats(this.handle, ptr(a), a.length), "expert store stats");
    const s = {} as ExpertStats;
    STAT_KEYS.forEach((k, i) => (s[k] = Number(a[i])));
    return s;
  }

  /** Frees the store; close every backend of the program first. */
  close(): void {
    if (!this.handle) return;
    for (const bi of this.blockOf) program0(this.program, bi); // the blocks read their tensors' data again
    cpu().bl_expert_store_free(this.handle);
    this.handle = 0n;
  }
}
