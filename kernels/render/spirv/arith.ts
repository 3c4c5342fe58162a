// The SPIR-V renderer's arithmetic (spirv.ts): IR casts, unary and binary ops as instructions with the IR's
// numerics (NoContraction float add/sub/mul, shift amounts mod 32, f32 -> f16 rounded in integer ops so that every
// driver gives the same bits; NaN-safe compares, max/min and integer div/mod arrive decomposed).
import type { CType } from "../../ir.ts";
import type { Asm } from "./asm.ts";
import * as math from "./math.ts";
import type { SpirvModule } from "./module.ts";
import { GLSL, Op } from "./spec.ts";

/** What the arithmetic needs from the emitter: its assembler and module, types, constants and failure. */
export interface ArithHost {
  readonly a: Asm;
  readonly m: SpirvModule;
  type(t: CType): number;
  constant(t: CType, v: number): number;
  fail(msg: string): never;
  /** The f16 type where halves convert natively (caps.f16 and SpirvOptions.convertF16), else undefined. */
  readonly halfFast: (() => number) | undefined;
}

export function cast(h: ArithHost, id: number, from: CType, to: CType): number {
  if (from === to) return id;
  const { a } = h;
  const T = h.type(to);
  const isF = (t: CType) => t === "f32" || t === "f16";
  if (to === "bool") {
    if (isF(from)) { // decompose() tests a cast's NaN; this serves the storage paths' own casts
      const ne = a.v(Op.FUnordNotEqual, a.b, id, h.constant(from, 0));
      return a.lor(ne, math.isNan(a, from === "f16" ? a.v(Op.FConvert, a.f, id) : id));
    }
    return a.v(Op.INotEqual, a.b, id, h.constant(from, 0));
  }
  if (from === "bool") return a.sel(T, id, h.constant(to, 1), h.constant(to, 0));
  if (to === "f16") return toF16(h, isF(from) ? id : a.v(from === "i32" ? Op.ConvertSToF : Op.ConvertUToF, a.f, id));
  if (isF(from) && isF(to)) return a.v(Op.FConvert, T, id); // f16 -> f32: exact
  if (isF(from)) return math.toInt(a, from === "f16" ? a.v(Op.FConvert, a.f, id) : id, to === "i32");
  if (isF(to)) return a.v(from === "i32" ? Op.ConvertSToF : Op.ConvertUToF, T, id);
  return a.v(Op.Bitcast, T, id); // i32 <-> u32
}

/**
 * An f32 (an int's |value| < 2^24 is exact in f32, a larger one is inf either way) -> f16, rounded to nearest
 * even in integer ops and reinterpreted: OpFConvert's rounding mode is the driver's, and NVIDIA's compiler
 * drops a round trip f32 -> f16 -> f32 altogether (seen through Naga, which emits the same OpFConverts).
 */
export function toF16(h: ArithHost, x: number): number {
  const { a } = h;
  const half = h.type("f16");
  return a.v(Op.CompositeExtract, half, a.v(Op.Bitcast, h.m.tVec(half, 2), math.f32ToF16(a, x)), 0);
}

/** A float compare as its instruction: decompose() added the NaN tests SPIR-V's compares may skip. */
function fcmp(h: ArithHost, op: string, x: number, y: number, t: CType): number {
  const code = {
    lt: Op.FOrdLessThan, le: Op.FOrdLessThanEqual, gt: Op.FOrdGreaterThan, ge: Op.FOrdGreaterThanEqual,
    eq: Op.FOrdEqual, ne: Op.FUnordNotEqual,
  }[op];
  if (code === undefined) h.fail(`${op} on ${t}`);
  return h.a.v(code, h.a.b, x, y);
}

export function unary(h: ArithHost, op: string, x: number, t: CType): number {
  const { a } = h;
  const T = h.type(t);
  const isF = t === "f32" || t === "f16";
  switch (op) {
    case "neg":
      return isF ? a.v(Op.FNegate, T, x) : t === "bool" ? h.fail("neg of bool") : a.v(Op.SNegate, T, x);
    case "abs":
      if (isF) return a.glsl(T, GLSL.FAbs, x);
      return t === "i32" ? a.glsl(T, GLSL.SAbs, x) : x;
    case "sqrt": return a.glsl(T, GLSL.Sqrt, x);
    case "rsqrt": return a.glsl(T, GLSL.InverseSqrt, x);
    case "recip": return a.v(Op.FDiv, T, h.constant(t, 1), x);
    case "floor": return a.glsl(T, GLSL.Floor, x);
    case "ceil": return a.glsl(T, GLSL.Ceil, x);
    case "not": return t === "bool" ? a.v(Op.LogicalNot, T, x) : a.v(Op.Not, T, x);
    case "isfinite": return math.isFinite(a, t === "f16" ? a.v(Op.FConvert, a.f, x) : x);
    case "isnan": return math.isNan(a, t === "f16" ? a.v(Op.FConvert, a.f, x) : x);
    case "f16bits": return h.halfFast ? math.f16ToF32Convert(a, x, h.halfFast()) : math.f16ToF32(a, x);
    case "bf16bits": return math.bf16ToF32(a, x);
  }
  h.fail(`unary ${op}`);
}

export function binary(h: ArithHost, op: string, x: number, y: number, t: CType): number {
  const { a } = h;
  const T = h.type(t);
  if (t === "bool") {
    switch (op) {
      case "and": return a.v(Op.LogicalAnd, T, x, y);
      case "or": return a.v(Op.LogicalOr, T, x, y);
      case "xor": case "ne": return a.v(Op.LogicalNotEqual, T, x, y);
      case "eq": return a.v(Op.LogicalEqual, T, x, y);
      case "lt": case "le": case "gt": case "ge": { // false < true, as 0 < 1 (the JS and WGSL renderers agree)
        const u = (v: number) => a.sel(a.u, v, a.cu(1), a.cu(0));
        return binary(h, op, u(x), u(y), "u32");
      }
    }
    h.fail(`${op} on bool`);
  }
  if (t === "f32" || t === "f16") {
    switch (op) {
      case "add": return a.precise(Op.FAdd, T, x, y);
      case "sub": return a.precise(Op.FSub, T, x, y);
      case "mul": return a.precise(Op.FMul, T, x, y);
      case "div": return a.v(Op.FDiv, T, x, y);
      case "mod": return a.v(Op.FRem, T, x, y);
      case "max": return a.glsl(T, GLSL.FMax, x, y);
      case "min": return a.glsl(T, GLSL.FMin, x, y);
      case "pow": return a.glsl(T, GLSL.Pow, x, y);
      case "lt": case "le": case "gt": case "ge": case "eq": case "ne": return fcmp(h, op, x, y, t);
    }
    h.fail(`${op} on ${t}`);
  }
  const s = t === "i32";
  // shift amounts wrap at 32 as in JS, WGSL and the other renderers (SPIR-V leaves >= 32 undefined)
  const amount = () => a.and(T, y, h.constant(t, 31));
  switch (op) {
    case "add": return a.v(Op.IAdd, T, x, y);
    case "sub": return a.v(Op.ISub, T, x, y);
    case "mul": return a.v(Op.IMul, T, x, y);
    case "div": case "mod": // decompose() leaves only u32 by a non-zero divisor (OpSDiv/OpSRem: arith.ts says why not)
      if (s) h.fail(`i32 ${op} was not decomposed`);
      return a.v(op === "div" ? Op.UDiv : Op.UMod, T, x, y);
    case "max": return a.glsl(T, s ? GLSL.SMax : GLSL.UMax, x, y);
    case "min": return a.glsl(T, s ? GLSL.SMin : GLSL.UMin, x, y);
    case "and": return a.v(Op.BitwiseAnd, T, x, y);
    case "or": return a.v(Op.BitwiseOr, T, x, y);
    case "xor": return a.v(Op.BitwiseXor, T, x, y);
    case "shl": return a.v(Op.ShiftLeftLogical, T, x, amount());
    case "shr": return a.v(s ? Op.ShiftRightArithmetic : Op.ShiftRightLogical, T, x, amount());
    case "lt": return a.v(s ? Op.SLessThan : Op.ULessThan, a.b, x, y);
    case "le": return a.v(s ? Op.SLessThanEqual : Op.ULessThanEqual, a.b, x, y);
    case "gt": return a.v(s ? Op.SGreaterThan : Op.UGreaterThan, a.b, x, y);
    case "ge": return a.v(s ? Op.SGreaterThanEqual : Op.UGreaterThanEqual, a.b, x, y);
    case "eq": return a.v(Op.IEqual, a.b, x, y);
    case "ne": return a.v(Op.INotEqual, a.b, x, y);
  }
  h.fail(`${op} on ${t}`);
}
