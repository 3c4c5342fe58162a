// The thin per-backend Device that the generic Engine drives. One implementation per backend folder.
// Handles are opaque to the engine; each device keeps its own types behind them.
import type { Kernel } from "../kernels/ir.ts";
import type { TargetSet } from "../kernels/target.ts";
import type { CollectiveStep, Work } from "../kernels/program.ts";

/** An allocated device buffer; only its size is visible above the device. */
export interface DeviceBuffer {
  readonly bytes: number;
}
/** A kernel compiled for the device (pipeline, CUfunction, JS function ...). */
export interface CompiledKernel {
  readonly kernel: Kernel;
}
/** A recorded list of device steps (CUDA graph, command buffers, cached dispatch list). */
export interface Recording {
  readonly steps: number;
}

export interface DeviceBinding {
  buffer: DeviceBuffer;
  offset: number;
  bytes: number;
}
export type DeviceStep =
  | { k: "kernel"; compiled: CompiledKernel; bindings: DeviceBinding[]; grid: [number, number, number]; work: Work }
  | { k: "copy"; src: DeviceBinding; dst: DeviceBinding; work: Work };
/** A step between the ranks of a tensor-parallel group (kernels/program.ts CollectiveStep), on device buffers. */
export type DeviceCollective = CollectiveStep<DeviceBinding>;
/** What a device whose target has caps.collectives records and runs: kernels, copies and collectives. */
export type GroupStep = DeviceStep | DeviceCollective;

/**
 * What a backend implements. Every method that touches the device throws a typed error from errors.ts on
 * failure; a fault that leaves the context unusable sets `poisoned` (with its reason) before throwing, and the
 * Engine then refuses all later work without calling the device.
 */
export interface Device {
  readonly target: TargetSet;
  /** Set once the context is unusable; the reason names the first fault. */
  readonly poisoned: string | undefined;
  /** `device`: device-local; `upload`: host-written per step (slots); `readback`: host-read after a step. */
  alloc(bytes: number, usage: "device" | "upload" | "readback"): DeviceBuffer;
  free(buf: DeviceBuffer): void;
  /** Host -> device. Ordered before any later run/replay. */
  write(buf: DeviceBuffer, offset: number, data: Uint8Array): void;
  /** Device -> host, after the work that wrote it has been synchronized. */
  read(buf: DeviceBuffer, offset: number, bytes: number): Promise<Uint8Array>;
  compile(kernel: Kernel): CompiledKernel;
  /** Record once (capture). */
  record(steps: DeviceStep[]): Recording;
  /** Enqueue a recording's work; faults surface at synchronize. */
  replay(rec: Recording): void;
  /**
   * True where replay() hands the device all of a recording's work, which then runs to its end with no further
   * host call (a CUDA graph launch): only then can the host sleep through it (Executor StepOptions.park). Not
   * where synchronize submits the rest (Vulkan's later command buffers) or runs it (the JS device).
   */
  readonly autonomous?: boolean;
  /**
   * How many replays of one entry a Driver keeps in flight by default (Engine StepOptions.instance): where the
   * device runs a replay enqueued behind another without the host in between. Absent: 1, one at a time.
   */
  readonly stepsAhead?: number;
  /** Issue steps one by one without a recording (eager), for capture-vs-eager checks. */
  run(steps: DeviceStep[]): void;
  /**
   * Wait (bounded by timeoutMs) for all enqueued work, or with `mark` for the work enqueued before that mark;
   * raises KernelFault / DeviceLost / DeviceTimeout.
   */
  synchronize(timeoutMs: number, mark?: number): Promise<void>;
  /**
   * Where work runs in the order it was enqueued (one queue): a mark after the work enqueued so far, which
   * synchronize then waits for without waiting for what was enqueued after it (a Driver's steps in flight each
   * wait for their own). Absent: synchronize always waits for everything.
   */
  mark?(): number;
  releaseRecording(rec: Recording): void;
  destroy(): Promise<void>;
  /**
   * Device microseconds of each step of the recording's latest synchronized replay, from timestamps the
   * device wrote around every step (start, end); undefined when the device was not opened to time steps.
   */
  stepTimes?(rec: Recording): StepTime[] | undefined;
}

/**
 * A device that records collectives (its target's caps.collectives is set): record and run take collective
 * steps too, each issued on the device's own stream where it stands in the list.
 */
export interface CollectiveDevice extends Device {
  record(steps: GroupStep[]): Recording;
  run(steps: GroupStep[]): void;
}

/** One step's device time: its start after the previous step's (µs, the launch gap included) and its own span. */
export interface StepTime {
  /** From this step's start to the next step's start (or to this step's end, for the last). */
  interval: number;
  /** From this step's start to its end. */
  busy: number;
}

/** StepTimes from 2 timestamps per step (start, end), in ticks of `nsPerTick`, masked to `validBits`. */
export function stepTimesOf(ticks: BigUint64Array | bigint[], nsPerTick: number, validBits = 64): StepTime[] {
  const mask = validBits >= 64 ? (1n << 64n) - 1n : (1n << BigInt(validBits)) - 1n;
  const n = ticks.length >> 1;
  const at = (i: number) => ticks[i] & mask;
  const us = (a: bigint, b: bigint) => (Number((b - a) & mask) * nsPerTick) / 1000;
  return Array.from({ length: n }, (_, i) => ({
    interval: us(at(2 * i), i + 1 < n ? at(2 * i + 2) : at(2 * i + 1)),
    busy: us(at(2 * i), at(2 * i + 1)),
  }));
}
