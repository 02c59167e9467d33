// bloomery engine: maps a model's GGUF files read-only through native code and resolves
// tensor names to native tensor references (address, type, dims, strides).
import { ptr } from "bun:ffi";
import { availableParallelism } from "node:os";
import { check, cpu, cstr } from "../../ffi/cpu.ts";
import { prefault } from "../../ffi/cpu-kernels.ts";
import type { NativeTensor } from "../../ffi/layout.ts";
import { GgufError, TYPE_INFO, type GgufFile, type GgufTensorInfo } from "../gguf/index.ts";
import { basename } from "node:path";
import { prefaultRanges } from "./load-progress.ts";

export class MappedWeights {
  private maps = new Map<string, { base: bigint; size: bigint }>();
  /** ranges to prefault once every file is mapped */
  private pending: { base: bigint; bytes: number }[] = [];

  /** Tensors read into huge-page memory (bl_huge_copy): file, range [lo, hi) of it, address. */
  private huge: { file: string; lo: number; hi: number; base: bigint }[] = [];

  /**
   * `populate`: map every page now, as llama.cpp's MAP_POPULATE does (no faults while serving); a
   * predicate maps only the pages of the tensors it accepts (the expert store reads the rest).
   * `huge`: tensors read instead into anonymous memory backed by 2 MiB pages (the host experts
   * beside a card, streamed every token by the CPU and read in place by the card), neighbours
   * less than 2 MiB apart in one region (a small tensor between two accepted ones moves with them:
   * the same bytes).
   */
  constructor(readonly gguf: GgufFile, populate: boolean | ((t: GgufTensorInfo) => boolean) = true, huge?: (t: GgufTensorInfo) => boolean) {
    try {
      for (const path of gguf.paths) {
        const out = new BigUint64Array(2);
        check(cpu().bl_map_file(cstr(path), ptr(out), ptr(out, 8)), `mapping ${path}`);
        this.maps.set(path, { base: out[0], size: out[1] });
        if (huge) this.readHuge(path, huge);
        const mapped = (t: GgufTensorInfo) => !this.hugeRange(t);
        // only the tensors' pages: a file's header and any bytes past its last tensor are never read
        // (a 100 GiB sparse tail once prefaulted for minutes)
        if (populate === true) this.prefaultTensors(path, mapped);
        else if (populate) this.prefaultTensors(path, (t) => populate(t) && mapped(t));
      }
      // the reads themselves, with a progress line on stderr for a large model (load-progress.ts)
      prefaultRanges(this.pending, basename(gguf.path), prefault);
      this.pending = [];
    } catch (e) {
      this.close(); // the files mapped and the huge-page copies made so far
      throw e;
    }
  }

  /** Bytes read into huge-page memory, and how many of them the kernel backs with huge pages now. */
  hugeBytes(): { bytes: number; backed: number } {
    let bytes = 0, backed = 0;
    for (const h of this.huge) {
      bytes += h.hi - h.lo;
      backed += Math.max(0, Number(cpu().bl_huge_backed(h.base, BigInt(h.hi - h.lo))));
    }
    return { bytes, backed };
  }

  private readHuge(path: string, accept: (t: GgufTensorInfo) => boolean): void {
    const ts = [...this.gguf.tensors.values()].filter((t) => t.file === path && t.nbytes > 0 && accept(t)).sort((a, b) => a.fileOffset - b.fileOffset);
    const ranges: { lo: number; hi: number }[] = [];
    for (const t of ts) {
      const last = ranges[ranges.length - 1];
      if (last && t.fileOffset <= last.hi + (2 << 20)) last.hi = Math.max(last.hi, t.fileOffset + t.nbytes);
      else ranges.push({ lo: t.fileOffset, hi: t.fileOffset + t.nbytes });
    }
    const threads = Math.min(16, Math.max(1, availableParallelism()));
    const size = Number(this.maps.get(path)!.size);
    for (const r of ranges) {
      if (r.hi > size) throw new GgufError(path, `tensor data at ${r.lo}..${r.hi} lies past the end of the file (${size} bytes): the file is truncated`);
      const out = new BigUint64Array(1);
      check(cpu().bl_huge_copy(cstr(path), BigInt(r.lo), BigInt(r.hi - r.lo), threads, ptr(out)), `reading ${path} into huge pages`);
      this.huge.push({ file: path, lo: r.lo, hi: r.hi, base: out[0] });
    }
  }

  private hugeRange(t: GgufTensorInfo) {
    return this.huge.find((h) => h.file === t.file && t.fileOffset >= h.lo && t.fileOffset + t.nbytes <= h.hi);
  }

  /** Prefault the accepted tensors of one file, neighbours within a page merged into one range. */
  private prefaultTensors(path: string, accept: (t: GgufTensorInfo) => boolean): void {
    const m = this.maps.get(path)!;
    const ts = [...this.gguf.tensors.values()].filter((t) => t.file === path && t.nbytes > 0 && accept(t)).sort((a, b) => a.fileOffset - b.fileOffset);
    let lo = -1, hi = -1;
    const flush = () => {
      if (lo >= 0 && hi <= Number(m.size)) this.pending.push({ base: m.base + BigInt(lo), bytes: hi - lo });
    };
    for (const t of ts) {
      if (lo >= 0 && t.fileOffset <= hi + 4096) hi = Math.max(hi, t.fileOffset + t.nbytes);
      else {
        flush();
        lo = t.fileOffset;
        hi = t.fileOffset + t.nbytes;
      }
    }
    flush();
  }

  /** A native reference to a tensor's bytes in the mapping. */
  tensor(name: string): NativeTensor {
    const t = this.gguf.tensor(name);
    if (!t) throw new GgufError(this.gguf.path, `required tensor '${name}' is missing`);
    return this.ref(t);
  }

  ref(t: GgufTensorInfo): NativeTensor {
    const m = this.maps.get(t.file);
    if (!m) throw new Error(`internal: ${t.file} is not mapped`);
    if (BigInt(t.fileOffset + t.nbytes) > m.size) throw new GgufError(t.file, `tensor '${t.name}' lies outside the mapped file`);
    const h = this.hugeRange(t);
    if (h) return nativeTensor(h.base + BigInt(t.fileOffset - h.lo), t);
    return nativeTensor(m.base + BigInt(t.fileOffset), t);
  }

  close(): void {
    for (const m of this.maps.values()) cpu().bl_unmap_file(m.base, m.size);
    for (const h of this.huge) cpu().bl_huge_free(h.base, BigInt(h.hi - h.lo));
    this.huge = [];
    this.maps.clear();
  }
}

/** Row and slab strides of a contiguous tensor of type t. */
export function nativeTensor(data: bigint, t: { type: number; ne: number[] }): NativeTensor {
  const info = TYPE_INFO[t.type];
  const nb1 = (t.ne[0] / info.blockElems) * info.blockBytes;
  const nb2 = nb1 * (t.ne[1] ?? 1);
  return { data, type: t.type, ne: [...t.ne], nb1, nb2 };
}
