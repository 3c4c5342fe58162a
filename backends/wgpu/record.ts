// Building a WebGPU recording (or an eager run): steps become commands (a dispatch with its bind group made
// here, a buffer copy, or a copy dispatch where copyBufferToBuffer cannot: unaligned, or within one buffer),
// each binding checked against the adapter's limits, and a tail that copies the fault words, the readback
// buffers written and the timestamps into one MAP_READ staging buffer, which synchronize maps.
import type { Kernel } from "../../kernels/ir.ts";
import type { CompiledKernel, DeviceBinding, DeviceBuffer, DeviceStep } from "../device.ts";
import { Unsupported } from "../errors.ts";
import { COPY_BYTES, COPY_GROUPS, COPY_WORDS } from "./copy.ts";
import type { Cmd, Timing } from "./encode.ts";
import { B, ceil, COPY_DST, COPY_SRC, MAP_READ, QUERY_RESOLVE, STORAGE, type Tail, type Variant, type WgpuBuffer, WgpuCompiled } from "./handles.ts";
import type { WgpuFeatures } from "./target.ts";

/** What building needs of the device. */
export interface BuildContext {
  gpu: GPUDevice;
  features: WgpuFeatures;
  /** Binding offset alignment (minStorageBufferOffsetAlignment, at least 4). */
  align: number;
  /** Bytes between two dispatches' fault words. */
  faultStride: number;
  /** Declare every binding of a conflicting dispatch read_write (WgpuOptions.allReadWrite). */
  allReadWrite: boolean;
  /** The device's own live buffer behind a handle (else Unsupported). */
  buf(b: DeviceBuffer): WgpuBuffer;
  compile(kernel: Kernel): CompiledKernel;
  variant(c: WgpuCompiled, v: string): Variant;
  scoped(what: string, f: () => void): void;
}

/** A binding's GPU range, checked against the adapter's limits and rounded up to 16 bytes (see wgsl.ts). */
function range(cx: BuildContext, b: DeviceBinding, what: string, copy = false): { gpu: GPUBuffer; offset: number; size: number; buf: WgpuBuffer } {
  const w = cx.buf(b.buffer);
  if (b.offset < 0 || b.bytes < 0 || b.offset + b.bytes > w.bytes) {
    throw new Unsupported(`${B}: ${what}: range ${b.offset}+${b.bytes} outside a ${w.bytes}-byte buffer`);
  }
  if (copy) return { gpu: w.gpu, offset: b.offset, size: b.bytes, buf: w }; // copies bind aligned windows themselves
  if (b.offset % cx.align !== 0) {
    throw new Unsupported(`${B}: ${what}: binding offset ${b.offset} is not a multiple of ${cx.align} (caps.bindingAlign)`);
  }
  const size = Math.min(Math.max(16, ceil(b.bytes, 16)), w.size - b.offset);
  const max = cx.gpu.limits.maxStorageBufferBindingSize;
  if (size > max) {
    throw new Unsupported(`${B}: ${what}: a binding of ${b.bytes} bytes exceeds the adapter's maxStorageBufferBindingSize (${max}); the planner must split it`);
  }
  return { gpu: w.gpu, offset: b.offset, size, buf: w };
}

function checkGrid(cx: BuildContext, name: string, g: [number, number, number]): void {
  const m = cx.gpu.limits.maxComputeWorkgroupsPerDimension;
  if (g.some((n) => n > m)) throw new Unsupported(`${B}: ${name}: grid ${g.join("x")} exceeds ${m} workgroups per dimension`);
}

/** Turns steps into commands: bind groups made here, fault words assigned in dispatch order. */
function build(cx: BuildContext, steps: DeviceStep[], faults: { buf?: GPUBuffer; names: string[]; stepOf?: number[] }, readbacks: Set<WgpuBuffer>, owned: GPUBuffer[]): Cmd[] {
  const cmds: Cmd[] = [];
  for (const [si, s] of steps.entries()) {
    if (s.k === "copy") {
      const a = range(cx, s.src, `step ${si} copy source`, true), b = range(cx, s.dst, `step ${si} copy destination`, true);
      if (s.src.bytes !== s.dst.bytes) throw new Unsupported(`${B}: step ${si}: copy of ${s.src.bytes} bytes into ${s.dst.bytes}`);
      if (b.buf.usage === "readback") readbacks.add(b.buf);
      const n = s.src.bytes;
      if (n === 0) continue;
      if (a.gpu !== b.gpu && n % 4 === 0 && a.offset % 4 === 0 && b.offset % 4 === 0) cmds.push({ k: "c", src: a.gpu, so: a.offset, dst: b.gpu, dOff: b.offset, n });
      else kernelCopy(cx, a, 0, b, 0, n, cmds, owned);
      continue;
    }
    if (!(s.compiled instanceof WgpuCompiled)) throw new Unsupported(`${B}: step ${si}: kernel was not compiled by this device`);
    const k = s.compiled.kernel;
    if (s.bindings.length !== k.buffers.length) {
      throw new Unsupported(`${B}: ${k.name}: ${s.bindings.length} bindings for ${k.buffers.length} buffers`);
    }
    checkGrid(cx, k.name, s.grid);
    const ranges = s.bindings.map((b, i) => range(cx, b, `${k.name} binding ${i} (${k.buffers[i].name})`));
    // One GPUBuffer bound read-only and writable in one dispatch is a usage conflict: those read bindings are
    // declared read_write in a variant (the others, weights mostly, stay read-only: no usage barrier, and
    // read-only loads for the driver).
    const base = cx.variant(s.compiled, "n");
    const writable = new Set(ranges.filter((_, i) => base.shader.bindings[i].access === "read_write").map((r) => r.gpu));
    const conflict = ranges.flatMap((r, i) => (base.shader.bindings[i].access === "read" && writable.has(r.gpu) ? [i] : []));
    const v = conflict.length ? cx.variant(s.compiled, cx.allReadWrite ? "rw" : `rw:${conflict.join(",")}`) : base;
    ranges.forEach((r, i) => {
      if (v.shader.bindings[i].access === "read_write" && r.buf.usage === "readback") readbacks.add(r.buf);
    });
    const entries: GPUBindGroupEntry[] = ranges.map((r, i) => ({ binding: i, resource: { buffer: r.gpu, offset: r.offset, size: r.size } }));
    if (v.shader.errorBinding >= 0) {
      entries.push({ binding: v.shader.errorBinding, resource: { buffer: faults.buf!, offset: faults.names.length * cx.faultStride, size: 4 } });
      faults.names.push(k.name);
    }
    const q = faults.stepOf ? faults.stepOf.push(si) - 1 : undefined;
    cmds.push({ k: "d", pipeline: v.pipeline, group: cx.gpu.createBindGroup({ label: k.name, layout: v.layout, entries }), grid: s.grid, q });
  }
  return cmds;
}

/** A dispatch copying n bytes from src+so to dst+dOff (offsets relative to the ranges' bases). */
export function kernelCopy(
  cx: BuildContext,
  src: { gpu: GPUBuffer; offset: number; size: number }, so: number,
  dst: { gpu: GPUBuffer; offset: number; size: number }, dOff: number, n: number,
  cmds: Cmd[], owned: GPUBuffer[],
): void {
  const words = (src.offset + so) % 4 === 0 && (dst.offset + dOff) % 4 === 0 && n % 4 === 0;
  const unit = words ? 4 : 1;
  const c = cx.compile(words ? COPY_WORDS : COPY_BYTES) as WgpuCompiled;
  // Bind whole aligned windows; the parameter buffer carries the residual offsets.
  const win = (r: { gpu: GPUBuffer; offset: number }, off: number) => {
    const start = r.offset + off, base = start - (start % cx.align);
    return { base, rel: start - base, size: Math.min(ceil(start - base + n, 16), r.gpu.size - base) };
  };
  const a = win(src, so), b = win(dst, dOff);
  const prm = cx.gpu.createBuffer({ size: 16, usage: STORAGE | COPY_DST });
  cx.gpu.queue.writeBuffer(prm, 0, new Uint32Array([a.rel / unit, b.rel / unit, n / unit, 0]));
  owned.push(prm);
  const same = src.gpu === dst.gpu;
  const v = cx.variant(c, same ? "rw" : "n");
  const group = cx.gpu.createBindGroup({
    label: c.kernel.name,
    layout: v.layout,
    entries: [
      { binding: 0, resource: { buffer: src.gpu, offset: a.base, size: a.size } },
      { binding: 1, resource: { buffer: dst.gpu, offset: b.base, size: b.size } },
      { binding: 2, resource: { buffer: prm, offset: 0, size: 16 } },
    ],
  });
  cmds.push({ k: "d", pipeline: v.pipeline, group, grid: [Math.min(COPY_GROUPS, Math.max(1, Math.ceil(n / unit / 256))), 1, 1] });
}

function faultBuffer(cx: BuildContext, steps: DeviceStep[]): GPUBuffer | undefined {
  let n = 0;
  for (const s of steps) {
    if (s.k === "kernel" && s.compiled instanceof WgpuCompiled && cx.variant(s.compiled, "n").shader.errorBinding >= 0) n++;
  }
  if (n === 0) return undefined;
  return cx.gpu.createBuffer({ size: ceil(n * cx.faultStride, 16), usage: STORAGE | COPY_SRC | COPY_DST });
}

/** Builds steps into commands plus their tail (fault words and readbacks copied into a staging buffer). */
export function prepare(cx: BuildContext, steps: DeviceStep[], what: string): { cmds: Cmd[]; tail: Tail; owned: GPUBuffer[] } {
  const faults = { buf: faultBuffer(cx, steps), names: [] as string[], stepOf: cx.features.timestamps ? [] as number[] : undefined };
  const readbacks = new Set<WgpuBuffer>();
  const owned: GPUBuffer[] = [];
  let cmds: Cmd[] = [];
  try {
    cx.scoped(what, () => {
      cmds = build(cx, steps, faults, readbacks, owned);
    });
  } catch (e) {
    faults.buf?.destroy();
    for (const o of owned) o.destroy();
    throw e;
  }
  const rbs = [...readbacks], at: number[] = [];
  let size = faults.buf?.size ?? 0;
  for (const r of rbs) {
    at.push(size);
    size += r.size;
  }
  let timing: Timing | undefined;
  const stepOf = faults.stepOf ?? [];
  if (stepOf.length) {
    const bytes = ceil(16 * stepOf.length, 256);
    const set = cx.gpu.createQuerySet({ type: "timestamp", count: 2 * stepOf.length });
    const resolved = cx.gpu.createBuffer({ size: bytes, usage: QUERY_RESOLVE | COPY_SRC });
    timing = { set, resolved, at: ceil(size, 8), stepOf, steps: steps.length };
    size = timing.at + bytes;
  }
  const staging = cx.gpu.createBuffer({ size: Math.max(16, size), usage: MAP_READ | COPY_DST });
  const copies: Cmd[] = [];
  if (faults.buf) copies.push({ k: "c", src: faults.buf, so: 0, dst: staging, dOff: 0, n: faults.buf.size });
  rbs.forEach((r, i) => copies.push({ k: "c", src: r.gpu, so: 0, dst: staging, dOff: at[i], n: r.size }));
  if (timing) {
    copies.push({ k: "r", set: timing.set, count: 2 * stepOf.length, dst: timing.resolved });
    copies.push({ k: "c", src: timing.resolved, so: 0, dst: staging, dOff: timing.at, n: 16 * stepOf.length });
  }
  return { cmds, tail: { faults: faults.buf, names: faults.names, readbacks: rbs, at, staging, copies, timing }, owned };
}
