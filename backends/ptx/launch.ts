// The PTX device's launch path below the device: a prepared step (a kernel launch with its arguments, a
// device copy, a slot slab upload or a collective call), a step list cut at its collectives for a group
// capture, and cuLaunchKernelEx with programmatic dependent launch (sm_90+: a kernel's blocks may start while
// the previous kernel drains). device.ts prepares and enqueues launches on its stream.
import type { Cuda, KernelArgs } from "../../ffi/cuda.ts";
import { ptrOf } from "../../ffi/lib.ts";
import type { PtxCompiled } from "./handles.ts";
import type { CollectiveCall } from "./nccl.ts";

/** One prepared step, ready to enqueue on the stream. */
export type Launch =
  | { k: "kernel"; c: PtxCompiled; grid: [number, number, number]; args: KernelArgs }
  | { k: "copy"; dst: bigint; src: bigint; bytes: number }
  | { k: "upload"; dst: bigint; src: bigint; bytes: number }
  | { k: "collective"; call: CollectiveCall };

/** Launches cut at their collectives: the stretch before each collective, and its call (the last has none). */
export function cutAtCollectives(list: readonly Launch[]): { launches: Launch[]; call?: CollectiveCall }[] {
  const out: { launches: Launch[]; call?: CollectiveCall }[] = [{ launches: [] }];
  for (const l of list) {
    if (l.k === "collective") {
      out[out.length - 1].call = l.call;
      out.push({ launches: [] });
    } else out[out.length - 1].launches.push(l);
  }
  return out;
}

// cuLaunchKernelEx with one CUlaunchConfig (56 bytes: grid and block dims,
// shared bytes, stream at 32, attrs at 40, numAttrs at 48) with one CUlaunchAttribute (72 bytes: id, then
// the value at 8) reused for every launch: the driver copies both at launch (and into a captured node).
const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
export class LaunchEx {
  private readonly cfgBytes = new Uint8Array(56);
  private readonly attrBytes = new Uint8Array(72);
  private readonly cfg = new DataView(this.cfgBytes.buffer);
  private constructor(private readonly fn: (cfg: Uint8Array, f: bigint, params: BigUint64Array, extra: null) => number) {
    const attr = new DataView(this.attrBytes.buffer);
    attr.setUint32(0, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, true);
    attr.setInt32(8, 1, true);
    this.cfg.setBigUint64(40, ptrOf(this.attrBytes), true);
    this.cfg.setUint32(48, 1, true);
  }
  static open(cu: Cuda): LaunchEx | undefined {
    const fn = cu.fn.cuLaunchKernelEx;
    return fn ? new LaunchEx(fn as unknown as LaunchEx["fn"]) : undefined;
  }
  launch(func: bigint, grid: readonly number[], block: readonly number[], shared: number, stream: bigint, params: BigUint64Array): number {
    const c = this.cfg;
    for (let i = 0; i < 3; i++) {
      c.setUint32(i * 4, grid[i] ?? 1, true);
      c.setUint32(12 + i * 4, block[i] ?? 1, true);
    }
    c.setUint32(24, shared, true);
    c.setBigUint64(32, stream, true);
    return this.fn(this.cfgBytes, func, params, null);
  }
}
