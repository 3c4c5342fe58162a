// The f32 math routines (math_f32.ts) expanded into kernel IR, for a renderer whose language's own exp, log,
// sin, ... are not accurate enough (decompose()'s `needs.math` names the ops). Each call becomes `let`
// statements just before the statement that uses it: every value the routine uses more than once gets a
// variable of its own, the rest stays one expression, so a renderer that writes expressions as text (WGSL)
// repeats nothing and one that writes SSA (SPIR-V) sees the same instructions. f16 arguments go through f32
// (exact) and the result is cast back once.
//
// The routines compute only; moving them before their statement changes nothing, except in a loop's bound,
// which is evaluated again on every trip: math there is refused (hoist.ts walks the statements).
import type { CType, Expr, Kernel, UnOp } from "../ir.ts";
import { KernelError } from "../ir.ts";
import { hoistKernel, leaf, materialize } from "./hoist.ts";
import { F32_MATH, type F32MathOp, type F32MathOps } from "./math_f32.ts";

const cst = (t: CType, v: number): Expr => ({ k: "const", t, v: t === "f32" ? Math.fround(v) : v });
const bin = (op: Extract<Expr, { k: "bin" }>["op"], t: CType, a: Expr, b: Expr): Expr => ({ k: "bin", t, op, a, b });
const un = (op: UnOp, t: CType, a: Expr): Expr => ({ k: "un", t, op, a });
const bitcast = (t: CType, a: Expr): Expr => a.t === t ? a : { k: "bitcast", t, a };
const CMP = (op: "lt" | "le" | "eq" | "ne") => (a: Expr, b: Expr) => bin(op, "bool", a, b);

/** The vocabulary as kernel IR: F is an f32 expression, I an i32 one, P a bool one. */
export const IR_MATH: F32MathOps<Expr, Expr, Expr> = {
  f: (x) => cst("f32", x),
  i: (x) => cst("i32", x | 0),
  add: (a, b) => bin("add", "f32", a, b),
  sub: (a, b) => bin("sub", "f32", a, b),
  mul: (a, b) => bin("mul", "f32", a, b),
  fma: (a, b, c) => ({ k: "fma", t: "f32", a, b, c }),
  div: (a, b) => bin("div", "f32", a, b),
  max: (a, b) => bin("max", "f32", a, b),
  min: (a, b) => bin("min", "f32", a, b),
  abs: (a) => un("abs", "f32", a),
  floor: (a) => un("floor", "f32", a),
  // select on x's NaN test, which every renderer computes from the bits: no compiler folds it
  opaque: (v, x) => ({ k: "select", t: "f32", c: un("isnan", "bool", x), a: cst("f32", 0), b: cst("f32", v) }),
  bits: (a) => bitcast("i32", a),
  float: (a) => bitcast("f32", a),
  cvti: (a) => ({ k: "cast", t: "i32", a }),
  cvtf: (a) => ({ k: "cast", t: "f32", a }),
  iadd: (a, b) => bin("add", "i32", a, b),
  isub: (a, b) => bin("sub", "i32", a, b),
  iand: (a, b) => bin("and", "i32", a, b),
  ior: (a, b) => bin("or", "i32", a, b),
  ixor: (a, b) => bin("xor", "i32", a, b),
  ishl: (a, n) => bin("shl", "i32", a, cst("i32", n)),
  ishr: (a, n) => bin("shr", "i32", a, cst("i32", n)),
  flt: CMP("lt"),
  fle: CMP("le"),
  feq: CMP("eq"),
  isnan: (a) => un("isnan", "bool", a),
  ilt: CMP("lt"),
  iltu: (a, b) => bin("lt", "bool", bitcast("u32", a), bitcast("u32", b)),
  ine: CMP("ne"),
  ieq: CMP("eq"),
  pand: (a, b) => bin("and", "bool", a, b),
  por: (a, b) => bin("or", "bool", a, b),
  pnot: (a) => un("not", "bool", a),
  sel: (c, a, b) => ({ k: "select", t: "f32", c, a, b }),
  isel: (c, a, b) => ({ k: "select", t: "i32", c, a, b }),
};

/** The kernel with every unary op in `ops` expanded into IR (the same object when there is none). */
export function expandMath(k: Kernel, ops: ReadonlySet<UnOp>): Kernel {
  if (ops.size === 0) return k;
  return hoistKernel(k, {
    wants: (e) => e.k === "un" && ops.has(e.op),
    expr: (x, h) => {
      if (x.k !== "un" || !ops.has(x.op)) return undefined;
      if (!h.pre) throw new KernelError(`${k.name}: ${x.op} in a loop bound`);
      const routine = F32_MATH[x.op as F32MathOp];
      if (!routine) throw new KernelError(`${k.name}: no f32 routine for ${x.op}`);
      const arg = leaf(x.a.t === "f16" ? { k: "cast", t: "f32", a: x.a } : x.a, h);
      const r = materialize(routine(IR_MATH, arg), h);
      return x.t === "f16" ? { k: "cast", t: "f16", a: r } : r;
    },
  }, "dm");
}
