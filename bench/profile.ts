// Device time of every step of a whole decode step, from the timestamps a device writes around each step of a
// replay (Device.stepTimes: Vulkan timestamp queries, WebGPU timestamp-query), summed per kernel, and a table
// that puts several backends' figures for the same kernel side by side. Zeroed weights and K/V (the memory
// traffic of a read does not depend on its values), the position slot at `pos`.
import type { Device, DeviceBuffer, DeviceStep, StepTime } from "../backends/device.ts";
import type { Program } from "../kernels/program.ts";
import { type Kernel, KernelBuilder, u32 } from "../kernels/ir.ts";
import type { Caps } from "../kernels/target.ts";
import { gridFor, wgIndex } from "../kernels/lib/common.ts";

/**
 * A pure streaming read of `bytes` (16-byte loads, `unroll` per invocation in flight, 256 per workgroup,
 * XOR-reduced, stored only on an impossible value): the bandwidth a backend's kernels can reach at all.
 */
export function streamKernel(caps: Caps, bytes: number, unroll = 4): Kernel {
  const threads = bytes / (16 * unroll), wg = 256;
  if (!Number.isInteger(threads / wg)) throw new RangeError(`stream: ${bytes} bytes is not a whole number of ${wg}x${unroll} 16-byte loads`);
  const grid = gridFor(caps, threads / wg);
  const b = new KernelBuilder(`stream_${bytes >> 20}MiB_u${unroll}`, { workgroup: wg, grid });
  const x = b.buffer("x", "u32", "r"), y = b.buffer("y", "u32", "w");
  const t = b.let(wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "t");
  const acc = b.let(u32(0), "u32", "acc");
  const vs = Array.from({ length: unroll }, (_, j) => b.loadv(x, t.add(j * threads).mul(4), 4));
  for (const v of vs) for (const e of v) b.set(acc, acc.xor(e));
  b.if(acc.eq(0x9e3779b9), () => b.store(y, t, acc));
  return b.build();
}

/** One kernel of a plan on one backend: its launches per token, mean µs per launch, and planned bytes. */
export interface KernelRow {
  /** Index of the kernel's first step in its plan. */
  first: number;
  name: string;
  count: number;
  /** Mean µs from a launch's start to the next step's start (the launch gap included, as in a token). */
  micros: number;
  /** Mean µs from a launch's start to its end. */
  busy: number;
  bytes: number;
}

export interface Profile {
  backend: string;
  device: string;
  steps: number;
  /** Sum of every step's interval: device ms per token by the timestamps. */
  deviceMs: number;
  /** Wall ms per token with each replay synchronized (as a decode loop runs it). */
  wallMs: number;
  rows: KernelRow[];
}

/**
 * Replays the whole program `reps` times (after warm-up), synchronizing each, and averages each step's
 * timestamps; undefined when the device does not time steps (opened without timestamps, or unsupported).
 */
export async function profileProgram(dev: Device, prog: Program, reps = 10, pos = 0): Promise<Profile | undefined> {
  if (!dev.stepTimes) return undefined;
  const bufs = allocProgram(dev, prog, pos);
  try {
    return await profileSteps(dev, prog, bufs, reps);
  } finally {
    for (const b of bufs) dev.free(b);
  }
}

/** 16 MiB of bf16 values, normal around 0 (std ~0.03) by a fixed LCG: random weights without a generator per byte. */
let randomBlock: Uint8Array | undefined;
function randomBytes(): Uint8Array {
  if (randomBlock) return randomBlock;
  const f = new Float32Array(1), u = new Uint32Array(f.buffer), out = new Uint16Array(8 << 20);
  let s = 0x2545f491;
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
  for (let i = 0; i < out.length; i++) {
    f[0] = (next() + next() + next() - 1.5) * 0.06;
    out[i] = u[0] >>> 16;
  }
  return randomBlock = new Uint8Array(out.buffer);
}

/**
 * Every buffer of the program: literals written, slots and state zeroed (token 0, empty cache), pos set;
 * weights zeroed by allocation, or with `weights: "random"` filled with random bf16 values (a repeated 16 MiB
 * block; f32 tensors read them as small finite values), for kernels whose cost could depend on the data.
 */
/** Contents for a slot buffer by name (a batched entry's per-row positions, block tables): undefined keeps the default. */
export type SlotFill = (name: string, bytes: number) => Uint8Array | undefined;

export function allocProgram(dev: Device, prog: Program, pos = 0, weights: "zero" | "random" = "zero", fill?: SlotFill): DeviceBuffer[] {
  const bufs: DeviceBuffer[] = [];
  try {
    for (const pb of prog.buffers) {
      const b = dev.alloc(pb.bytes, pb.kind === "readback" ? "readback" : pb.kind === "slot" ? "upload" : "device");
      bufs.push(b);
      if (pb.init) dev.write(b, 0, pb.init);
      else if (pb.kind === "slot" || pb.kind === "state") dev.write(b, 0, new Uint8Array(pb.bytes)); // memory is not zeroed
      else if (pb.kind === "weight" && weights === "random") {
        const r = randomBytes();
        for (let at = 0; at < pb.bytes; at += r.byteLength) dev.write(b, at, r.subarray(0, Math.min(r.byteLength, pb.bytes - at)));
      }
      if (pb.kind === "slot" && pb.name === "pos") dev.write(b, 0, new Uint8Array(Int32Array.of(pos).buffer));
      const given = pb.kind === "slot" ? fill?.(pb.name, pb.bytes) : undefined;
      if (given) dev.write(b, 0, given);
    }
    return bufs;
  } catch (e) {
    for (const b of bufs) dev.free(b);
    throw e;
  }
}

/** True when two programs lay out the same buffers (so one allocation serves both: another tuning of one graph). */
export function sameBuffers(a: Program, b: Program): boolean {
  return a.buffers.length === b.buffers.length && a.buffers.every((x, i) => x.bytes === b.buffers[i].bytes && x.kind === b.buffers[i].kind);
}

/** profileProgram over buffers already allocated for `prog` (allocProgram). */
/** A program's steps as device steps over `bufs` (one device buffer per program buffer), kernels compiled on `dev`. */
export function deviceSteps(dev: Device, prog: Program, bufs: DeviceBuffer[]): DeviceStep[] {
  const bind = (bd: { buffer: number; offset: number; bytes: number }) => ({ buffer: bufs[bd.buffer], offset: bd.offset, bytes: bd.bytes });
  return prog.steps.map((s): DeviceStep =>
    s.k === "kernel"
      ? { k: "kernel", compiled: dev.compile(s.kernel), grid: s.grid, work: s.work, bindings: s.bindings.map(bind) }
      : { k: "copy", src: bind(s.src), dst: bind(s.dst), work: s.work }
  );
}

export async function profileSteps(dev: Device, prog: Program, bufs: DeviceBuffer[], reps = 10): Promise<Profile | undefined> {
  if (!dev.stepTimes) return undefined;
  const steps = deviceSteps(dev, prog, bufs);
  const rec = dev.record(steps);
  try {
    for (let i = 0; i < 3; i++) {
      dev.replay(rec);
      await dev.synchronize(60_000);
    }
    if (!dev.stepTimes(rec)) return undefined;
    const sum: StepTime[] = steps.map(() => ({ interval: 0, busy: 0 }));
    const t0 = performance.now();
    for (let r = 0; r < reps; r++) {
      dev.replay(rec);
      await dev.synchronize(60_000);
      dev.stepTimes(rec)!.forEach((t, i) => {
        sum[i].interval += t.interval / reps;
        sum[i].busy += t.busy / reps;
      });
    }
    const wallMs = (performance.now() - t0) / reps;
    return profileOf(dev.target.backend, dev.target.device, prog, sum, wallMs);
  } finally {
    dev.releaseRecording(rec);
  }
}

/**
 * A Profile of `prog` from each step's mean time (`sum[i]`, µs): steps of one kernel name summed into a row
 * (µs per launch), copies and untimed steps (NaN) left out of the rows and of deviceMs.
 */
export function profileOf(backend: string, device: string, prog: Program, sum: StepTime[], wallMs: number): Profile {
  const rows = new Map<string, KernelRow>();
  prog.steps.forEach((s, i) => {
    if (s.k !== "kernel") return;
    const r = rows.get(s.kernel.name) ?? { first: i, name: s.kernel.name, count: 0, micros: 0, busy: 0, bytes: s.work.bytes };
    r.micros += sum[i].interval;
    r.busy += sum[i].busy;
    r.count++;
    rows.set(s.kernel.name, r);
  });
  for (const r of rows.values()) {
    r.micros /= r.count;
    r.busy /= r.count;
  }
  const deviceMs = sum.reduce((a, t) => a + (Number.isNaN(t.interval) ? 0 : t.interval), 0) / 1000;
  return { backend, device, steps: prog.steps.length, deviceMs, wallMs, rows: [...rows.values()] };
}

/** A kernel's kind across backends and tunings: its name up to the first underscore (gemv, attention, argmax...). */
export const kindOf = (name: string): string => name.split("_")[0];

const NAME = 56;
const cell = (r: KernelRow | undefined, total: number): string =>
  r
    ? `${String(r.count).padStart(4)} ${r.micros.toFixed(2).padStart(9)} ${(r.bytes / r.micros / 1000).toFixed(0).padStart(6)} ${(100 * r.count * r.micros / total).toFixed(1).padStart(5)}`
    : `${"-".padStart(4)} ${"-".padStart(9)} ${"".padStart(6)} ${"".padStart(5)}`;
const totalOf = (p: Profile): number => p.rows.reduce((a, r) => a + r.count * r.micros, 0);

/**
 * Several backends' profiles of one decode step as text. Their plans differ (Vulkan and WebGPU fuse what PTX
 * launches twice), so kernels are matched by name, never by position: first the kernels two or more backends
 * run, a row each with every backend's launches per token, µs per launch, planned GB/s and share of that
 * backend's own token ("-" where it runs no such kernel); then each backend's kernels that no other runs,
 * with the same columns; then the token's time by kind of kernel (gemv, attention, ...), which lines up a
 * fused kernel with the pair it replaces; then each backend's sum of kernels.
 */
export function kernelTable(profiles: Profile[]): string {
  if (!profiles.length) return "";
  const totals = profiles.map(totalOf);
  const by = profiles.map((p) => new Map(p.rows.map((r) => [r.name, r])));
  const order: string[] = [];
  for (const p of profiles) for (const r of p.rows) if (!order.includes(r.name)) order.push(r.name);
  const shared = order.filter((n) => by.filter((m) => m.has(n)).length >= 2 || profiles.length === 1);
  const colHead = `${"n".padStart(4)} ${"µs".padStart(9)} ${"GB/s".padStart(6)} ${"tok%".padStart(5)}`;
  const lines = [
    ["".padEnd(NAME), ...profiles.map((p) => p.backend.slice(0, 27).padStart(27))].join(" | "),
    ["kernel".padEnd(NAME), ...profiles.map(() => colHead)].join(" | "),
  ];
  const row = (name: string) => [name.slice(0, NAME).padEnd(NAME), ...by.map((m, i) => cell(m.get(name), totals[i]))].join(" | ");
  for (const n of shared) lines.push(row(n));
  profiles.forEach((p, i) => {
    const own = p.rows.filter((r) => !shared.includes(r.name));
    if (!own.length) return;
    lines.push(`only on ${p.backend}:`);
    for (const r of own) lines.push(`  ${r.name.slice(0, NAME - 2).padEnd(NAME - 2)} ${cell(r, totals[i])}`);
  });
  const kinds: string[] = [];
  for (const n of order) if (!kinds.includes(kindOf(n))) kinds.push(kindOf(n));
  lines.push(`${"by kind (µs per token, share)".padEnd(NAME)} | ${profiles.map((p) => p.backend.padStart(27)).join(" | ")}`);
  for (const k of kinds) {
    const cells = profiles.map((p, i) => {
      const us = p.rows.filter((r) => kindOf(r.name) === k).reduce((a, r) => a + r.count * r.micros, 0);
      const n = p.rows.filter((r) => kindOf(r.name) === k).reduce((a, r) => a + r.count, 0);
      return n ? `${String(n).padStart(4)} ${us.toFixed(1).padStart(16)} ${(100 * us / totals[i]).toFixed(1).padStart(5)}` : "-".padStart(27);
    });
    lines.push(`${k.padEnd(NAME)} | ${cells.join(" | ")}`);
  }
  lines.push(`${"sum of kernels (ms per token)".padEnd(NAME)} | ${totals.map((t) => (t / 1000).toFixed(3).padStart(27)).join(" | ")}`);
  return lines.join("\n");
}
