// Values of the kernel IR (kernels/ir.ts): Val wraps an expression tree so kernel code reads like arithmetic; the
// constructors check operand types where the tree is made, so a renderer never meets an ill-typed expression.
import { type BinOp, type CType, type Expr, KernelError, type UnOp } from "./ir_data.ts";

export type Like = Val | number | boolean;

export class Val {
  constructor(readonly e: Expr) {}
  get t(): CType {
    return this.e.t;
  }
  add(b: Like): Val { return bin("add", this, b); }
  sub(b: Like): Val { return bin("sub", this, b); }
  mul(b: Like): Val { return bin("mul", this, b); }
  div(b: Like): Val { return bin("div", this, b); }
  mod(b: Like): Val { return bin("mod", this, b); }
  max(b: Like): Val { return bin("max", this, b); }
  min(b: Like): Val { return bin("min", this, b); }
  pow(b: Like): Val { return bin("pow", this, b); }
  and(b: Like): Val { return bin("and", this, b); }
  or(b: Like): Val { return bin("or", this, b); }
  xor(b: Like): Val { return bin("xor", this, b); }
  shl(b: Like): Val { return bin("shl", this, b); }
  shr(b: Like): Val { return bin("shr", this, b); }
  lt(b: Like): Val { return bin("lt", this, b); }
  le(b: Like): Val { return bin("le", this, b); }
  gt(b: Like): Val { return bin("gt", this, b); }
  ge(b: Like): Val { return bin("ge", this, b); }
  eq(b: Like): Val { return bin("eq", this, b); }
  ne(b: Like): Val { return bin("ne", this, b); }
  /** The signed int8x4 dot product of two u32 words (i32); see BinOp "dot4". */
  dot4(b: Like): Val { return bin("dot4", this, b); }
  neg(): Val { return un("neg", this); }
  abs(): Val { return un("abs", this); }
  exp(): Val { return un("exp", this); }
  log(): Val { return un("log", this); }
  sqrt(): Val { return un("sqrt", this); }
  rsqrt(): Val { return un("rsqrt", this); }
  recip(): Val { return un("recip", this); }
  sin(): Val { return un("sin", this); }
  cos(): Val { return un("cos", this); }
  tanh(): Val { return un("tanh", this); }
  floor(): Val { return un("floor", this); }
  not(): Val { return un("not", this); }
  isfinite(): Val { return un("isfinite", this); }
  cast(t: CType): Val { return this.t === t ? this : new Val({ k: "cast", t, a: this.e }); }
  bitcast(t: CType): Val {
    if (this.t === "bool" || t === "bool" || this.t === "f16" || t === "f16") {
      throw new KernelError(`bitcast ${this.t} -> ${t}: only between 32-bit types`);
    }
    return new Val({ k: "bitcast", t, a: this.e });
  }
  select(a: Like, b: Like): Val { // this ? a : b
    if (this.t !== "bool") throw new KernelError(`select condition must be bool, got ${this.t}`);
    const [x, y] = unify(a, b);
    return new Val({ k: "select", t: x.t, c: this.e, a: x.e, b: y.e });
  }
}

export function c(v: number | boolean, t?: CType): Val {
  if (typeof v === "boolean") return new Val({ k: "const", t: "bool", v: v ? 1 : 0 });
  const ty = t ?? (Number.isInteger(v) ? "i32" : "f32");
  if ((ty === "i32" || ty === "u32") && !Number.isInteger(v)) throw new KernelError(`${v} is not an integer ${ty}`);
  if (ty === "u32" && (v < 0 || v > 0xffffffff)) throw new KernelError(`${v} out of u32 range`);
  if (ty === "i32" && (v < -0x80000000 || v > 0x7fffffff)) throw new KernelError(`${v} out of i32 range`);
  return new Val({ k: "const", t: ty, v: ty === "f32" ? Math.fround(v) : v });
}
export const f32 = (v: number): Val => c(v, "f32");
export const u32 = (v: number): Val => c(v, "u32");
export const i32 = (v: number): Val => c(v, "i32");

export function lift(x: Like, t: CType): Val {
  if (x instanceof Val) return x;
  if (typeof x === "boolean") return c(x);
  return c(x, t === "bool" ? undefined : t);
}
function unify(a: Like, b: Like): [Val, Val] {
  const t = a instanceof Val ? a.t : b instanceof Val ? b.t : (Number.isInteger(a) && Number.isInteger(b) ? "i32" : "f32");
  const x = lift(a, t), y = lift(b, t);
  if (x.t !== y.t) throw new KernelError(`type mismatch: ${x.t} vs ${y.t}`);
  return [x, y];
}
const CMP = new Set<BinOp>(["lt", "le", "gt", "ge", "eq", "ne"]);
const INT_ONLY = new Set<BinOp>(["and", "or", "xor", "shl", "shr"]);
export function bin(op: BinOp, a: Like, b: Like): Val {
  const [x, y] = unify(a, b);
  if (INT_ONLY.has(op) && x.t !== "i32" && x.t !== "u32" && !(x.t === "bool" && op !== "shl" && op !== "shr")) {
    throw new KernelError(`${op} needs integers, got ${x.t}`);
  }
  if (op === "pow" && x.t !== "f32" && x.t !== "f16") throw new KernelError(`pow needs floats, got ${x.t}`);
  if (op === "dot4" && x.t !== "u32") throw new KernelError(`dot4 needs u32 words, got ${x.t}`);
  return new Val({ k: "bin", t: CMP.has(op) ? "bool" : op === "dot4" ? "i32" : x.t, op, a: x.e, b: y.e });
}
const FLOAT_UN = new Set<UnOp>(["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "recip", "sin", "cos", "tanh", "floor", "ceil", "isfinite", "isnan"]);
export function un(op: UnOp, a: Val): Val {
  if (FLOAT_UN.has(op) && a.t !== "f32" && a.t !== "f16") throw new KernelError(`${op} needs a float, got ${a.t}`);
  if ((op === "f16bits" || op === "bf16bits") && a.t !== "u32") throw new KernelError(`${op} needs u32 bits`);
  if (op === "not" && a.t !== "bool" && a.t !== "u32" && a.t !== "i32") throw new KernelError(`not needs bool or int`);
  const t: CType = op === "isfinite" || op === "isnan" ? "bool" : op === "f16bits" || op === "bf16bits" ? "f32" : a.t;
  return new Val({ k: "un", t, op, a: a.e });
}
export function fma(a: Val, b: Like, cc: Like): Val {
  const y = lift(b, a.t), z = lift(cc, a.t);
  if (a.t !== "f32" && a.t !== "f16" || y.t !== a.t || z.t !== a.t) throw new KernelError("fma needs three floats");
  return new Val({ k: "fma", t: a.t, a: a.e, b: y.e, c: z.e });
}
