// Checks that a Graph is well formed: ids equal positions, inputs come earlier, every node's dtype and shape
// are what inferNode gives for its op and inputs, outputs and states point at real nodes of the right type.
import { type Graph, GraphError, type NodeRef, sameShape } from "./ir.ts";
import { inferNode, LEAF } from "./ops.ts";

/** Throws a GraphError naming the first malformed node; returns the graph otherwise. */
export function validate(g: Graph): Graph {
  const ref = (i: number): NodeRef => ({ id: i, op: g.nodes[i]?.op ?? "?", label: g.nodes[i]?.label });
  const slots = new Map<string, number>(), states = new Map<string, number>();
  g.nodes.forEach((n, i) => {
    if (n.id !== i) throw new GraphError("order", `node at position ${i} has id ${n.id}`, ref(i));
    for (const j of n.inputs) {
      if (!Number.isInteger(j) || j < 0 || j >= i) throw new GraphError("order", `input ${j} does not come before it`, ref(i));
    }
    const inf = inferNode(n.op, n.inputs.map((j) => g.nodes[j]), n.attrs, ref(i), LEAF.has(n.op) ? n : undefined);
    if (inf.dtype !== n.dtype || !sameShape(inf.shape, n.shape)) {
      throw new GraphError("shape", `recorded ${n.dtype}[${n.shape}] but its inputs give ${inf.dtype}[${inf.shape}]`, ref(i));
    }
    const dup = n.op === "slot" ? slots : n.op === "state" ? states : undefined;
    if (dup) {
      if (dup.has(n.attrs.name!)) throw new GraphError("duplicate", `${n.op} ${n.attrs.name} read by two nodes`, ref(i));
      dup.set(n.attrs.name!, i);
    }
  });
  const at = (id: number, what: string) => {
    if (!Number.isInteger(id) || id < 0 || id >= g.nodes.length) {
      throw new GraphError("order", `${what} refers to node ${id} of ${g.nodes.length}`);
    }
    return g.nodes[id];
  };
  for (const [k, id] of Object.entries(g.outputs)) at(id, `output ${k}`);
  for (const [k, s] of Object.entries(g.states)) {
    const r = at(s.read, `state ${k}`), w = at(s.write, `state ${k}`);
    if (r.op !== "state" || r.attrs.name !== k) throw new GraphError("order", `state ${k} reads from a ${r.op} node`, ref(r.id));
    if (w.dtype !== s.dtype || !sameShape(w.shape, s.shape) || r.dtype !== s.dtype || !sameShape(r.shape, s.shape)) {
      throw new GraphError("shape", `state ${k} is ${s.dtype}[${s.shape}], written with ${w.dtype}[${w.shape}]`, ref(w.id));
    }
  }
  for (const [name, id] of states) {
    if (!g.states[name]) throw new GraphError("unbound", `state node ${name} has no declaration`, ref(id));
  }
  return g;
}
