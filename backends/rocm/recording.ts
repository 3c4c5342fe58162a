// A recording of the ROCm device: the steps checked once and turned into a prebuilt packet list (packets.ts)
// with every dispatch's kernarg segment written once into kernarg memory. A barrier-AND packet goes before a
// step only where it depends on a step since the last barrier (kernels/hazards.ts; before every step for
// eager runs and the allBarriers option); the first dispatch acquires at system scope (slots the host wrote),
// the others at agent scope; a tail barrier-AND waits for everything, releases to system scope (readback the
// host reads) and decrements the device's completion signal. Copy steps are dispatches of a copy kernel
// (copy.ts) whose length word sits in the kernarg memory beside its arguments.
import type { Caps } from "../../kernels/target.ts";
import type { DeviceBinding, DeviceBuffer, DeviceStep, Recording } from "../device.ts";
import { Unsupported } from "../errors.ts";
import { barriersBefore, type StepAccess } from "../../kernels/hazards.ts";
import { RocmCompiled } from "./code.ts";
import { COPY_GROUPS } from "./copy.ts";
import { writeKernargs } from "./kernarg.ts";
import { AGENT, type Fences, PacketList, STEP_BARRIER, SYSTEM_ACQUIRE, TAIL } from "./packets.ts";

/** Kernarg segments start 64-byte aligned (a cache line; every kernel's own alignment divides it). */
export const KERNARG_ALIGN = 64;

export class RocmBuffer implements DeviceBuffer {
  freed = false;
  constructor(readonly bytes: number, readonly ptr: bigint, readonly host?: Uint8Array) {}
}

export class RocmRecording implements Recording {
  released = false;
  /** A replay of it has completed since recording, so every step has its times. */
  timed = false;
  constructor(
    readonly steps: number,
    readonly list: PacketList,
    /** Kernarg memory of the list's dispatches (0n when none). */
    readonly kernarg: bigint,
    readonly kernels: RocmCompiled[],
    /** Barrier-AND packets between steps (the hazards), the tail not counted. */
    readonly barriers: number,
    /** Each step's completion signal, which the profiler stamps (empty unless the device times steps). */
    readonly signals: bigint[],
  ) {}
}

/** What building a packet list needs of the device. */
export interface RecordingContext {
  caps(): Caps;
  /** The live buffer of this device behind a binding, with the range checked. */
  range(b: DeviceBuffer, offset: number, bytes: number): RocmBuffer;
  owns(c: RocmCompiled): boolean;
  copyKernel(elem: "u32" | "u8"): RocmCompiled;
  /** Zeroed kernarg memory the GPU may read, and its host view. */
  kernarg(bytes: number): { ptr: bigint; view: Uint8Array };
  freeKernarg(ptr: bigint): void;
  signal(): bigint;
  destroySignal(signal: bigint): void;
  /** The device's completion signal (the tail decrements it). */
  done(): bigint;
}

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

/** Writes a dispatch's kernargs at `dv[at]` (device address `addr`) and its packet into `list`. */
export function dispatchInto(list: PacketList, c: RocmCompiled, ptrs: bigint[], grid: readonly number[], dv: DataView, at: number, addr: bigint, f: Fences = AGENT, completion = 0n): void {
  if (c.fault) ptrs.push(c.fault.ptr);
  writeKernargs(new DataView(dv.buffer, dv.byteOffset + at, c.layout.bytes), c.layout, ptrs, grid, c.kernel.workgroup);
  list.dispatch({ kernelObject: c.kernelObject, kernarg: addr, workgroup: c.kernel.workgroup, grid, groupBytes: c.groupBytes, privateBytes: c.privateBytes }, f, completion);
}

/** Checks a step and says what it reads and writes (by allocation). */
function access(ctx: RecordingContext, s: DeviceStep, i: number): StepAccess {
  const caps = ctx.caps();
  const span = (b: DeviceBinding, what: string) => {
    const rb = ctx.range(b.buffer, b.offset, b.bytes);
    if (b.offset % caps.bindingAlign !== 0) throw new Unsupported(`rocm: step ${i}: ${what} at offset ${b.offset} (needs ${caps.bindingAlign}-byte alignment)`);
    return { buffer: rb, lo: b.offset, hi: b.offset + Math.max(b.bytes, 1) };
  };
  if (s.k === "copy") {
    if (s.src.bytes !== s.dst.bytes) throw new Unsupported(`rocm: step ${i}: copy of ${s.src.bytes} bytes into ${s.dst.bytes}`);
    return { reads: [span(s.src, "copy source")], writes: [span(s.dst, "copy destination")] };
  }
  const c = s.compiled;
  if (!(c instanceof RocmCompiled) || !ctx.owns(c)) throw new Unsupported(`rocm: step ${i}: kernel was not compiled by this device`);
  const k = c.kernel;
  if (s.bindings.length !== k.buffers.length) throw new Unsupported(`rocm: step ${i}: ${k.name} takes ${k.buffers.length} bindings, got ${s.bindings.length}`);
  s.grid.forEach((g, d) => {
    if (!Number.isInteger(g) || g < 1 || g > caps.maxWorkgroupsPerDim[d] || g * k.workgroup[d] > 0xffffffff) {
      throw new Unsupported(`rocm: step ${i}: ${k.name}: grid ${s.grid.join("x")} out of range`);
    }
  });
  const out: StepAccess = { reads: [], writes: [] };
  s.bindings.forEach((b, j) => {
    const r = span(b, `binding ${j}`), acc = k.buffers[j].access;
    if (acc !== "w") out.reads.push(r);
    if (acc !== "r") out.writes.push(r);
  });
  return out;
}

/**
 * The packet list of `steps` with their kernargs in fresh kernarg memory; `timed` gives each step a
 * completion signal for the profiler to stamp. Everything is checked before anything is allocated.
 */
export function buildRecording(ctx: RecordingContext, steps: DeviceStep[], allBarriers: boolean, timed: boolean): RocmRecording {
  const need = barriersBefore(steps.map((s, i) => access(ctx, s, i)), allBarriers);
  const plan = steps.map((s) => {
    if (s.k === "kernel") return { c: s.compiled as RocmCompiled, extra: 0, words: false };
    const words = s.src.bytes % 4 === 0;
    return { c: ctx.copyKernel(words ? "u32" : "u8"), extra: KERNARG_ALIGN, words }; // room for the length word
  });
  const bytes = plan.reduce((n, p) => n + alignUp(p.c.layout.bytes, KERNARG_ALIGN) + p.extra, 0);
  const mem = bytes ? ctx.kernarg(bytes) : undefined;
  const signals: bigint[] = [];
  try {
    if (timed) for (let i = 0; i < steps.length; i++) signals.push(ctx.signal());
  } catch (e) {
    for (const sg of signals) ctx.destroySignal(sg);
    if (mem) ctx.freeKernarg(mem.ptr);
    throw e;
  }
  const barriers = need.filter(Boolean).length;
  const list = new PacketList(steps.length + barriers + 1);
  const dv = mem ? new DataView(mem.view.buffer, mem.view.byteOffset, bytes) : new DataView(new ArrayBuffer(0));
  const addr = (o: number) => mem!.ptr + BigInt(o);
  let at = 0;
  steps.forEach((s, i) => {
    if (need[i]) list.barrierAnd(STEP_BARRIER);
    const { c, extra, words } = plan[i];
    const f = i === 0 ? SYSTEM_ACQUIRE : AGENT;
    if (s.k === "kernel") {
      const ptrs = s.bindings.map((b) => (b.buffer as RocmBuffer).ptr + BigInt(b.offset));
      dispatchInto(list, c, ptrs, s.grid, dv, at, addr(at), f, signals[i]);
    } else {
      dv.setUint32(at, words ? s.src.bytes / 4 : s.src.bytes, true);
      const ptrs = [(s.dst.buffer as RocmBuffer).ptr + BigInt(s.dst.offset), (s.src.buffer as RocmBuffer).ptr + BigInt(s.src.offset), addr(at)];
      dispatchInto(list, c, ptrs, [COPY_GROUPS, 1, 1], dv, at + extra, addr(at + extra), f, signals[i]);
    }
    at += alignUp(c.layout.bytes, KERNARG_ALIGN) + extra;
  });
  list.barrierAnd(TAIL, [], ctx.done());
  return new RocmRecording(steps.length, list, mem?.ptr ?? 0n, plan.map((p) => p.c), barriers, signals);
}
