// The WebGPU device's handles and records: what alloc, compile and record hand out (backends/device.ts
// DeviceBuffer, CompiledKernel, Recording), a compiled kernel's pipeline variants, and the tail a submit ends
// with (fault words, readback copies, timestamps) that synchronize reads. Only device.ts makes them.
import type { Kernel } from "../../kernels/ir.ts";
import type { WgslShader } from "../../kernels/render/wgsl.ts";
import type { CompiledKernel, DeviceBuffer, Recording } from "../device.ts";
import type { Cmd, Encoded, Timing } from "./encode.ts";

// GPUBufferUsage / GPUMapMode / GPUShaderStage values (the globals do not exist under Bun; this module must load there).
export const MAP_READ = 0x1, COPY_SRC = 0x4, COPY_DST = 0x8, STORAGE = 0x80, QUERY_RESOLVE = 0x200, COMPUTE = 0x4;
export const B = "wgpu";

/** Counters of a WgpuDevice (WgpuDevice.stats). */
export interface WgpuStats {
  submits: number;
  replays: number;
  eagerRuns: number;
  dispatches: number;
  maps: number;
  /** Host microseconds spent encoding command buffers in replay/run before their submit (total and last call;
   * 0 for a replay whose command buffer was encoded ahead). */
  encodeMicros: number;
  lastEncodeMicros: number;
  /** Host microseconds encoding a recording's next command buffer after a submit, while the GPU runs. */
  preEncodeMicros: number;
  /**
   * Of encodeMicros + preEncodeMicros, the microseconds in GPUCommandEncoder.finish(), where wgpu validates the
   * passes, tracks their buffers' usage, places its barriers and records the Vulkan/Metal/D3D commands; the rest
   * is our calls (setPipeline, setBindGroup, dispatchWorkgroups, copies).
   */
  finishMicros: number;
  /** Host microseconds inside queue.submit for those (lavapipe runs the work there, so it is device time). */
  submitMicros: number;
  /** Host microseconds waiting in synchronize/read for maps. */
  mapMicros: number;
  /** Maps read before mapAsync's promise resolved (see mappedEarly). */
  earlyMaps: number;
  /** Distinct compute pipelines made (kernels rendering to the same WGSL share one). */
  pipelines: number;
}

export const ceil = (n: number, a: number) => Math.ceil(n / a) * a;

export class WgpuBuffer implements DeviceBuffer {
  freed = false;
  /** Written since its last snapshot (by work or by write()): read() must copy and map. */
  dirty = false;
  /** Bumped by every write(), so a snapshot copied before a later write is never taken as current. */
  writes = 0;
  snapshot: Uint8Array | undefined;
  constructor(readonly bytes: number, readonly gpu: GPUBuffer, readonly size: number, readonly usage: string) {}
}

/** One pipeline of a kernel: its WGSL, the compute pipeline and its bind group layout. */
export interface Variant {
  shader: WgslShader;
  pipeline: GPUComputePipeline;
  layout: GPUBindGroupLayout;
}
export class WgpuCompiled implements CompiledKernel {
  /** "n" (as the kernel declares), "rw" (every binding read_write), or "rw:i,j" (those bindings read_write). */
  readonly variants = new Map<string, Variant>();
  constructor(readonly kernel: Kernel) {}
}

/**
 * What synchronize reads for one recording (or one eager run): its fault words (one per checked dispatch, and
 * which kernel owns each) and the readback buffers it writes, copied by the last commands of the same submit
 * into its own MAP_READ staging buffer (faults at 0, readback i at `at[i]`).
 */
export interface Tail {
  faults: GPUBuffer | undefined;
  names: string[];
  readbacks: WgpuBuffer[];
  at: number[];
  staging: GPUBuffer;
  copies: Cmd[];
  /** Timestamps (device timing): the query set, the resolve buffer, where they land in the staging, which step
   * each pair brackets, and the values of the latest synchronized submit. */
  timing?: Timing;
}
export interface Pending {
  tail: Tail;
  /** Order of the latest submit that filled the staging, and each readback's write count at that time. */
  seq: number;
  writes: number[];
  /** Free the tail's buffers (and these) after synchronize: an eager run's, or a released recording's. */
  temp: GPUBuffer[] | undefined;
}

export class WgpuRecording implements Recording {
  released = false;
  replays = 0;
  /** The next replay's command buffers, encoded while the previous one ran. */
  spare: Encoded[] | undefined;
  constructor(
    /** The dispatches and copies, then the tail's copies. */
    readonly list: Cmd[],
    readonly tail: Tail,
    /** Buffers only this recording uses (copy parameters); destroyed on release. */
    readonly owned: GPUBuffer[],
    readonly steps: number,
  ) {}
}

/** A tail with nothing to read: no fault words, readbacks or timestamps. */
export function emptyTail(t: Tail): boolean {
  return !t.faults && t.readbacks.length === 0 && !t.timing;
}

/** The GPU objects a tail owns (the fault words, the staging buffer, the timestamp queries). */
export function tailBuffers(t: Tail): (GPUBuffer | GPUQuerySet)[] {
  const out: (GPUBuffer | GPUQuerySet)[] = t.faults ? [t.faults, t.staging] : [t.staging];
  if (t.timing) out.push(t.timing.set, t.timing.resolved);
  return out;
}
