// The fusions the planner intends, declared as patterns over the graph: each names the sites where its shape
// is present (a decode-step rmsnorm feeding weight matmuls, a rope of a projection, a K/V cache write of one,
// a gated activation of two, a residual add after a projection, attention under its causal mask) and says
// whether the plan fused each one. A site the plan left unfused is a near miss: `fusionReport` lists it with
// the reason, so a graph that almost matches is reported instead of silently falling back to unfused kernels
// (tests/families/fusions.test.ts holds every family's decode step to no near miss).
import type { Graph, Node } from "./ir.ts";
import { numel } from "./ir.ts";
import type { GemvPartPlan, Plan, Unit } from "./plan.ts";

export interface FusionPattern {
  name: string;
  /** What the fused kernel does, in words. */
  what: string;
  /** Nodes where the pattern's shape is present in the graph (its anchor). */
  sites(g: Graph, uses: number[][]): number[];
  /** Why the plan did not fuse `site`, or undefined when it did. */
  missed(p: Plan, site: number, uses: number[][]): string | undefined;
}

const isWeightMatmul = (g: Graph, id: number): boolean => {
  const n = g.nodes[id];
  return n.op === "matmul" && g.nodes[n.inputs[1]].op === "const" && g.nodes[n.inputs[1]].shape.length === 2;
};
const oneRow = (n: Node): boolean => numel(n.shape) === n.shape[n.shape.length - 1];
const parts = (p: Plan): GemvPartPlan[] => p.units.flatMap((u) => (u.k === "gemv" ? u.parts : []));
const unitHolding = (p: Plan, id: number): Unit | undefined =>
  p.units.find((u) =>
    u.k === "gemv" ? u.norm === id || u.parts.some((pp) => pp.nodes.includes(id))
    : u.k === "group" ? u.group.nodes.includes(id)
    : u.k === "matmul_residual" ? u.matmul === id || u.add === id
    : u.k === "update" ? u.node === id || u.src === id
    : u.k === "gather_cast" ? u.gather === id || u.cast === id
    : u.k === "norm_rope" ? u.parts.some((pp) => pp.nodes.includes(id))
    : u.k === "norm_add" ? u.norm === id || u.add === id
    : u.node === id);
const where = (p: Plan, id: number): string => {
  const u = unitHolding(p, id);
  return u ? `it went to a ${u.k} unit` : "no unit computes it";
};
/** The weight matmul a chain of reshapes / casts / ropes / bias adds ends at, walking back from `id`. */
function projectionOf(g: Graph, id: number): number | undefined {
  for (let cur = id; ;) {
    const n = g.nodes[cur];
    if (isWeightMatmul(g, cur)) return cur;
    if (n.op === "add") {
      const m = n.inputs.find((i) => isWeightMatmul(g, i));
      if (m === undefined) return undefined;
      cur = m;
      continue;
    }
    if (n.op !== "reshape" && n.op !== "cast" && n.op !== "rope") return undefined;
    cur = n.inputs[0];
  }
}

export const FUSIONS: FusionPattern[] = [
  {
    name: "gemv+norm",
    what: "a one-row rmsnorm folded into the gemv that reads it (its value never stored)",
    sites: (g, uses) => g.nodes.filter((n) => n.op === "rmsnorm" && oneRow(n) && uses[n.id].some((u) => isWeightMatmul(g, u))).map((n) => n.id),
    missed: (p, site, uses) => {
      if (p.units.some((u) => u.k === "gemv" && u.norm === site)) return undefined;
      const other = uses[site].filter((u) => !isWeightMatmul(p.graph, u));
      return other.length ? `also read by ${other.map((u) => `${p.graph.nodes[u].op} #${u}`).join(", ")}` : `its matmuls were not planned as one gemv input (${where(p, uses[site][0])})`;
    },
  },
  {
    name: "gemv+rope",
    what: "rope of a one-row projection applied by the gemv's epilogue",
    sites: (g) => g.nodes.filter((n) => n.op === "rope" && n.shape[0] === 1 && projectionOf(g, n.inputs[0]) !== undefined).map((n) => n.id),
    missed: (p, site) => (parts(p).some((pp) => pp.rope === site) ? undefined : `the rope ${where(p, site)}`),
  },
  {
    name: "gemv+kv-write",
    what: "a one-row K/V projection (roped and cast as the cache wants) written into the cache by the gemv",
    sites: (g) =>
      g.nodes.filter((n) => n.op === "dynamic_update_slice" && g.nodes[n.inputs[1]].shape[0] === 1 && projectionOf(g, n.inputs[1]) !== undefined &&
        Object.values(g.states).some((s) => s.write === n.id)).map((n) => n.id),
    missed: (p, site) => (parts(p).some((pp) => pp.update === site) ? undefined : `the cache write ${where(p, site)}`),
  },
  {
    name: "gemv+gated",
    what: "silu(a)·b or gelu(a)·b of two projections of one input in one gemv",
    sites: (g) =>
      g.nodes.filter((n) => {
        if (!oneRow(n)) return false;
        if (n.op === "silu_mul") return isWeightMatmul(g, n.inputs[0]) && isWeightMatmul(g, n.inputs[1]);
        if (n.op !== "mul") return false;
        const gi = n.inputs.findIndex((i) => g.nodes[i].op === "gelu");
        return gi >= 0 && isWeightMatmul(g, g.nodes[n.inputs[gi]].inputs[0]) && isWeightMatmul(g, n.inputs[1 - gi]);
      }).map((n) => n.id),
    missed: (p, site) => (parts(p).some((pp) => pp.act === site) ? undefined : `the activation ${where(p, site)}`),
  },
  {
    name: "matmul+residual",
    what: "a residual (or bias) add after a projection, done by the matmul's epilogue",
    sites: (g, uses) =>
      g.nodes.filter((n) =>
        n.op === "add" && n.dtype === "f32" && n.inputs.some((i) => isWeightMatmul(g, i) && uses[i].length === 1 && g.nodes[i].shape.length === n.shape.length)
      ).map((n) => n.id),
    missed: (p, site) =>
      p.units.some((u) => (u.k === "matmul_residual" && u.add === site) || (u.k === "gemv" && u.parts.some((pp) => pp.nodes.includes(site) && (pp.residual !== undefined || pp.bias))))
        ? undefined
        : `the add ${where(p, site)}`,
  },
  {
    name: "attention+mask",
    what: "attention masking from the position itself (the causal mask is never stored)",
    sites: (g) => g.nodes.filter((n) => n.op === "attention" && g.nodes[n.inputs[3]].op === "causal_mask").map((n) => n.id),
    missed: (p, site) => (p.units.some((u) => u.k === "attention" && u.node === site) ? undefined : `the attention ${where(p, site)}`),
  },
];

export interface FusionCount {
  name: string;
  sites: number;
  fused: number;
  /** Near misses: sites the plan did not fuse, each with its node and why. */
  missed: { node: number; label?: string; why: string }[];
}

/** Every declared fusion's sites in a plan's graph, how many fused, and the near misses. */
export function fusionReport(p: Plan): FusionCount[] {
  const g = p.graph;
  const uses: number[][] = g.nodes.map(() => []);
  for (const n of g.nodes) for (const i of n.inputs) uses[i].push(n.id);
  return FUSIONS.map((f) => {
    const sites = f.sites(g, uses);
    const missed = sites.flatMap((s) => {
      const why = f.missed(p, s, uses);
      return why === undefined ? [] : [{ node: s, label: g.nodes[s].label, why }];
    });
    return { name: f.name, sites: sites.length, fused: sites.length - missed.length, missed };
  });
}
