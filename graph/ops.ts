// The op set: which ops exist, what they accept, and the dtype and shape each produces, as the registry of op
// records says (graph/ops/mod.ts: one record per op, with its type rule, oracle, tolerance and lowering). The
// tracer and validate() both go through inferNode, so a graph that validates is one the oracle and the planner
// can read. The op sets below are derived from the records' kinds.
import { type Attrs, GraphError, type NodeRef, type Op } from "./ir.ts";
import { ALL_OPS, OPS, opsOfKind, recordOf } from "./ops/mod.ts";
import type { Inferred, TypeInfo } from "./ops/record.ts";

export { broadcastShapes, normAxis, resolveShape } from "./ops/record.ts";
export type { Inferred, TypeInfo } from "./ops/record.ts";
export { ALL_OPS, OPS, recordOf };

export const UNARY: ReadonlySet<Op> = opsOfKind("unary");
export const BINARY: ReadonlySet<Op> = opsOfKind("binary");
export const COMPARE: ReadonlySet<Op> = opsOfKind("compare");
/** Ops with a definition over other ops (an expansion) or an oracle of their own outside the primitives. */
export const COMPOSITE: ReadonlySet<Op> = opsOfKind("composite");
export const LEAF: ReadonlySet<Op> = opsOfKind("leaf");
/** Ops whose two inputs may be swapped without changing a bit of the result. */
export const COMMUTATIVE: ReadonlySet<Op> = new Set<Op>(["add", "mul", "max", "min", "and", "or", "eq", "ne"]);
/** Ops that only move or copy elements (their oracle result is bit-exact on every backend). */
export const MOVEMENT: ReadonlySet<Op> = opsOfKind("movement");

/** Elementwise ops: each output element depends only on the same element of each input. */
export function isElementwise(op: Op): boolean {
  return OPS[op]?.lower === "elementwise";
}

/** What each op reads and produces (the documentation of the op set; the records' oracles define the arithmetic). */
export const OP_DOC = Object.fromEntries(ALL_OPS.map((op) => [op, OPS[op].doc])) as Record<Op, string>;

/**
 * The dtype and shape a node of `op` produces from inputs `ins`, or a GraphError naming `ref`. Leaves take their
 * dtype and shape from `leaf`. An op without a record is refused.
 */
export function inferNode(op: Op, ins: TypeInfo[], attrs: Attrs, ref: NodeRef, leaf?: TypeInfo): Inferred {
  const r = recordOf(op);
  if (!r) throw new GraphError("attr", `unknown op ${op}`, ref);
  if (r.kind !== "leaf") for (const t of ins) if (!t) throw new GraphError("order", "missing input", ref);
  return r.infer(op, ins, { ...attrs }, ref, leaf);
}
