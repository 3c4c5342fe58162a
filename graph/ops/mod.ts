// The registry: one record per graph op (graph/ops/record.ts says what a record holds), gathered from the
// family files beside this one. Its type makes a record required for every name of the Op union, and inferNode
// (graph/ops.ts) refuses an op without one, so the ops the graph accepts are exactly this registry's keys.
import { COLLECTIVE_OPS, inferCollective } from "../collective.ts";
import { type CollectiveOp, GraphError, type Op } from "../ir.ts";
import { LEAF_OPS } from "./leaf.ts";
import { BINARY_RECORDS, COMPARE_RECORDS, OTHER_ELEMENTWISE, UNARY_RECORDS } from "./elementwise.ts";
import { MOVEMENT_OPS } from "./movement.ts";
import { REDUCE_OPS } from "./reduce.ts";
import { COMPOSITE_OPS } from "./composite.ts";
import { SAMPLING_OPS } from "./sampling.ts";
import type { OpRecord } from "./record.ts";

export type { Expander, Inferred, Lowering, OpKind, OpRecord, Tolerance, TypeInfo } from "./record.ts";

// A collective's value depends on the other ranks: one graph alone has them only in a group of one
// (graph/stages.ts evalGroup is the oracle of a sharded graph; backends/group.ts runs it).
const collective = (op: CollectiveOp): OpRecord => ({
  kind: "collective",
  doc: COLLECTIVE_OPS[op].doc,
  infer: (o, ins, a, ref) => inferCollective(o as CollectiveOp, ins, a, ref),
  eval: (n, _ins, v) => {
    if (n.attrs.ranks === 1) return v[0];
    throw new GraphError("attr", `${op} over ${n.attrs.ranks} ranks needs the other ranks: evaluate the group (graph/stages.ts evalGroup)`, n);
  },
  // tolerance.ts propagates no bound through a collective (a group of one is the identity); a sharded graph is
  // held to the unsharded oracle's bound by tests/tp.
  tolerance: "exact",
  lower: "group",
});

export const OPS: { readonly [K in Op]: OpRecord } = {
  ...LEAF_OPS,
  ...UNARY_RECORDS,
  ...BINARY_RECORDS,
  ...COMPARE_RECORDS,
  ...OTHER_ELEMENTWISE,
  ...REDUCE_OPS,
  ...MOVEMENT_OPS,
  ...COMPOSITE_OPS,
  ...SAMPLING_OPS,
  all_reduce: collective("all_reduce"),
  all_gather: collective("all_gather"),
};

/** The record of `op`, or undefined for a name that is no op. */
export function recordOf(op: string): OpRecord | undefined {
  return Object.hasOwn(OPS, op) ? OPS[op as Op] : undefined;
}

/** Every op of the graph, in registry order. */
export const ALL_OPS: readonly Op[] = Object.keys(OPS) as Op[];

/** The ops of one kind. */
export function opsOfKind(...kinds: OpRecord["kind"][]): Set<Op> {
  return new Set(ALL_OPS.filter((op) => kinds.includes(OPS[op].kind)));
}
