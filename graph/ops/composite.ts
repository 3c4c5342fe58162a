// The composite ops, one record each: single nodes for the planner (which may give one a dedicated kernel),
// defined by their expansion over primitives. The expansions below ARE the meaning of each composite, including
// the order of every rounding: the oracle evaluates them (graph/composites.ts expandComposites), and a target
// without a kernel of its own for one runs its expansion (kernels/decomp/graph.ts). Tier-2 bounds of the
// composites bounded as wholes are graph/tolerance_composite.ts's.
import type { Attrs } from "../ir.ts";
import { numel, sameShape } from "../ir.ts";
import type { Tensor, Tracer } from "../tracer.ts";
import { boundAttention, boundRmsnorm, boundSilu, boundSiluMul, boundSoftmax } from "../tolerance_composite.ts";
import { arity, fail, fmt, likeFirst, needFloat, needIndex, normAxis, type OpRecord, same } from "./record.ts";

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
 * 0..pos[r] (with a window, those > pos[r] - window), and logical position t lives at pool row
 * table[r, ⌊t/B⌋]·B + t mod B; with a softcap the scores are softcap · tanh(scale · q·kᵀ / softcap). The whole
 * table is swept (MB·B positions) under the mask, so every table entry must name a real block whose rows are finite
 * (a server points unused entries at a reserved block).
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
  let s = g.mul(g.matmul(g.reshape(q, [R, KVH, G, D]), k), a.scale!); // [R, KVH, G, T]
  if (a.softcap !== undefined) s = g.mul(g.tanh(g.div(s, a.softcap)), a.softcap);
  const p = pos.dtype === dt ? pos : g.cast(pos, dt);
  const t = g.iota([R, T], 1, dt), last = g.broadcast(g.reshape(p, [R, 1]), [R, T]);
  const causal = g.le(t, last);
  const mask = a.window === undefined ? causal : g.and(causal, g.gt(g.add(t, a.window), last));
  const m = g.broadcast(g.reshape(mask, [R, 1, 1, T]), [R, KVH, G, T]);
  const w = expandSoftmax(g, [g.select(m, s, -Infinity)], { axis: 3 });
  return g.reshape(g.matmul(w, v), [R, H, Dv]); // [R, KVH, G, Dv]
}


// ---------------------------------------------------------------- type rules

const normRule: OpRecord["infer"] = (op, ins, a, ref) => {
  arity(ins, op === "rmsnorm" ? 2 : 3, op === "rmsnorm" ? 2 : 3, ref);
  const x = ins[0];
  if (x.dtype !== "f32") fail("dtype", ref, `x must be f32, got ${fmt(x)}`);
  if (x.shape.length < 1) fail("shape", ref, "norm of a scalar");
  const D = x.shape[x.shape.length - 1];
  for (const p of ins.slice(1)) {
    if (p.dtype !== "f32" || !sameShape(p.shape, [D])) fail("shape", ref, `weight ${fmt(p)} must be f32[${D}]`);
  }
  if (typeof a.eps !== "number" || !(a.eps >= 0)) fail("attr", ref, "eps must be a non-negative number");
  return { dtype: "f32", shape: [...x.shape], attrs: a };
};

const ropeRule: OpRecord["infer"] = (_op, ins, a, ref) => {
  arity(ins, 2, 3, ref);
  const [x, pos, fac] = ins;
  if (x.dtype !== "f32" || x.shape.length !== 3) fail("shape", ref, `x must be f32[rows, heads, head_dim], got ${fmt(x)}`);
  needIndex(pos, ref, "positions");
  if (!sameShape(pos.shape, [x.shape[0]])) fail("shape", ref, `positions ${fmt(pos)} must be [${x.shape[0]}]`);
  const D = x.shape[2];
  a.dims = a.dims ?? D;
  if (!Number.isInteger(a.dims) || a.dims < 2 || a.dims % 2 || a.dims > D) fail("attr", ref, `rope dims ${a.dims} for head_dim ${D}`);
  if (a.style !== "adjacent" && a.style !== "half") fail("attr", ref, `rope style must be adjacent or half, got ${a.style}`);
  if (typeof a.theta !== "number" || !(a.theta > 0)) fail("attr", ref, "rope theta must be positive");
  if (fac && (fac.dtype !== "f32" || !sameShape(fac.shape, [a.dims / 2]))) fail("shape", ref, `factors ${fmt(fac)} must be f32[${a.dims / 2}]`);
  return { dtype: "f32", shape: [...x.shape], attrs: a };
};

const softmaxRule: OpRecord["infer"] = (_op, ins, a, ref) => {
  arity(ins, 1, 1, ref);
  if (ins[0].dtype !== "f32") fail("dtype", ref, `softmax needs f32, got ${fmt(ins[0])}`);
  a.axis = normAxis(a.axis, ins[0].shape.length, ref);
  return { dtype: "f32", shape: [...ins[0].shape], attrs: a };
};

const attentionRule: OpRecord["infer"] = (_op, ins, a, ref) => {
  arity(ins, 4, 4, ref);
  const [q, k, v, m] = ins;
  if (q.dtype !== "f32" || q.shape.length !== 3) fail("shape", ref, `q must be f32[rows, heads, head_dim], got ${fmt(q)}`);
  needFloat(k, ref, "k");
  needFloat(v, ref, "v");
  if (k.shape.length !== 3 || v.shape.length !== 3) fail("shape", ref, `k ${fmt(k)} and v ${fmt(v)} must be [cap, kv_heads, dim]`);
  const [R, H, D] = q.shape, [C, KVH] = k.shape;
  if (k.shape[2] !== D || v.shape[0] !== C || v.shape[1] !== KVH) fail("shape", ref, `q ${fmt(q)}, k ${fmt(k)}, v ${fmt(v)}`);
  if (H % KVH !== 0) fail("shape", ref, `${H} heads are not a multiple of ${KVH} kv heads`);
  if (m.dtype !== "bool" || !sameShape(m.shape, [R, C])) fail("shape", ref, `mask ${fmt(m)} must be bool[${R},${C}]`);
  if (typeof a.scale !== "number") fail("attr", ref, "attention needs a scale");
  if (a.softcap !== undefined && !(a.softcap > 0)) fail("attr", ref, `attention softcap ${a.softcap} must be positive`);
  return { dtype: "f32", shape: [R, H, v.shape[2]], attrs: a };
};

const pagedAttentionRule: OpRecord["infer"] = (_op, ins, a, ref) => {
  arity(ins, 5, 5, ref);
  const [q, k, v, tb, pos] = ins;
  if (q.dtype !== "f32" || q.shape.length !== 3) fail("shape", ref, `q must be f32[rows, heads, head_dim], got ${fmt(q)}`);
  needFloat(k, ref, "k pool");
  needFloat(v, ref, "v pool");
  if (k.shape.length !== 3 || v.shape.length !== 3) fail("shape", ref, `k ${fmt(k)} and v ${fmt(v)} must be [pool rows, kv_heads, dim]`);
  const [R, H, D] = q.shape, [P, KVH] = k.shape;
  if (k.shape[2] !== D || v.shape[0] !== P || v.shape[1] !== KVH) fail("shape", ref, `q ${fmt(q)}, k ${fmt(k)}, v ${fmt(v)}`);
  if (H % KVH !== 0) fail("shape", ref, `${H} heads are not a multiple of ${KVH} kv heads`);
  needIndex(tb, ref, "block table");
  needIndex(pos, ref, "positions");
  if (tb.shape.length !== 2 || tb.shape[0] !== R) fail("shape", ref, `block table ${fmt(tb)} must be [${R}, max_blocks]`);
  if (!sameShape(pos.shape, [R])) fail("shape", ref, `positions ${fmt(pos)} must be [${R}]`);
  if (!Number.isInteger(a.block) || a.block! < 1 || P % a.block! !== 0) fail("attr", ref, `block size ${a.block} must divide the pool's ${P} rows`);
  if (typeof a.scale !== "number") fail("attr", ref, "paged_attention needs a scale");
  if (a.window !== undefined && !(Number.isInteger(a.window) && a.window >= 1)) fail("attr", ref, `paged_attention window ${a.window} must be a positive integer`);
  if (a.softcap !== undefined && !(a.softcap > 0)) fail("attr", ref, `paged_attention softcap ${a.softcap} must be positive`);
  return { dtype: "f32", shape: [R, H, v.shape[2]], attrs: a };
};

const causalMaskRule: OpRecord["infer"] = (_op, ins, a, ref) => {
  arity(ins, 1, 1, ref);
  needIndex(ins[0], ref, "pos");
  if (numel(ins[0].shape) !== 1) fail("shape", ref, `pos must hold one element, got ${fmt(ins[0])}`);
  const rows = a.rows, cap = a.cap;
  if (!Number.isInteger(rows) || !Number.isInteger(cap) || rows! < 1 || cap! < 1) fail("attr", ref, "causal_mask needs rows and cap");
  if (a.window !== undefined && !(Number.isInteger(a.window) && a.window >= 1)) fail("attr", ref, `causal_mask window ${a.window} must be a positive integer`);
  return { dtype: "bool", shape: [rows!, cap!], attrs: a };
};

const activationRule: OpRecord["infer"] = (_op, ins, a, ref) => {
  arity(ins, 1, 1, ref);
  needFloat(ins[0], ref);
  return likeFirst(ins[0], a);
};

const gatedRule: OpRecord["infer"] = (_op, ins, a, ref) => {
  arity(ins, 2, 2, ref);
  needFloat(ins[0], ref);
  same(ins[0], ins[1], ref, "operands");
  return likeFirst(ins[0], a);
};

// ---------------------------------------------------------------- the records

const composite = (doc: string, infer: OpRecord["infer"], expand: OpRecord["expand"], tolerance: OpRecord["tolerance"], lower: OpRecord["lower"]): OpRecord =>
  ({ kind: "composite", doc, infer, expand, tolerance, lower });

const ATTENTION: OpRecord = {
  ...composite(
    "[q[R, H, D], k[C, KVH, D], v[C, KVH, Dv], mask[R, C] bool] attrs.scale -> [R, H, Dv]",
    attentionRule, expandAttention, boundAttention, "unit",
  ),
  unit: "attention",
};

// An explicit type (the names again) keeps the public API free of inferred types (JSR's slow-type check); the
// names are still declared here only: graph/ir.ts CompositeOp is keyof typeof COMPOSITE_OPS.
export const COMPOSITE_OPS: {
  rmsnorm: OpRecord;
  layernorm: OpRecord;
  rope: OpRecord;
  softmax: OpRecord;
  attention: OpRecord;
  paged_attention: OpRecord;
  causal_mask: OpRecord;
  silu: OpRecord;
  gelu: OpRecord;
  silu_mul: OpRecord;
} = {
  rmsnorm: composite("[x[..., D], w[D]] attrs.eps", normRule, expandRmsnorm, boundRmsnorm, "kernel"),
  layernorm: composite("[x[..., D], w[D], b[D]] attrs.eps", normRule, expandLayernorm, "expansion", "kernel"),
  rope: composite("[x[R, H, D], pos[R] int, factors?[dims/2]] attrs.theta, style, dims", ropeRule, expandRope, "expansion", "kernel"),
  softmax: composite("along attrs.axis", softmaxRule, expandSoftmax, boundSoftmax, "kernel"),
  // Under its causal_mask: a plan unit masking from the position itself; other masks run the expansion.
  attention: ATTENTION,
  paged_attention: composite(
    "[q[R, H, D], k[P, KVH, D], v[P, KVH, Dv], table[R, MB] int, pos[R] int] attrs.scale, block -> [R, H, Dv]: row r sees logical positions 0..pos[r], position t at pool row table[r, t / block] * block + t % block",
    pagedAttentionRule, expandPagedAttention, "expansion", "kernel",
  ),
  causal_mask: composite(
    "[pos(1 int)] attrs.rows, cap, window? -> bool [rows, cap]: t <= pos + r (and t > pos + r - window)",
    causalMaskRule, expandCausalMask, "exact", "kernel",
  ),
  silu: composite("x·σ(x)", activationRule, expandSilu, boundSilu, "elementwise"),
  gelu: composite("tanh approximation", activationRule, expandGelu, "expansion", "elementwise"),
  silu_mul: composite("[a, b] -> silu(a)·b", gatedRule, expandSiluMul, boundSiluMul, "elementwise"),
};
