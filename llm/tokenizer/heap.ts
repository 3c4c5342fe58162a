// A binary min-heap of merge candidates kept in parallel typed arrays (no object per entry). Order: smaller
// `prio` first, then smaller `left` (the leftmost of equal candidates merges first, as in llama.cpp).

export class MergeHeap {
  prio = new Float64Array(64);
  left = new Int32Array(64);
  right = new Int32Array(64);
  a = new Int32Array(64);
  b = new Int32Array(64);
  size = 0;

  clear(): void {
    this.size = 0;
  }

  #grow(): void {
    const n = this.prio.length * 2;
    const g = <T extends Float64Array | Int32Array>(x: T, y: T): T => {
      y.set(x);
      return y;
    };
    this.prio = g(this.prio, new Float64Array(n));
    this.left = g(this.left, new Int32Array(n));
    this.right = g(this.right, new Int32Array(n));
    this.a = g(this.a, new Int32Array(n));
    this.b = g(this.b, new Int32Array(n));
  }

  #less(i: number, j: number): boolean {
    const p = this.prio[i], q = this.prio[j];
    return p < q || (p === q && this.left[i] < this.left[j]);
  }

  #swap(i: number, j: number): void {
    let t: number;
    t = this.prio[i], this.prio[i] = this.prio[j], this.prio[j] = t;
    t = this.left[i], this.left[i] = this.left[j], this.left[j] = t;
    t = this.right[i], this.right[i] = this.right[j], this.right[j] = t;
    t = this.a[i], this.a[i] = this.a[j], this.a[j] = t;
    t = this.b[i], this.b[i] = this.b[j], this.b[j] = t;
  }

  push(prio: number, left: number, right: number, a: number, b: number): void {
    if (this.size === this.prio.length) this.#grow();
    let i = this.size++;
    this.prio[i] = prio;
    this.left[i] = left;
    this.right[i] = right;
    this.a[i] = a;
    this.b[i] = b;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#less(i, parent)) break;
      this.#swap(i, parent);
      i = parent;
    }
  }

  /** Removes the top entry, leaving it in slot `size` (read it there before the next push). */
  pop(): number {
    const last = --this.size;
    this.#swap(0, last);
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= last) break;
      const r = l + 1;
      const c = r < last && this.#less(r, l) ? r : l;
      if (!this.#less(c, i)) break;
      this.#swap(c, i);
      i = c;
    }
    return last;
  }
}
