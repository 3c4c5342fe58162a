// The backend-neutral execution contract: the object-safe Executor the driver talks to (llm/ never branches on a
// backend), the values a step takes and gives, and the limits every implementation keeps. executor.ts's Engine<D>
// implements it over any Device.
//
// Error model (spec, "Failure handling"):
// - a device fault never aborts: the call that sees it throws a typed error (errors.ts);
// - once the device reports itself poisoned, every later call throws Poisoned without touching the device;
// - a step that fails after it replayed marks its entry NeedsReset until resetState;
// - every wait is bounded by `timeoutMs` (600 s default), by the engine itself: each promise it awaits from the
//   device is watched (backends/bound.ts), so a device whose wait never settles still yields DeviceTimeout on
//   time (within timeoutMs plus an eighth of it, at most 100 ms late). The engine
//   then counts the device as poisoned (its pending work may still write its buffers) and never calls it
//   again, not even to free or destroy. A device that blocks the thread inside a wait (a spin or a blocking
//   fence wait) cannot be pre-empted by a timer: those backends bound their own waits with the same timeoutMs.
import type { Graph } from "../graph/ir.ts";
import type { WeightMap, WeightStore } from "../graph/weights.ts";
import type { TargetSet } from "../kernels/target.ts";
import type { CompileOptions } from "../kernels/lower.ts";

/** Identifies an entry: program, step shape, sampling suffix and carried inputs (never a token or a position). */
export type EntryKey = string;
export type EntryId = number;

export type HostArray = Float32Array | Int32Array | Uint32Array | Uint16Array | Uint8Array | Int8Array;
/**
 * A value for the first bytes of a slot only: the rest keeps what earlier steps wrote (the graph must not read
 * it; a batch's grammar masks: only constrained rows' masks are sent). Empty: nothing is written.
 */
export interface SlotPrefix {
  prefix: HostArray;
}
/** Values of an entry's slots by slot name (Token, Pos, SlotMap, WriteMap, sampler parameters). */
export type SlotValues = Record<string, HostArray | number | SlotPrefix>;

export interface StepResult {
  /** Each program output by name (only what the plan reads back: a token id, flags, small tensors). */
  outputs: Record<string, HostArray>;
  /** Host time of this step in microseconds (slot writes, replay, wait, readback). */
  hostMicros: number;
  /** Of hostMicros, the time spent waiting for the device (synchronize). */
  waitMicros: number;
  /** Of hostMicros, the time parked on a timer before the wait (step option `park`; 0 when not parked). */
  parkedMicros: number;
  /** Of hostMicros, the slot writes and the replay call (the rest besides the wait: the readbacks). */
  submitMicros?: number;
}

/** A step launched by Engine.launch and not yet finished. */
export interface Launched {
  readonly id: EntryId;
  /** The entry's instance it ran on (StepOptions.instance). */
  readonly instance: number;
  /** The engine's count of launches when this one was enqueued: a synchronize after it covers it. */
  readonly seq: number;
  /** The device's mark after this launch (Device.mark), where it has them: the wait for it needs no later work. */
  readonly mark?: number;
  /** performance.now() when the launch began (hostMicros counts from here). */
  readonly t0: number;
  /** performance.now() once the work was enqueued (the device time estimate counts from here). */
  readonly tRun: number;
  /** Park before the wait (StepOptions.park). */
  readonly park: boolean;
}

/** Options of Executor.step. */
export interface StepOptions {
  /** Run the steps one by one (no recording). */
  eager?: boolean;
  /**
   * Park the event loop on a timer for most of the step's expected device time before waiting on the device:
   * a GPU's wait spins on its fence and never lets the runtime poll sockets or run timers, so a server steps,
   * then gives the runtime a timer turn (1-2.5 ms under Deno); parked inside the step, that turn overlaps the
   * device's work. Taken on an autonomous device (Device.autonomous) when the entry's last two measured device
   * times are at least PARK_MARGIN_MS + PARK_MIN_MS.
   */
  park?: boolean;
  /**
   * The entry's instance to run (default 0). Instances share the entry's program, weights, State and scratch
   * buffers but each has its own slot and readback buffers and its own recording, so several launches of one
   * entry can be in flight at once (`launch` them all, then `finish` each in order): a step whose input the
   * device feeds itself (a decode step reading the token the previous one sampled, StepShape.feed) need not wait
   * for the host to read that token. Steps run in launch order on the device's one queue, so the scratch they
   * share is never used by two at once. Instance i is recorded the first time it is launched.
   */
  instance?: number;
  /**
   * Return to the caller before waiting on the device (Engine.step yields a microtask turn between its launch and
   * its wait), so that steps launched one after another in one synchronous loop (llm/steps.ts AheadSteps) are all
   * queued before the first wait: where a wait spins without yielding (ptx), the first step would otherwise run alone
   * while the host spun, and the device idle while the host then launched the next. An executor that runs steps one
   * at a time ignores it.
   */
  queued?: boolean;
}

/** Most instances an entry may have (StepOptions.instance): each is a recording and its slot and readback buffers. */
export const MAX_INSTANCES = 64;

/** A park ends this long before the device is expected to finish (Deno's timers fire up to ~2.5 ms late). */
export const PARK_MARGIN_MS = 3;
/** Shortest park worth a timer. */
export const PARK_MIN_MS = 2;
/** Longest park (a longer step still spins the rest). */
export const PARK_MAX_MS = 250;

export interface ExecutorStats {
  backend: string;
  device: string;
  entries: number;
  /** Entry keys in creation order, so callers can check that a step never made a new one. */
  keys: EntryKey[];
  bytes: { weights: number; state: number; entries: number };
  replays: number;
  steps: number;
  /** Mean host microseconds per step over the last 64 steps (the wait for the device included). */
  hostMicrosPerStep: number;
  /** Of hostMicrosPerStep, the mean wait for the device: the rest is the host's own work per step. */
  waitMicrosPerStep: number;
  poisoned?: string;
}

export interface Executor {
  targetSet(): TargetSet;
  /**
   * Steps of one entry worth keeping in flight (StepOptions.instance) on this executor's device; absent where
   * the executor runs one at a time (it ignores `instance`).
   */
  stepsAhead?(): number;
  loadWeights(store: WeightStore, map: WeightMap, opts?: LoadOptions): Promise<void>;
  /** `opts`: compile options of this entry over the executor's own (a variant of a step: llm/steps.ts short decode). */
  addEntry(key: EntryKey, graph: Graph, opts?: CompileOptions): EntryId;
  step(entry: EntryId, slots: SlotValues, opts?: StepOptions): Promise<StepResult>;
  resetState(entry?: EntryId): void;
  removeEntry(entry: EntryId): void;
  stats(): ExecutorStats;
  unload(): Promise<void>;
}

/** Options of Executor.loadWeights. */
export interface LoadOptions {
  /** Called after each tensor reaches the device: counts and bytes so far, and the totals. */
  onTensor?: (tensors: number, totalTensors: number, bytes: number, totalBytes: number) => void;
}
