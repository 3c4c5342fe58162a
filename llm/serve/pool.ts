// The paged KV pool: K/V State of every layer is one buffer of `blocks` blocks of `block` positions, sized once
// from the device's memory; this file holds the host side: how many blocks fit and which are free.
// Block 0 is reserved and never handed out: unused block-table entries point at it so every table entry names
// a real block (the oracle sweeps the whole table; the kernel never reads past a row's position).

/** What one block costs: K and V of every layer. */
export interface KvLayout {
  layers: number;
  kvHeads: number;
  headDim: number;
  /** Bytes per element of the K/V State (4 for f32). */
  elemBytes: number;
}

export interface PoolPlan {
  /** Positions per block. */
  block: number;
  /** Blocks in the pool, the reserved one included. */
  blocks: number;
  /** Entries of a block table: enough for a full context. */
  maxBlocks: number;
  /** Bytes of K/V State in all (every layer, K and V). */
  bytes: number;
}

export interface PoolSizing {
  ctx: number;
  slots: number;
  block: number;
  /** Fraction of the device's free (else total) memory the pool may take, after the weights are loaded. */
  fraction: number;
  memory: { totalBytes: number; freeBytes?: number };
  /** Largest single buffer the device allows (one layer's K or V pool). */
  maxBufferBytes?: number;
  /** An exact block count (tests; overrides the fraction). */
  blocks?: number;
}

/** A pool sizing that cannot hold even one full-context sequence. */
export class PoolSizeError extends RangeError {
  override name = "PoolSizeError";
}

/**
 * Blocks that fit in `fraction` of memory, at most what `slots` full-context sequences use (more would never be
 * touched), and at least one full context (else a long request could never run).
 */
export function planPool(kv: KvLayout, s: PoolSizing): PoolPlan {
  if (!(Number.isInteger(s.block) && s.block >= 1)) throw new PoolSizeError(`KV block size ${s.block} must be a positive integer`);
  const maxBlocks = Math.ceil(s.ctx / s.block);
  const rowBytes = kv.kvHeads * kv.headDim * kv.elemBytes;
  const blockBytes = 2 * kv.layers * s.block * rowBytes;
  let blocks: number;
  if (s.blocks !== undefined) blocks = s.blocks;
  else {
    const avail = (s.memory.freeBytes ?? s.memory.totalBytes) * s.fraction;
    blocks = Math.min(Math.floor(avail / blockBytes), s.slots * maxBlocks + 1);
    if (s.maxBufferBytes) blocks = Math.min(blocks, Math.floor(s.maxBufferBytes / (s.block * rowBytes)));
  }
  if (!(blocks >= maxBlocks + 1)) {
    throw new PoolSizeError(`KV pool of ${blocks} blocks cannot hold one context of ${s.ctx} positions (${maxBlocks + 1} blocks of ` +
      `${s.block} needed, ${(blockBytes / 2 ** 20).toFixed(2)} MiB each): raise --kv-memory or lower --ctx`);
  }
  return { block: s.block, blocks, maxBlocks, bytes: blocks * blockBytes };
}

/** Free-list of pool blocks (block 0 reserved). */
export class BlockPool {
  #free: number[] = [];

  constructor(readonly blocks: number) {
    for (let b = blocks - 1; b >= 1; b--) this.#free.push(b);
  }

  get free(): number {
    return this.#free.length;
  }
  get used(): number {
    return this.blocks - 1 - this.#free.length;
  }

  /** A free block, or undefined when none is left. */
  alloc(): number | undefined {
    return this.#free.pop();
  }

  release(ids: readonly number[]): void {
    for (const b of ids) {
      if (!(b >= 1 && b < this.blocks)) throw new RangeError(`block ${b} is not a pool block`);
      this.#free.push(b);
    }
  }
}
