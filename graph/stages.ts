// Running a tensor-parallel graph as a group of ranks without a device-side collective: cut the graph at its
// collectives into stages, run stage k on every rank, combine the collectives' inputs on the host
// (graph/collective.ts combine), feed the results to the later stages, and so on. This is the oracle of a
// sharded graph (evalGroup) and the way backends/group.ts runs a simulated N-rank group on any Executor; a device
// with NCCL records the collectives inside its own replay instead (backends/ptx, not here).
//
// A stage is an ordinary Graph: values it needs from earlier stages (and collective results) arrive as Input
// slots named `tp.<id>`, values later stages need leave as outputs of the same name (id: the node in the sharded
// graph). Leaves (weights, slots, literals, iota, State reads) are copied into each stage that reads them. A
// State must be read and written in one stage (true of every family's K/V: the write and the attention that
// reads it sit between the same two collectives); anything else is a GraphError naming it.
import { combine, isCollective } from "./collective.ts";
import type { Storage } from "./dtype.ts";
import { type EvalInputs, evaluate } from "./eval.ts";
import { type CollectiveOp, type Graph, GraphError, type Node, type StateDecl } from "./ir.ts";
import { LEAF } from "./ops.ts";

/** One stage: its graph, and the collectives whose inputs it produces (run on the host after it). */
export interface Stage {
  graph: Graph;
  /** Collectives to combine after this stage: node id in the sharded graph, its op and attrs, result shape. */
  collectives: { node: number; input: number; op: CollectiveOp; dtype: Node["dtype"]; shape: number[]; attrs: Node["attrs"] }[];
}

export interface Staged {
  stages: Stage[];
  /** Outputs of the whole graph that are collective results (taken from the host values, not from a stage). */
  collectiveOutputs: Record<string, number>;
}

/** Name of the slot and output that carry node `id` between stages. */
export const carried = (id: number): string => `tp.${id}`;

/** Cuts `g` at its collectives; see the top of this file. */
export function splitAtCollectives(g: Graph): Staged {
  const level = new Int32Array(g.nodes.length).fill(-1); // -1: a leaf, placed wherever it is read
  for (const n of g.nodes) {
    if (LEAF.has(n.op)) continue;
    let l = 0;
    for (const i of n.inputs) l = Math.max(l, level[i]);
    if (isCollective(n.op)) l += 1; // a leaf's value (a rank's own slot) leaves stage 0
    level[n.id] = l;
  }
  const top = Math.max(0, ...level);
  // Who needs node i outside its own stage: a later stage, a collective, or the graph's outputs.
  const needed = new Set<number>();
  for (const n of g.nodes) {
    if (LEAF.has(n.op) || isCollective(n.op)) continue;
    for (const i of n.inputs) if (!LEAF.has(g.nodes[i].op) && (isCollective(g.nodes[i].op) || level[i] < level[n.id])) needed.add(i);
  }
  for (const n of g.nodes) if (isCollective(n.op)) needed.add(n.inputs[0]);
  const stageOfState = new Map<string, number>();
  for (const [name, s] of Object.entries(g.states)) {
    if (s.write === s.read) continue;
    const w = level[s.write];
    for (const n of g.nodes) {
      if (n.inputs.includes(s.read) && level[n.id] !== w) {
        throw new GraphError("order", `state ${name} is written in stage ${w} but read in stage ${level[n.id]}: a collective lies between`, n);
      }
    }
    stageOfState.set(name, w);
  }

  const stages: Stage[] = [];
  const collectiveOutputs: Record<string, number> = {};
  for (let k = 0; k <= top; k++) {
    const nodes: Node[] = [];
    const local = new Map<number, number>();
    const add = (n: Omit<Node, "id">): number => {
      nodes.push({ ...n, id: nodes.length });
      return nodes.length - 1;
    };
    const input = (i: number): number => {
      const known = local.get(i);
      if (known !== undefined) return known;
      const src = g.nodes[i];
      const id = LEAF.has(src.op)
        ? add({ ...src, inputs: [] })
        : add({ op: "slot", dtype: src.dtype, shape: [...src.shape], inputs: [], attrs: { name: carried(i), kind: "Input" }, label: src.label });
      local.set(i, id);
      return id;
    };
    for (const n of g.nodes) {
      if (level[n.id] !== k || LEAF.has(n.op) || isCollective(n.op)) continue;
      const ins = n.inputs.map((i) => (LEAF.has(g.nodes[i].op) || level[i] !== k || isCollective(g.nodes[i].op) ? input(i) : local.get(i)!));
      local.set(n.id, add({ ...n, inputs: ins }));
    }
    const outputs: Record<string, number> = {};
    for (const [name, id] of Object.entries(g.outputs)) {
      if (isCollective(g.nodes[id].op)) collectiveOutputs[name] = id;
      else if (level[id] === k || (level[id] < 0 && k === top)) outputs[name] = input(id);
    }
    for (const i of needed) {
      if (level[i] === k) outputs[carried(i)] = local.get(i)!;
      else if (level[i] < 0 && k === 0) outputs[carried(i)] = input(i);
    }
    const states: Record<string, StateDecl> = {};
    for (const [name, s] of Object.entries(g.states)) {
      const at = stageOfState.get(name);
      if (at === k) states[name] = { ...s, read: input(s.read), write: local.get(s.write)! };
      else if (at === undefined && local.has(s.read)) states[name] = { ...s, read: local.get(s.read)!, write: local.get(s.read)! };
    }
    const collectives = g.nodes.filter((n) => isCollective(n.op) && Math.max(level[n.inputs[0]], 0) === k).map((n) => ({
      node: n.id, input: n.inputs[0], op: n.op as CollectiveOp, dtype: n.dtype, shape: [...g.nodes[n.inputs[0]].shape], attrs: n.attrs,
    }));
    if (Object.keys(outputs).length === 0 && collectives.length === 0 && Object.keys(states).length === 0) continue;
    stages.push({ graph: { nodes, outputs, states }, collectives });
  }
  return { stages, collectiveOutputs };
}

/** Runs one stage on one rank: its slot values in, its outputs out (an executor step, or the oracle). */
export type StageRunner = (rank: number, stage: number, slots: Record<string, Storage | ArrayLike<number>>) =>
  Promise<Record<string, Storage>> | Record<string, Storage>;

/**
 * Runs every stage on every rank in order with the collectives combined on the host between them. `slots(rank)`
 * gives a rank's step slots; returns each rank's outputs (collective outputs are the same array on all ranks),
 * and the host microseconds spent combining.
 */
export async function runStages(
  st: Staged, ranks: number, slots: (rank: number) => Record<string, Storage | ArrayLike<number>>, run: StageRunner,
): Promise<{ outputs: Record<string, Storage>[]; combineMicros: number }> {
  const values = Array.from({ length: ranks }, () => new Map<string, Storage>());
  const shared = new Map<string, Storage>();
  const outputs = Array.from({ length: ranks }, () => ({} as Record<string, Storage>));
  let combineMicros = 0;
  for (let k = 0; k < st.stages.length; k++) {
    const { graph, collectives } = st.stages[k];
    // Every rank's stage settles before a failure is raised: no rank is left running into the next call.
    const settled = await Promise.allSettled(Array.from({ length: ranks }, async (_, r) => {
      const base = slots(r);
      const s: Record<string, Storage | ArrayLike<number>> = {};
      for (const n of graph.nodes) {
        if (n.op !== "slot") continue;
        const name = n.attrs.name!;
        const v = name.startsWith("tp.") ? values[r].get(name) ?? shared.get(name) : base[name];
        if (v === undefined) throw new GraphError("unbound", `stage ${k} of rank ${r}: no value for slot ${name}`, n);
        s[name] = v;
      }
      return await run(r, k, s);
    }));
    const failed = settled.find((x) => x.status === "rejected") as PromiseRejectedResult | undefined;
    if (failed) throw failed.reason;
    const results = settled.map((x) => (x as PromiseFulfilledResult<Record<string, Storage>>).value);
    for (let r = 0; r < ranks; r++) {
      for (const [name, v] of Object.entries(results[r])) {
        if (name.startsWith("tp.")) values[r].set(name, v);
        else outputs[r][name] = v;
      }
    }
    const t0 = performance.now();
    for (const c of collectives) {
      const name = carried(c.node);
      const ins = Array.from({ length: ranks }, (_, r) => values[r].get(carried(c.input))!);
      shared.set(name, combine(c.op, c.dtype, c.shape, c.attrs, ins));
    }
    combineMicros += (performance.now() - t0) * 1000;
  }
  for (const [name, id] of Object.entries(st.collectiveOutputs)) {
    for (let r = 0; r < ranks; r++) outputs[r][name] = shared.get(carried(id))!;
  }
  return { outputs, combineMicros };
}

/**
 * The oracle of a sharded graph over `ranks` ranks: every rank's stages evaluated by graph/eval.ts, collectives
 * combined between them. `inputs(rank)` gives a rank's consts (its shard of the weights), slots and state.
 * Returns each rank's outputs and its State after the step.
 */
export async function evalGroup(g: Graph, ranks: number, inputs: (rank: number) => EvalInputs): Promise<{ output: Record<string, Storage>; state: Record<string, Storage> }[]> {
  const st = splitAtCollectives(g);
  const state = Array.from({ length: ranks }, (_, r) => ({ ...(inputs(r).state ?? {}) }));
  const { outputs } = await runStages(st, ranks, (r) => inputs(r).slots as Record<string, Storage>, (r, k, slots) => {
    const e = evaluate(st.stages[k].graph, { consts: inputs(r).consts, slots, state: state[r] });
    Object.assign(state[r], e.state);
    return e.output;
  });
  return outputs.map((output, r) => ({ output, state: state[r] }));
}
