// bloomery engine: the last forward passes, one record a step: its tokens, its wall time and that
// time split between the card, the CPU and the copies (from the backend's own counters, read
// after each step), the expert bytes read from disk and the experts promotion moved - what the
// placement view (placement-view.ts, GET /placement/state) shows as it happens.

/** One forward pass. */
export interface StepRecord {
  /** wall-clock time at the step's end (ms since the epoch) */
  t: number;
  /** tokens in the batch, of them prompt tokens, and the sequences it served */
  tokens: number;
  promptTokens: number;
  seqs: number;
  /** the forward's wall time */
  ms: number;
  /**
   * CPU time: on the CPU backend the whole step; beside a card the host experts' CPU calls (the
   * hook's measured time, which overlaps the card's)
   */
  cpuMs: number;
  /** host-to-card copies of host experts: their bytes, and the time they take at the measured PCIe rate (an estimate) */
  copyBytes: number;
  copyMs: number;
  /** the card's part: the wall time less the CPU's and the copies' (0 on the CPU backend) */
  cardMs: number;
  /** bytes of routed experts read from the GGUF file into the RAM cache (the disk tier) */
  diskBytes: number;
  /** experts moved into the card's promotion slots during the step */
  promoted: number;
}

/** The counters a step's split is read from (cumulative; undefined where the backend has none). */
export interface StepCounters {
  /** the host experts' CPU calls beside a card, microseconds */
  hookUs?: number;
  uploadBytes?: number;
  pcieBytesPerSec?: number;
  promoted?: number;
  /** the expert store's bytes read */
  diskBytes?: number;
}

/** Steps kept (a few seconds of decoding). */
export const STEP_LOG_SIZE = 256;

export class StepLog {
  private ring: StepRecord[] = [];
  private next = 0;
  private last: StepCounters;
  /** steps recorded since load */
  count = 0;

  /** onCard: the backend is a card (the CPU's share is the hook's time, not the step's) */
  constructor(private readonly onCard: boolean, private readonly counters: () => StepCounters, private readonly size = STEP_LOG_SIZE) {
    this.last = counters();
  }

  /** Records a step that just ended. */
  record(tokens: number, promptTokens: number, seqs: number, ms: number): void {
    const now = this.counters();
    const d = (k: keyof StepCounters) => Math.max(0, (now[k] ?? 0) - (this.last[k] ?? 0));
    const copyBytes = d("uploadBytes");
    const rate = now.pcieBytesPerSec ?? 0;
    const copyMs = rate > 0 ? (copyBytes / rate) * 1000 : 0;
    const cpuMs = this.onCard ? d("hookUs") / 1000 : ms;
    const r: StepRecord = {
      t: Date.now(), tokens, promptTokens, seqs, ms, cpuMs, copyBytes, copyMs,
      cardMs: this.onCard ? Math.max(0, ms - cpuMs - copyMs) : 0, diskBytes: d("diskBytes"), promoted: d("promoted"),
    };
    this.last = now;
    this.count++;
    if (this.ring.length < this.size) this.ring.push(r);
    else this.ring[this.next] = r;
    this.next = (this.next + 1) % this.size;
  }

  /** The kept steps, oldest first. */
  list(): StepRecord[] {
    return this.ring.length < this.size ? [...this.ring] : [...this.ring.slice(this.next), ...this.ring.slice(0, this.next)];
  }
}
