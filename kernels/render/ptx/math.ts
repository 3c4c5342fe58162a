// The PTX implementation of the math vocabulary (kernels/decomp/math.ts's MathOps): each instruction is one
// PTX instruction into an Asm; the routines themselves (expf, logf, sinf, ...) are written once over MathOps.
import type { MathOps } from "../../decomp/math.ts";
import type { Asm } from "./asm.ts";
import { f32imm, f64imm, isReg } from "./asm.ts";

/** Emits each MathOps instruction into `asm`; values are register names or immediates. */
export class PtxMath implements MathOps<string, string, string, string> {
  constructor(readonly asm: Asm) {}
  private o(rc: "f" | "r" | "p" | "fd", op: string, ...s: string[]): string {
    return this.asm.to(rc, op, ...s);
  }
  private rf(x: string): string {
    return this.asm.inReg("f", x);
  }
  private rr(x: string): string {
    return this.asm.inReg("r", x);
  }
  private rd(x: string): string {
    return this.asm.inReg("fd", x);
  }
  f(x: number): string { return f32imm(x); }
  i(x: number): string { return String(x | 0); }
  add(a: string, b: string): string { return this.o("f", "add.rn.f32", this.rf(a), b); }
  sub(a: string, b: string): string { return this.o("f", "sub.rn.f32", this.rf(a), b); }
  mul(a: string, b: string): string { return this.o("f", "mul.rn.f32", this.rf(a), b); }
  fma(a: string, b: string, c: string): string { return this.o("f", "fma.rn.f32", this.rf(a), b, c); }
  div(a: string, b: string): string { return this.o("f", "div.rn.f32", this.rf(a), this.rf(b)); }
  rni(a: string): string { return this.o("f", "cvt.rni.f32.f32", this.rf(a)); }
  trunc(a: string): string { return this.o("f", "cvt.rzi.f32.f32", this.rf(a)); }
  max(a: string, b: string): string { return this.o("f", "max.NaN.f32", this.rf(a), b); }
  min(a: string, b: string): string { return this.o("f", "min.NaN.f32", this.rf(a), b); }
  abs(a: string): string { return this.o("f", "abs.f32", this.rf(a)); }
  bits(a: string): string { return isReg(a) ? this.o("r", "mov.b32", a) : a; }
  float(a: string): string { return this.o("f", "mov.b32", a); }
  cvti(a: string): string { return this.o("r", "cvt.rzi.s32.f32", this.rf(a)); }
  cvtf(a: string): string { return this.o("f", "cvt.rn.f32.s32", this.rr(a)); }
  iadd(a: string, b: string): string { return this.o("r", "add.s32", this.rr(a), b); }
  isub(a: string, b: string): string { return this.o("r", "sub.s32", this.rr(a), b); }
  iand(a: string, b: string): string { return this.o("r", "and.b32", this.rr(a), b); }
  ior(a: string, b: string): string { return this.o("r", "or.b32", this.rr(a), b); }
  ixor(a: string, b: string): string { return this.o("r", "xor.b32", this.rr(a), b); }
  ishl(a: string, n: number): string { return this.o("r", "shl.b32", this.rr(a), String(n)); }
  ishr(a: string, n: number): string { return this.o("r", "shr.s32", this.rr(a), String(n)); }
  shlv(a: string, n: string): string { return this.o("r", "shl.b32", this.rr(a), n); }
  ushrv(a: string, n: string): string { return this.o("r", "shr.u32", this.rr(a), n); }
  imul(a: string, b: string): string { return this.o("r", "mul.lo.u32", this.rr(a), b); }
  umulhi(a: string, b: string): string { return this.o("r", "mul.hi.u32", this.rr(a), b); }
  flt(a: string, b: string): string { return this.o("p", "setp.lt.f32", this.rf(a), b); }
  fle(a: string, b: string): string { return this.o("p", "setp.le.f32", this.rf(a), b); }
  feq(a: string, b: string): string { return this.o("p", "setp.eq.f32", this.rf(a), b); }
  isnan(a: string): string { return this.o("p", "testp.notanumber.f32", this.rf(a)); }
  ilt(a: string, b: string): string { return this.o("p", "setp.lt.s32", this.rr(a), b); }
  iltu(a: string, b: string): string { return this.o("p", "setp.lt.u32", this.rr(a), b); }
  ine(a: string, b: string): string { return this.o("p", "setp.ne.s32", this.rr(a), b); }
  ieq(a: string, b: string): string { return this.o("p", "setp.eq.s32", this.rr(a), b); }
  pand(a: string, b: string): string { return this.o("p", "and.pred", a, b); }
  por(a: string, b: string): string { return this.o("p", "or.pred", a, b); }
  pnot(a: string): string { return this.o("p", "not.pred", a); }
  sel(p: string, a: string, b: string): string { return this.o("f", "selp.f32", a, b, p); }
  isel(p: string, a: string, b: string): string { return this.o("r", "selp.b32", a, b, p); }
  d(x: number): string { return f64imm(x); }
  dcvt(a: string): string { return this.o("fd", "cvt.f64.f32", this.rf(a)); }
  dint(a: string): string { return this.o("fd", "cvt.rn.f64.s32", this.rr(a)); }
  duint(a: string): string { return this.o("fd", "cvt.rn.f64.u32", this.rr(a)); }
  dround(a: string): string { return this.o("f", "cvt.rn.f32.f64", this.rd(a)); }
  dadd(a: string, b: string): string { return this.o("fd", "add.rn.f64", this.rd(a), b); }
  dsub(a: string, b: string): string { return this.o("fd", "sub.rn.f64", this.rd(a), b); }
  dmul(a: string, b: string): string { return this.o("fd", "mul.rn.f64", this.rd(a), b); }
  ddiv(a: string, b: string): string { return this.o("fd", "div.rn.f64", this.rd(a), this.rd(b)); }
  dfma(a: string, b: string, c: string): string { return this.o("fd", "fma.rn.f64", this.rd(a), b, c); }
  drni(a: string): string { return this.o("fd", "cvt.rni.f64.f64", this.rd(a)); }
  dtrunc(a: string): string { return this.o("fd", "cvt.rzi.f64.f64", this.rd(a)); }
  dabs(a: string): string { return this.o("fd", "abs.f64", this.rd(a)); }
  dlt(a: string, b: string): string { return this.o("p", "setp.lt.f64", this.rd(a), b); }
  dle(a: string, b: string): string { return this.o("p", "setp.le.f64", this.rd(a), b); }
  deq(a: string, b: string): string { return this.o("p", "setp.eq.f64", this.rd(a), b); }
  dmin(a: string, b: string): string { return this.o("fd", "min.f64", this.rd(a), b); }
  dmax(a: string, b: string): string { return this.o("fd", "max.f64", this.rd(a), b); }
  dcvti(a: string): string { return this.o("r", "cvt.rzi.s32.f64", this.rd(a)); }
  dsel(p: string, a: string, b: string): string { return this.o("fd", "selp.f64", a, b, p); }
  disnan(a: string): string { return this.o("p", "testp.notanumber.f64", this.rd(a)); }
}
