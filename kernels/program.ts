// A Program is a plan lowered to kernels: what a Device records once and replays per step. Plain data.
// graph/plan.ts decides buffers, lifetimes and dispatch order; kernels/lower.ts turns each planned op group
// into a Kernel; the result is this.
import type { DType } from "../graph/dtype.ts";
import type { Kernel } from "./ir.ts";

/**
 * A device buffer the program needs. Weights, State and Slot buffers stay at stable places for the life of
 * an entry (the recording points at them); `arena` holds every Temp at planned offsets.
 * `readback` is host-visible and holds what the host reads after a step (token id, flags, small outputs).
 */
export interface ProgramBuffer {
  id: number;
  /** `literal`: constant data of the program itself (a folded tensor, a rope table), uploaded once from `init`. */
  kind: "weight" | "state" | "slot" | "arena" | "literal" | "readback";
  bytes: number;
  /** Weight role key (graph/weights roleKey), State name, Slot name, output name, literal id, or "arena". */
  name: string;
  init?: Uint8Array;
}

/** A byte range of a program buffer bound to one kernel binding. */
export interface Binding {
  buffer: number;
  offset: number;
  bytes: number;
}

/** Estimated cost of one step, used to split recordings under a watchdog budget and to report rooflines. */
export interface Work {
  bytes: number;
  flops: number;
}

export type Step =
  | { k: "kernel"; kernel: Kernel; bindings: Binding[]; grid: [number, number, number]; work: Work }
  | { k: "copy"; src: Binding; dst: Binding; work: Work }
  | CollectiveStep<Binding>;

/**
 * A collective between the ranks of a tensor-parallel group, issued on the device's own stream in step order
 * (an NCCL call recorded inside the rank's CUDA graph). `count` elements of `dtype` go from src to dst:
 * all_reduce sums them over the ranks into dst (count elements); all_gather puts rank r's count elements at
 * dst + r·count (the caller rearranges blocks for a gather along an inner axis). Only a target whose caps say
 * `collectives` gets these (kernels/lower/collective.ts); everywhere else a sharded graph runs stage by stage on the host.
 */
export interface CollectiveStep<B> {
  k: "collective";
  op: "all_reduce" | "all_gather";
  dtype: DType;
  count: number;
  ranks: number;
  src: B;
  dst: B;
  work: Work;
}

/** Where a named graph value lives in the program's buffers. */
export interface Place {
  name: string;
  buffer: number;
  offset: number;
  dtype: DType;
  shape: number[];
}

export interface Program {
  buffers: ProgramBuffer[];
  steps: Step[];
  /** Per-step inputs: the host writes these before each replay. */
  slots: Place[];
  /** Carried state (KV cache): zeroed by resetState, never reallocated. */
  state: Place[];
  /** Results the host reads after a step (from readback buffers). */
  outputs: Place[];
  /** Weights by role key: the Engine uploads the bound tensor into each once. */
  weights: Place[];
}
