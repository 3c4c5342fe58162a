// Arithmetic lowering: the IR's unary and binary operators, select and numeric casts on PTX registers, with the
// semantics kernel.ts's header states (IEEE .rn float ops, NaN-propagating min/max, x/0 = 0, shift mod 32,
// truncating and saturating float -> int casts); f16 routines without a native instruction go through f32.
import type { CType, Expr, Kernel } from "../../ir.ts";
import { KernelError } from "../../ir.ts";
import * as math from "../../decomp/math.ts";
import { type Asm, b32imm, RC, SUF } from "./asm.ts";
import type { PtxMath } from "./math.ts";

/** What arithmetic lowering needs from the kernel lowering. */
export interface ArithCtx {
  readonly a: Asm;
  readonly m: PtxMath;
  readonly k: Kernel;
  ex(e: Expr): string;
  opnd(e: Expr): string;
  reg(t: CType, x: string): string;
}

const isFloat = (t: CType) => t === "f32" || t === "f16";

export class Arith {
  constructor(private readonly c: ArithCtx) {}

  toF32(x: string, t: CType): string {
    return t === "f16" ? this.c.a.to("f", "cvt.f32.f16", x) : x;
  }
  private fromF32(x: string, t: CType): string {
    return t === "f16" ? this.c.a.to("h", "cvt.rn.f16.f32", x) : x;
  }
  /** Runs an f32 routine on an f32 or f16 value (f16 goes through f32 and rounds back). */
  private viaF32(t: CType, x: string, f: (x: string) => string): string {
    return this.fromF32(f(this.toF32(x, t)), t);
  }

  unary(op: string, t: CType, ea: Expr): string {
    const a = this.c.a, m = this.c.m;
    const x = this.c.ex(ea);
    const s = SUF[t];
    const routine = math.UNARY_ROUTINES[op];
    if (routine) return this.viaF32(t, x, (v) => routine(m, v));
    switch (op) {
      case "neg":
        if (isFloat(t)) return a.to(RC[t], `neg.${s}`, x);
        return a.to("r", "neg.s32", x);
      case "abs":
        if (isFloat(t)) return a.to(RC[t], `abs.${s}`, x);
        return t === "i32" ? a.to("r", "abs.s32", x) : x;
      case "sqrt": return this.viaF32(t, x, (v) => a.to("f", "sqrt.rn.f32", v));
      case "rsqrt": return this.viaF32(t, x, (v) => a.to("f", "rsqrt.approx.f32", v));
      case "recip": return this.viaF32(t, x, (v) => a.to("f", "rcp.rn.f32", v));
      case "floor": return a.to(RC[t], `cvt.rmi.${s}.${s}`, x);
      case "ceil": return a.to(RC[t], `cvt.rpi.${s}.${s}`, x);
      case "not": return t === "bool" ? a.to("p", "not.pred", x) : a.to("r", "not.b32", x);
      case "isfinite": return a.to("p", "testp.finite.f32", this.toF32(x, ea.t));
      case "isnan": return a.to("p", "testp.notanumber.f32", this.toF32(x, ea.t));
      case "f16bits": {
        const lo = a.reg("h"), hi = a.reg("h");
        a.op(`mov.b32 {${lo}, ${hi}}, ${this.c.reg("u32", x)}`);
        return a.to("f", "cvt.f32.f16", lo);
      }
      case "bf16bits": return a.to("f", "mov.b32", a.to("r", "shl.b32", this.c.reg("u32", x), "16"));
    }
    throw new KernelError(`${this.c.k.name}: unknown unary op ${op}`);
  }

  binary(op: string, t: CType, ea: Expr, eb: Expr): string {
    const a = this.c.a;
    const at = ea.t;
    if (at === "bool") return this.boolBinary(op, ea, eb);
    const s = SUF[at];
    const cmp = { lt: "lt", le: "le", gt: "gt", ge: "ge", eq: "eq", ne: isFloat(at) ? "neu" : "ne" }[op as "lt"];
    if (cmp) {
      if (at === "f16") return a.to("p", `setp.${cmp}.f16`, this.c.ex(ea), this.c.ex(eb));
      return a.to("p", `setp.${cmp}.${s}`, this.c.ex(ea), this.c.opnd(eb));
    }
    if (t === "f16") {
      const x = this.c.ex(ea), y = this.c.ex(eb);
      switch (op) {
        case "add": case "sub": case "mul": return a.to("h", `${op}.rn.f16`, x, y);
        case "max": case "min": return a.to("h", `${op}.NaN.f16`, x, y);
      }
      const fx = this.toF32(x, "f16"), fy = this.toF32(y, "f16");
      return this.fromF32(this.floatBinary(op, fx, fy), "f16");
    }
    if (t === "f32") {
      switch (op) {
        case "add": case "sub": case "mul": return a.to("f", `${op}.rn.f32`, this.c.ex(ea), this.c.opnd(eb));
        case "max": case "min": return a.to("f", `${op}.NaN.f32`, this.c.ex(ea), this.c.opnd(eb));
      }
      return this.floatBinary(op, this.c.ex(ea), this.c.ex(eb));
    }
    // 32-bit integers
    const x = this.c.ex(ea);
    switch (op) {
      case "add": return a.to("r", "add.s32", x, this.c.opnd(eb));
      case "sub": return a.to("r", "sub.s32", x, this.c.opnd(eb));
      case "mul": return a.to("r", "mul.lo.s32", x, this.c.opnd(eb));
      case "dot4": return a.to("r", "dp4a.s32.s32", x, this.c.opnd(eb), "0");
      case "max": case "min": return a.to("r", `${op}.${s}`, x, this.c.opnd(eb));
      case "and": case "or": case "xor": return a.to("r", `${op}.b32`, x, this.c.opnd(eb));
      case "shl": case "shr": {
        const sh = op === "shl" ? "shl.b32" : `shr.${s}`;
        if (eb.k === "const") return a.to("r", sh, x, String(eb.v & 31));
        return a.to("r", sh, x, a.to("r", "and.b32", this.c.ex(eb), "31"));
      }
      case "div": case "mod": {
        const opc = op === "div" ? `div.${s}` : `rem.${s}`;
        if (eb.k === "const" && eb.v !== 0) return a.to("r", opc, x, b32imm(eb.v));
        if (eb.k === "const") return a.to("r", "mov.b32", "0");
        const y = this.c.ex(eb);
        // x/0 and x%0 are 0 (as on the JS device); PTX leaves them unspecified.
        return a.to("r", "selp.b32", "0", a.to("r", opc, x, y), a.to("p", "setp.eq.u32", y, "0"));
      }
    }
    throw new KernelError(`${this.c.k.name}: ${op} on ${t}`);
  }
  private floatBinary(op: string, x: string, y: string): string {
    switch (op) {
      case "div": return this.c.a.to("f", "div.rn.f32", x, y);
      case "mod": return math.fmodf(this.c.m, x, y);
      case "pow": return math.powf(this.c.m, x, y);
    }
    throw new KernelError(`${this.c.k.name}: ${op} on floats`);
  }
  private boolBinary(op: string, ea: Expr, eb: Expr): string {
    const a = this.c.a;
    const x = this.c.ex(ea), y = this.c.ex(eb);
    switch (op) {
      case "and": case "min": return a.to("p", "and.pred", x, y);
      case "or": case "max": return a.to("p", "or.pred", x, y);
      case "xor": case "ne": return a.to("p", "xor.pred", x, y);
      case "eq": return a.to("p", "not.pred", a.to("p", "xor.pred", x, y));
      case "lt": case "le": case "gt": case "ge": {
        const u = (p: string) => a.to("r", "selp.u32", "1", "0", p);
        return a.to("p", `setp.${op}.u32`, u(x), u(y));
      }
    }
    throw new KernelError(`${this.c.k.name}: ${op} on bool`);
  }

  select(t: CType, c: string, ea: Expr, eb: Expr): string {
    const a = this.c.a;
    if (t === "bool") {
      const x = this.c.ex(ea), y = this.c.ex(eb);
      const nc = a.to("p", "not.pred", c);
      return a.to("p", "or.pred", a.to("p", "and.pred", c, x), a.to("p", "and.pred", nc, y));
    }
    const ty = t === "f32" ? "f32" : t === "f16" ? "b16" : "b32";
    const x = t === "f16" ? this.c.ex(ea) : this.c.opnd(ea), y = t === "f16" ? this.c.ex(eb) : this.c.opnd(eb);
    return a.to(RC[t], `selp.${ty}`, x, y, c);
  }

  /** Numeric conversion of register x from type `from` to `to`. */
  cast(x: string, from: CType, to: CType): string {
    const a = this.c.a;
    if (from === to) return x;
    if (to === "bool") {
      if (from === "f16") return a.to("p", "setp.neu.f32", a.to("f", "cvt.f32.f16", x), "0f00000000");
      return a.to("p", from === "f32" ? "setp.neu.f32" : "setp.ne.u32", x, from === "f32" ? "0f00000000" : "0");
    }
    if (from === "bool") {
      if (to === "f32") return a.to("f", "selp.f32", "0f3F800000", "0f00000000", x);
      if (to === "f16") return a.to("h", "selp.b16", "0x3C00", "0x0000", x);
      return a.to("r", "selp.b32", "1", "0", x);
    }
    if ((from === "i32" || from === "u32") && (to === "i32" || to === "u32")) return x;
    const s = (t: CType) => (t === "i32" ? "s32" : t);
    if (isFloat(to)) {
      if (isFloat(from)) return a.to(RC[to], from === "f32" ? "cvt.rn.f16.f32" : "cvt.f32.f16", x);
      return a.to(RC[to], `cvt.rn.${to}.${s(from)}`, x);
    }
    return a.to("r", `cvt.rzi.${s(to)}.${from}`, x); // float -> int: truncate, saturate, NaN -> 0
  }
}
