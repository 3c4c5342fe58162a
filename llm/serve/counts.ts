// The host side of a batch's token counts in device State (llm/sampling.ts appendSampler `rows`): one counts row
// of `vocab` words per sequence slot (count of the token among the generated ones | PROMPT_BIT), read by the
// penalties of the sequence that holds the row. The device keeps the counts; the host sends only what changes,
// as writes of whole words that the next step applies before its sampler reads:
// - when a sequence takes a row (admission, or readmission after a preemption): every word its previous holder
//   left non-zero set to 0, and every token of the sequence set to its word (the prompt's marks, and the
//   generated tokens' counts after a preemption): a reset plus the prompt, once, touching only those words;
// - after each generated token: that token's new word.
// Writes wait in row order of acquisition; a step carries at most `writes` of them, so a row is `ready` (its
// sequence may be sampled) only once all of its writes fit in the step being built. Only sequences with a
// penalty hold a row: a step with none uploads `writes` skipped entries and reads no counts.
import { PROMPT_BIT } from "../../graph/logits.ts";
import type { TokenHistory } from "../sampling.ts";

export class CountRows {
  /** This step's writes: COUNT_AT_SLOT and COUNT_VALUE_SLOT values (unused ones set word 0 of the spare row). */
  readonly at: Int32Array;
  readonly value: Uint32Array;
  #free: number[] = [];
  /** Tokens whose word may be non-zero on the device, per row. */
  #dirty: Set<number>[];
  /** Writes not yet sent, per row, in the order rows were acquired (Map order). */
  #pending = new Map<number, Map<number, number>>();

  constructor(readonly rows: number, readonly vocab: number, readonly writes: number) {
    if (!(Number.isInteger(rows) && rows >= 1 && Number.isInteger(writes) && writes >= 1)) {
      throw new RangeError(`count rows ${rows} and writes ${writes} must be positive integers`);
    }
    for (let q = rows - 1; q >= 0; q--) this.#free.push(q);
    this.#dirty = Array.from({ length: rows }, () => new Set<number>());
    this.at = new Int32Array(writes).fill(rows * vocab);
    this.value = new Uint32Array(writes);
  }

  /** Rows held. */
  get used(): number {
    return this.rows - this.#free.length;
  }

  /** A row for a sequence with these tokens (undefined when all are held); its writes are queued. */
  acquire(h: TokenHistory): number | undefined {
    const q = this.#free.pop();
    if (q === undefined) return undefined;
    const w = new Map<number, number>();
    for (const id of this.#dirty[q]) w.set(id, 0);
    for (const id of h.prompt) if (id >= 0 && id < this.vocab) w.set(id, PROMPT_BIT);
    for (const [id, c] of h.counts) if (id >= 0 && id < this.vocab) w.set(id, word(h, id, c));
    this.#dirty[q] = new Set(w.keys());
    this.#pending.delete(q);
    this.#pending.set(q, w);
    return q;
  }

  /** Gives a row back (its words are zeroed when it is next acquired). */
  release(q: number): void {
    if (!(q >= 0 && q < this.rows) || this.#free.includes(q)) throw new RangeError(`count row ${q} is not held`);
    this.#pending.delete(q);
    this.#free.push(q);
  }

  /** Queues row q's word of a token the sequence just generated (`h` already counts it). */
  generated(q: number, h: TokenHistory, id: number): void {
    if (!(id >= 0 && id < this.vocab)) return;
    let w = this.#pending.get(q);
    if (!w) this.#pending.set(q, w = new Map());
    w.set(id, word(h, id, h.counts.get(id) ?? 0));
    this.#dirty[q].add(id);
  }

  /** True when row q's queued writes all go out with the next step (the sequence may be sampled in it). */
  ready(q: number): boolean {
    let n = 0;
    for (const [r, w] of this.#pending) {
      n += w.size;
      if (r === q) return n <= this.writes;
    }
    return true;
  }

  /** True when writes are queued (a step should run even with no rows to send them). */
  get pending(): boolean {
    return this.#pending.size > 0;
  }

  /** Moves up to `writes` queued writes into `at`/`value` (the rest skipped) for the step about to run. */
  fill(): void {
    let n = 0;
    for (const [q, w] of this.#pending) {
      for (const [id, v] of w) {
        if (n === this.writes) break;
        this.at[n] = q * this.vocab + id;
        this.value[n++] = v;
        w.delete(id);
      }
      if (w.size === 0) this.#pending.delete(q);
      if (n === this.writes) break;
    }
    this.at.fill(this.rows * this.vocab, n);
    this.value.fill(0, n);
  }

  /** The device State was zeroed (a failed step's reset): nothing is dirty or queued, every row is free. */
  reset(): void {
    this.#pending.clear();
    for (const d of this.#dirty) d.clear();
    this.#free = [];
    for (let q = this.rows - 1; q >= 0; q--) this.#free.push(q);
  }
}

function word(h: TokenHistory, id: number, count: number): number {
  return (Math.min(count, 0x7fffffff) | (h.prompt.has(id) ? PROMPT_BIT : 0)) >>> 0;
}
