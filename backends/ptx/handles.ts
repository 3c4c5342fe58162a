// The PTX device's handles: what alloc, compile and record hand out (backends/device.ts DeviceBuffer,
// CompiledKernel, Recording), as plain records of driver handles. Only device.ts makes them; the launch path
// (launch.ts) reads them.
import type { CompiledKernel, DeviceBuffer, Recording } from "../device.ts";
import type { Kernel } from "../../kernels/ir.ts";
import type { PtxModule } from "../../kernels/render/ptx.ts";
import type { SlotPlace } from "./slots.ts";

export class PtxBuffer implements DeviceBuffer {
  freed = false;
  constructor(
    readonly bytes: number,
    /** Device address. */
    readonly ptr: bigint,
    /** Host view of mapped pinned memory (readback buffers), with its host address. */
    readonly host?: Uint8Array,
    readonly hostPtr = 0n,
    /** A slot buffer's place in a slab (slots.ts): writes go to its host shadow. */
    readonly slot?: SlotPlace,
  ) {}
}
export class PtxCompiled implements CompiledKernel {
  constructor(
    readonly kernel: Kernel,
    readonly module: PtxModule,
    readonly cuModule: bigint,
    readonly func: bigint,
    /** Device address of this kernel's fault word (0n when it has no checks). */
    readonly faultPtr: bigint,
    readonly fault?: { words: Uint32Array; index: number },
  ) {}
}
export class PtxRecording implements Recording {
  released = false;
  /** A rank's part of a group recording captured once every rank's part is in (backends/ptx/nccl.ts). */
  pending = false;
  /** Why the group capture of this recording failed. */
  failed: string | undefined;
  constructor(
    public exec: bigint,
    readonly steps: number,
    readonly kernels: PtxCompiled[],
    /** Host ranges of the slot shadows its head copies (slots.ts); undefined: count every slot as copied. */
    readonly uploads?: HostSpan[],
  ) {}
}

/** A range of host addresses [lo, hi). */
export interface HostSpan {
  lo: bigint;
  hi: bigint;
}
