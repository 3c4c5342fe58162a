// The planner: an optimized Graph -> a Plan. It decides which nodes are computed by one unit of work (a
// node, a fused elementwise group, a matmul with its residual add, attention with its causal mask), which
// values need no storage (reshapes are views), where every value lives (weights, State, Slot, literals, the
// temp arena, outputs), and the lifetimes that let temps share arena bytes. kernels/lower.ts turns each unit
// into kernels; nothing here knows a target.
//
// State updates are planned in place: a dynamic_update_slice or scatter_update that is a State's write and
// whose target is that State's read (read by nothing else) writes straight into the State buffer, so one
// recording serves every step. Any other update first copies its target.
import { byteSize, type DType, isBlock, isFloat } from "./dtype.ts";
import { describeNode, type FusionGroup, type Graph, GraphError, type Node, numel, sameShape } from "./ir.ts";
import { layoutArena } from "./arena.ts";
import { roleKey } from "./weights.ts";
import { planGemv, planNormRope, VIEW, viewSource, weightAddOf } from "./plan_fused.ts";

export { viewSource } from "./plan_fused.ts";

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
  /**
   * Batch-1 matmuls of one input vector against float const weights of one dtype and width, in one kernel:
   * each part a matmul (two for silu_mul) with its epilogue chain. `norm`, when set, is an rmsnorm of `x`
   * that every part's dot folds in (its value is never stored).
   */
  | { k: "gemv"; x: number; norm?: number; parts: GemvPartPlan[] }
  /**
   * A gather of a 16-bit float table whose only use is its cast to f32 (an embedding lookup): one kernel that
   * converts as it stores (exact: f16 and bf16 widen to f32 without rounding), `cast`'s node as the result.
   * Planned where PlanOptions.gatherCast asks for it.
   */
  | { k: "gather_cast"; gather: number; cast: number }
  /**
   * Per-head RMS norms ([rows, heads, hd] over hd: Qwen3's and Gemma 3's q/k norms) of values one unit produces,
   * each with its rope, float cast and in-place cache write, as one kernel. Planned where PlanOptions.normRope
   * asks for it.
   */
  | { k: "norm_rope"; parts: NormRopePartPlan[] }
  /**
   * An rmsnorm with what follows or feeds it folded in: `add`, when set, is its only use, an add of `residual`
   * (Gemma's post-norms: h + norm(o)); `weightAdd`, when set, is its weight: an add of the const `weight` and a
   * scalar literal (Gemma's 1 + w), never stored. Planned where PlanOptions.normAdd asks for it.
   */
  | { k: "norm_add"; norm: number; weight: number; weightAdd?: number; add?: number; residual?: number }
  /** attention whose mask is causal_mask(pos) (with its window, if any): the kernel masks from pos itself. */
  | { k: "attention"; node: number; pos: number; window?: number }
  /**
   * In-place State update: `node` (dynamic_update_slice / scatter_update) writes into its target's home; `src`,
   * when set, is read instead of the update row (the row was a float cast of it, done by the store).
   */
  | { k: "update"; node: number; copyFirst: boolean; src?: number };

/**
 * One part of a gemv unit: matmul(s) of the unit's input, then in order an optional bias or residual add, a
 * silu_mul of the two matmuls, a rope (through a reshape to heads), a float cast and an in-place
 * dynamic_update_slice into State (through a reshape). `out` is the node whose value the part stores.
 */
export interface GemvPartPlan {
  matmuls: number[];
  /** Const [N] (or [1, N]) f32 biases, one per matmul. */
  bias?: number[];
  residual?: number;
  act?: number;
  /** The two-weight part's activation is the tanh GELU (mul(gelu(a), b): GeGLU) rather than silu_mul's silu. */
  gelu?: boolean;
  rope?: number;
  cast?: number;
  update?: number;
  out: number;
  /** Every node the part computes without storing it (out included). */
  nodes: number[];
}

/**
 * One part of a norm_rope unit: rmsnorm `norm` of `x` (a [rows, heads, hd] f32 view), then in order an optional
 * rope, a float cast and an in-place dynamic_update_slice into State (one row, at the rope's position). `out` is
 * the node whose value the part stores; `nodes` every node it computes (out included).
 */
export interface NormRopePartPlan {
  x: number;
  norm: number;
  /** The norm's weight as read: its input, or w of an input add(w, literal c) folded in (weightAdd = c). */
  weight: number;
  weightAdd?: number;
  rope?: number;
  cast?: number;
  update?: number;
  out: number;
  nodes: number[];
}

export interface PlanOptions {
  /** Arena alignment (bytes, default 256). */
  align?: number;
  /** Plan gemv units (fused batch-1 matmuls); default true. */
  gemv?: boolean;
  /**
   * Plan gather_cast units (an f16/bf16 gather and its cast to f32 as one kernel); default false. The lowering
   * turns it on where a dispatch has a fixed cost of its own (kernels/lower.ts CompileOptions.gatherCast).
   */
  gatherCast?: boolean;
  /**
   * Plan norm_rope units (per-head norms of one producer with their ropes and cache writes as one kernel);
   * default false. The lowering turns it on where a dispatch has a fixed cost of its own (CompileOptions.normRope).
   */
  normRope?: boolean;
  /**
   * Plan norm_add units (an rmsnorm with its residual add after and its weight's scalar add before, one
   * kernel); default false. The lowering turns it on where a dispatch has a fixed cost of its own.
   */
  normAdd?: boolean;
  /**
   * Values no kernel stores: their one reader computes them itself (kernels/lower/matmul.ts mmaPrepGroups, an
   * elementwise x made in a matmul's MMA preparation). They get no arena space.
   */
  unstored?: ReadonlySet<number>;
}

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

function nodeBytes(n: Node): number {
  return byteSize(n.dtype === "bool" ? "u8" : n.dtype, numel(n.shape));
}

/** What the planning phases share: the graph's nodes, their uses, and which nodes leave the step. */
interface PlanCx {
  g: Graph;
  nodes: Node[];
  uses: number[][];
  outputNodes: Set<number>;
  /** State write node -> the State's name. */
  stateWrites: Map<number, string>;
  /** A node with one use that is neither an output nor a State write (its user may compute it). */
  single: (id: number) => boolean;
  /** A State write that updates its own read in place (the read's only use). */
  inPlaceUpdate: (id: number) => boolean;
}

/** Plans a graph (call graph/passes optimize first to get fusion groups). */
export function plan(g: Graph, opts: PlanOptions = {}): Plan {
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
  const single = (id: number) => uses[id].length === 1 && !outputNodes.has(id) && !stateWrites.has(id);
  const inPlaceUpdate = (id: number) => {
    const target = nodes[id].inputs[0];
    return stateWrites.has(id) && stateReads.get(target) === stateWrites.get(id) && uses[target].length === 1;
  };
  const cx: PlanCx = { g, nodes, uses, outputNodes, stateWrites, single, inPlaceUpdate };
  const { unitOf, gemvAt, maskOnly } = planUnits(cx, opts);
  const { values, inPlaceOf, units } = placeUnits(cx, unitOf, gemvAt, maskOnly);
  const arenaBytes = placeTemps(cx, opts, units, values, inPlaceOf);
  const outputs = Object.entries(g.outputs).map(([name, node]) => ({ name, node }));
  const stateCopies = [...stateWrites].filter(([w]) => !inPlaceOf.has(w)).map(([node, name]) => ({ name, node }));
  return { graph: g, units, values, arenaBytes, outputs, stateCopies };
}

/**
 * 1. Units. Epilogues first: a matmul whose only use is an add of a residual (same shape) or of a bias (a const
 * [N], broadcast), and a K/V update whose row is a float cast, become one kernel each. Returns the unit of each
 * node a unit is keyed by, the gemv (and norm_rope) units by the node they are placed at, and which causal masks
 * only attention units read (never materialized).
 */
function planUnits(cx: PlanCx, opts: PlanOptions): { unitOf: Map<number, Unit>; gemvAt: Map<number, Unit>; maskOnly: (id: number) => boolean } {
  const { g, nodes, uses, outputNodes, single, inPlaceUpdate } = cx;
  const covered = new Set<number>();
  const unitOf = new Map<number, Unit>();
  const gemvAt = new Map<number, Unit>(); // position node -> gemv (or norm_rope) unit
  const gemvs = opts.gemv ?? true ? planGemv(g, uses, single, inPlaceUpdate, outputNodes) : [];
  for (const { unit, nodes: inside, at } of gemvs) {
    for (const m of inside) covered.add(m);
    gemvAt.set(at, unit);
  }
  if (opts.normRope) {
    for (const { unit, nodes: inside, at } of planNormRope(g, uses, single, inPlaceUpdate, covered, gemvs)) {
      for (const m of inside) covered.add(m);
      gemvAt.set(at, unit);
    }
  }
  if (opts.normAdd) normAddUnits(cx, covered, unitOf);
  matmulEpilogues(cx, covered, unitOf);
  if (opts.gatherCast) {
    for (const n of nodes) {
      if (n.op !== "gather" || covered.has(n.id) || !single(n.id)) continue;
      const c = nodes[uses[n.id][0]], table = nodes[n.inputs[0]].dtype;
      if (c.op !== "cast" || c.dtype !== "f32" || (table !== "f16" && table !== "bf16") || n.dtype !== table || covered.has(c.id)) continue;
      // The cast must be a group of its own (or none): a larger group would lose its member.
      if ((g.groups ?? []).some((grp) => grp.nodes.includes(c.id) && grp.nodes.length > 1)) continue;
      covered.add(n.id).add(c.id);
      unitOf.set(c.id, { k: "gather_cast", gather: n.id, cast: c.id });
    }
  }
  for (const n of nodes) {
    if ((n.op !== "dynamic_update_slice" && n.op !== "scatter_update") || covered.has(n.id)) continue;
    const inPlace = inPlaceUpdate(n.id);
    // A float cast of the row (f32 -> f16 K/V) happens in the update kernel's store.
    const row = nodes[n.inputs[1]];
    const src = row.op === "cast" && single(row.id) && isFloat(row.dtype) && isFloat(nodes[row.inputs[0]].dtype)
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
        unitOf.set(n.id, { k: "attention", node: n.id, pos: mask.inputs[0], window: mask.attrs.window });
        continue;
      }
    }
    unitOf.set(n.id, { k: "node", node: n.id });
  }
  // A causal mask only feeding attention units is never materialized.
  const maskOnly = (id: number) =>
    nodes[id].op === "causal_mask" && !outputNodes.has(id) && uses[id].length > 0 &&
    uses[id].every((u) => unitOf.get(u)?.k === "attention");
  return { unitOf, gemvAt, maskOnly };
}

/** norm_add units: an f32 rmsnorm with its weight's scalar add before and its residual add after, either or both. */
function normAddUnits(cx: PlanCx, covered: Set<number>, unitOf: Map<number, Unit>): void {
  const { g, nodes, uses, single } = cx;
  const alone = (id: number) => !(g.groups ?? []).some((grp) => grp.nodes.includes(id) && grp.nodes.length > 1);
  for (const n of nodes) {
    if (n.op !== "rmsnorm" || n.dtype !== "f32" || covered.has(n.id)) continue;
    const u: Extract<Unit, { k: "norm_add" }> = { k: "norm_add", norm: n.id, weight: n.inputs[1] };
    const wa = weightAddOf(g, n.inputs[1]);
    if (wa && single(n.inputs[1]) && !covered.has(n.inputs[1]) && alone(n.inputs[1])) [u.weight, u.weightAdd] = wa;
    const a = single(n.id) ? nodes[uses[n.id][0]] : undefined;
    if (a?.op === "add" && a.dtype === "f32" && a.inputs[0] !== a.inputs[1] && !covered.has(a.id) && alone(a.id)) {
      const r = a.inputs[0] === n.id ? a.inputs[1] : a.inputs[0];
      if (nodes[r].dtype === "f32" && sameShape(nodes[r].shape, n.shape) && sameShape(a.shape, n.shape)) [u.add, u.residual] = [a.id, r];
    }
    if (u.add === undefined && u.weightAdd === undefined) continue;
    covered.add(n.id);
    if (u.weightAdd !== undefined) covered.add(n.inputs[1]);
    if (u.add !== undefined) covered.add(u.add);
    unitOf.set(u.add ?? n.id, u);
  }
}

/** matmul_residual units: an f32 add of a matmul (a const weight, its only use) and a residual or a bias. */
function matmulEpilogues(cx: PlanCx, covered: Set<number>, unitOf: Map<number, Unit>): void {
  const { nodes, single } = cx;
  for (const n of nodes) {
    if (n.op !== "add" || n.dtype !== "f32" || covered.has(n.id)) continue;
    const [a, b] = n.inputs;
    for (const [m, r] of [[a, b], [b, a]]) {
      const mm = nodes[m], rn = nodes[r];
      if (mm.op !== "matmul" || !single(m) || covered.has(m) || m === r || mm.shape.length !== 2 ||
        nodes[mm.inputs[1]].op !== "const" || nodes[mm.inputs[0]].dtype !== "f32" || rn.dtype !== "f32") continue;
      const N = mm.shape[1];
      const biasConst = rn.op === "broadcast" && single(r) && nodes[rn.inputs[0]].op === "const" &&
          numel(nodes[rn.inputs[0]].shape) === N && nodes[rn.inputs[0]].dtype === "f32"
        ? rn.inputs[0]
        : rn.op === "const" && sameShape(rn.shape, n.shape) && mm.shape[0] === 1 ? r : undefined;
      if (biasConst !== undefined) {
        unitOf.set(n.id, { k: "matmul_residual", matmul: m, add: n.id, bias: biasConst });
        if (rn.op === "broadcast") covered.add(r);
      } else if (sameShape(rn.shape, n.shape)) {
        unitOf.set(n.id, { k: "matmul_residual", matmul: m, add: n.id, residual: r });
      } else continue;
      covered.add(m);
      break;
    }
  }
}

/** 2. Homes of leaves and in-place updates, and the units in node order (gemv units where they are placed). */
function placeUnits(cx: PlanCx, unitOf: Map<number, Unit>, gemvAt: Map<number, Unit>, maskOnly: (id: number) => boolean): { values: Value[]; inPlaceOf: Map<number, number>; units: Unit[] } {
  const { nodes } = cx;
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
    const gu = gemvAt.get(n.id);
    if (gu?.k === "gemv" || gu?.k === "norm_rope") {
      for (const part of gu.parts) {
        if (part.update === undefined) continue;
        const target = nodes[part.update].inputs[0];
        // The target is a State read (in place), which a unit placed early may precede in node order.
        const home: Home = values[target]?.home ?? { k: "state", name: nodes[target].attrs.name! };
        values[part.update] = { node: part.update, dtype: nodes[part.update].dtype, shape: nodes[part.update].shape, bytes: nodeBytes(nodes[part.update]), home };
        inPlaceOf.set(part.update, target);
      }
      units.push(gu);
      continue;
    }
    if (VIEW.has(n.op)) continue; // homed below, once its source has one
    const u = unitOf.get(n.id);
    if (u?.k === "update" && !u.copyFirst) {
      values[n.id] = { ...base, home: values[n.inputs[0]].home };
      inPlaceOf.set(n.id, n.inputs[0]);
    }
    if (u && !(n.op === "causal_mask" && maskOnly(n.id))) units.push(u);
  }
  return { values, inPlaceOf, units };
}

/** 3. Lifetimes of arena values, in unit order, then offsets; views take their source's home. Returns the arena's bytes. */
function placeTemps(cx: PlanCx, opts: PlanOptions, units: Unit[], values: Value[], inPlaceOf: Map<number, number>): number {
  const { g, nodes, outputNodes, stateWrites } = cx;
  const producedAt = new Map<number, number>();
  units.forEach((u, i) => {
    for (const r of resultsOf(u)) producedAt.set(r, i);
  });
  const lastUse = new Map<number, number>();
  units.forEach((u, i) => {
    for (const x of unitInputs(g, u)) lastUse.set(viewSource(nodes, x), i);
  });
  const end = units.length; // outputs and state copies are read after the last unit
  for (const id of outputNodes) lastUse.set(viewSource(nodes, id), end);
  for (const [w] of stateWrites) if (!inPlaceOf.has(w)) lastUse.set(viewSource(nodes, w), end);
  const temps: number[] = [];
  for (const id of producedAt.keys()) if (!values[id] && !opts.unstored?.has(id)) temps.push(id);
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
      // Only members of fused groups, masks folded into attention and unstored values have no storage.
      values[n.id] = { node: n.id, dtype: n.dtype, shape: n.shape, bytes: nodeBytes(n), home: { k: "temp", offset: -1 } };
    }
  }
  return layout.bytes;
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



/** The node whose value a unit produces (a gemv unit's first part's). */
export function resultOf(u: Unit): number {
  switch (u.k) {
    case "group": return u.group.root;
    case "matmul_residual": return u.add;
    case "gemv": case "norm_rope": return u.parts[0].out;
    case "norm_add": return u.add ?? u.norm;
    case "gather_cast": return u.cast;
    default: return u.node;
  }
}

/** Every node whose value a unit stores. */
export function resultsOf(u: Unit): number[] {
  return u.k === "gemv" || u.k === "norm_rope" ? u.parts.map((p) => p.out) : [resultOf(u)];
}

/** The nodes a unit reads (outside itself). */
export function unitInputs(g: Graph, u: Unit): number[] {
  switch (u.k) {
    case "group": return u.group.inputs;
    case "matmul_residual": return [...g.nodes[u.matmul].inputs, u.residual ?? u.bias!];
    case "gemv": {
      const ins = u.norm === undefined ? [u.x] : [u.x, g.nodes[u.norm].inputs[1]];
      for (const p of u.parts) {
        ins.push(...p.matmuls.map((m) => g.nodes[m].inputs[1]), ...(p.bias ?? []));
        if (p.residual !== undefined) ins.push(p.residual);
        if (p.rope !== undefined) ins.push(g.nodes[p.rope].inputs[1]);
        if (p.update !== undefined) ins.push(...g.nodes[p.update].inputs.filter((_, i) => i !== 1));
      }
      return ins;
    }
    case "gather_cast": return g.nodes[u.gather].inputs;
    case "norm_add": return [g.nodes[u.norm].inputs[0], u.weight, ...(u.residual === undefined ? [] : [u.residual])];
    case "norm_rope": {
      const ins: number[] = [];
      for (const p of u.parts) {
        ins.push(p.x, p.weight);
        if (p.rope !== undefined) ins.push(...g.nodes[p.rope].inputs.slice(1));
        if (p.update !== undefined) ins.push(...g.nodes[p.update].inputs.filter((_, i) => i !== 1));
      }
      return ins;
    }
    case "attention": return [...g.nodes[u.node].inputs.slice(0, 3), u.pos];
    case "update": {
      const ins = g.nodes[u.node].inputs;
      return u.src === undefined ? ins : [ins[0], u.src, ins[2]];
    }
    default: return g.nodes[u.node].inputs;
  }
}

/**
 * Values (through views, by their source) read by exactly one unit and kept by nothing else: not an output nor a
 * state copy's source. A kernel may fold such a value into its one reader (the value need not be stored).
 */
export function soleReads(p: Plan): Set<number> {
  const nodes = p.graph.nodes, source = (id: number) => viewSource(nodes, id);
  const readers = new Map<number, number>();
  for (const u of p.units) for (const id of new Set(unitInputs(p.graph, u).map(source))) readers.set(id, (readers.get(id) ?? 0) + 1);
  const kept = new Set([...p.outputs.map((o) => source(o.node)), ...p.stateCopies.map((c) => source(c.node))]);
  return new Set([...readers].filter(([id, n]) => n === 1 && !kept.has(id)).map(([id]) => id));
}

/** "matmul #12 (blk.0/attn.q)" for errors about a unit. */
export function describeUnit(g: Graph, u: Unit): string {
  return describeNode(ref(g.nodes[resultOf(u)]));
}
