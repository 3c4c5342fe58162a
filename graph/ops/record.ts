// What one graph op is, in one record: its type rule, its oracle, its tolerance rule and how the lowering
// computes it. graph/ops/mod.ts holds the registry (one record per op); the tracer and validate() (through
// graph/ops.ts inferNode), the oracle (graph/eval_ops.ts runPrimitive, graph/composites.ts), the tolerance
// (graph/tolerance.ts, graph/tolerance_composite.ts) and the lowering (kernels/lower.ts, kernels/decomp/graph.ts)
// all read it. The helpers below are the type rules' shared checks.
import { type DType, isBlock, isFloat, type Storage } from "../dtype.ts";
import { type Attrs, GraphError, type Node, type NodeRef, numel, type Op, sameShape } from "../ir.ts";
import type { Tensor, Tracer } from "../tracer.ts";
import type { Unit } from "../plan.ts";

export interface TypeInfo {
  dtype: DType;
  shape: number[];
}

/** Inference result: the node's dtype and shape, and its attrs with axes made non-negative. */
export interface Inferred extends TypeInfo {
  attrs: Attrs;
}

/**
 * How matmul and reduce-sum accumulate. "sequential" is the oracle. The others emulate a device's
 * reassociation for testing tier-2 tolerances: "reverse" index order, "pairwise" (balanced halves, as a tree
 * reduction), "fma" (sequential with fused multiply-add: one rounding per term).
 */
export type AccumulateOrder = "sequential" | "reverse" | "pairwise" | "fma";

/** What kind of op a record is; graph/ops.ts derives its op sets (UNARY, MOVEMENT, ...) from it. */
export type OpKind =
  | "leaf" | "unary" | "binary" | "compare" | "elementwise" | "reduce" | "matmul" | "movement" | "composite"
  | "collective";

/**
 * How kernels/lower.ts computes an op. graph/ may not import kernels/, so the record names the way and the
 * lowering holds the code: "kernel" is an entry of NODE_LOWERERS (kernels/lower.ts) under the op's name;
 * "elementwise" a member of a fused elementwise kernel (a group unit); "view" no kernel (the same bytes read with
 * another shape); "buffer" a leaf bound to its buffer; "unit" a plan unit of its own (graph/plan.ts, lowered by
 * UNIT_LOWERERS), with a node lowerer or a decomposition for the cases the unit does not take; "expand" its
 * expansion before planning (kernels/decomp/graph.ts); "group" a collective between the ranks of a
 * tensor-parallel group: a collective step where the target records them (caps.collectives), else nothing on
 * one device (backends/group.ts runs the graph stage by stage and combines on the host). tests/ops/registry.test.ts holds kernels/lower.ts to this.
 */
export type Lowering = "kernel" | "elementwise" | "view" | "buffer" | "unit" | "expand" | "group";

/** Tier-2 bound of a composite as a whole (graph/tolerance_composite.ts), from its inputs' values and bounds. */
export type CompositeBound = (n: Node, ins: Node[], v: Storage[], e: (Float32Array | null)[], worst: boolean) => Float32Array;

/**
 * The tolerance rule (graph/tolerance.ts states the theory): "exact" (integer, bool and movement results: equal
 * bits; a movement op moves its input's bound with the values), "propagated" (a float result bounded by
 * tolerance.ts propagate: its inputs' bounds pushed through the op plus the device's own error), "expansion" (a
 * composite bounded through the primitives of its expansion) or a function bounding the composite as a whole.
 */
export type Tolerance = "exact" | "propagated" | "expansion" | CompositeBound;

/** A composite's meaning over primitives (graph/composites.ts evaluates a graph through these). */
export type Expander = (g: Tracer, ins: Tensor[], a: Attrs) => Tensor;

/** The oracle of a primitive: its value from its input nodes and values (graph/eval_ops.ts runPrimitive). */
export type Oracle = (n: Node, ins: Node[], v: Storage[], order: AccumulateOrder) => Storage;

export interface OpRecord {
  kind: OpKind;
  /** What it reads and produces (the documentation of the op set; graph/ops.ts OP_DOC). */
  doc: string;
  /**
   * The type rule: the dtype and shape from the inputs, or a GraphError naming `ref`. `a` is the node's attrs,
   * copied; the rule may normalize it (axes made non-negative). Leaves get their dtype and shape in `leaf`.
   */
  infer(op: Op, ins: TypeInfo[], a: Attrs, ref: NodeRef, leaf?: TypeInfo): Inferred;
  /** The oracle of a primitive (leaves without one are read from the evaluation's inputs). */
  eval?: Oracle;
  /** The oracle of a composite: its expansion; absent on a composite that has an `eval` of its own. */
  expand?: Expander;
  tolerance: Tolerance;
  lower: Lowering;
  /** With lower "unit": the plan unit kind (graph/plan.ts) that computes it, lowered by UNIT_LOWERERS. */
  unit?: Unit["k"];
  /**
   * Targets (kernels/render/mod.ts names) where a graph holding this op does not lower, each with the reason.
   * A "group" op is not lowered on any one device; this lists exceptions beyond that.
   */
  notLowered?: Partial<Record<"js" | "ptx" | "spirv" | "wgsl" | "amdgpu", string>>;
}

// ---------------------------------------------------------------- the type rules' shared checks

export function fail(code: ConstructorParameters<typeof GraphError>[0], ref: NodeRef, msg: string): never {
  throw new GraphError(code, msg, ref);
}

export function fmt(t: TypeInfo): string {
  return `${t.dtype}[${t.shape.join(",")}]`;
}

export function checkShape(shape: unknown, ref: NodeRef, what = "shape"): number[] {
  if (!Array.isArray(shape) || shape.some((d) => !Number.isInteger(d) || d < 1)) {
    fail("shape", ref, `${what} must be a list of positive integers, got ${JSON.stringify(shape)}`);
  }
  return shape as number[];
}

/** Normalizes an axis against a rank (negative counts from the end). */
export function normAxis(axis: number | undefined, rank: number, ref: NodeRef): number {
  const a = axis ?? -1;
  if (!Number.isInteger(a) || a < -rank || a >= rank) fail("axis", ref, `axis ${axis} out of range for rank ${rank}`);
  return a < 0 ? a + rank : a;
}

export function arity(ins: TypeInfo[], lo: number, hi: number, ref: NodeRef): void {
  if (ins.length < lo || ins.length > hi) {
    fail("attr", ref, `takes ${lo === hi ? lo : `${lo}..${hi}`} inputs, got ${ins.length}`);
  }
}

export function noBlock(t: TypeInfo, ref: NodeRef, what = "input"): void {
  if (isBlock(t.dtype)) fail("dtype", ref, `${what} ${fmt(t)} is a block type; only matmul and gather read those`);
}

export function needFloat(t: TypeInfo, ref: NodeRef, what = "input"): void {
  if (!isFloat(t.dtype)) fail("dtype", ref, `${what} must be f32, f16 or bf16, got ${fmt(t)}`);
}

export function needIndex(t: TypeInfo, ref: NodeRef, what: string): void {
  if (t.dtype !== "i32" && t.dtype !== "u32") fail("dtype", ref, `${what} must be i32 or u32, got ${fmt(t)}`);
}

export function same(a: TypeInfo, b: TypeInfo, ref: NodeRef, what: string): void {
  if (a.dtype !== b.dtype) fail("dtype", ref, `${what}: dtypes differ: ${fmt(a)} vs ${fmt(b)}`);
  if (!sameShape(a.shape, b.shape)) fail("shape", ref, `${what}: shapes differ: ${fmt(a)} vs ${fmt(b)}`);
}

/** The input's dtype and shape, attrs as they are (ops whose result looks like their first input). */
export function likeFirst(x: TypeInfo, a: Attrs): Inferred {
  return { dtype: x.dtype, shape: [...x.shape], attrs: a };
}

/** Numpy broadcasting of two shapes, or undefined when they do not broadcast. */
export function broadcastShapes(a: readonly number[], b: readonly number[]): number[] | undefined {
  const r = Math.max(a.length, b.length);
  const out = new Array<number>(r);
  for (let i = 0; i < r; i++) {
    const x = a[a.length - r + i] ?? 1, y = b[b.length - r + i] ?? 1;
    if (x !== y && x !== 1 && y !== 1) return undefined;
    out[i] = Math.max(x, y);
  }
  return out;
}

/** Resolves one -1 in a reshape target. */
export function resolveShape(shape: readonly number[], count: number, ref: NodeRef): number[] {
  const free = shape.filter((d) => d === -1).length;
  if (free > 1) fail("shape", ref, `reshape to [${shape}] has more than one -1`);
  const known = shape.reduce((a, d) => (d === -1 ? a : a * d), 1);
  const out = shape.map((d) => (d === -1 ? count / known : d));
  checkShape(out, ref, "reshape target");
  if (numel(out) !== count) fail("shape", ref, `cannot reshape ${count} elements to [${shape}]`);
  return out;
}
