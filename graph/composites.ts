// Composite ops defined over primitives. The planner sees a composite as one node (and may give it a dedicated
// kernel); the oracle evaluates its expansion, so these functions ARE the meaning of each composite, including
// the order of every rounding.
import type { Attrs, CompositeOp, Graph, Node, StateDecl } from "./ir.ts";
import { COMPOSITE, LEAF } from "./ops.ts";
import { type Tensor, Tracer } from "./tracer.ts";

type Expander = (g: Tracer, ins: Tensor[], a: Attrs) => Tensor;

/** rms: y = w · (x · rsqrt(Σx²/D + eps)), as llama2.c orders it. */
export function expandRmsnorm(g: Tracer, [x, w]: Tensor[], a: Attrs): Tensor {
  const D = x.shape[x.shape.length - 1];
  const r = g.rsqrt(g.add(g.div(g.sum(g.mul(x, x)), D), a.eps!));
  return g.mul(w, g.mul(r, x));
}

/** y = (x - mean) · rsqrt(var + eps) · w + b, var the mean of squared deviations. */
export function expandLayernorm(g: Tracer, [x, w, b]: Tensor[], a: Attrs): Tensor {
  const D = x.shape[x.shape.length - 1];
  const d = g.sub(x, g.div(g.sum(x), D));
  const r = g.rsqrt(g.add(g.div(g.sum(g.mul(d, d)), D), a.eps!));
  return g.add(g.mul(g.mul(d, r), w), b);
}

/** exp(x - max) / Σ exp(x - max) along the axis. */
export function expandSoftmax(g: Tracer, [x]: Tensor[], a: Attrs): Tensor {
  const axis = a.axis ?? x.shape.length - 1;
  const e = g.exp(g.sub(x, g.reduceMax(x, axis)));
  return g.div(e, g.sum(e, axis));
}

/** x · (1 / (1 + exp(-x))). */
export function expandSilu(g: Tracer, [x]: Tensor[]): Tensor {
  return g.mul(x, g.recip(g.add(g.exp(g.neg(x)), 1)));
}

/** 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). */
export function expandGelu(g: Tracer, [x]: Tensor[]): Tensor {
  const inner = g.mul(g.add(x, g.mul(g.mul(g.mul(x, x), x), 0.044715)), Math.sqrt(2 / Math.PI));
  return g.mul(g.mul(x, 0.5), g.add(g.tanh(inner), 1));
}

export function expandSiluMul(g: Tracer, [x, y]: Tensor[]): Tensor {
  return g.mul(expandSilu(g, [x]), y);
}

/**
 * Rotary embedding of x[R, H, D] at positions pos[R]: frequency i (of n = dims/2) is 1 / theta^(2i/dims)
 * (divided by factors[i] when given); angle = pos · freq. "adjacent" rotates pairs (2i, 2i+1) as llama2.c and
 * GGML's rope NORM do; "half" rotates (i, i + n) as Hugging Face's rotate_half does. Dims past `dims` pass.
 */
export function expandRope(g: Tracer, [x, pos, factors]: Tensor[], a: Attrs): Tensor {
  const [R, H, D] = x.shape;
  const dims = a.dims ?? D, n = dims / 2;
  let freq = g.recip(g.pow(g.literal(a.theta!, "f32", [n]), g.div(g.mul(g.iota([n], 0, "f32"), 2), dims)));
  if (factors) freq = g.div(freq, factors);
  const ang = g.mul(g.reshape(g.cast(pos, "f32"), [R, 1]), freq); // [R, n]
  const c = g.broadcast(g.reshape(g.cos(ang), [R, 1, n]), [R, H, n]);
  const s = g.broadcast(g.reshape(g.sin(ang), [R, 1, n]), [R, H, n]);
  const xr = dims < D ? g.slice(x, 2, 0, dims) : x;
  let x0: Tensor, x1: Tensor;
  if (a.style === "adjacent") {
    const p = g.reshape(xr, [R, H, n, 2]);
    x0 = g.reshape(g.slice(p, 3, 0, 1), [R, H, n]);
    x1 = g.reshape(g.slice(p, 3, 1, 2), [R, H, n]);
  } else {
    x0 = g.slice(xr, 2, 0, n);
    x1 = g.slice(xr, 2, n, dims);
  }
  const y0 = g.sub(g.mul(x0, c), g.mul(x1, s));
  const y1 = g.add(g.mul(x0, s), g.mul(x1, c));
  const y = a.style === "adjacent"
    ? g.reshape(g.concat([g.reshape(y0, [R, H, n, 1]), g.reshape(y1, [R, H, n, 1])], 3), [R, H, dims])
    : g.concat([y0, y1], 2);
  return dims < D ? g.concat([y, g.slice(x, 2, dims, D)], 2) : y;
}

/** bool[rows, cap]: t <= pos + r, and t + window > pos + r with a window. */
export function expandCausalMask(g: Tracer, [pos]: Tensor[], a: Attrs): Tensor {
  const R = a.rows!, C = a.cap!;
  const dt = pos.dtype as "i32" | "u32";
  const p = g.broadcast(g.reshape(pos, [1, 1]), [R, C]);
  const t = g.iota([R, C], 1, dt), last = g.add(p, g.iota([R, C], 0, dt));
  const causal = g.le(t, last);
  return a.window === undefined ? causal : g.and(causal, g.gt(g.add(t, a.window), last));
}

/**
 * Grouped-query attention over the whole [C] of k and v: for query head h (kv head ⌊h/G⌋, G = H/KVH),
 * p = softmax(select(mask, scale · q·kᵀ, -inf)) and out = p·v; with a softcap the scores are
 * softcap · tanh(scale · q·kᵀ / softcap). Masked positions contribute exactly 0·v, so
 * their k/v rows must be finite (State starts zeroed; paged reads must point at real rows).
 */
export function expandAttention(g: Tracer, [q, k, v, mask]: Tensor[], a: Attrs): Tensor {
  const [R, H, D] = q.shape, [C, KVH] = k.shape, Dv = v.shape[2];
  const G = H / KVH;
  const qh = g.reshape(g.permute(g.reshape(q, [R, KVH, G, D]), [1, 0, 2, 3]), [KVH, R * G, D]);
  let s = g.mul(g.matmul(qh, g.permute(k, [1, 0, 2])), a.scale!); // [KVH, R*G, C]
  if (a.softcap !== undefined) s = g.mul(g.tanh(g.div(s, a.softcap)), a.softcap);
  const m = g.reshape(g.broadcast(g.reshape(mask, [1, R, 1, C]), [KVH, R, G, C]), [KVH, R * G, C]);
  const p = expandSoftmax(g, [g.select(m, s, -Infinity)], { axis: 2 });
  const o = g.matmul(p, g.permute(v, [1, 2, 0])); // [KVH, R*G, Dv]
  return g.reshape(g.permute(g.reshape(o, [KVH, R, G, Dv]), [1, 0, 2, 3]), [R, H, Dv]);
}

/**
 * Attention of each row through its own block table: row r (position pos[r]) sees logical positions
 * 0..pos[r], and logical position t lives at pool row table[r, ⌊t/B⌋]·B + t mod B. The whole table is swept
 * (MB·B positions) under the mask, so every table entry must name a real block whose rows are finite (a
 * server points unused entries at a reserved block).
 */
export function expandPagedAttention(g: Tracer, [q, kp, vp, table, pos]: Tensor[], a: Attrs): Tensor {
  const [R, H, D] = q.shape, KVH = kp.shape[1], Dv = vp.shape[2];
  const MB = table.shape[1], B = a.block!, T = MB * B, G = H / KVH;
  const dt = table.dtype as "i32" | "u32";
  const blk = g.broadcast(g.reshape(g.mul(table, B), [R, MB, 1]), [R, MB, B]);
  const phys = g.reshape(g.add(blk, g.iota([R, MB, B], 2, dt)), [R, T]);
  const rows = (pool: Tensor) => {
    const x = g.gather(pool, phys); // [R, T, KVH, D]
    return x.dtype === "f32" ? x : g.cast(x, "f32");
  };
  const k = g.permute(rows(kp), [0, 2, 1, 3]); // [R, KVH, T, D]
  const v = g.permute(rows(vp), [0, 2, 3, 1]); // [R, KVH, Dv, T]
  const s = g.mul(g.matmul(g.reshape(q, [R, KVH, G, D]), k), a.scale!); // [R, KVH, G, T]
  const p = pos.dtype === dt ? pos : g.cast(pos, dt);
  const mask = g.le(g.iota([R, T], 1, dt), g.broadcast(g.reshape(p, [R, 1]), [R, T]));
  const m = g.broadcast(g.reshape(mask, [R, 1, 1, T]), [R, KVH, G, T]);
  const w = expandSoftmax(g, [g.select(m, s, -Infinity)], { axis: 3 });
  return g.reshape(g.matmul(w, v), [R, H, Dv]); // [R, KVH, G, Dv]
}

/** Composites with no expansion: their oracles run directly (graph/sample.ts, graph/logits.ts). */
type Unexpanded = "sample" | "logits_process" | "logprobs";
const UNEXPANDED: ReadonlySet<string> = new Set<Unexpanded>(["sample", "logits_process", "logprobs"]);

/** Expansions by op; `sample` has none (its meaning is graph/sample.ts, which the oracle runs directly). */
export const EXPAND: Record<Exclude<CompositeOp, Unexpanded>, Expander> = {
  rmsnorm: expandRmsnorm,
  layernorm: expandLayernorm,
  rope: expandRope,
  softmax: expandSoftmax,
  attention: expandAttention,
  paged_attention: expandPagedAttention,
  causal_mask: expandCausalMask,
  silu: expandSilu,
  gelu: expandGelu,
  silu_mul: expandSiluMul,
};

/** A graph with every composite replaced by its primitives, and where each original node's value now is. */
export interface Expanded {
  graph: Graph;
  /** map[originalId] = id in `graph` of the node holding the same value. */
  map: number[];
}

/**
 * Replaces composites by their expansions; primitive nodes, and composites for which `keep` says true (say, those
 * a target has a dedicated kernel for), are copied as they are.
 */
export function expandComposites(src: Graph, keep?: (n: Node) => boolean): Expanded {
  const g = new Tracer();
  const map = new Array<number>(src.nodes.length);
  const t = (id: number) => g.nodes[map[id]];
  for (const n of src.nodes) {
    const ins = n.inputs.map(t);
    let out: Tensor;
    if (COMPOSITE.has(n.op) && !UNEXPANDED.has(n.op) && !keep?.(n)) {
      out = g.scope(n.label ? `${n.label}/${n.op}` : n.op, () => EXPAND[n.op as Exclude<CompositeOp, Unexpanded>](g, ins, n.attrs));
    } else {
      out = g.node(n.op, ins, n.attrs, LEAF.has(n.op) ? { dtype: n.dtype, shape: n.shape } : undefined);
      if (n.label) g.nodes[out.id].label = n.label;
    }
    map[n.id] = out.id;
  }
  const states: Record<string, StateDecl> = {};
  for (const [k, s] of Object.entries(src.states)) states[k] = { ...s, read: map[s.read], write: map[s.write] };
  const outputs: Record<string, number> = {};
  for (const [k, id] of Object.entries(src.outputs)) outputs[k] = map[id];
  return { graph: { nodes: g.nodes, outputs, states }, map };
}
