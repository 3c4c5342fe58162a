// The planner: an optimized Graph -> a Plan. It decides which nodes are computed by one unit of work (a
// node, a fused elementwise group, a matmul with its residual add, attention with its causal mask), which
// values need no storage (reshapes are views), where every value lives (weights, State, Slot, literals, the
// temp arena, outputs), and the lifetimes that let temps share arena bytes. kernels/lower.ts turns each unit
// into kernels; nothing here knows a target.
//
// State updates are planned in place: a dynamic_update_slice or scatter_update that is a State's write and
// whose target is that State's read (read by nothing else) writes straight into the State buffer, so one
// recording serves every step. Any other update first copies its target.
import { byteSize, type DType, isBlock } from "./dtype.ts";
import { describeNode, type FusionGroup, type Graph, GraphError, type Node, numel } from "./ir.ts";
import { layoutArena } from "./arena.ts";
import { roleKey } from "./weights.ts";

/** Where a value's bytes are. */
export type Home =
  | { k: "weight"; role: string }
  | { k: "slot"; name: string }
  | { k: "state"; name: string }
  | { k: "literal"; node: number }
  | { k: "temp"; offset: number }; // into the arena

export interface Value {
  node: number;
  dtype: DType;
  shape: number[];
  bytes: number;
  home: Home;
}

export type Unit =
  /** One node computed by its own kernel(s). */
  | { k: "node"; node: number }
  /** A fused elementwise tree; `root`'s value is the only one stored. */
  | { k: "group"; group: FusionGroup }
  /** y = matmul(x, w) + residual (same shape) or + bias (a const [N]), with the add's node as the result. */
  | { k: "matmul_residual"; matmul: number; add: number; residual?: number; bias?: number }
  /** attention whose mask is causal_mask(pos): the kernel masks from pos itself. */
  | { k: "attention"; node: number; pos: number }
  /**
   * In-place State update: `node` (dynamic_update_slice / scatter_update) writes into its target's home; `src`,
   * when set, is read instead of the update row (the row was a float cast of it, done by the store).
   */
  | { k: "update"; node: number; copyFirst: boolean; src?: number };

export interface Plan {
  graph: Graph;
  units: Unit[];
  /** values[nodeId]: where each node's value lives (views share their source's home). */
  values: Value[];
  arenaBytes: number;
  /** Each output by name and the node holding it. */
  outputs: { name: string; node: number }[];
  /** State writes that are not in place: copy node's value into the State at the end of the step. */
  stateCopies: { name: string; node: number }[];
}

const VIEW = new Set(["reshape"]);

function nodeBytes(n: Node): number {
  return byteSize(n.dtype === "bool" ? "u8" : n.dtype, numel(n.shape));
}

/** Plans a graph (call graph/passes optimize first to get fusion groups). */
export function plan(g: Graph, opts: { align?: number } = {}): Plan {
  const nodes = g.nodes;
  const uses: number[][] = nodes.map(() => []);
  for (const n of nodes) for (const i of n.inputs) uses[i].push(n.id);
  const outputNodes = new Set(Object.values(g.outputs));
  const stateWrites = new Map<number, string>(); // write node -> state name
  const stateReads = new Map<number, string>();
  for (const s of Object.values(g.states)) {
    stateReads.set(s.read, s.name);
    if (s.write !== s.read) stateWrites.set(s.write, s.name);
  }

  // 1. Units. Epilogues first: a matmul whose only use is an add of a residual (same shape) or of a bias (a
  // const [N], broadcast), and a K/V update whose row is a float cast, become one kernel each.
  const covered = new Set<number>();
  const unitOf = new Map<number, Unit>();
  const single = (id: number) => uses[id].length === 1 && !outputNodes.has(id) && !stateWrites.has(id);
  for (const n of nodes) {
    if (n.op !== "add" || n.dtype !== "f32") continue;
    const [a, b] = n.inputs;
    for (const [m, r] of [[a, b], [b, a]]) {
      const mm = nodes[m], rn = nodes[r];
      if (mm.op !== "matmul" || !single(m) || covered.has(m) || m === r || mm.shape.length !== 2 ||
        nodes[mm.inputs[1]].op !== "const" || nodes[mm.inputs[0]].dtype !== "f32" || rn.dtype !== "f32") continue;
      const N = mm.shape[1];
      const biasConst = rn.op === "broadcast" && single(r) && nodes[rn.inputs[0]].op === "const" &&
          numel(nodes[rn.inputs[0]].shape) === N && nodes[rn.inputs[0]].dtype === "f32"
        ? rn.inputs[0]
        : rn.op === "const" && sameDims(rn.shape, n.shape) && mm.shape[0] === 1 ? r : undefined;
      if (biasConst !== undefined) {
        unitOf.set(n.id, { k: "matmul_residual", matmul: m, add: n.id, bias: biasConst });
        if (rn.op === "broadcast") covered.add(r);
      } else if (sameDims(rn.shape, n.shape)) {
        unitOf.set(n.id, { k: "matmul_residual", matmul: m, add: n.id, residual: r });
      } else continue;
      covered.add(m);
      break;
    }
  }
  for (const n of nodes) {
    if (n.op !== "dynamic_update_slice" && n.op !== "scatter_update") continue;
    const target = n.inputs[0];
    const inPlace = stateWrites.has(n.id) && stateReads.get(target) === stateWrites.get(n.id) && uses[target].length === 1;
    // A float cast of the row (f32 -> f16 K/V) happens in the update kernel's store.
    const row = nodes[n.inputs[1]];
    const src = row.op === "cast" && single(row.id) && isFloatType(row.dtype) && isFloatType(nodes[row.inputs[0]].dtype)
      ? row.inputs[0]
      : undefined;
    if (src !== undefined) covered.add(row.id);
    unitOf.set(n.id, { k: "update", node: n.id, copyFirst: !inPlace, src });
  }
  for (const grp of g.groups ?? []) {
    // Kernels read a group input at element i % numel(input): right for broadcasts that only add leading dims.
    if (grp.nodes.some((m) => nodes[m].op === "broadcast" && (m === grp.root || !suffixBroadcast(nodes[nodes[m].inputs[0]].shape, nodes[m].shape)))) continue;
    if (grp.nodes.some((m) => covered.has(m) || unitOf.has(m))) continue;
    const u: Unit = { k: "group", group: grp };
    for (const m of grp.nodes) covered.add(m);
    unitOf.set(grp.root, u);
  }
  for (const n of nodes) {
    if (covered.has(n.id) || unitOf.has(n.id)) continue;
    if (n.op === "attention") {
      const mask = nodes[n.inputs[3]];
      if (mask.op === "causal_mask" && mask.attrs.rows === n.shape[0] && mask.attrs.cap === nodes[n.inputs[1]].shape[0]) {
        unitOf.set(n.id, { k: "attention", node: n.id, pos: mask.inputs[0] });
        continue;
      }
    }
    unitOf.set(n.id, { k: "node", node: n.id });
  }
  // A causal mask only feeding attention units is never materialized.
  const maskOnly = (id: number) =>
    nodes[id].op === "causal_mask" && !outputNodes.has(id) && uses[id].length > 0 &&
    uses[id].every((u) => unitOf.get(u)?.k === "attention");

  // 2. Homes of leaves and in-place updates; which nodes need arena storage.
  const values: Value[] = new Array(nodes.length);
  const inPlaceOf = new Map<number, number>(); // update node -> the node whose home it shares
  const units: Unit[] = [];
  for (const n of nodes) {
    const base = { node: n.id, dtype: n.dtype, shape: n.shape, bytes: nodeBytes(n) };
    switch (n.op) {
      case "const":
        values[n.id] = { ...base, home: { k: "weight", role: roleKey(n.attrs.role!) } };
        continue;
      case "slot":
        values[n.id] = { ...base, home: { k: "slot", name: n.attrs.name! } };
        continue;
      case "state":
        values[n.id] = { ...base, home: { k: "state", name: n.attrs.name! } };
        continue;
      case "literal":
        values[n.id] = { ...base, home: { k: "literal", node: n.id } };
        continue;
    }
    if (isBlock(n.dtype)) throw new GraphError("dtype", `a computed ${n.dtype} value cannot be planned`, ref(n));
    if (VIEW.has(n.op)) continue; // homed below, once its source has one
    const u = unitOf.get(n.id);
    if (u?.k === "update" && !u.copyFirst) {
      values[n.id] = { ...base, home: values[n.inputs[0]].home };
      inPlaceOf.set(n.id, n.inputs[0]);
    }
    if (u && !(n.op === "causal_mask" && maskOnly(n.id))) units.push(u);
  }

  // 3. Lifetimes of arena values, in unit order, then offsets.
  const producedAt = new Map<number, number>();
  units.forEach((u, i) => producedAt.set(resultOf(u), i));
  const lastUse = new Map<number, number>();
  const viewSource = (id: number): number => (VIEW.has(nodes[id].op) ? viewSource(nodes[id].inputs[0]) : id);
  units.forEach((u, i) => {
    for (const x of unitInputs(g, u)) lastUse.set(viewSource(x), i);
  });
  const end = units.length; // outputs and state copies are read after the last unit
  for (const id of outputNodes) lastUse.set(viewSource(id), end);
  for (const [w] of stateWrites) if (!inPlaceOf.has(w)) lastUse.set(viewSource(w), end);
  const temps: number[] = [];
  for (const id of producedAt.keys()) if (!values[id]) temps.push(id);
  const layout = layoutArena(
    temps.map((id) => ({ bytes: nodeBytes(nodes[id]), first: producedAt.get(id)!, last: lastUse.get(id) ?? producedAt.get(id)! })),
    opts.align ?? 256,
  );
  temps.forEach((id, i) => {
    const n = nodes[id];
    values[id] = { node: id, dtype: n.dtype, shape: n.shape, bytes: nodeBytes(n), home: { k: "temp", offset: layout.offsets[i] } };
  });
  for (const n of nodes) {
    if (VIEW.has(n.op) && values[n.inputs[0]]) {
      values[n.id] = { node: n.id, dtype: n.dtype, shape: n.shape, bytes: nodeBytes(n), home: values[n.inputs[0]].home };
    }
  }
  for (const n of nodes) {
    if (!values[n.id]) {
      // Only members of fused groups and masks folded into attention have no storage.
      values[n.id] = { node: n.id, dtype: n.dtype, shape: n.shape, bytes: nodeBytes(n), home: { k: "temp", offset: -1 } };
    }
  }

  const outputs = Object.entries(g.outputs).map(([name, node]) => ({ name, node }));
  const stateCopies = [...stateWrites].filter(([w]) => !inPlaceOf.has(w)).map(([node, name]) => ({ name, node }));
  return { graph: g, units, values, arenaBytes: layout.bytes, outputs, stateCopies };
}

function ref(n: Node) {
  return { id: n.id, op: n.op, label: n.label };
}

/** `to` only adds leading dims (or size-1 leading dims) to `from`: element i of `to` is element i % numel(from). */
export function suffixBroadcast(from: readonly number[], to: readonly number[]): boolean {
  const f = [...from];
  while (f.length && f[0] === 1) f.shift();
  const tail = to.slice(to.length - f.length);
  return f.length <= to.length && f.every((d, i) => d === tail[i]);
}

function isFloatType(d: string): boolean {
  return d === "f32" || d === "f16" || d === "bf16";
}

function sameDims(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** The node whose value a unit produces. */
export function resultOf(u: Unit): number {
  switch (u.k) {
    case "group": return u.group.root;
    case "matmul_residual": return u.add;
    default: return u.node;
  }
}

/** The nodes a unit reads (outside itself). */
export function unitInputs(g: Graph, u: Unit): number[] {
  switch (u.k) {
    case "group": return u.group.inputs;
    case "matmul_residual": return [...g.nodes[u.matmul].inputs, u.residual ?? u.bias!];
    case "attention": return [...g.nodes[u.node].inputs.slice(0, 3), u.pos];
    case "update": {
      const ins = g.nodes[u.node].inputs;
      return u.src === undefined ? ins : [ins[0], u.src, ins[2]];
    }
    default: return g.nodes[u.node].inputs;
  }
}

/** "matmul #12 (blk.0/attn.q)" for errors about a unit. */
export function describeUnit(g: Graph, u: Unit): string {
  return describeNode(ref(g.nodes[resultOf(u)]));
}
