// Composite ops evaluated through their expansions. Each composite's expansion over primitives is in its record
// (graph/ops/composite.ts); these functions ARE the meaning of each composite, including the order of every
// rounding. The planner sees a composite as one node (and may give it a dedicated kernel); the oracle evaluates
// its expansion. Composites with no expansion (sample, logits_process, logprobs) are their own oracles.
import type { Graph, Node, Op, StateDecl } from "./ir.ts";
import { LEAF } from "./ops.ts";
import { ALL_OPS, type Expander, OPS } from "./ops/mod.ts";
import { type Tensor, Tracer } from "./tracer.ts";

export {
  expandAttention, expandCausalMask, expandGelu, expandLayernorm, expandPagedAttention, expandRmsnorm, expandRope,
  expandSilu, expandSiluMul, expandSoftmax,
} from "./ops/composite.ts";

/** Expansions by op: every composite record's that has one. */
export const EXPAND: Partial<Record<Op, Expander>> = Object.fromEntries(
  ALL_OPS.flatMap((op) => (OPS[op].expand ? [[op, OPS[op].expand]] : [])),
);

/** A graph with every composite replaced by its primitives, and where each original node's value now is. */
export interface Expanded {
  graph: Graph;
  /** map[originalId] = id in `graph` of the node holding the same value. */
  map: number[];
}

/**
 * Replaces composites by their expansions; primitive nodes, and composites for which `keep` says true (say, those
 * a target has a dedicated kernel for), are copied as they are.
 */
export function expandComposites(src: Graph, keep?: (n: Node) => boolean): Expanded {
  const g = new Tracer();
  const map = new Array<number>(src.nodes.length);
  const t = (id: number) => g.nodes[map[id]];
  for (const n of src.nodes) {
    const ins = n.inputs.map(t);
    let out: Tensor;
    const expand = EXPAND[n.op];
    if (expand && !keep?.(n)) {
      out = g.scope(n.label ? `${n.label}/${n.op}` : n.op, () => expand(g, ins, n.attrs));
    } else {
      out = g.node(n.op, ins, n.attrs, LEAF.has(n.op) ? { dtype: n.dtype, shape: n.shape } : undefined);
      if (n.label) g.nodes[out.id].label = n.label;
    }
    map[n.id] = out.id;
  }
  const states: Record<string, StateDecl> = {};
  for (const [k, s] of Object.entries(src.states)) states[k] = { ...s, read: map[s.read], write: map[s.write] };
  const outputs: Record<string, number> = {};
  for (const [k, id] of Object.entries(src.outputs)) outputs[k] = map[id];
  return { graph: { nodes: g.nodes, outputs, states }, map };
}
