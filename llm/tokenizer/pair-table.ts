// An open-addressing hash map from a pair of token ids to an int (a merge rank), in typed arrays. A JS Map
// keyed by `left * vocab + right` would hash doubles (the key passes 2^31 for vocabularies over ~46k tokens),
// which made building and probing merges the slowest part of a large BPE tokenizer.

export class PairTable {
  readonly #left: Int32Array;
  readonly #right: Int32Array;
  readonly #value: Int32Array;
  readonly #mask: number;
  size = 0;

  constructor(capacity: number) {
    let n = 16;
    while (n < capacity * 2) n *= 2;
    this.#left = new Int32Array(n).fill(-1);
    this.#right = new Int32Array(n);
    this.#value = new Int32Array(n);
    this.#mask = n - 1;
  }

  #slot(a: number, b: number): number {
    return (Math.imul(a, 0x9e3779b1) ^ Math.imul(b + 0x7f4a7c15, 0x85ebca77)) >>> 0 & this.#mask;
  }

  /** Sets the value of (a, b) unless the pair is already present; returns whether it was added. */
  add(a: number, b: number, value: number): boolean {
    if (this.size * 2 >= this.#mask) throw new RangeError("PairTable is full");
    for (let i = this.#slot(a, b);; i = (i + 1) & this.#mask) {
      const l = this.#left[i];
      if (l === -1) {
        this.#left[i] = a;
        this.#right[i] = b;
        this.#value[i] = value;
        this.size++;
        return true;
      }
      if (l === a && this.#right[i] === b) return false;
    }
  }

  /** The value of (a, b), or -1. */
  get(a: number, b: number): number {
    for (let i = this.#slot(a, b);; i = (i + 1) & this.#mask) {
      const l = this.#left[i];
      if (l === -1) return -1;
      if (l === a && this.#right[i] === b) return this.#value[i];
    }
  }
}
