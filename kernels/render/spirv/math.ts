// Float special-value tests, float -> int casts and 16-bit float conversions, in plain SPIR-V arithmetic.
// f16/bf16 conversions are integer bit manipulation: exact, round-to-nearest-even, and independent of a
// driver's denormal and rounding-mode choices. (exp/log/sin/cos/tanh arrive expanded into IR by kernels/decomp:
// GLSL.std.450's are only loosely bounded, Exp 3 + 2|x| ulp, Sin/Cos absolute on [-pi, pi], and NVIDIA
// uses its fast hardware approximations.)
import type { Asm } from "./asm.ts";
import { GLSL, Op } from "./spec.ts";

/** x is NaN, from its bits (immune to any fast-math assumption a driver makes about IsNan). */
export function isNan(a: Asm, x: number): number {
  return a.ugt(a.and(a.u, a.bits(x), a.cu(0x7fffffff)), a.cu(0x7f800000));
}
export function isFinite(a: Asm, x: number): number {
  return a.v(Op.INotEqual, a.b, a.and(a.u, a.bits(x), a.cu(0x7f800000)), a.cu(0x7f800000));
}

function clamp(a: Asm, x: number, lo: number, hi: number): number {
  return a.glsl(a.f, GLSL.FMin, a.glsl(a.f, GLSL.FMax, x, a.cf(lo)), a.cf(hi));
}

// ---- 16-bit floats ----

/** f16 bits (low 16 bits of a u32) -> f32, exactly (denormals, infinities and NaN payloads kept). */
export function f16ToF32(a: Asm, h: number): number {
  const hb = a.and(a.u, h, a.cu(0xffff));
  const sign = a.shl(a.u, a.and(a.u, hb, a.cu(0x8000)), a.cu(16));
  const em = a.and(a.u, hb, a.cu(0x7fff));
  const e = a.shr(em, a.cu(10));
  const mbits = a.shl(a.u, em, a.cu(13));
  const normal = a.iadd(a.u, mbits, a.cu(0x38000000));
  const special = a.or(a.u, mbits, a.cu(0x7f800000));
  // a denormal half is m * 2^-24: exact in f32 and never itself a denormal there
  const m = a.and(a.u, hb, a.cu(0x3ff));
  const sub = a.bits(a.mul(a.v(Op.ConvertUToF, a.f, m), a.cf(2 ** -24)));
  let r = a.sel(a.u, a.ieq(e, a.cu(31)), special, normal);
  r = a.sel(a.u, a.ieq(e, a.cu(0)), sub, r);
  return a.float(a.or(a.u, r, sign));
}

/**
 * f16 bits (low 16 bits of a u32) -> f32 through the hardware: the word reinterpreted as two halves and the
 * low one widened by OpFConvert (exact, as every f16 value is an f32; used where the target has Float16).
 */
export function f16ToF32Convert(a: Asm, h: number, half: number): number {
  const pair = a.v(Op.Bitcast, a.m.tVec(half, 2), h);
  return a.v(Op.FConvert, a.f, a.v(Op.CompositeExtract, half, pair, 0));
}

/** f32 -> f16 bits in a u32, round to nearest even; overflow goes to infinity, NaN to a quiet NaN. */
export function f32ToF16(a: Asm, x: number): number {
  const b = a.bits(x);
  const sign = a.and(a.u, a.shr(b, a.cu(16)), a.cu(0x8000));
  const abs = a.and(a.u, b, a.cu(0x7fffffff));
  // normal halves: rebias the exponent (127 -> 15) and round 13 bits off
  const t = a.isub(a.u, abs, a.cu(0x38000000));
  const odd = a.and(a.u, a.shr(t, a.cu(13)), a.cu(1));
  const normal = a.shr(a.iadd(a.u, a.iadd(a.u, t, a.cu(0xfff)), odd), a.cu(13));
  // denormal halves: shift the full mantissa right by s = 126 - exponent, rounding to nearest even
  const s = a.glsl(a.u, GLSL.UMin, a.isub(a.u, a.cu(126), a.shr(abs, a.cu(23))), a.cu(31));
  const m = a.or(a.u, a.and(a.u, abs, a.cu(0x7fffff)), a.cu(0x800000));
  const h = a.shr(m, s);
  const rem = a.and(a.u, m, a.isub(a.u, a.shl(a.u, a.cu(1), s), a.cu(1)));
  const half = a.shl(a.u, a.cu(1), a.isub(a.u, s, a.cu(1)));
  const up = a.lor(a.ugt(rem, half), a.land(a.ieq(rem, half), a.ieq(a.and(a.u, h, a.cu(1)), a.cu(1))));
  const denorm = a.iadd(a.u, h, a.sel(a.u, up, a.cu(1), a.cu(0)));
  let r = a.sel(a.u, a.uge(abs, a.cu(0x38800000)), normal, denorm);
  r = a.sel(a.u, a.uge(abs, a.cu(0x477ff000)), a.cu(0x7c00), r);
  // NaN keeps its top payload bits and becomes quiet (as the JS runtime's f2h does)
  const nan = a.or(a.u, a.cu(0x7e00), a.shr(a.and(a.u, abs, a.cu(0x7fffff)), a.cu(13)));
  r = a.sel(a.u, a.ugt(abs, a.cu(0x7f800000)), nan, r);
  return a.or(a.u, r, sign);
}

/** bf16 bits (low 16 bits of a u32) -> f32, exactly. */
export function bf16ToF32(a: Asm, h: number): number {
  return a.float(a.shl(a.u, h, a.cu(16)));
}

/** f32 -> bf16 bits in a u32, round to nearest even; NaN stays a (quiet) NaN. */
export function f32ToBf16(a: Asm, x: number): number {
  const b = a.bits(x);
  const odd = a.and(a.u, a.shr(b, a.cu(16)), a.cu(1));
  const rne = a.shr(a.iadd(a.u, a.iadd(a.u, b, a.cu(0x7fff)), odd), a.cu(16));
  const nan = a.or(a.u, a.shr(b, a.cu(16)), a.cu(0x40));
  return a.sel(a.u, isNan(a, x), nan, rne);
}

/** float -> i32 or u32 truncating toward zero, saturating at the type's range, NaN -> 0 (as every renderer does). */
export function toInt(a: Asm, x: number, signed: boolean): number {
  const T = signed ? a.i : a.u;
  const [lo, hi, top] = signed ? [-2147483648, 2147483520, 0x7fffffff] : [0, 4294967040, 0xffffffff];
  const c = a.v(signed ? Op.ConvertFToS : Op.ConvertFToU, T, clamp(a, x, lo, hi));
  const topC = signed ? a.ci(top) : a.cu(top);
  const zero = signed ? a.ci(0) : a.cu(0);
  const r = a.sel(T, a.v(Op.FOrdGreaterThanEqual, a.b, x, a.cf(signed ? 2147483648 : 4294967296)), topC, c);
  return a.sel(T, isNan(a, x), zero, r);
}
