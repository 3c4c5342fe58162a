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

/**
 * Pool blocks (block 0 reserved) with reference counts and a prefix cache. A full block of K/V is published
 * under a key that names every token up to its end (prefixKey); a sequence whose prompt starts with the same
 * tokens shares it instead of recomputing (the values are the same bits: a row's K/V depends only on the
 * tokens and positions before it). A cached block nobody holds stays cached until an allocation needs it
 * (least recently released first). Shared blocks are never written: only positions past a sequence's shared
 * prefix are, and only full blocks are published.
 */
export class BlockPool {
  #free: number[] = [];
  #refs: Int32Array;
  #keyOf = new Map<number, string>();
  #byKey = new Map<string, number>();
  /** Cached blocks with no holder, oldest release first (Map keeps insertion order). */
  #idle = new Map<number, true>();

  constructor(readonly blocks: number) {
    for (let b = blocks - 1; b >= 1; b--) this.#free.push(b);
    this.#refs = new Int32Array(blocks);
  }

  /** Blocks an allocation can get (free, or cached and held by nobody). */
  get free(): number {
    return this.#free.length + this.#idle.size;
  }
  /** Blocks held by sequences. */
  get used(): number {
    return this.blocks - 1 - this.free;
  }
  /** Blocks holding a published prefix (held or idle). */
  get cached(): number {
    return this.#byKey.size;
  }

  /** A block for one holder, or undefined when none is left (evicts the oldest idle cached block). */
  alloc(): number | undefined {
    let b = this.#free.pop();
    if (b === undefined) {
      const first = this.#idle.keys().next();
      if (first.done) return undefined;
      b = first.value;
      this.#idle.delete(b);
      this.#byKey.delete(this.#keyOf.get(b)!);
      this.#keyOf.delete(b);
    }
    this.#refs[b] = 1;
    return b;
  }

  /** The cached block of this prefix key, now also held by the caller; undefined when not cached. */
  share(key: string): number | undefined {
    const b = this.#byKey.get(key);
    if (b === undefined) return undefined;
    if (this.#refs[b]++ === 0) this.#idle.delete(b);
    return b;
  }

  /** Publishes a full block the caller holds under its prefix key (a key already cached keeps its block). */
  publish(block: number, key: string): void {
    if (this.#byKey.has(key) || this.#keyOf.has(block)) return;
    this.#byKey.set(key, block);
    this.#keyOf.set(block, key);
  }

  /** Drops the whole prefix cache (the pool's contents were reset): idle cached blocks become free. */
  forget(): void {
    for (const b of this.#idle.keys()) this.#free.push(b);
    this.#idle.clear();
    this.#byKey.clear();
    this.#keyOf.clear();
  }

  release(ids: readonly number[]): void {
    for (const b of ids) {
      if (!(b >= 1 && b < this.blocks) || this.#refs[b] <= 0) throw new RangeError(`block ${b} is not held`);
      if (--this.#refs[b] > 0) continue;
      if (this.#keyOf.has(b)) this.#idle.set(b, true);
      else this.#free.push(b);
    }
  }
}

/**
 * The cache key of logical block k of a token sequence: a 64-bit hash of every token before the block (chained
 * through `parent`, the key of block k - 1) and the block's own tokens spelled out.
 */
export function prefixKey(parent: string | undefined, tokens: readonly number[]): string {
  let h1 = 0x811c9dc5, h2 = 0x9747b28c;
  const mix = (x: number) => {
    h1 = Math.imul(h1 ^ x, 0x01000193) >>> 0;
    h2 = Math.imul(h2 ^ (x >>> 16 | x << 16), 0x5bd1e995) >>> 0;
    h2 ^= h2 >>> 13;
  };
  if (parent) for (let i = 0; i < parent.length; i++) mix(parent.charCodeAt(i));
  for (const t of tokens) mix(t);
  return `${h1.toString(36)}.${h2.toString(36)}:${tokens.join(",")}`;
}
