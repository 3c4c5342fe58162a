// The collective ops, one record each: what the type rule accepts and produces, and the oracle over the ranks of
// a group. A tensor-parallel graph (graph/passes/tp.ts) is one graph that every rank runs on its own shard of the
// weights; a collective is the one node whose value also depends on the other ranks' values of its input.
//
//   all_reduce  [x] attrs.ranks          -> x's dtype and shape: Σ over ranks, accumulated in f32 in rank order
//   all_gather  [x] attrs.axis, ranks    -> x with shape[axis]·ranks: the ranks' values concatenated in rank order
//
// A single graph evaluated alone (graph/eval.ts) has no other ranks: the oracle of a sharded graph is
// graph/stages.ts evalGroup, which runs every rank and applies `combine` between them. The all-reduce sum order
// is fixed (rank 0 + rank 1 + ...) so that every backend's host or NCCL ring gives a result within the tier-2
// bound of the unsharded oracle (a split-K sum is a reassociation: graph/tolerance.ts covers any order).
import { type DType, isFloat, type Storage, storageFor } from "./dtype.ts";
import { type Attrs, type CollectiveOp, GraphError, type NodeRef, numel, stridesOf } from "./ir.ts";

export interface CollectiveRecord {
  doc: string;
}

export const COLLECTIVE_OPS: Record<CollectiveOp, CollectiveRecord> = {
  all_reduce: { doc: "[x] attrs.ranks -> Σ of x over the group's ranks (f32 accumulation in rank order)" },
  all_gather: { doc: "[x] attrs.axis, ranks -> the ranks' x concatenated along attrs.axis in rank order" },
};

export function isCollective(op: string): op is CollectiveOp {
  return op === "all_reduce" || op === "all_gather";
}

interface TypeInfo {
  dtype: DType;
  shape: number[];
}

/** The type rule: the result's dtype and shape, and attrs with the axis made non-negative. */
export function inferCollective(op: CollectiveOp, ins: TypeInfo[], attrs: Attrs, ref: NodeRef): TypeInfo & { attrs: Attrs } {
  const fail = (code: "attr" | "dtype" | "axis", m: string): never => {
    throw new GraphError(code, m, ref);
  };
  if (ins.length !== 1) fail("attr", `takes 1 input, got ${ins.length}`);
  const x = ins[0];
  const a = { ...attrs };
  if (!Number.isInteger(a.ranks) || a.ranks! < 1) fail("attr", `${op} needs ranks >= 1, got ${a.ranks}`);
  if (op === "all_reduce") {
    if (!isFloat(x.dtype)) fail("dtype", `all_reduce sums floats, got ${x.dtype}`);
    return { dtype: x.dtype, shape: [...x.shape], attrs: a };
  }
  if (x.dtype === "bool" || x.shape.length === 0) fail("dtype", `all_gather of ${x.dtype}[${x.shape}]`);
  const axis = a.axis ?? -1;
  if (!Number.isInteger(axis) || axis < -x.shape.length || axis >= x.shape.length) {
    fail("axis", `axis ${a.axis} out of range for rank ${x.shape.length}`);
  }
  a.axis = axis < 0 ? axis + x.shape.length : axis;
  const shape = [...x.shape];
  shape[a.axis] *= a.ranks!;
  return { dtype: x.dtype, shape, attrs: a };
}

/**
 * The oracle: the collective's result from every rank's input value (index = rank), the same on every rank.
 * Half types are summed in f32 and rounded once, like NCCL's reductions of bf16/f16 on one step.
 */
export function combine(op: CollectiveOp, dtype: DType, shape: readonly number[], attrs: Attrs, values: readonly Storage[]): Storage {
  if (values.length !== attrs.ranks) {
    throw new GraphError("attr", `${op} over ${attrs.ranks} ranks was given ${values.length} values`);
  }
  const n = numel(shape);
  for (const v of values) if (v.length !== n) throw new GraphError("shape", `${op}: a rank's value has ${v.length} elements, want ${n}`);
  if (op === "all_reduce") {
    if (dtype !== "f32") throw new GraphError("dtype", `all_reduce oracle of ${dtype} (the sharding pass reduces f32 matmul results)`);
    const out = new Float32Array(n);
    for (const v of values) for (let i = 0; i < n; i++) out[i] = Math.fround(out[i] + v[i]);
    return out;
  }
  const axis = attrs.axis!, ranks = values.length;
  const inner = stridesOf(shape)[axis] * shape[axis]; // elements of one rank's block per outer index
  const outer = n / inner;
  const out = storageFor(dtype, n * ranks);
  for (let o = 0; o < outer; o++) {
    for (let r = 0; r < ranks; r++) {
      (out as Float32Array).set((values[r] as Float32Array).subarray(o * inner, (o + 1) * inner), (o * ranks + r) * inner);
    }
  }
  return out;
}
