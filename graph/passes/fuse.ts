// Elementwise fusion grouping: annotates (graph.groups) trees of elementwise nodes a planner may compute in one
// kernel. A node joins the group of its consumer when that consumer is its only use (no output or State write
// reads it either), so each group is a tree whose single result is its root: convex, and nothing inside it is
// needed elsewhere. Broadcasts join the same way and are read with broadcast indexing. The annotation changes
// no node, so the oracle's results are trivially the same; any later rewrite drops it (ids change).
import type { FusionGroup, Graph } from "../ir.ts";
import { isElementwise } from "../ops.ts";
import { useCounts } from "./rewrite.ts";

export function fuse(g: Graph): Graph {
  const { uses, external } = useCounts(g);
  const group = new Int32Array(g.nodes.length).fill(-1);
  const groups: FusionGroup[] = [];
  for (let i = g.nodes.length - 1; i >= 0; i--) {
    const root = g.nodes[i];
    if (group[i] >= 0 || !isElementwise(root.op)) continue;
    const members = [i];
    group[i] = groups.length;
    for (let k = 0; k < members.length; k++) {
      for (const j of g.nodes[members[k]].inputs) {
        const x = g.nodes[j];
        if (group[j] >= 0 || uses[j] !== 1 || external[j]) continue;
        if (!isElementwise(x.op) && x.op !== "broadcast") continue;
        group[j] = groups.length;
        members.push(j);
      }
    }
    if (members.length < 2) {
      group[i] = -1;
      continue;
    }
    members.sort((a, b) => a - b);
    const inside = new Set(members);
    const inputs = [...new Set(members.flatMap((m) => g.nodes[m].inputs).filter((j) => !inside.has(j)))].sort((a, b) => a - b);
    groups.push({ root: i, nodes: members, inputs });
  }
  groups.sort((a, b) => a.root - b.root);
  return { ...g, groups };
}
