// AQL packets and the queue ring they are submitted into.
//
// A packet list is prebuilt once (a recording, or an eager run's one-off list): 64-byte images whose first
// word (header | setup << 16) reads INVALID, and beside them the real first word of each. Submitting copies
// the images into the ring's free slots (one or two block copies, around the wrap), publishes the write
// index, then stores each real header word atomically: every packet after the first, then the first last, so
// the packet processor never sees a valid header ahead of a packet that is still being written. Then ONE
// doorbell store hands the packet processor the last write index. The ring is a single-producer queue: the
// device owns the write index and reads the read index only when the free slots it remembers run short.
import {
  aqlHeader, type Hsa, HSA_FENCE_SCOPE_AGENT, HSA_FENCE_SCOPE_SYSTEM, HSA_PACKET_TYPE_BARRIER_AND, HSA_PACKET_TYPE_INVALID,
  HSA_PACKET_TYPE_KERNEL_DISPATCH, type HsaQueue,
} from "../../ffi/hsa.ts";
import { ptrView } from "../../ffi/lib.ts";

export const PACKET_BYTES = 64;
/** The first word of a slot that holds no packet (what the images carry until submission). */
export const INVALID_WORD = aqlHeader(HSA_PACKET_TYPE_INVALID, { acquire: 0, release: 0 });

/** A kernel dispatch: sizes in work-items (grid) and per workgroup, segment sizes, code and arguments. */
export interface Dispatch {
  kernelObject: bigint;
  kernarg: bigint;
  workgroup: readonly number[];
  /** Workgroups per dimension (the kernel IR's grid); the packet carries work-items (grid * workgroup). */
  grid: readonly number[];
  groupBytes: number;
  privateBytes: number;
}

/** Fence scopes of one packet: what it acquires at launch and releases at completion. */
export interface Fences {
  barrier?: boolean;
  acquire: number;
  release: number;
}

/** Packets in submission order: images (first word INVALID) and each packet's real first word. */
export class PacketList {
  readonly images: Uint8Array;
  readonly words: Uint32Array;
  private readonly view: DataView;
  count = 0;

  constructor(capacity: number) {
    this.images = new Uint8Array(capacity * PACKET_BYTES);
    this.words = new Uint32Array(capacity);
    this.view = new DataView(this.images.buffer);
  }

  private next(word: number): number {
    const i = this.count++;
    this.view.setUint32(i * PACKET_BYTES, INVALID_WORD, true);
    this.words[i] = word >>> 0;
    return i * PACKET_BYTES;
  }

  /** hsa_kernel_dispatch_packet_t; `completion` is decremented when it is done (0n: none). */
  dispatch(d: Dispatch, f: Fences, completion = 0n): void {
    const dims = d.grid[2] > 1 || d.workgroup[2] > 1 ? 3 : d.grid[1] > 1 || d.workgroup[1] > 1 ? 2 : 1;
    const o = this.next(aqlHeader(HSA_PACKET_TYPE_KERNEL_DISPATCH, f) | (dims << 16)), v = this.view;
    for (let i = 0; i < 3; i++) {
      v.setUint16(o + 4 + 2 * i, d.workgroup[i], true);
      v.setUint32(o + 12 + 4 * i, d.grid[i] * d.workgroup[i], true);
    }
    v.setUint32(o + 24, d.privateBytes, true);
    v.setUint32(o + 28, d.groupBytes, true);
    v.setBigUint64(o + 32, d.kernelObject, true);
    v.setBigUint64(o + 40, d.kernarg, true);
    v.setBigUint64(o + 56, completion, true);
  }

  /** hsa_barrier_and_packet_t: waits for `deps` (at most 5) and, with the barrier bit, for every packet before it. */
  barrierAnd(f: Fences, deps: readonly bigint[] = [], completion = 0n): void {
    if (deps.length > 5) throw new RangeError(`a barrier-AND packet takes 5 dependencies, got ${deps.length}`);
    const o = this.next(aqlHeader(HSA_PACKET_TYPE_BARRIER_AND, f)), v = this.view;
    for (let i = 0; i < 5; i++) v.setBigUint64(o + 8 + 8 * i, deps[i] ?? 0n, true);
    v.setBigUint64(o + 56, completion, true);
  }
}

/** Fences between steps of one agent, and where the host is involved (slots in, readback out). */
export const AGENT: Fences = { acquire: HSA_FENCE_SCOPE_AGENT, release: HSA_FENCE_SCOPE_AGENT };
export const SYSTEM_ACQUIRE: Fences = { acquire: HSA_FENCE_SCOPE_SYSTEM, release: HSA_FENCE_SCOPE_AGENT };
/** The tail of every submission: after all before it, writes released to the host, then the completion signal. */
export const TAIL: Fences = { barrier: true, acquire: HSA_FENCE_SCOPE_AGENT, release: HSA_FENCE_SCOPE_SYSTEM };
/** A barrier between dependent steps. */
export const STEP_BARRIER: Fences = { barrier: true, acquire: HSA_FENCE_SCOPE_AGENT, release: HSA_FENCE_SCOPE_AGENT };

/** The queue's ring as the device writes it. */
export class AqlRing {
  readonly size: number;
  private readonly bytes: Uint8Array;
  private readonly heads: Uint32Array;
  private write: bigint;
  private read: bigint;
  /** Doorbell rings so far (tests count them: one per submission). */
  doorbells = 0;

  constructor(private readonly hsa: Hsa, private readonly queue: HsaQueue) {
    this.size = queue.info.size;
    const buf = ptrView(queue.info.base_address, this.size * PACKET_BYTES);
    this.bytes = new Uint8Array(buf);
    this.heads = new Uint32Array(buf);
    this.write = hsa.queueLoadWriteIndex(queue);
    this.read = hsa.queueLoadReadIndex(queue);
  }

  /**
   * Makes room for `n` packets, reloading the read index while the ring is short, for at most `timeoutMs`;
   * false when the packet processor did not free them in time.
   */
  private room(n: number, timeoutMs: number): boolean {
    const size = BigInt(this.size), need = BigInt(n);
    if (this.write + need - this.read <= size) return true;
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      this.read = this.hsa.queueLoadReadIndex(this.queue);
      if (this.write + need - this.read <= size) return true;
      if (performance.now() > deadline) return false;
    }
  }

  /**
   * Writes `list` into the ring and rings the doorbell once. Lists longer than the ring go in ring-sized
   * parts, each waiting for room. Returns false (nothing more written) when the ring stayed full past the bound.
   */
  submit(list: PacketList, timeoutMs: number): boolean {
    for (let at = 0; at < list.count; at += this.size) {
      const n = Math.min(this.size, list.count - at);
      if (!this.room(n, timeoutMs)) return false;
      this.put(list, at, n);
    }
    return true;
  }

  private put(list: PacketList, at: number, n: number): void {
    const base = this.write, size = this.size;
    const first = Number(base % BigInt(size));
    const run = Math.min(n, size - first);
    this.bytes.set(list.images.subarray(at * PACKET_BYTES, (at + run) * PACKET_BYTES), first * PACKET_BYTES);
    if (run < n) this.bytes.set(list.images.subarray((at + run) * PACKET_BYTES, (at + n) * PACKET_BYTES), 0);
    this.write = base + BigInt(n);
    this.hsa.queueStoreWriteIndex(this.queue, this.write);
    const slot = (i: number) => ((first + i) % size) * (PACKET_BYTES / 4);
    for (let i = 1; i < n; i++) Atomics.store(this.heads, slot(i), list.words[at + i]);
    Atomics.store(this.heads, slot(0), list.words[at]);
    this.hsa.signalStore(this.queue.info.doorbell_signal, this.write - 1n);
    this.doorbells++;
  }
}
