// bloomery engine: the progress of reading a large model's weights at load (the prefault of its
// mapped tensors, src/engine/weights.ts), on stderr: one line redrawn in place on a terminal, else a
// line every 2 seconds (and one at the end), so a person watching a 17 GB load from disk sees it move.
// Files under LOAD_PROGRESS_MIN_BYTES say nothing; stdout (the --json events) is never written.

/** Weights below this are read without a progress line (a few seconds at most). */
export const LOAD_PROGRESS_MIN_BYTES = 2 * 2 ** 30;

export interface ProgressSink {
  write(text: string): void;
  /** a terminal: the line is redrawn in place */
  isTTY?: boolean;
}

const size = (n: number) => (n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${(n / 2 ** 20).toFixed(1)} MiB`);

export class LoadProgress {
  private done = 0;
  private readonly t0 = performance.now();
  private lastDraw = performance.now();

  constructor(
    readonly totalBytes: number,
    readonly what: string,
    private readonly sink: ProgressSink = process.stderr,
  ) {}

  /** A progress for `totalBytes` when it is large enough to be worth one, else undefined. */
  static maybe(totalBytes: number, what: string, sink?: ProgressSink): LoadProgress | undefined {
    // BLOOMERY_LOAD_PROGRESS_MIN_MIB: another threshold (the tests show the line on the small demo)
    const env = Number(process.env.BLOOMERY_LOAD_PROGRESS_MIN_MIB);
    const min = process.env.BLOOMERY_LOAD_PROGRESS_MIN_MIB && Number.isFinite(env) && env >= 0 ? env * 2 ** 20 : LOAD_PROGRESS_MIN_BYTES;
    return totalBytes > 0 && totalBytes >= min ? new LoadProgress(totalBytes, what, sink) : undefined;
  }

  private line(): string {
    const s = (performance.now() - this.t0) / 1000;
    const pct = Math.floor((100 * this.done) / this.totalBytes);
    const rate = s > 0 ? ` at ${size(this.done / s)}/s` : "";
    return `load: ${this.what}: ${size(this.done)} of ${size(this.totalBytes)} read (${pct}%${rate}, ${s.toFixed(1)} s)`;
  }

  /** `bytes` more are read. */
  add(bytes: number): void {
    this.done = Math.min(this.totalBytes, this.done + bytes);
    if (this.done >= this.totalBytes) return; // finish() writes the last line
    const now = performance.now();
    if (now - this.lastDraw < (this.sink.isTTY ? 200 : 2000)) return;
    this.lastDraw = now;
    this.sink.write(this.sink.isTTY ? `\r${this.line()}\x1b[K` : `${this.line()}\n`);
  }

  /** The closing line. */
  finish(): void {
    this.done = this.totalBytes;
    this.sink.write(this.sink.isTTY ? `\r${this.line()}\x1b[K\n` : `${this.line()}\n`);
  }
}

/** Bytes one prefault call reads between two progress updates. */
const CHUNK = 256 * 2 ** 20;

/** Prefault the ranges in chunks, with a LoadProgress when they add up to a large model. */
export function prefaultRanges(ranges: readonly { base: bigint; bytes: number }[], what: string, prefault: (base: bigint, size: bigint) => void, sink?: ProgressSink): void {
  const total = ranges.reduce((a, r) => a + r.bytes, 0);
  const progress = LoadProgress.maybe(total, what, sink);
  for (const r of ranges) {
    if (!progress) {
      prefault(r.base, BigInt(r.bytes));
      continue;
    }
    for (let off = 0; off < r.bytes; off += CHUNK) {
      const n = Math.min(CHUNK, r.bytes - off);
      prefault(r.base + BigInt(off), BigInt(n));
      progress.add(n);
    }
  }
  progress?.finish();
}
