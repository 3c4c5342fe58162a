// The AMDGPU renderer's arithmetic (kernel.ts): IR unary and binary ops and casts as LLVM IR with the IR's numerics
// (see kernel.ts's header: no contraction, correctly rounded division, NaN-propagating min/max, saturating
// float->int casts, shift amounts mod 32; f16 computed through f32 where LLVM has no half routine), the math
// library's routines over LlMath.
import type { CType, Expr, Kernel } from "../../ir.ts";
import { KernelError } from "../../ir.ts";
import * as math from "../../decomp/math.ts";
import { type Ll, LT } from "./ll.ts";
import type { LlMath } from "./math.ts";

/** What the arithmetic needs from the renderer: its kernel, instruction builder, math library and sub-expressions. */
export interface ArithHost {
  readonly k: Kernel;
  readonly ll: Ll;
  readonly m: LlMath;
  ex(e: Expr): string;
}

export const isFloat = (t: CType) => t === "f32" || t === "f16";

function toF32(ll: Ll, x: string, t: CType): string {
  return t === "f16" ? ll.v(`fpext half ${x} to float`) : x;
}
function fromF32(ll: Ll, x: string, t: CType): string {
  return t === "f16" ? ll.v(`fptrunc float ${x} to half`) : x;
}
function viaF32(ll: Ll, t: CType, x: string, f: (x: string) => string): string {
  return fromF32(ll, f(toF32(ll, x, t)), t);
}

export function unary(h: ArithHost, op: string, t: CType, ea: Expr): string {
  const { ll, m } = h;
  const x = h.ex(ea);
  const ft = LT[t];
  const routine = math.UNARY_ROUTINES[op];
  if (routine) return viaF32(ll, t, x, (v) => routine(m, v));
  switch (op) {
    case "neg": return isFloat(t) ? ll.v(`fneg ${ft} ${x}`) : ll.v(`sub i32 0, ${x}`);
    case "abs":
      if (isFloat(t)) return ll.call(ft, `llvm.fabs.${t}`, [[ft, x]]);
      return t === "i32" ? ll.call("i32", "llvm.abs.i32", [["i32", x], ["i1", "false"]]) : x;
    case "sqrt": return viaF32(ll, t, x, (v) => ll.call("float", "llvm.sqrt.f32", [["float", v]]));
    case "rsqrt": return viaF32(ll, t, x, (v) => ll.v(`fdiv float 1.0, ${ll.call("float", "llvm.sqrt.f32", [["float", v]])}`));
    case "recip": return viaF32(ll, t, x, (v) => ll.v(`fdiv float 1.0, ${v}`));
    case "floor": return ll.call(ft, `llvm.floor.${t}`, [[ft, x]]);
    case "ceil": return ll.call(ft, `llvm.ceil.${t}`, [[ft, x]]);
    case "not": return ll.v(t === "bool" ? `xor i1 ${x}, true` : `xor i32 ${x}, -1`);
    case "isfinite": {
      const bits = ll.v(`bitcast float ${toF32(ll, x, ea.t)} to i32`);
      return ll.v(`icmp ne i32 ${ll.v(`and i32 ${bits}, 2139095040`)}, 2139095040`);
    }
    case "isnan": return ll.v(`fcmp uno ${LT[ea.t]} ${x}, ${x}`);
    case "f16bits": return ll.v(`fpext half ${ll.v(`bitcast i16 ${ll.v(`trunc i32 ${x} to i16`)} to half`)} to float`);
    case "bf16bits": return ll.v(`bitcast i32 ${ll.v(`shl i32 ${x}, 16`)} to float`);
  }
  throw new KernelError(`${h.k.name}: unknown unary op ${op}`);
}

export function binary(h: ArithHost, op: string, t: CType, ea: Expr, eb: Expr): string {
  const ll = h.ll;
  const at = ea.t;
  const x = h.ex(ea), y = h.ex(eb);
  const ty = LT[at];
  if (at === "bool") {
    switch (op) {
      case "and": case "min": return ll.v(`and i1 ${x}, ${y}`);
      case "or": case "max": return ll.v(`or i1 ${x}, ${y}`);
      case "xor": case "ne": return ll.v(`xor i1 ${x}, ${y}`);
      case "eq": return ll.v(`icmp eq i1 ${x}, ${y}`);
      case "lt": case "le": case "gt": case "ge": return ll.v(`icmp u${op} i1 ${x}, ${y}`);
    }
    throw new KernelError(`${h.k.name}: ${op} on bool`);
  }
  if (isFloat(at)) {
    const fc = { lt: "olt", le: "ole", gt: "ogt", ge: "oge", eq: "oeq", ne: "une" }[op as "lt"];
    if (fc) return ll.v(`fcmp ${fc} ${ty} ${x}, ${y}`);
    switch (op) {
      case "add": return ll.v(`fadd ${ty} ${x}, ${y}`);
      case "sub": return ll.v(`fsub ${ty} ${x}, ${y}`);
      case "mul": return ll.v(`fmul ${ty} ${x}, ${y}`);
      case "max": case "min": return h.m.nanMinMax(op, ty, x, y);
    }
    const fx = toF32(ll, x, at), fy = toF32(ll, y, at);
    let r: string;
    if (op === "div") r = ll.v(`fdiv float ${fx}, ${fy}`);
    else if (op === "mod") r = math.fmodf(h.m, fx, fy);
    else if (op === "pow") r = math.powf(h.m, fx, fy);
    else throw new KernelError(`${h.k.name}: ${op} on floats`);
    return fromF32(ll, r, t);
  }
  const s = at === "i32";
  const ic = { lt: "lt", le: "le", gt: "gt", ge: "ge" }[op as "lt"];
  if (ic) return ll.v(`icmp ${s ? "s" : "u"}${ic} i32 ${x}, ${y}`);
  switch (op) {
    case "eq": return ll.v(`icmp eq i32 ${x}, ${y}`);
    case "ne": return ll.v(`icmp ne i32 ${x}, ${y}`);
    case "add": case "sub": case "mul": case "and": case "or": case "xor": return ll.v(`${op} i32 ${x}, ${y}`);
    case "max": case "min": return ll.call("i32", `llvm.${s ? "s" : "u"}${op}.i32`, [["i32", x], ["i32", y]]);
    case "shl": case "shr": {
      const n = eb.k === "const" ? String(eb.v & 31) : ll.v(`and i32 ${y}, 31`);
      return ll.v(`${op === "shl" ? "shl" : s ? "ashr" : "lshr"} i32 ${x}, ${n}`);
    }
    case "div": case "mod": {
      // decompose(intDivMod) left only u32 division by a value that is never 0
      if (s) throw new KernelError(`${h.k.name}: i32 ${op} reached the renderer (decomp intDivMod missing)`);
      return ll.v(`${op === "div" ? "udiv" : "urem"} i32 ${x}, ${y}`);
    }
  }
  throw new KernelError(`${h.k.name}: ${op} on ${t}`);
}

/** Numeric conversion of x from type `from` to `to`. */
export function cast(ll: Ll, x: string, from: CType, to: CType): string {
  if (from === to) return x;
  if (to === "bool") return isFloat(from) ? ll.v(`fcmp une ${LT[from]} ${x}, 0.0`) : ll.v(`icmp ne i32 ${x}, 0`);
  if (from === "bool") {
    if (isFloat(to)) return ll.v(`uitofp i1 ${x} to ${LT[to]}`);
    return ll.v(`zext i1 ${x} to i32`);
  }
  if (!isFloat(from) && !isFloat(to)) return x;
  if (isFloat(from) && isFloat(to)) return ll.v(from === "f32" ? `fptrunc float ${x} to half` : `fpext half ${x} to float`);
  if (isFloat(to)) return ll.v(`${from === "i32" ? "sitofp" : "uitofp"} i32 ${x} to ${LT[to]}`);
  const f = from === "f16" ? "f16" : "f32";
  return ll.call("i32", `llvm.${to === "i32" ? "fptosi" : "fptoui"}.sat.i32.${f}`, [[LT[from], x]]);
}
