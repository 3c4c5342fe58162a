// Pinned host memory that host->device copies are staged through, so that write() can return at once and
// still be ordered on the device's stream (an async copy reads its source when the stream reaches it).
//
// Two halves used in turn: a write takes bytes from the current half; when it is full, an event is recorded
// after the copies reading it, the other half becomes current, and its own event (recorded when it was left)
// is waited for before its bytes are reused. When the stream is seen idle, both halves are free again. So a
// burst of writes between synchronizations (loading weights) costs at most a wait per half, overlapping the
// host memcpy of one half with the DMA of the other.
import type { Cuda } from "../../ffi/cuda.ts";
import { CU_EVENT_DISABLE_TIMING, CU_MEMHOSTALLOC_PORTABLE } from "../../ffi/cuda.ts";
import { ptrView } from "../../ffi/lib.ts";

export class StagingRing {
  readonly half: number;
  private base = 0n;
  private view: Uint8Array | undefined;
  private cur = 0;
  private readonly used = [0, 0];
  private readonly armed = [false, false];
  private readonly events: bigint[] = [];

  /**
   * `wait(event)` blocks until the event completed (bounded; it throws a typed error otherwise).
   * Memory is allocated on first use.
   */
  constructor(private readonly cu: Cuda, private readonly stream: bigint, private readonly wait: (event: bigint) => void, half = 4 << 20) {
    this.half = half;
  }

  private init(): Uint8Array {
    this.base = this.cu.memHostAlloc(2 * this.half, CU_MEMHOSTALLOC_PORTABLE);
    this.view = new Uint8Array(ptrView(this.base, 2 * this.half));
    this.events.push(this.cu.eventCreate(CU_EVENT_DISABLE_TIMING), this.cu.eventCreate(CU_EVENT_DISABLE_TIMING));
    return this.view;
  }

  /** Copies `data` (at most `half` bytes) into pinned memory and returns its host address. */
  stage(data: Uint8Array): bigint {
    const n = data.byteLength;
    if (n > this.half) throw new RangeError(`staging ${n} bytes in ${this.half}-byte halves`);
    const view = this.view ?? this.init();
    if (this.used[this.cur] + n > this.half) {
      this.cu.eventRecord(this.events[this.cur], this.stream);
      this.armed[this.cur] = true;
      this.cur ^= 1;
      if (this.armed[this.cur]) this.wait(this.events[this.cur]);
      this.armed[this.cur] = false;
      this.used[this.cur] = 0;
    }
    const off = this.cur * this.half + this.used[this.cur];
    this.used[this.cur] += (n + 15) & ~15;
    view.set(data, off);
    return this.base + BigInt(off);
  }

  /** Every copy enqueued so far has run (the stream was seen idle): all staged bytes may be reused. */
  idle(): void {
    this.used[0] = this.used[1] = 0;
    this.armed[0] = this.armed[1] = false;
  }

  /** Frees the pinned memory and events (the stream must be idle). */
  release(): void {
    for (const e of this.events) this.cu.eventDestroy(e);
    this.events.length = 0;
    if (this.view) this.cu.memFreeHost(this.base);
    this.view = undefined;
  }
}
