// The LLVM IR implementation of the math vocabulary (kernels/decomp/math.ts's MathOps): each instruction is
// one LLVM instruction or intrinsic that the AMDGPU backend lowers without the ROCm device libraries (no
// ocml); the routines themselves (expf, logf, sinf, ...) are written once over MathOps.
import type { MathOps } from "../../decomp/math.ts";
import { f32c, fhex, type Ll } from "./ll.ts";

type V = string;

/** Emits each MathOps instruction into `ll`; F = float, I = i32, P = i1, D = double operands. */
export class LlMath implements MathOps<V, V, V, V> {
  constructor(readonly ll: Ll) {}
  private fi(name: string, t: string, ...xs: V[]): V {
    return this.ll.call(t, `llvm.${name}.${t === "float" ? "f32" : t === "double" ? "f64" : "f16"}`, xs.map((x) => [t, x]));
  }
  /** NaN-propagating max/min (llvm.maxnum drops a NaN operand; a + b is NaN when either is). */
  nanMinMax(op: "max" | "min", t: string, a: V, b: V): V {
    const ll = this.ll;
    const uno = ll.v(`fcmp uno ${t} ${a}, ${b}`);
    const sum = ll.v(`fadd ${t} ${a}, ${b}`);
    return ll.v(`select i1 ${uno}, ${t} ${sum}, ${t} ${this.fi(op === "max" ? "maxnum" : "minnum", t, a, b)}`);
  }
  f(x: number): V { return f32c(x); }
  i(x: number): V { return String(x | 0); }
  add(a: V, b: V): V { return this.ll.v(`fadd float ${a}, ${b}`); }
  sub(a: V, b: V): V { return this.ll.v(`fsub float ${a}, ${b}`); }
  mul(a: V, b: V): V { return this.ll.v(`fmul float ${a}, ${b}`); }
  fma(a: V, b: V, c: V): V { return this.fi("fma", "float", a, b, c); }
  div(a: V, b: V): V { return this.ll.v(`fdiv float ${a}, ${b}`); }
  rni(a: V): V { return this.fi("rint", "float", a); }
  trunc(a: V): V { return this.fi("trunc", "float", a); }
  max(a: V, b: V): V { return this.nanMinMax("max", "float", a, b); }
  min(a: V, b: V): V { return this.nanMinMax("min", "float", a, b); }
  abs(a: V): V { return this.fi("fabs", "float", a); }
  bits(a: V): V { return this.ll.v(`bitcast float ${a} to i32`); }
  float(a: V): V { return this.ll.v(`bitcast i32 ${a} to float`); }
  cvti(a: V): V { return this.ll.call("i32", "llvm.fptosi.sat.i32.f32", [["float", a]]); }
  cvtf(a: V): V { return this.ll.v(`sitofp i32 ${a} to float`); }
  iadd(a: V, b: V): V { return this.ll.v(`add i32 ${a}, ${b}`); }
  isub(a: V, b: V): V { return this.ll.v(`sub i32 ${a}, ${b}`); }
  iand(a: V, b: V): V { return this.ll.v(`and i32 ${a}, ${b}`); }
  ior(a: V, b: V): V { return this.ll.v(`or i32 ${a}, ${b}`); }
  ixor(a: V, b: V): V { return this.ll.v(`xor i32 ${a}, ${b}`); }
  ishl(a: V, n: number): V { return this.ll.v(`shl i32 ${a}, ${n}`); }
  ishr(a: V, n: number): V { return this.ll.v(`ashr i32 ${a}, ${n}`); }
  shlv(a: V, n: V): V { return this.ll.v(`shl i32 ${a}, ${n}`); }
  ushrv(a: V, n: V): V { return this.ll.v(`lshr i32 ${a}, ${n}`); }
  imul(a: V, b: V): V { return this.ll.v(`mul i32 ${a}, ${b}`); }
  umulhi(a: V, b: V): V {
    const ll = this.ll;
    const p = ll.v(`mul i64 ${ll.v(`zext i32 ${a} to i64`)}, ${ll.v(`zext i32 ${b} to i64`)}`);
    return ll.v(`trunc i64 ${ll.v(`lshr i64 ${p}, 32`)} to i32`);
  }
  flt(a: V, b: V): V { return this.ll.v(`fcmp olt float ${a}, ${b}`); }
  fle(a: V, b: V): V { return this.ll.v(`fcmp ole float ${a}, ${b}`); }
  feq(a: V, b: V): V { return this.ll.v(`fcmp oeq float ${a}, ${b}`); }
  isnan(a: V): V { return this.ll.v(`fcmp uno float ${a}, 0.0`); }
  ilt(a: V, b: V): V { return this.ll.v(`icmp slt i32 ${a}, ${b}`); }
  iltu(a: V, b: V): V { return this.ll.v(`icmp ult i32 ${a}, ${b}`); }
  ine(a: V, b: V): V { return this.ll.v(`icmp ne i32 ${a}, ${b}`); }
  ieq(a: V, b: V): V { return this.ll.v(`icmp eq i32 ${a}, ${b}`); }
  pand(a: V, b: V): V { return this.ll.v(`and i1 ${a}, ${b}`); }
  por(a: V, b: V): V { return this.ll.v(`or i1 ${a}, ${b}`); }
  pnot(a: V): V { return this.ll.v(`xor i1 ${a}, true`); }
  sel(p: V, a: V, b: V): V { return this.ll.v(`select i1 ${p}, float ${a}, float ${b}`); }
  isel(p: V, a: V, b: V): V { return this.ll.v(`select i1 ${p}, i32 ${a}, i32 ${b}`); }
  d(x: number): V { return fhex(x); }
  dcvt(a: V): V { return this.ll.v(`fpext float ${a} to double`); }
  dint(a: V): V { return this.ll.v(`sitofp i32 ${a} to double`); }
  duint(a: V): V { return this.ll.v(`uitofp i32 ${a} to double`); }
  dround(a: V): V { return this.ll.v(`fptrunc double ${a} to float`); }
  dadd(a: V, b: V): V { return this.ll.v(`fadd double ${a}, ${b}`); }
  dsub(a: V, b: V): V { return this.ll.v(`fsub double ${a}, ${b}`); }
  dmul(a: V, b: V): V { return this.ll.v(`fmul double ${a}, ${b}`); }
  ddiv(a: V, b: V): V { return this.ll.v(`fdiv double ${a}, ${b}`); }
  dfma(a: V, b: V, c: V): V { return this.fi("fma", "double", a, b, c); }
  drni(a: V): V { return this.fi("rint", "double", a); }
  dtrunc(a: V): V { return this.fi("trunc", "double", a); }
  dabs(a: V): V { return this.fi("fabs", "double", a); }
  dlt(a: V, b: V): V { return this.ll.v(`fcmp olt double ${a}, ${b}`); }
  dle(a: V, b: V): V { return this.ll.v(`fcmp ole double ${a}, ${b}`); }
  deq(a: V, b: V): V { return this.ll.v(`fcmp oeq double ${a}, ${b}`); }
  dmin(a: V, b: V): V { return this.fi("minnum", "double", a, b); }
  dmax(a: V, b: V): V { return this.fi("maxnum", "double", a, b); }
  dcvti(a: V): V { return this.ll.call("i32", "llvm.fptosi.sat.i32.f64", [["double", a]]); }
  dsel(p: V, a: V, b: V): V { return this.ll.v(`select i1 ${p}, double ${a}, double ${b}`); }
  disnan(a: V): V { return this.ll.v(`fcmp uno double ${a}, 0.0`); }
}
