// Pinned host memory the PTX device keeps beside its buffers: the fault words, host-mapped so that the code a
// failing check stored is read after the trap without a driver call (one word per compiled kernel with checks,
// in chunks of FAULT_WORDS), and the staging buffer that reads of device buffers copy through (grown to the
// largest chunk read, 1 MiB at least). Writes stage through staging.ts's ring instead.
import { CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, type Cuda } from "../../ffi/cuda.ts";
import { ptrView } from "../../ffi/lib.ts";

const FAULT_WORDS = 1024;

/** One kernel's fault word: the device address its check stores to, and the host view it is read from. */
export interface FaultWord {
  ptr: bigint;
  fault: { words: Uint32Array; index: number };
}

/** The fault words of one device, handed out one per kernel. */
export class FaultWords {
  private readonly chunks: { host: bigint; dptr: bigint; words: Uint32Array; used: number }[] = [];

  constructor(private readonly cu: Cuda) {
    this.grow();
  }

  private grow(): void {
    const bytes = FAULT_WORDS * 4;
    const host = this.cu.memHostAlloc(bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    const words = new Uint32Array(ptrView(host, bytes));
    words.fill(0);
    this.chunks.push({ host, dptr: this.cu.memHostGetDevicePointer(host), words, used: 0 });
  }

  /** A fresh (zero) word. */
  take(): FaultWord {
    if (this.chunks[this.chunks.length - 1].used === FAULT_WORDS) this.grow();
    const ch = this.chunks[this.chunks.length - 1];
    const fault = { words: ch.words, index: ch.used++ };
    return { ptr: ch.dptr + BigInt(fault.index * 4), fault };
  }

  /** Frees every chunk (the device is being destroyed). */
  release(): void {
    for (const ch of this.chunks) this.cu.memFreeHost(ch.host);
  }
}

/** The pinned buffer device reads land in before they are copied out (one read at a time uses it). */
export class ReadStage {
  private stage: { ptr: bigint; view: Uint8Array } | undefined;

  constructor(private readonly cu: Cuda) {}

  /** The buffer, at least `n` bytes (reallocated when smaller). */
  get(n: number): { ptr: bigint; view: Uint8Array } {
    if (!this.stage || this.stage.view.byteLength < n) {
      if (this.stage) this.cu.memFreeHost(this.stage.ptr);
      const size = Math.max(1 << 20, n);
      const ptr = this.cu.memHostAlloc(size, CU_MEMHOSTALLOC_PORTABLE);
      this.stage = { ptr, view: new Uint8Array(ptrView(ptr, size)) };
    }
    return this.stage;
  }

  /** Frees the buffer, if one was made. */
  release(): void {
    if (this.stage) this.cu.memFreeHost(this.stage.ptr);
  }
}
