// Dead-code elimination: keeps the nodes that outputs and State writes depend on, and every State read (so a
// State buffer stays declared even when the step leaves it alone).
import type { Graph } from "../ir.ts";
import { identity, rewrite } from "./rewrite.ts";

export function dce(g: Graph): Graph {
  const live = new Array<boolean>(g.nodes.length).fill(false);
  for (const id of Object.values(g.outputs)) live[id] = true;
  for (const s of Object.values(g.states)) live[s.write] = live[s.read] = true;
  for (let i = g.nodes.length - 1; i >= 0; i--) if (live[i]) for (const j of g.nodes[i].inputs) live[j] = true;
  return live.every((x) => x) ? g : rewrite(g, identity(g.nodes.length), live);
}
