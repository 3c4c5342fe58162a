// Lowering of a fused elementwise group (graph/plan.ts "group" units): its expression over the values it reads
// (groupExpr), as a kernel of its own (lowerGroup), unless the one matmul that reads it computes it in its MMA x
// preparation instead (kernels/lower/matmul.ts mmaPrepGroups: the group is skipped here).
import { numel } from "../../graph/ir.ts";
import type { Node } from "../../graph/ir.ts";
import type { Unit } from "../../graph/plan.ts";
import * as lib from "../lib/mod.ts";
import type { EwExpr, EwInput } from "../lib/elementwise.ts";
import type { LowerContext } from "../lower.ts";
import { ctype, etype } from "./common.ts";

/** A group as one expression: its inputs (the values it reads, in order) and their types. */
export interface GroupExpr {
  ids: number[];
  inputs: EwInput[];
  expr: EwExpr;
}

export function groupExpr(nodes: Node[], u: Extract<Unit, { k: "group" }>): GroupExpr {
  const root = nodes[u.group.root];
  const inputs: EwInput[] = [];
  const ids: number[] = [];
  const inputIndex = new Map<number, number>();
  const member = new Set(u.group.nodes);
  const expr = (id: number): EwExpr => {
    const x = nodes[id];
    if (!member.has(id)) {
      if (x.op === "literal" && x.attrs.data === undefined && x.dtype !== "bool") return { c: x.attrs.value!, t: ctype(x.dtype) };
      let k = inputIndex.get(id);
      if (k === undefined) {
        k = inputs.length;
        inputIndex.set(id, k);
        inputs.push({ type: etype(x.dtype), len: numel(x.shape) });
        ids.push(id);
      }
      const v: EwExpr = { in: k };
      return x.dtype === "bool" ? { op: "ne", args: [v, { c: 0, t: "u32" }] } : v;
    }
    const a = x.inputs.map(expr);
    switch (x.op) {
      case "broadcast": return a[0];
      case "cast": return { cast: ctype(x.dtype), a: a[0] };
      case "silu": return { op: "silu", args: a };
      case "gelu": return { op: "gelu", args: a };
      case "silu_mul": return { op: "mul", args: [{ op: "silu", args: [a[0]] }, a[1]] };
      case "select": return { op: "select", args: a };
      default: return { op: x.op as "add", args: a };
    }
  };
  let e = expr(root.id);
  if (root.dtype === "bool") e = { op: "select", args: [e, { c: 1, t: "u32" }, { c: 0, t: "u32" }] };
  return { ids, inputs, expr: e };
}

/** One elementwise node as a group of one (its own unit when the plan fused nothing into it). */
export function elementwiseGroup(n: Node): Extract<Unit, { k: "group" }> {
  return { k: "group", group: { root: n.id, nodes: [n.id], inputs: [...new Set(n.inputs)] } };
}

export function lowerGroup(cx: LowerContext, u: Extract<Unit, { k: "group" }>): void {
  const { p, nodes, caps, bind, kernel, bytesOfIds } = cx;
  const root = nodes[u.group.root];
  if (cx.prepGroups.has(root.id)) return; // computed by the matmul that reads it
  const n = numel(root.shape);
  const { ids, inputs, expr } = groupExpr(nodes, u);
  const k = lib.elementwise(caps, { n, inputs, out: etype(root.dtype), expr });
  kernel(k, [...ids.map(bind), bind(root.id)], { bytes: bytesOfIds(ids) + p.values[root.id].bytes, flops: n * u.group.nodes.length });
}
