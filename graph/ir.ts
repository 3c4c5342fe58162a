// The graph: plain data describing one model step. Every backend compiles it; graph/eval.ts defines its meaning.
//
// A Graph is a list of nodes in topological order whose ids equal their index (passes renumber). Storage
// classes are node kinds: `const` (a weight named by its WeightRole), `state` (the value a State buffer holds
// when the step begins), `slot` (a per-step input), `literal` (a value baked into the graph); every other node is
// a Temp. `outputs` names the nodes whose values the step returns, and `states` names, for each State buffer,
// the node reading it and the node whose value it holds after the step (its `write`).
import type { DType, Storage } from "./dtype.ts";
import type { WeightRole } from "./weights.ts";
import type { COMPOSITE_OPS } from "./ops/composite.ts";
import type { UNARY_OPS } from "./unary.ts";
import type { BINARY_OPS } from "./binary.ts";

/** Leaves: storage classes, literals and index tensors. */
export type LeafOp = "const" | "slot" | "state" | "literal" | "iota";
/** Elementwise with one input, declared by their records (graph/unary.ts). `not` is for bool; exp..floor for floats. */
export type UnaryOp = keyof typeof UNARY_OPS;
/**
 * Elementwise with two inputs of the same dtype and shape, declared by their records (graph/binary.ts).
 * `and`/`or` are for bool and integers (bitwise).
 */
export type BinaryOp = keyof typeof BINARY_OPS;
/** Elementwise comparisons giving bool. */
export type CompareOp = "eq" | "ne" | "lt" | "le" | "gt" | "ge";
/** Everything else the oracle implements directly. */
export type OtherOp =
  | "select" | "cast"
  | "reduce" | "argmax"
  | "matmul" | "gather"
  | "reshape" | "permute" | "broadcast" | "slice" | "concat"
  | "dynamic_update_slice" | "scatter_update";
export type PrimitiveOp = LeafOp | UnaryOp | BinaryOp | CompareOp | OtherOp;
/**
 * Composite ops: single nodes for the planner, defined by their records (graph/ops/composite.ts: type rule,
 * expansion over primitives, tolerance, lowering), so a new composite is its record alone; the sampler's
 * composites have no expansion (graph/sample.ts, graph/logits.ts are their oracles).
 */
export type CompositeOp = keyof typeof COMPOSITE_OPS | "sample" | "logits_process" | "logprobs";
/**
 * Collectives over the ranks of a tensor-parallel group (graph/collective.ts): every rank runs the same graph on
 * its shard of the weights, and these are the only nodes whose value depends on the other ranks.
 */
export type CollectiveOp = "all_reduce" | "all_gather";
export type Op = PrimitiveOp | CompositeOp | CollectiveOp;

/** Per-step inputs at stable device addresses. */
export type SlotKind = "Token" | "Pos" | "SlotMap" | "WriteMap" | "Sampler" | "Input";
export type RopeStyle = "adjacent" | "half";
export type ReduceFn = "sum" | "max" | "min";

/**
 * Attributes of a node: one plain record; which fields an op uses is in its record's doc (graph/ops/, OP_DOC).
 * Axes are stored non-negative. Shapes are row-major, outermost first.
 */
export interface Attrs {
  /** const: the weight's typed role. */
  role?: WeightRole;
  /** slot, state: the name the inputs, outputs and bindings use. */
  name?: string;
  /** slot: what the slot carries. */
  kind?: SlotKind;
  /** literal: every element equals `value` (a splat), unless `data` is given. */
  value?: number;
  /** literal: the elements, as the dtype's storage (graph/dtype.ts). */
  data?: Storage;
  /** iota, reduce, argmax, concat, dynamic_update_slice, softmax: the axis. */
  axis?: number;
  /** reduce: the reduction. */
  fn?: ReduceFn;
  /** logprobs: top logprobs per row (the most a row may ask for). */
  n?: number;
  /** reshape, broadcast: the result shape. */
  shape?: number[];
  /** permute: result axis i is input axis perm[i]. */
  perm?: number[];
  /** slice: per-axis [start, end) bounds. */
  start?: number[];
  end?: number[];
  /** cast: the target dtype (also node.dtype). */
  to?: DType;
  /** rmsnorm, layernorm. */
  eps?: number;
  /** rope: frequency base, pair convention, rotated leading dims of each head (default all). */
  theta?: number;
  style?: RopeStyle;
  dims?: number;
  /** attention: the factor applied to q·k. */
  scale?: number;
  /** attention, paged_attention: scores become softcap · tanh(score / softcap) after the scale (Gemma 2). */
  softcap?: number;
  /** paged_attention: positions per KV block (the pool's rows are numBlocks * block). */
  block?: number;
  /** causal_mask: result shape [rows, cap]. */
  rows?: number;
  cap?: number;
  /** causal_mask, paged_attention: only the last `window` positions are visible (sliding-window attention). */
  window?: number;
  /**
   * matmul with a block-type weight that has an integer path (graph/ops/qdot.ts XQ_RUNS): x is quantized to int8
   * per run and dotted in integers (what the decode gemv computes under CompileOptions.quantizedX).
   */
  xq?: boolean;
  /** all_reduce, all_gather: the number of ranks in the group. */
  ranks?: number;
}

export interface Node {
  id: number;
  op: Op;
  dtype: DType;
  shape: number[];
  inputs: number[];
  attrs: Attrs;
  /** A user label (tracer scope path and name), for errors and dumps. */
  label?: string;
}

/** A State buffer of the step: carried across steps, preallocated; `shape[0]` is its capacity. */
export interface StateDecl {
  name: string;
  dtype: DType;
  shape: number[];
  /** The `state` node reading the buffer at the start of the step. */
  read: number;
  /** The node whose value the buffer holds after the step (== read when the step leaves it unchanged). */
  write: number;
}

/**
 * Elementwise nodes a planner may fuse into one kernel: a tree of nodes of one shape whose only value leaving
 * the group is `root`'s. `nodes` lists members in topological order (root last); `inputs` the nodes outside the
 * group that members read. Members are elementwise ops (unary, binary, compare, select, cast, silu, gelu,
 * silu_mul) and broadcasts (read with broadcast indexing).
 */
export interface FusionGroup {
  root: number;
  nodes: number[];
  inputs: number[];
}

export interface Graph {
  nodes: Node[];
  /** Named results of the step, in declaration order. */
  outputs: Record<string, number>;
  /** State buffers by name. */
  states: Record<string, StateDecl>;
  /** Fusion annotation from graph/passes/fuse.ts; ids refer to this graph (any later pass drops it). */
  groups?: FusionGroup[];
}

export type GraphErrorCode =
  | "shape" // shapes disagree or a shape is malformed
  | "dtype" // a dtype an op does not accept, or operands of different dtypes
  | "axis" // an axis or permutation out of range
  | "attr" // a missing or malformed attribute
  | "unbound" // a slot, state or const without a declaration or a value
  | "duplicate" // one name declared twice with different types
  | "order" // a graph that is not topologically ordered, or a foreign node
  | "range"; // an index read from a tensor at evaluation time is out of range

/** The node an error is about: its op and id, and its label when it has one. */
export interface NodeRef {
  id: number;
  op: string;
  label?: string;
}

/** Every error about a graph, at trace time, in passes, or evaluation, names the node it is about. */
export class GraphError extends Error {
  readonly code: GraphErrorCode;
  readonly node?: NodeRef;
  constructor(code: GraphErrorCode, message: string, node?: NodeRef) {
    super(`${node ? `${describeNode(node)}: ` : ""}${message} [${code}]`);
    this.name = "GraphError";
    this.code = code;
    this.node = node;
  }
}

/** "matmul #12 (blk.0/attn.q)". */
export function describeNode(n: NodeRef): string {
  return `${n.op} #${n.id}${n.label ? ` (${n.label})` : ""}`;
}

/** Element count of a shape ([] is a scalar: 1). */
export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Row-major strides of a shape, in elements. */
export function stridesOf(shape: readonly number[]): number[] {
  const s = new Array<number>(shape.length);
  let acc = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The slots a graph reads, by name (derived from its `slot` nodes). */
export function slotsOf(g: Graph): Record<string, { node: number; kind: SlotKind; dtype: DType; shape: number[] }> {
  const out: Record<string, { node: number; kind: SlotKind; dtype: DType; shape: number[] }> = {};
  for (const n of g.nodes) {
    if (n.op === "slot") out[n.attrs.name!] = { node: n.id, kind: n.attrs.kind!, dtype: n.dtype, shape: n.shape };
  }
  return out;
}

/** The constants a graph reads (derived from its `const` nodes). */
export function constsOf(g: Graph): { node: number; role: WeightRole; dtype: DType; shape: number[] }[] {
  return g.nodes.filter((n) => n.op === "const").map((n) => ({
    node: n.id,
    role: n.attrs.role!,
    dtype: n.dtype,
    shape: n.shape,
  }));
}
