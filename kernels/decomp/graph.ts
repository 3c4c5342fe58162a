// Graph-level decomposition, before planning: what the graph accepts but no kernel of the library computes
// directly is rewritten into ops that have kernels, so that every graph that validates lowers on every target
// (tests/ops/lowers.test.ts sweeps the op set). The rewrites keep the oracle's meaning exactly: a composite
// becomes its own expansion (its record's, graph/ops/composite.ts: the definition the oracle evaluates), a dynamic_update_slice
// along an inner axis becomes the same update along axis 0 between two permutes (movement only, bit-exact).
// A graph that needs none of them is returned as it is (same object), so the usual programs do not change.
import { EXPAND } from "../../graph/composites.ts";
import type { Graph, Node, StateDecl } from "../../graph/ir.ts";
import { COMPOSITE, LEAF } from "../../graph/ops.ts";
import { type Tensor, Tracer } from "../../graph/tracer.ts";

const isKv = (d: string) => d === "f32" || d === "f16" || d === "bf16";

/** Whether the lowering has a kernel of its own for an op (kernels/lower.ts passes its table). */
export type HasLowerer = (op: Node["op"]) => boolean;

/**
 * Why a node has no direct kernel (kernels/lower.ts), or undefined when it has one. Composites the planner
 * fuses (attention with its causal mask) are judged by the same conditions graph/plan.ts uses; any other
 * composite without a lowerer of its own is expanded, so a new composite needs only its record (graph/ops/:
 * type rule and expansion) to run on every target.
 */
export function undirect(n: Node, nodes: readonly Node[], lowers: HasLowerer = () => true): string | undefined {
  switch (n.op) {
    case "softmax":
      if (n.attrs.axis !== n.shape.length - 1) return "softmax along an inner axis";
      break;
    case "attention": {
      const [q, k, v, m] = n.inputs.map((i) => nodes[i]);
      if (m.op !== "causal_mask" || m.attrs.rows !== n.shape[0] || m.attrs.cap !== k.shape[0]) return "attention under a mask other than causal_mask";
      if (v.shape[2] !== q.shape[2]) return "attention with a value width other than the head width";
      if (k.dtype !== v.dtype || !isKv(k.dtype)) return `attention over ${k.dtype} K and ${v.dtype} V`;
      return undefined; // a plan unit of its own (graph/plan.ts), not a node lowerer
    }
    case "paged_attention": {
      const [q, k, v] = n.inputs.map((i) => nodes[i]);
      if (v.shape[2] !== q.shape[2]) return "paged attention with a value width other than the head width";
      if (k.dtype !== v.dtype || !isKv(k.dtype)) return `paged attention over ${k.dtype} K and ${v.dtype} V`;
      break;
    }
    case "dynamic_update_slice":
      return (n.attrs.axis ?? 0) === 0 ? undefined : "dynamic_update_slice along an inner axis";
    case "sample":
    case "logits_process":
    case "logprobs":
      return undefined; // no expansion: graph/sample.ts and graph/logits.ts are their oracles, kernels/lib their kernels
  }
  // (A composite without an expansion, like sample, is its own oracle: it needs a kernel; lowering says so.)
  return COMPOSITE.has(n.op) && n.op in EXPAND && !lowers(n.op) ? `no kernel of its own for ${n.op}` : undefined;
}

/** The graph with every node that has no direct kernel rewritten (see the top of the file). */
export function decomposeGraph(src: Graph, lowers?: HasLowerer): Graph {
  if (!src.nodes.some((n) => undirect(n, src.nodes, lowers) !== undefined)) return src;
  const g = new Tracer();
  const map = new Array<number>(src.nodes.length);
  for (const n of src.nodes) {
    const ins = n.inputs.map((id) => g.nodes[map[id]]);
    let out: Tensor;
    if (undirect(n, src.nodes, lowers) === undefined) {
      out = g.node(n.op, ins, n.attrs, LEAF.has(n.op) ? { dtype: n.dtype, shape: n.shape } : undefined);
      if (n.label) g.nodes[out.id].label = n.label;
    } else if (COMPOSITE.has(n.op)) {
      out = g.scope(n.label ? `${n.label}/${n.op}` : n.op, () => EXPAND[n.op]!(g, ins, n.attrs));
    } else {
      // dynamic_update_slice along axis a: bring a to the front, update along axis 0, put it back.
      const a = n.attrs.axis!, rank = n.shape.length;
      const perm = [a, ...Array.from({ length: rank }, (_, i) => i).filter((i) => i !== a)];
      const back = perm.map((_, i) => perm.indexOf(i));
      out = g.permute(g.updateSlice(g.permute(ins[0], perm), g.permute(ins[1], perm), ins[2], 0), back);
    }
    map[n.id] = out.id;
  }
  const states: Record<string, StateDecl> = {};
  for (const [k, s] of Object.entries(src.states)) states[k] = { ...s, read: map[s.read], write: map[s.write] };
  const outputs: Record<string, number> = {};
  for (const [k, id] of Object.entries(src.outputs)) outputs[k] = map[id];
  return { nodes: g.nodes, outputs, states };
}
