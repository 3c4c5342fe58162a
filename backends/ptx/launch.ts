// The PTX device's launch path below the device: a prepared step (a kernel launch with its arguments, a
// device copy, a slot slab upload or a collective call), a step list cut at its collectives for a group
// capture, and cuLaunchKernelEx with programmatic dependent launch (sm_90+: a kernel's blocks may start while
// the previous kernel drains). prepareLaunches turns checked steps into launches; device.ts enqueues them on
// its stream.
import { type Cuda, KernelArgs, type KernelArgType } from "../../ffi/cuda.ts";
import { ptrOf } from "../../ffi/lib.ts";
import type { Caps } from "../../kernels/target.ts";
import type { CollectiveStep } from "../../kernels/program.ts";
import type { DeviceBinding, DeviceBuffer, GroupStep } from "../device.ts";
import { Unsupported } from "../errors.ts";
import { type HostSpan, PtxBuffer, PtxCompiled } from "./handles.ts";
import type { CollectiveCall } from "./nccl.ts";
import { slabSpans, type SlotPlace } from "./slots.ts";

/** One prepared step, ready to enqueue on the stream. */
export type Launch =
  | { k: "kernel"; c: PtxCompiled; grid: [number, number, number]; args: KernelArgs }
  | { k: "copy"; dst: bigint; src: bigint; bytes: number }
  | { k: "upload"; dst: bigint; src: bigint; bytes: number }
  | { k: "collective"; call: CollectiveCall };

/** What preparing launches needs of the device. */
export interface PrepareContext {
  caps: Caps;
  /** A live buffer of this device holding the range (else Unsupported). */
  range(b: DeviceBuffer, offset: number, bytes: number): PtxBuffer;
  /** Whether this device compiled `c`. */
  owns(c: PtxCompiled): boolean;
  /** This rank's call of a collective step (undefined outside an NCCL group). */
  collective?: (s: CollectiveStep<DeviceBinding>, send: bigint, recv: bigint) => CollectiveCall;
  /** Argument types by parameter count, shared across calls (all pointers). */
  argTypes: KernelArgType[][];
}

/**
 * Checks steps and builds their launch arguments (device addresses with binding offsets applied), led by
 * one shadow-to-device copy per slot slab the steps bind.
 */
export function prepareLaunches(steps: GroupStep[], cx: PrepareContext): Launch[] {
  const caps = cx.caps;
  const places: SlotPlace[] = [];
  const slotOf = (b: DeviceBinding) => {
    if (b.buffer instanceof PtxBuffer && b.buffer.slot) places.push(b.buffer.slot);
  };
  const list = steps.map((s): Launch => {
    if (s.k === "collective") {
      if (!cx.collective) throw new Unsupported("ptx: a collective step on a device outside an NCCL group");
      const src = cx.range(s.src.buffer, s.src.offset, s.src.bytes), dst = cx.range(s.dst.buffer, s.dst.offset, s.dst.bytes);
      const call = cx.collective(s, src.ptr + BigInt(s.src.offset), dst.ptr + BigInt(s.dst.offset));
      slotOf(s.src);
      return { k: "collective", call };
    }
    if (s.k === "copy") {
      const src = cx.range(s.src.buffer, s.src.offset, s.src.bytes), dst = cx.range(s.dst.buffer, s.dst.offset, s.dst.bytes);
      if (s.src.bytes !== s.dst.bytes) throw new Unsupported(`ptx: copy of ${s.src.bytes} bytes into ${s.dst.bytes}`);
      slotOf(s.src);
      return { k: "copy", src: src.ptr + BigInt(s.src.offset), dst: dst.ptr + BigInt(s.dst.offset), bytes: s.src.bytes };
    }
    const c = s.compiled;
    if (!(c instanceof PtxCompiled) || !cx.owns(c)) throw new Unsupported("ptx: kernel was not compiled by this device");
    const k = c.kernel;
    if (s.bindings.length !== k.buffers.length) throw new Unsupported(`ptx: ${k.name} takes ${k.buffers.length} bindings, got ${s.bindings.length}`);
    s.grid.forEach((g, i) => {
      if (!Number.isInteger(g) || g < 1 || g > caps.maxWorkgroupsPerDim[i]) throw new Unsupported(`ptx: ${k.name}: grid ${s.grid.join("x")} out of range`);
    });
    const n = c.module.params;
    const types = cx.argTypes[n] ??= new Array<KernelArgType>(n).fill("pointer");
    const args = new KernelArgs(types);
    s.bindings.forEach((b: DeviceBinding, i) => {
      const pb = cx.range(b.buffer, b.offset, b.bytes);
      if (b.offset % caps.bindingAlign !== 0) throw new Unsupported(`ptx: ${k.name} binding ${i} at offset ${b.offset} (needs ${caps.bindingAlign}-byte alignment)`);
      args.set(i, pb.ptr + BigInt(b.offset));
      slotOf(b);
    });
    if (c.module.faultParam) args.set(n - 1, c.faultPtr);
    return { k: "kernel", c, grid: s.grid, args };
  });
  const uploads = slabSpans(places).map(({ slab, lo, hi }): Launch => ({ k: "upload", dst: slab.dev + BigInt(lo), src: slab.hostPtr + BigInt(lo), bytes: hi - lo }));
  return uploads.length ? [...uploads, ...list] : list;
}

/** The host ranges the head copies of a launch list read (the slot shadows). */
export function uploadSpans(list: readonly Launch[]): HostSpan[] {
  return list.flatMap((l) => (l.k === "upload" ? [{ lo: l.src, hi: l.src + BigInt(l.bytes) }] : []));
}

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
