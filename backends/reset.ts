// Zeroing an Engine's State buffers (resetState, before every sequence). The fills of one set of buffers are
// recorded once and that recording is replayed on every later reset of the same set: one submission. Run
// eagerly, a fill per buffer cost a host round trip each on Vulkan (its eager steps are submitted and waited
// one at a time): ~1.5 ms for qwen2.5-0.5b's State on the H200, a 64-token bench/decode run's 25 µs a token,
// and every request's time to first token.
//
// Buffers of whole words of at least MIN_FILL bytes get a fill kernel (compiled once per size); smaller or odd
// ones a host upload of zeros, which costs less than a pipeline per size on a CPU Vulkan. A recording names the
// buffers it writes: `forget` drops those of a buffer about to be freed, so none is replayed on a stale one, and
// hands them to the Engine to release once no queued work uses them.
import type { CompiledKernel, Device, DeviceBuffer, DeviceStep, Recording } from "./device.ts";
import type { Kernel } from "../kernels/ir.ts";
import { zeroFill } from "../kernels/lib/fill.ts";

const MIN_FILL = 1024;

/** A buffer to zero: its first `bytes`. */
export interface Zeroed {
  buf: DeviceBuffer;
  bytes: number;
}

export class StateReset {
  readonly #kernels = new Map<number, { k: Kernel; compiled: CompiledKernel }>();
  readonly #recs = new Map<string, { rec: Recording; bufs: Set<DeviceBuffer> }>();

  constructor(readonly device: Device) {}

  /** Zeroes `bufs` (queued after the work before it); `key` names the set, the same key the same buffers. */
  zero(key: string, bufs: Zeroed[]): void {
    for (const z of bufs) if (!fills(z)) this.device.write(z.buf, 0, new Uint8Array(z.bytes));
    let r = this.#recs.get(key);
    if (!r) {
      const steps = bufs.filter(fills).map((z) => this.#step(z));
      if (!steps.length) return;
      r = { rec: this.device.record(steps), bufs: new Set(bufs.map((z) => z.buf)) };
      this.#recs.set(key, r);
    }
    this.device.replay(r.rec);
  }

  /** `buf` is about to be freed: the recordings that write it, never replayed again, for the caller to release. */
  forget(buf: DeviceBuffer): Recording[] {
    const dropped: Recording[] = [];
    for (const [key, r] of this.#recs) {
      if (!r.bufs.has(buf)) continue;
      this.#recs.delete(key);
      dropped.push(r.rec);
    }
    return dropped;
  }

  #step(z: Zeroed): DeviceStep {
    let c = this.#kernels.get(z.bytes);
    if (!c) {
      const k = zeroFill(this.device.target.caps, z.bytes / 4);
      this.#kernels.set(z.bytes, c = { k, compiled: this.device.compile(k) });
    }
    return { k: "kernel", compiled: c.compiled, grid: c.k.grid, work: { bytes: z.bytes, flops: 0 }, bindings: [{ buffer: z.buf, offset: 0, bytes: z.bytes }] };
  }
}

const fills = (z: Zeroed) => z.bytes % 4 === 0 && z.bytes >= MIN_FILL;
