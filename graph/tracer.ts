// The tracer: model code calls it like an array library and it records a Graph. Every call checks its operands
// (graph/ops.ts inferNode) and throws a GraphError naming the node it was about to add.
//
//   const g = new Tracer();
//   const tok = g.slot("token", { kind: "Token", dtype: "i32", shape: [1] });
//   let x = g.gather(g.const({ role: "tok_embd" }, "f32", [V, D]), tok);
//   x = g.rmsnorm(x, g.const({ role: "attn_norm", layer: 0 }, "f32", [D]), 1e-5);
//   g.output("logits", g.matmul(x, w));
//   const graph = g.build();
import {
  bf16ToF32,
  type DType,
  encodeHalf,
  f16ToF32,
  isBlock,
  type ScalarDType,
  type Storage,
  storageFor,
} from "./dtype.ts";
import {
  type Attrs,
  type BinaryOp,
  type CompareOp,
  type Graph,
  GraphError,
  type Node,
  type NodeRef,
  type Op,
  type ReduceFn,
  type RopeStyle,
  sameShape,
  type SlotKind,
  type StateDecl,
  type UnaryOp,
} from "./ir.ts";
import { broadcastShapes, inferNode, normAxis } from "./ops.ts";
import { roleKey, type WeightRole } from "./weights.ts";

/** A traced value: the node that computes it. Read-only; only its tracer accepts it. */
export type Tensor = Readonly<Pick<Node, "id" | "op" | "dtype">> & { readonly shape: readonly number[] };
/** A tensor, or a number standing for a splat literal of the other operand's dtype and shape. */
export type Operand = Tensor | number;

export interface SlotSpec {
  kind: SlotKind;
  dtype: ScalarDType;
  shape: number[];
}

export interface RopeOptions {
  theta: number;
  style: RopeStyle;
  /** Rotated leading dims of each head (default: all of head_dim). */
  dims?: number;
  /** Per-frequency divisors f32[dims/2] (Llama 3 style rope_freqs). */
  factors?: Tensor;
}

/** Converts numbers to the storage of a scalar dtype (f16/bf16 round to nearest even). */
export function toStorage(dtype: ScalarDType, data: ArrayLike<number>): Storage {
  if (dtype === "f16" || dtype === "bf16") return encodeHalf(dtype, data);
  const s = storageFor(dtype, data.length);
  for (let i = 0; i < data.length; i++) s[i] = dtype === "bool" ? (data[i] ? 1 : 0) : data[i];
  return s;
}

export class Tracer {
  readonly nodes: Node[] = [];
  #outputs: Record<string, number> = {};
  #states = new Map<string, StateDecl>();
  #slots = new Map<string, number>();
  #consts = new Map<string, number>();
  #scope: string[] = [];

  // ------------------------------------------------------------ core

  /**
   * Adds a node of any op (the typed methods below are built on this). Leaves pass their dtype and shape in
   * `leaf`. Composite ops added here stay composite.
   */
  node(op: Op, inputs: readonly Tensor[], attrs: Attrs = {}, leaf?: { dtype: DType; shape: readonly number[] }): Tensor {
    const ref = this.#ref(op);
    for (const t of inputs) this.#own(t, ref);
    const inf = inferNode(
      op,
      inputs.map((t) => ({ dtype: t.dtype, shape: [...t.shape] })),
      attrs,
      ref,
      leaf && { dtype: leaf.dtype, shape: [...leaf.shape] },
    );
    const n: Node = { id: ref.id, op, dtype: inf.dtype, shape: inf.shape, inputs: inputs.map((t) => t.id), attrs: inf.attrs };
    if (ref.label) n.label = ref.label;
    this.nodes.push(n);
    return n;
  }

  /** Runs `fn` with `name` appended to the label path of every node it adds. */
  scope<T>(name: string, fn: () => T): T {
    this.#scope.push(name);
    try {
      return fn();
    } finally {
      this.#scope.pop();
    }
  }

  /** Sets the label of a traced node (scope path + name). */
  label<T extends Tensor>(t: T, name: string): T {
    this.#own(t, this.#ref("label"));
    this.nodes[t.id].label = [...this.#scope, name].join("/");
    return t;
  }

  // ------------------------------------------------------------ storage classes and leaves

  /** A weight, named by its typed role. One node per role: asking again with a different type throws. */
  const(role: WeightRole, dtype: DType, shape: readonly number[]): Tensor {
    const key = roleKey(role);
    const have = this.#consts.get(key);
    if (have !== undefined) return this.#same(have, dtype, shape, `const ${key}`);
    const t = this.node("const", [], { role: { ...role } }, { dtype, shape });
    this.#consts.set(key, t.id);
    return t;
  }

  /**
   * A per-step input. With a spec it declares the slot (again with the same spec returns the same node);
   * without one it refers to a slot declared before and throws an "unbound" GraphError otherwise.
   */
  slot(name: string, spec?: SlotSpec): Tensor {
    const have = this.#slots.get(name);
    if (have !== undefined) {
      if (spec && this.nodes[have].attrs.kind !== spec.kind) {
        throw new GraphError("duplicate", `slot ${name} declared as ${this.nodes[have].attrs.kind} and ${spec.kind}`, this.#ref("slot"));
      }
      return spec ? this.#same(have, spec.dtype, spec.shape, `slot ${name}`) : this.nodes[have];
    }
    if (!spec) throw new GraphError("unbound", `slot ${JSON.stringify(name)} was never declared`, this.#ref("slot"));
    const t = this.node("slot", [], { name, kind: spec.kind }, spec);
    this.#slots.set(name, t.id);
    return t;
  }

  /** The value of State buffer `name` at the start of the step; shape[0] is its capacity. */
  state(name: string, dtype: ScalarDType, shape: readonly number[]): Tensor {
    const have = this.#states.get(name);
    if (have) return this.#same(have.read, dtype, shape, `state ${name}`);
    const t = this.node("state", [], { name }, { dtype, shape });
    this.#states.set(name, { name, dtype, shape: [...t.shape], read: t.id, write: t.id });
    return t;
  }

  /** Sets what State buffer `name` holds after the step (once per step). */
  writeState(name: string, value: Tensor): void {
    const ref = this.#ref("writeState");
    this.#own(value, ref);
    const s = this.#states.get(name);
    if (!s) throw new GraphError("unbound", `state ${JSON.stringify(name)} was never declared`, ref);
    if (s.write !== s.read) throw new GraphError("duplicate", `state ${name} written twice`, ref);
    if (value.dtype !== s.dtype) throw new GraphError("dtype", `state ${name} is ${s.dtype}, value is ${value.dtype}`, ref);
    if (!sameShape(value.shape, s.shape)) {
      throw new GraphError("shape", `state ${name} is [${s.shape}], value is [${value.shape}]`, ref);
    }
    s.write = value.id;
  }

  /** A splat literal: every element equals `value` (rounded to the dtype). */
  literal(value: number, dtype: ScalarDType = "f32", shape: readonly number[] = []): Tensor {
    return this.node("literal", [], { value: roundTo(dtype, value) }, { dtype, shape });
  }

  /** A literal tensor with the given elements. */
  tensor(data: ArrayLike<number>, dtype: ScalarDType, shape: readonly number[]): Tensor {
    return this.node("literal", [], { data: toStorage(dtype, data) }, { dtype, shape });
  }

  /** Each element is its index along `axis`. */
  iota(shape: readonly number[], axis = 0, dtype: ScalarDType = "i32"): Tensor {
    return this.node("iota", [], { axis }, { dtype, shape });
  }

  // ------------------------------------------------------------ elementwise

  unary(op: UnaryOp, x: Tensor): Tensor {
    return this.node(op, [x]);
  }
  neg(x: Tensor): Tensor { return this.node("neg", [x]); }
  abs(x: Tensor): Tensor { return this.node("abs", [x]); }
  exp(x: Tensor): Tensor { return this.node("exp", [x]); }
  log(x: Tensor): Tensor { return this.node("log", [x]); }
  sqrt(x: Tensor): Tensor { return this.node("sqrt", [x]); }
  rsqrt(x: Tensor): Tensor { return this.node("rsqrt", [x]); }
  recip(x: Tensor): Tensor { return this.node("recip", [x]); }
  sin(x: Tensor): Tensor { return this.node("sin", [x]); }
  cos(x: Tensor): Tensor { return this.node("cos", [x]); }
  tanh(x: Tensor): Tensor { return this.node("tanh", [x]); }
  floor(x: Tensor): Tensor { return this.node("floor", [x]); }
  not(x: Tensor): Tensor { return this.node("not", [x]); }

  /** A binary op with numpy broadcasting (explicit broadcast nodes are added) and number operands as splats. */
  binary(op: BinaryOp | CompareOp, a: Operand, b: Operand): Tensor {
    const [x, y] = this.#operands(op, a, b);
    return this.node(op, [x, y]);
  }
  add(a: Operand, b: Operand): Tensor { return this.binary("add", a, b); }
  sub(a: Operand, b: Operand): Tensor { return this.binary("sub", a, b); }
  mul(a: Operand, b: Operand): Tensor { return this.binary("mul", a, b); }
  div(a: Operand, b: Operand): Tensor { return this.binary("div", a, b); }
  mod(a: Operand, b: Operand): Tensor { return this.binary("mod", a, b); }
  max(a: Operand, b: Operand): Tensor { return this.binary("max", a, b); }
  min(a: Operand, b: Operand): Tensor { return this.binary("min", a, b); }
  pow(a: Operand, b: Operand): Tensor { return this.binary("pow", a, b); }
  and(a: Operand, b: Operand): Tensor { return this.binary("and", a, b); }
  or(a: Operand, b: Operand): Tensor { return this.binary("or", a, b); }
  eq(a: Operand, b: Operand): Tensor { return this.binary("eq", a, b); }
  ne(a: Operand, b: Operand): Tensor { return this.binary("ne", a, b); }
  lt(a: Operand, b: Operand): Tensor { return this.binary("lt", a, b); }
  le(a: Operand, b: Operand): Tensor { return this.binary("le", a, b); }
  gt(a: Operand, b: Operand): Tensor { return this.binary("gt", a, b); }
  ge(a: Operand, b: Operand): Tensor { return this.binary("ge", a, b); }

  /** cond ? a : b, broadcasting all three. */
  select(cond: Tensor, a: Operand, b: Operand): Tensor {
    const ref = this.#ref("select");
    const [x, y] = this.#operands("select", a, b);
    const shape = broadcastShapes(cond.shape, x.shape);
    if (!shape) throw new GraphError("shape", `condition [${cond.shape}] and branches [${x.shape}] do not broadcast`, ref);
    return this.node("select", [this.broadcast(cond, shape), this.broadcast(x, shape), this.broadcast(y, shape)]);
  }

  cast(x: Tensor, to: ScalarDType): Tensor {
    return this.node("cast", [x], { to });
  }

  // ------------------------------------------------------------ reductions and contractions

  reduce(fn: ReduceFn, x: Tensor, axis = -1): Tensor {
    return this.node("reduce", [x], { fn, axis });
  }
  /** Sum along `axis` (kept as a dim of 1), accumulated in index order. */
  sum(x: Tensor, axis = -1): Tensor { return this.reduce("sum", x, axis); }
  reduceMax(x: Tensor, axis = -1): Tensor { return this.reduce("max", x, axis); }
  reduceMin(x: Tensor, axis = -1): Tensor { return this.reduce("min", x, axis); }
  argmax(x: Tensor, axis = -1): Tensor { return this.node("argmax", [x], { axis }); }

  /** x[..., K] · w[N, K]ᵀ (w may be a block type), or batched [B.., M, K] · [B.., N, K]ᵀ. */
  /** x · wᵀ; `xq`: x quantized to int8 per run and dotted in integers (block weights of graph/ops/qdot.ts XQ_RUNS). */
  matmul(x: Tensor, w: Tensor, opts: { xq?: boolean } = {}): Tensor {
    return this.node("matmul", [x, w], opts.xq ? { xq: true } : {});
  }

  /** Rows of `table` picked by `idx`: [...idx, ...table.shape[1:]]. */
  gather(table: Tensor, idx: Tensor): Tensor {
    return this.node("gather", [table, idx]);
  }

  // ------------------------------------------------------------ movement

  reshape(x: Tensor, shape: readonly number[]): Tensor {
    if (sameShape(x.shape, shape)) return x;
    return this.node("reshape", [x], { shape: [...shape] });
  }
  permute(x: Tensor, perm: readonly number[]): Tensor {
    return this.node("permute", [x], { perm: [...perm] });
  }
  /** Broadcasts to `shape` (numpy rules); returns `x` when it already has that shape. */
  broadcast(x: Tensor, shape: readonly number[]): Tensor {
    if (sameShape(x.shape, shape)) return x;
    return this.node("broadcast", [x], { shape: [...shape] });
  }
  /** slice(x, axis, start, end) on one axis, or slice(x, starts, ends) on all. */
  slice(x: Tensor, axis: number | readonly number[], start: number | readonly number[], end?: number): Tensor {
    if (typeof axis === "number") {
      const ref = this.#ref("slice");
      const a = normAxis(axis, x.shape.length, ref);
      const s = x.shape.map(() => 0), e = [...x.shape];
      s[a] = start as number;
      e[a] = end ?? x.shape[a];
      return this.node("slice", [x], { start: s, end: e });
    }
    return this.node("slice", [x], { start: [...axis], end: [...(start as readonly number[])] });
  }
  concat(xs: readonly Tensor[], axis = -1): Tensor {
    return this.node("concat", xs, { axis });
  }
  /** `target` with `update` written at the offset held by `offset` (one integer) along `axis`. */
  updateSlice(target: Tensor, update: Tensor, offset: Tensor, axis = 0): Tensor {
    return this.node("dynamic_update_slice", [target, update, offset], { axis });
  }
  /** `target` with row index[u] replaced by update[u] (index < 0 skips the row). */
  scatter(target: Tensor, update: Tensor, index: Tensor): Tensor {
    return this.node("scatter_update", [target, update, index]);
  }

  // ------------------------------------------------------------ composites (single nodes; see graph/ops/composite.ts)

  rmsnorm(x: Tensor, w: Tensor, eps: number): Tensor {
    return this.node("rmsnorm", [x, w], { eps });
  }
  layernorm(x: Tensor, w: Tensor, b: Tensor, eps: number): Tensor {
    return this.node("layernorm", [x, w, b], { eps });
  }
  /** Rotary embedding of x[rows, heads, head_dim] at positions pos[rows]. */
  rope(x: Tensor, pos: Tensor, o: RopeOptions): Tensor {
    const ins = o.factors ? [x, pos, o.factors] : [x, pos];
    return this.node("rope", ins, { theta: o.theta, style: o.style, dims: o.dims });
  }
  softmax(x: Tensor, axis = -1): Tensor {
    return this.node("softmax", [x], { axis });
  }
  /** softmax(scale · q·kᵀ, masked) · v with grouped-query heads: q head h reads kv head ⌊h / (H/KVH)⌋. */
  attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: number, softcap?: number): Tensor {
    return this.node("attention", [q, k, v, mask], softcap === undefined ? { scale } : { scale, softcap });
  }
  /**
   * Attention of each row r through its own block table row: positions 0..pos[r] (with a window, the last `window`
   * of them), position t at pool row table[r, t / block] * block + t % block, scores soft-capped where `softcap` is
   * given (graph/ops/composite.ts expandPagedAttention).
   */
  pagedAttention(q: Tensor, k: Tensor, v: Tensor, table: Tensor, pos: Tensor, o: { scale: number; block: number; window?: number; softcap?: number }): Tensor {
    return this.node("paged_attention", [q, k, v, table, pos], {
      scale: o.scale, block: o.block, ...(o.window !== undefined ? { window: o.window } : {}), ...(o.softcap !== undefined ? { softcap: o.softcap } : {}),
    });
  }
  /** bool[rows, cap]: position t is visible to row r when t <= pos + r (and, with a window, t > pos + r - window). */
  causalMask(pos: Tensor, rows: number, cap: number, window?: number): Tensor {
    return this.node("causal_mask", [pos], window === undefined ? { rows, cap } : { rows, cap, window });
  }
  silu(x: Tensor): Tensor { return this.node("silu", [x]); }
  gelu(x: Tensor): Tensor { return this.node("gelu", [x]); }
  siluMul(a: Tensor, b: Tensor): Tensor { return this.node("silu_mul", [a, b]); }
  /** (token, nonfinite) i32[rows, 2] drawn from logits f32[rows, V] under a Sampler slot u32[rows, 8]; graph/sample.ts. */
  sample(logits: Tensor, params: Tensor): Tensor { return this.node("sample", [logits, params]); }
  /** Logits f32[rows, V] after bias, bans, penalties and a grammar mask (graph/logits.ts). */
  logitsProcess(logits: Tensor, extra: Tensor, mask: Tensor, counts?: Tensor): Tensor {
    return this.node("logits_process", counts ? [logits, extra, mask, counts] : [logits, extra, mask]);
  }
  /** The sampled token's logprob and the n best, f32[rows, 1 + 2n], from raw logits (graph/logits.ts). */
  logprobs(logits: Tensor, sample: Tensor, params: Tensor, n: number): Tensor { return this.node("logprobs", [logits, sample, params], { n }); }

  // ------------------------------------------------------------ results

  /** Names a result of the step. */
  output(name: string, t: Tensor): void {
    const ref = this.#ref("output");
    this.#own(t, ref);
    if (name in this.#outputs) throw new GraphError("duplicate", `output ${JSON.stringify(name)} declared twice`, ref);
    this.#outputs[name] = t.id;
  }

  /** The node computing output `name` (for callers appending to a traced step, e.g. a sampler after logits). */
  getOutput(name: string): Tensor | undefined {
    const id = this.#outputs[name];
    return id === undefined ? undefined : this.nodes[id];
  }

  /** Drops output `name` (e.g. to replace logits by a sampled token). */
  removeOutput(name: string): void {
    delete this.#outputs[name];
  }

  /** The graph traced so far (a copy: the tracer may go on). */
  build(): Graph {
    if (Object.keys(this.#outputs).length === 0 && this.#states.size === 0) {
      throw new GraphError("unbound", "a graph needs an output or a state", this.#ref("build"));
    }
    const states: Record<string, StateDecl> = {};
    for (const [k, s] of this.#states) states[k] = { ...s, shape: [...s.shape] };
    return {
      nodes: this.nodes.map((n) => ({ ...n, shape: [...n.shape], inputs: [...n.inputs], attrs: { ...n.attrs } })),
      outputs: { ...this.#outputs },
      states,
    };
  }

  // ------------------------------------------------------------ internals

  #ref(op: string): NodeRef {
    const label = this.#scope.length ? this.#scope.join("/") : undefined;
    return label ? { id: this.nodes.length, op, label } : { id: this.nodes.length, op };
  }

  #own(t: Tensor, ref: NodeRef): void {
    if (!t || this.nodes[t.id] !== t) throw new GraphError("order", "operand is not a node of this tracer", ref);
  }

  #same(id: number, dtype: DType, shape: readonly number[], what: string): Tensor {
    const n = this.nodes[id];
    if (n.dtype !== dtype || !sameShape(n.shape, shape)) {
      throw new GraphError("duplicate", `${what} is ${n.dtype}[${n.shape}], asked as ${dtype}[${shape}]`, this.#ref(n.op));
    }
    return n;
  }

  #operands(op: string, a: Operand, b: Operand): [Tensor, Tensor] {
    const ref = this.#ref(op);
    if (typeof a === "number" && typeof b === "number") throw new GraphError("dtype", "two numbers: no dtype to use", ref);
    if (typeof a !== "number") this.#own(a, ref);
    if (typeof b !== "number") this.#own(b, ref);
    const like = (typeof a === "number" ? b : a) as Tensor;
    if (isBlock(like.dtype)) throw new GraphError("dtype", `operand ${like.dtype} is a block type`, ref);
    const x = typeof a === "number" ? this.literal(a, like.dtype as ScalarDType, like.shape) : a;
    const y = typeof b === "number" ? this.literal(b, like.dtype as ScalarDType, like.shape) : b;
    if (sameShape(x.shape, y.shape)) return [x, y];
    const shape = broadcastShapes(x.shape, y.shape);
    if (!shape) throw new GraphError("shape", `operands [${x.shape}] and [${y.shape}] do not broadcast`, ref);
    return [this.broadcast(x, shape), this.broadcast(y, shape)];
  }
}

/** The number an element of `dtype` holds after storing `x` (rounded, wrapped, saturated as storage does). */
export function roundTo(dtype: ScalarDType, x: number): number {
  const v = toStorage(dtype, [x])[0];
  if (dtype === "f16") return f16ToF32(v);
  if (dtype === "bf16") return bf16ToF32(v);
  return v;
}
