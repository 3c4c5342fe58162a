// A generic elementwise kernel over a small expression tree (what a fused elementwise group lowers to), and
// the named activations built on it (silu, gelu, silu-mul, add, mul).
import {
  type BinOp, c, type CType, type EType, f32, type Kernel, KernelBuilder, KernelError, un, type UnOp, type Val,
} from "../ir.ts";
import type { Caps } from "../target.ts";
import { gridFor, wgIndex } from "./common.ts";

/** Named composites the expression language adds on top of the IR's ops (all in f32). */
export type EwFn = "silu" | "sigmoid" | "gelu" | "gelu_erf";
export type EwExpr =
  | number // an f32 constant
  | { c: number; t: CType } // a typed constant
  | { in: number } // input i at this element
  | { op: UnOp | BinOp | EwFn | "select" | "fma"; args: EwExpr[] }
  | { cast: CType; a: EwExpr };
export interface EwInput {
  type: EType;
  /** Elements of this input; < n broadcasts (element i reads i % len). Default n. */
  len?: number;
}
export interface ElementwiseShape {
  n: number;
  inputs: EwInput[];
  out: EType;
  expr: EwExpr;
  name?: string;
}

const UN = new Set<string>(["neg", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "recip", "sin", "cos",
  "tanh", "floor", "ceil", "not", "isfinite", "isnan", "f16bits", "bf16bits"]);

/** Builds an expression's value from the inputs' values at one element. */
export function evalEw(e: EwExpr, ins: Val[]): Val {
  if (typeof e === "number") return f32(e);
  if ("c" in e) return c(e.c, e.t);
  if ("in" in e) {
    if (!ins[e.in]) throw new KernelError(`elementwise: no input ${e.in}`);
    return ins[e.in];
  }
  if ("cast" in e) return evalEw(e.a, ins).cast(e.cast);
  const a = e.args.map((x) => evalEw(x, ins));
  switch (e.op) {
    case "silu": return a[0].div(f32(1).add(a[0].neg().exp()));
    case "sigmoid": return f32(1).div(f32(1).add(a[0].neg().exp()));
    case "gelu": { // tanh approximation (gelu_pytorch_tanh)
      const x = a[0];
      const inner = x.add(x.mul(x).mul(x).mul(0.044715)).mul(0.7978845608028654);
      return x.mul(0.5).mul(f32(1).add(inner.tanh()));
    }
    case "gelu_erf": return a[0].mul(0.5).mul(f32(1).add(erf(a[0].mul(Math.SQRT1_2))));
    case "select": return a[0].select(a[1], a[2]);
    case "fma": return a[0].mul(a[1]).add(a[2]); // rounded twice on purpose: renderers may not fuse
  }
  if (UN.has(e.op)) return un(e.op as UnOp, a[0]);
  const m = (a[0] as unknown as Record<string, (b: Val) => Val>)[e.op];
  if (typeof m !== "function" || a.length !== 2) throw new KernelError(`elementwise: unknown op ${e.op}/${a.length}`);
  return m.call(a[0], a[1]);
}

/** erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), from exp only. */
function erf(z: Val): Val {
  const x = z.abs();
  const t = f32(1).div(x.mul(0.3275911).add(1));
  const poly = t.mul(t.mul(t.mul(t.mul(t.mul(1.061405429).add(-1.453152027)).add(1.421413741)).add(-0.284496736)).add(0.254829592));
  const y = f32(1).sub(poly.mul(x.mul(x).neg().exp()));
  return z.lt(0).select(y.neg(), y);
}

/**
 * out[i] = expr(inputs[0][i % len0], inputs[1][i % len1], ...), i < n.
 * Bindings: the inputs in order (r), then out [n] (w; may alias a full-length input of the same type).
 */
export function elementwise(caps: Caps, s: ElementwiseShape): Kernel {
  const { n } = s;
  if (!(n >= 1) || n >= 2 ** 32) throw new KernelError(`elementwise: bad size ${n}`);
  const lens = s.inputs.map((x) => x.len ?? n);
  for (const l of lens) if (l < 1 || l > n) throw new KernelError(`elementwise: input of ${l} for ${n} elements`);
  // Four elements per invocation when every full-length access stays aligned (16-byte f32 vectors).
  const per = n % 4 === 0 ? 4 : 1;
  const total = n / per;
  const wg = Math.min(64, caps.maxWorkgroupSize);
  const grid = gridFor(caps, Math.ceil(total / wg));
  const b = new KernelBuilder(s.name ?? `elementwise_n${n}`, { workgroup: wg, grid });
  const bufs = s.inputs.map((x, i) => b.buffer(`in${i}`, x.type, "r"));
  const out = b.buffer("out", s.out, "w");
  const idx = b.let(wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "idx");
  if (grid[0] * grid[1] * grid[2] * wg > total) b.if(idx.ge(total), () => b.return());
  const e0 = b.let(per === 1 ? idx : idx.mul(per), "u32", "e");
  const vals: Val[][] = Array.from({ length: per }, () => []);
  bufs.forEach((buf, k) => {
    const len = lens[k];
    if (len === n && per > 1) {
      b.loadv(buf, e0, per).forEach((v, j) => vals[j].push(v));
    } else if (len === 1) {
      const v = b.let(b.load(buf, 0), undefined, "bc");
      for (let j = 0; j < per; j++) vals[j].push(v);
    } else {
      for (let j = 0; j < per; j++) vals[j].push(b.load(buf, len === n ? e0.add(j) : e0.add(j).mod(len)));
    }
  });
  const ot: CType = s.out === "f32" || s.out === "f16" || s.out === "bf16" ? "f32"
    : s.out === "i32" || s.out === "i8" || s.out === "i16" ? "i32" : "u32";
  const res = vals.map((v) => {
    const r = evalEw(s.expr, v);
    return r.t === ot ? r : r.cast(ot);
  });
  if (per > 1) b.storev(out, e0, res);
  else b.store(out, e0, res[0]);
  return b.build();
}

const full = (type: EType = "f32"): EwInput => ({ type });

/** out = silu(x) = x * sigmoid(x). Bindings: x f32 [n] (r); out f32 [n] (w). */
export function silu(caps: Caps, n: number): Kernel {
  return elementwise(caps, { n, inputs: [full()], out: "f32", expr: { op: "silu", args: [{ in: 0 }] }, name: `silu_n${n}` });
}
/** out = gelu(x), tanh approximation or exact (erf). Bindings: x f32 [n] (r); out f32 [n] (w). */
export function gelu(caps: Caps, n: number, exact = false): Kernel {
  const op = exact ? "gelu_erf" : "gelu";
  return elementwise(caps, { n, inputs: [full()], out: "f32", expr: { op, args: [{ in: 0 }] }, name: `${op}_n${n}` });
}
/** out = silu(gate) * up (the SwiGLU feed-forward). Bindings: gate f32 [n] (r); up f32 [n] (r); out f32 [n] (w). */
export function siluMul(caps: Caps, n: number): Kernel {
  return elementwise(caps, {
    n, inputs: [full(), full()], out: "f32", name: `silu_mul_n${n}`,
    expr: { op: "mul", args: [{ op: "silu", args: [{ in: 0 }] }, { in: 1 }] },
  });
}
/** out = a + b (b may broadcast with lenB < n). Bindings: a f32 [n] (r); b f32 [lenB] (r); out f32 [n] (w). */
export function add(caps: Caps, n: number, lenB = n): Kernel {
  return elementwise(caps, {
    n, inputs: [full(), { type: "f32", len: lenB }], out: "f32", name: `add_n${n}${lenB !== n ? `_b${lenB}` : ""}`,
    expr: { op: "add", args: [{ in: 0 }, { in: 1 }] },
  });
}
/** out = a * b (b may broadcast with lenB < n). Bindings: a f32 [n] (r); b f32 [lenB] (r); out f32 [n] (w). */
export function mul(caps: Caps, n: number, lenB = n): Kernel {
  return elementwise(caps, {
    n, inputs: [full(), { type: "f32", len: lenB }], out: "f32", name: `mul_n${n}${lenB !== n ? `_b${lenB}` : ""}`,
    expr: { op: "mul", args: [{ in: 0 }, { in: 1 }] },
  });
}
