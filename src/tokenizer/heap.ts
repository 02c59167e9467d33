// A binary min-heap of float64 keys (rank * 2^31 + position), the BPE merge queue.

export class KeyHeap {
  private a = new Float64Array(64);
  size = 0;

  clear(): void {
    this.size = 0;
  }

  push(key: number): void {
    if (this.size === this.a.length) {
      const b = new Float64Array(this.a.length * 2);
      b.set(this.a);
      this.a = b;
    }
    const a = this.a;
    let i = this.size++;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p] <= key) break;
      a[i] = a[p];
      i = p;
    }
    a[i] = key;
  }

  /** Removes and returns the smallest key; the heap must not be empty. */
  pop(): number {
    const a = this.a;
    const top = a[0];
    const last = a[--this.size];
    const n = this.size;
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && a[c + 1] < a[c]) c++;
      if (a[c] >= last) break;
      a[i] = a[c];
      i = c;
    }
    if (n > 0) a[i] = last;
    return top;
  }
}
