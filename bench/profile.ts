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
  /** Index of the kernel's first step in the plan (the key that lines backends up). */
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
    return { backend: dev.target.backend, device: dev.target.device, steps: steps.length, deviceMs, wallMs, rows: [...rows.values()] };
  } finally {
    dev.releaseRecording(rec);
  }
}

/**
 * One table: a row per kernel of the first profile's plan (lined up with the others by the index of its first
 * step), µs per launch and GB/s per backend, and each kernel's share of the first backend's token. A kernel
 * whose name differs on another backend (another variant at the same place) gets a `*` there.
 */
export function kernelTable(profiles: Profile[]): string {
  if (!profiles.length) return "";
  const [base] = profiles;
  const total = base.rows.reduce((a, r) => a + r.count * r.micros, 0);
  const head = [`${"kernel".padEnd(56)} ${"n".padStart(4)}`];
  for (const p of profiles) head.push(`${(p.backend + " µs").padStart(11)} ${"GB/s".padStart(6)}`);
  head.push(`${"token%".padStart(7)}`);
  const lines = [head.join(" ")];
  const others = profiles.map((p) => new Map(p.rows.map((r) => [r.first, r])));
  for (const r of base.rows) {
    const cells = [`${r.name.slice(0, 56).padEnd(56)} ${String(r.count).padStart(4)}`];
    others.forEach((m) => {
      const o = m.get(r.first);
      if (!o) return cells.push(`${"-".padStart(11)} ${"".padStart(6)}`);
      const mark = o.name === r.name ? " " : "*";
      cells.push(`${(o.micros.toFixed(2) + mark).padStart(11)} ${(o.bytes / o.micros / 1000).toFixed(0).padStart(6)}`);
    });
    cells.push(`${(100 * r.count * r.micros / total).toFixed(1).padStart(7)}`);
    lines.push(cells.join(" "));
  }
  const sums = [`${"sum of kernels (ms per token)".padEnd(61)}`];
  for (const p of profiles) sums.push(`${(p.rows.reduce((a, r) => a + r.count * r.micros, 0) / 1000).toFixed(3).padStart(11)} ${"".padStart(6)}`);
  lines.push(sums.join(" "));
  return lines.join("\n");
}
