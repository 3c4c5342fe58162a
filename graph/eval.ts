// The oracle: evaluates any Graph on the CPU in plain TypeScript. Deterministic; its arithmetic and accumulation
// order are documented in eval_ops.ts and its tier-2 tolerance in tolerance.ts. Tests and device checks call it;
// generation never does.
//
// Composites are evaluated through their expansion (composites.ts), cached per graph object: do not mutate a
// graph after evaluating it. Results may alias inputs (a reshape of a slot is the slot's array): treat every
// array in and out as read-only.
import { byteSize, type DType, isBlock, isFloat, type Storage, storageFor, storageFromBytes } from "./dtype.ts";
import { type AccumulateOrder, runPrimitive } from "./eval_ops.ts";
import { expandComposites } from "./composites.ts";
import { type Graph, GraphError, type Node, numel } from "./ir.ts";
import { type BoundMode, propagate, SIGMAS } from "./tolerance.ts";
import { recordOf } from "./ops/mod.ts";
import { toStorage } from "./tracer.ts";
import { roleKey, type WeightMap, type WeightRole, type WeightStore } from "./weights.ts";

/** Weight values by role: a record keyed by roleKey, or a function. Bytes (Uint8Array) are reinterpreted. */
export type ConstSource = Record<string, Storage> | ((role: WeightRole, node: Node) => Storage | undefined);

export interface EvalInputs {
  consts?: ConstSource;
  /** Slot values by slot name: the dtype's storage, or numbers (converted). */
  slots?: Record<string, Storage | ArrayLike<number>>;
  /** State buffers by name as the step begins; a missing one starts zeroed. */
  state?: Record<string, Storage>;
  /** Tier-2 bounds carried by incoming state (Evaluation.bounds.state of the previous step). */
  stateBounds?: Record<string, Float32Array>;
}

export interface EvalOptions {
  /** Return every node's value, keyed by the id of the node in the graph given to evaluate. */
  env?: boolean;
  /** Also compute tier-2 bounds (tolerance.ts) of every output and state; true means "expected". */
  bounds?: boolean | BoundMode;
  /** Accumulation order of matmul and reduce-sum: "sequential" is the oracle; others emulate a device. */
  order?: AccumulateOrder;
}

export interface Evaluation {
  output: Record<string, Storage>;
  state: Record<string, Storage>;
  env?: Map<number, Storage>;
  bounds?: { output: Record<string, Float32Array>; state: Record<string, Float32Array> };
}

interface Prepared {
  graph: Graph;
  map: number[];
  lastUse: Int32Array;
  /** By the expanded id of its output: a composite bounded as a whole (its node, its inputs' expanded ids). */
  composites: Map<number, { node: Node; ins: number[] }>;
}

const prepared = new WeakMap<Graph, Prepared>();

/** Whether a composite is bounded as a whole: its record's tolerance is a function (graph/tolerance_composite.ts). */
function boundedAsWhole(op: string): boolean {
  return typeof recordOf(op)?.tolerance === "function";
}

/** A composite's bound as a whole, from its inputs' nodes, values and bounds; undefined for any other node. */
function compositeBound(n: Node, ins: Node[], v: Storage[], e: (Float32Array | null)[], mode: BoundMode): Float32Array | undefined {
  const t = recordOf(n.op)?.tolerance;
  if (typeof t !== "function" || !isFloat(n.dtype)) return undefined;
  return t(n, ins, v, e, mode === "worst");
}

function prepare(g: Graph): Prepared {
  let p = prepared.get(g);
  if (p) return p;
  const { graph, map } = expandComposites(g);
  const lastUse = new Int32Array(graph.nodes.length).fill(-1);
  for (const n of graph.nodes) for (const i of n.inputs) lastUse[i] = n.id;
  for (const id of Object.values(graph.outputs)) lastUse[id] = graph.nodes.length;
  for (const s of Object.values(graph.states)) lastUse[s.write] = graph.nodes.length;
  const composites = new Map<number, { node: Node; ins: number[] }>();
  for (const n of g.nodes) {
    if (!boundedAsWhole(n.op)) continue;
    const out = map[n.id], ins = n.inputs.map((i) => map[i]);
    if (ins.includes(out)) continue;
    composites.set(out, { node: n, ins });
    for (const i of ins) lastUse[i] = Math.max(lastUse[i], out); // its inputs live until its bound is taken
  }
  p = { graph, map, lastUse, composites };
  prepared.set(g, p);
  return p;
}

const constCache = new WeakMap<object, Storage>();

function constValue(n: Node, src: ConstSource | undefined): Storage {
  const role = n.attrs.role!;
  const raw = typeof src === "function" ? src(role, n) : src?.[roleKey(role)];
  if (!raw) throw new GraphError("unbound", `no value for const ${roleKey(role)}`, n);
  let s = raw;
  if (raw instanceof Uint8Array && n.dtype !== "u8" && n.dtype !== "bool" && !isBlock(n.dtype)) {
    s = constCache.get(raw) ?? storageFromBytes(n.dtype, raw);
    constCache.set(raw, s);
  }
  checkStorage(n, s, `const ${roleKey(role)}`);
  return s;
}

function checkStorage(n: { dtype: DType; shape: number[] } & Node, s: Storage, what: string): void {
  const want = storageFor(n.dtype, 0).constructor;
  if (s.constructor !== want) throw new GraphError("dtype", `${what}: ${s.constructor.name} does not hold ${n.dtype}`, n);
  const len = isBlock(n.dtype) ? byteSize(n.dtype, numel(n.shape)) : numel(n.shape);
  if (s.length !== len) throw new GraphError("shape", `${what}: ${s.length} elements for [${n.shape}] ${n.dtype}`, n);
}

function slotValue(n: Node, v: Storage | ArrayLike<number> | undefined): Storage {
  const name = n.attrs.name!;
  if (v === undefined) throw new GraphError("unbound", `no value for slot ${JSON.stringify(name)}`, n);
  const s = v.constructor === storageFor(n.dtype, 0).constructor ? v as Storage : toStorage(n.dtype as "i32", v);
  checkStorage(n, s, `slot ${name}`);
  return s;
}

/** Evaluates one step of `graph`. */
export function evaluate(graph: Graph, inputs: EvalInputs = {}, options: EvalOptions = {}): Evaluation {
  const { graph: g, map, lastUse, composites } = prepare(graph);
  const vals = new Array<Storage | undefined>(g.nodes.length);
  const mode: BoundMode | undefined = options.bounds === true ? "expected" : options.bounds || undefined;
  const bnds = mode ? new Array<Float32Array | null>(g.nodes.length) : undefined;
  const scale = mode === "expected" ? SIGMAS : 1;
  const order = options.order ?? "sequential";
  const keep = !!options.env;
  for (const n of g.nodes) {
    let r: Storage;
    switch (n.op) {
      case "const": r = constValue(n, inputs.consts); break;
      case "slot": r = slotValue(n, inputs.slots?.[n.attrs.name!]); break;
      case "state": {
        const s = inputs.state?.[n.attrs.name!];
        r = s ?? storageFor(n.dtype, numel(n.shape));
        if (s) checkStorage(n, s, `state ${n.attrs.name}`);
        break;
      }
      default: r = runPrimitive(n, n.inputs.map((i) => g.nodes[i]), n.inputs.map((i) => vals[i]!), order);
    }
    vals[n.id] = r;
    if (bnds) {
      const ins = n.inputs.map((i) => g.nodes[i]);
      let sb = n.op === "state" ? inputs.stateBounds?.[n.attrs.name!] : undefined;
      if (sb && scale !== 1) sb = sb.map((x) => x / scale);
      bnds[n.id] = propagate(n, ins, n.inputs.map((i) => vals[i]!), n.inputs.map((i) => bnds[i]), r, mode!, sb, g.nodes);
      const c = composites.get(n.id);
      if (c) {
        const cb = compositeBound(c.node, c.ins.map((i) => g.nodes[i]), c.ins.map((i) => vals[i]!), c.ins.map((i) => bnds[i]), mode!);
        if (cb) bnds[n.id] = cb;
      }
    }
    if (!keep) {
      for (const i of n.inputs) {
        if (lastUse[i] === n.id) {
          vals[i] = undefined;
          if (bnds) bnds[i] = null;
        }
      }
    }
  }
  const out: Evaluation = { output: {}, state: {} };
  for (const [k, id] of Object.entries(g.outputs)) out.output[k] = vals[id]!;
  for (const [k, s] of Object.entries(g.states)) out.state[k] = vals[s.write]!;
  if (bnds) {
    const zero = (id: number) => bnds[id] ? bnds[id]!.map((x) => x * scale) : new Float32Array(numel(g.nodes[id].shape));
    out.bounds = { output: {}, state: {} };
    for (const [k, id] of Object.entries(g.outputs)) out.bounds.output[k] = zero(id);
    for (const [k, s] of Object.entries(g.states)) out.bounds.state[k] = zero(s.write);
  }
  if (keep) {
    out.env = new Map();
    for (let i = 0; i < map.length; i++) out.env.set(i, vals[map[i]]!);
  }
  return out;
}

/** Const values from a WeightStore through a WeightMap; a role the map does not name is unbound. */
export function constsFromStore(store: WeightStore, map: WeightMap): ConstSource {
  return (role, node) => {
    const name = map.get(roleKey(role));
    if (name === undefined) return undefined;
    const info = store.info(name);
    if (!info) throw new GraphError("unbound", `store has no tensor ${name} for ${roleKey(role)}`, node);
    if (info.dtype !== node.dtype) throw new GraphError("dtype", `${name} is ${info.dtype}, graph wants ${node.dtype}`, node);
    if (numel(info.shape) !== numel(node.shape)) {
      throw new GraphError("shape", `${name} is [${info.shape}], graph wants [${node.shape}]`, node);
    }
    return store.bytes(name);
  };
}
