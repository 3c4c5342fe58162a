// Instruction helpers over a module's function code: one call per SPIR-V instruction, returning result ids.
// Float add/sub/mul results are decorated NoContraction so no driver fuses a*b+c behind the kernel's back.
import type { SpirvModule } from "./module.ts";
import { Dec, Op } from "./spec.ts";

export class Asm {
  constructor(readonly m: SpirvModule) {}

  /** An instruction with a result: `op type id ...operands`. */
  v(op: number, type: number, ...operands: number[]): number {
    const id = this.m.id();
    const out = this.m.code;
    out.push(((operands.length + 3) << 16) | op, type, id);
    for (const x of operands) out.push(x >>> 0);
    return id;
  }
  /** An instruction without a result. */
  s(op: number, ...operands: number[]): void {
    const out = this.m.code;
    out.push(((operands.length + 1) << 16) | op);
    for (const x of operands) out.push(x >>> 0);
  }
  label(id: number): void {
    this.s(Op.Label, id);
  }
  glsl(type: number, inst: number, ...args: number[]): number {
    return this.v(Op.ExtInst, type, this.m.glsl(), inst, ...args);
  }
  /** A float op that must round on its own (never contracted into an fma). */
  precise(op: number, type: number, a: number, b: number): number {
    const id = this.v(op, type, a, b);
    this.m.decorate(id, Dec.NoContraction);
    return id;
  }

  // ---- f32 shorthands (used by the math expansions) ----
  get f(): number { return this.m.tF32; }
  get u(): number { return this.m.tU32; }
  get i(): number { return this.m.tI32; }
  get b(): number { return this.m.tBool; }
  cf(v: number): number { return this.m.constF32(v); }
  cu(v: number): number { return this.m.constU32(v); }
  ci(v: number): number { return this.m.constI32(v); }
  add(a: number, b: number): number { return this.precise(Op.FAdd, this.f, a, b); }
  sub(a: number, b: number): number { return this.precise(Op.FSub, this.f, a, b); }
  mul(a: number, b: number): number { return this.precise(Op.FMul, this.f, a, b); }
  div(a: number, b: number): number { return this.v(Op.FDiv, this.f, a, b); }
  /** Horner evaluation c[0]*x^(n-1) + ... + c[n-1], every step rounded. */
  poly(x: number, coeffs: number[]): number {
    let acc = this.cf(coeffs[0]);
    for (let k = 1; k < coeffs.length; k++) acc = this.add(this.mul(acc, x), this.cf(coeffs[k]));
    return acc;
  }
  sel(type: number, c: number, a: number, b: number): number { return this.v(Op.Select, type, c, a, b); }
  bits(x: number): number { return this.v(Op.Bitcast, this.u, x); }
  float(bits: number): number { return this.v(Op.Bitcast, this.f, bits); }
  iadd(type: number, a: number, b: number): number { return this.v(Op.IAdd, type, a, b); }
  isub(type: number, a: number, b: number): number { return this.v(Op.ISub, type, a, b); }
  and(type: number, a: number, b: number): number { return this.v(Op.BitwiseAnd, type, a, b); }
  or(type: number, a: number, b: number): number { return this.v(Op.BitwiseOr, type, a, b); }
  xor(type: number, a: number, b: number): number { return this.v(Op.BitwiseXor, type, a, b); }
  shl(type: number, a: number, b: number): number { return this.v(Op.ShiftLeftLogical, type, a, b); }
  shr(a: number, b: number): number { return this.v(Op.ShiftRightLogical, this.u, a, b); }
  sar(a: number, b: number): number { return this.v(Op.ShiftRightArithmetic, this.i, a, b); }
  ult(a: number, b: number): number { return this.v(Op.ULessThan, this.b, a, b); }
  ugt(a: number, b: number): number { return this.v(Op.UGreaterThan, this.b, a, b); }
  uge(a: number, b: number): number { return this.v(Op.UGreaterThanEqual, this.b, a, b); }
  ieq(a: number, b: number): number { return this.v(Op.IEqual, this.b, a, b); }
  lor(a: number, b: number): number { return this.v(Op.LogicalOr, this.b, a, b); }
  land(a: number, b: number): number { return this.v(Op.LogicalAnd, this.b, a, b); }
}
