// Rebuilding a graph after a pass decided, per node, to keep it, drop it, or use another node in its place.
import type { FusionGroup, Graph, Node } from "../ir.ts";

/**
 * A new graph where uses of node i refer to node `alias[i]` (alias[i] <= i; alias[i] === i keeps it), holding
 * only nodes with keep[i] (default: every node that is its own alias), renumbered in order. `replace[i]`
 * substitutes a new node body for i (its inputs are old ids). Fusion groups are dropped: ids change.
 */
export function rewrite(g: Graph, alias: Int32Array, keep?: boolean[], replace?: Map<number, Omit<Node, "id">>): Graph {
  const resolve = (i: number): number => {
    while (alias[i] !== i) i = alias[i];
    return i;
  };
  const newId = new Int32Array(g.nodes.length).fill(-1);
  const nodes: Node[] = [];
  for (const n of g.nodes) {
    if (resolve(n.id) !== n.id || (keep && !keep[n.id])) continue;
    const body = replace?.get(n.id) ?? n;
    const inputs = body.inputs.map((i) => {
      const j = newId[resolve(i)];
      if (j < 0) throw new Error(`rewrite: node ${n.id} reads dropped node ${i}`);
      return j;
    });
    newId[n.id] = nodes.length;
    const m: Node = { id: nodes.length, op: body.op, dtype: body.dtype, shape: [...body.shape], inputs, attrs: body.attrs };
    if (body.label ?? n.label) m.label = body.label ?? n.label;
    nodes.push(m);
  }
  const to = (i: number) => newId[resolve(i)];
  const outputs: Record<string, number> = {};
  for (const [k, id] of Object.entries(g.outputs)) outputs[k] = to(id);
  const states: Graph["states"] = {};
  for (const [k, s] of Object.entries(g.states)) states[k] = { ...s, shape: [...s.shape], read: to(s.read), write: to(s.write) };
  return { nodes, outputs, states };
}

/** alias array where every node is its own. */
export function identity(n: number): Int32Array {
  return Int32Array.from({ length: n }, (_, i) => i);
}

/** Number of uses of each node: by inputs, outputs and state writes. */
export function useCounts(g: Graph): { uses: Int32Array; external: Uint8Array } {
  const uses = new Int32Array(g.nodes.length);
  const external = new Uint8Array(g.nodes.length);
  for (const n of g.nodes) for (const i of n.inputs) uses[i]++;
  for (const id of Object.values(g.outputs)) external[id] = 1;
  for (const s of Object.values(g.states)) external[s.write] = 1;
  return { uses, external };
}

export type { FusionGroup };
