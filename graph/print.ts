// A text dump of a graph, one node a line, for debugging and for error reports:
//   %23 = matmul(%21, %22) f32[1,64]  # blk.0/attn.q
import { roleKey } from "./weights.ts";
import type { Graph, Node } from "./ir.ts";

function attrs(n: Node): string {
  const a = n.attrs;
  switch (n.op) {
    case "const": return roleKey(a.role!);
    case "slot": return `${a.name} ${a.kind}`;
    case "state": return a.name!;
    case "literal": return a.data ? `data[${a.data.length}]` : String(a.value);
  }
  const parts: string[] = [];
  for (const [k, v] of Object.entries(a)) if (v !== undefined) parts.push(`${k}=${Array.isArray(v) ? `[${v}]` : v}`);
  return parts.join(" ");
}

export function formatGraph(g: Graph): string {
  const outs = new Map<number, string[]>();
  for (const [k, id] of Object.entries(g.outputs)) outs.set(id, [...(outs.get(id) ?? []), `output ${k}`]);
  for (const [k, s] of Object.entries(g.states)) if (s.write !== s.read) outs.set(s.write, [...(outs.get(s.write) ?? []), `-> state ${k}`]);
  const group = new Map<number, number>();
  g.groups?.forEach((grp, i) => grp.nodes.forEach((n) => group.set(n, i)));
  return g.nodes.map((n) => {
    const a = attrs(n);
    const tail = [n.label, group.has(n.id) ? `group ${group.get(n.id)}` : undefined, ...(outs.get(n.id) ?? [])].filter(Boolean);
    return `%${n.id} = ${n.op}(${n.inputs.map((i) => `%${i}`).join(", ")})${a ? ` {${a}}` : ""} ${n.dtype}[${n.shape}]` +
      (tail.length ? `  # ${tail.join("; ")}` : "");
  }).join("\n");
}
