// Float functions and 16-bit float conversions, expanded into plain SPIR-V arithmetic.
//
// Why not GLSL.std.450 Exp/Log/Sin/Cos/Tanh: Vulkan only bounds them loosely (Exp is 3 + 2|x| ulp, Sin/Cos
// are absolute-error bounds on [-pi, pi], Tanh inherits sinh/cosh), and drivers differ (NVIDIA uses its
// fast hardware approximations, lavapipe its own polynomials). Expanded here with Cody-Waite range reduction
// and Cephes' single-precision polynomials, every step rounded on its own (NoContraction), they come out
// within a few ulp and the same on every driver. f16/bf16 conversions are integer bit manipulation: exact,
// round-to-nearest-even, and independent of a driver's denormal and rounding-mode choices.
import { Asm } from "./asm.ts";
import { GLSL, Op } from "./spec.ts";

// pi/2 in five parts: the first four have at most 7 significant bits, so k * part is exact for |k| < 2^17
// (|x| up to ~2e5), and x - k*P1 - ... - k*P5 keeps ~54 bits of pi/2; only the last, tiny product rounds.
const PIO2 = [1.5625, 0.0081787109375, 0.00011730194091796875, 3.129243850708008e-07, 9.92093629470503e-10];
const TWO_OVER_PI = 0.6366197466850281;
// ln 2 in two parts: the first has 16 significant bits, so k * LN2_HI is exact for |k| < 2^8.
const LN2_HI = 0.693145751953125, LN2_LO = 1.428606765330187e-06;
const LOG2E = 1.4426950216293335;
const LN2 = 0.6931471805599453;

const EXP_P = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1];
const SIN_P = [-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1];
const COS_P = [2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2];
const LOG_P = [
  7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
  2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
];
const TANH_P = [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1];

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

/** r * 2^k for k in [-152, 130], as two exact power-of-two products (no Ldexp range caveats). */
function scale2(a: Asm, r: number, k: number): number {
  const k1 = a.sar(k, a.ci(1));
  const k2 = a.isub(a.i, k, k1);
  const pow2 = (e: number) => a.float(a.shl(a.u, a.v(Op.Bitcast, a.u, a.iadd(a.i, e, a.ci(127))), a.cu(23)));
  return a.mul(a.mul(r, pow2(k1)), pow2(k2));
}

/** e^r for |r| <= ~0.35 (Cephes expf). */
function expCore(a: Asm, r: number): number {
  const z = a.mul(r, r);
  return a.add(a.add(a.mul(a.poly(r, EXP_P), z), r), a.cf(1));
}

export function exp(a: Asm, x: number): number {
  const xc = clamp(a, x, -104, 89);
  const kf = a.glsl(a.f, GLSL.RoundEven, a.mul(xc, a.cf(LOG2E)));
  const r = a.sub(a.sub(xc, a.mul(kf, a.cf(LN2_HI))), a.mul(kf, a.cf(LN2_LO)));
  const y = scale2(a, expCore(a, r), a.v(Op.ConvertFToS, a.i, kf));
  return a.sel(a.f, isNan(a, x), x, y);
}

export function exp2(a: Asm, x: number): number {
  const xc = clamp(a, x, -151, 129);
  const kf = a.glsl(a.f, GLSL.RoundEven, xc);
  const r = a.mul(a.sub(xc, kf), a.cf(LN2));
  const y = scale2(a, expCore(a, r), a.v(Op.ConvertFToS, a.i, kf));
  return a.sel(a.f, isNan(a, x), x, y);
}

/** Splits x > 0 (denormals included) into m in [sqrt(1/2), sqrt(2)) and e with x = m 2^e; returns [f = m - 1, e]. */
function logSplit(a: Asm, x: number): [number, number] {
  const b = a.bits(x);
  const E = a.shr(b, a.cu(23));
  const mt = a.and(a.u, b, a.cu(0x7fffff));
  // A denormal has no implicit bit: normalize its mantissa by its highest set bit p (value = m 2^(p-148)).
  const sub = a.ieq(E, a.cu(0));
  const p = a.glsl(a.u, GLSL.FindUMsb, mt);
  const mtn = a.and(a.u, a.shl(a.u, mt, a.isub(a.u, a.cu(23), p)), a.cu(0x7fffff));
  const mant = a.sel(a.u, sub, mtn, mt);
  const e0 = a.sel(a.u, sub, a.isub(a.u, p, a.cu(148)), a.isub(a.u, E, a.cu(126)));
  const m0 = a.float(a.or(a.u, mant, a.cu(0x3f000000))); // [0.5, 1)
  const small = a.v(Op.FOrdLessThan, a.b, m0, a.cf(0.70710678118654752));
  const e = a.sel(a.u, small, a.isub(a.u, e0, a.cu(1)), e0);
  const m = a.sel(a.f, small, a.add(m0, m0), m0);
  return [a.sub(m, a.cf(1)), a.v(Op.ConvertSToF, a.f, a.v(Op.Bitcast, a.i, e))];
}

/** The log polynomial's part beyond f: f^3 P(f) - f^2/2 (Cephes logf), so ln(1 + f) = f + tail. */
function logTail(a: Asm, f: number): number {
  const z = a.mul(f, f);
  const y = a.mul(a.mul(a.poly(f, LOG_P), f), z);
  return a.add(y, a.mul(a.cf(-0.5), z));
}

/** log of 0 is -inf, of a negative is NaN, of +inf is +inf, NaN stays. */
function logSpecial(a: Asm, x: number, r: number): number {
  const b = a.bits(x);
  const abs = a.and(a.u, b, a.cu(0x7fffffff));
  let out = a.sel(a.f, a.ieq(abs, a.cu(0)), a.cf(-Infinity), r);
  out = a.sel(a.f, a.ieq(b, a.cu(0x7f800000)), a.cf(Infinity), out);
  out = a.sel(a.f, a.ugt(b, a.cu(0x80000000)), a.float(a.cu(0x7fc00000)), out);
  return a.sel(a.f, isNan(a, x), x, out);
}

export function log(a: Asm, x: number): number {
  const [f, e] = logSplit(a, x);
  let y = a.add(logTail(a, f), a.mul(e, a.cf(-2.12194440e-4)));
  y = a.add(a.add(f, y), a.mul(e, a.cf(0.693359375)));
  return logSpecial(a, x, y);
}

export function log2(a: Asm, x: number): number {
  const [f, e] = logSplit(a, x);
  const y = logTail(a, f);
  const L = a.cf(LOG2E - 1); // log2(e) - 1, so the leading f and y add exactly
  let z = a.mul(y, L);
  z = a.add(z, a.mul(f, L));
  z = a.add(a.add(a.add(z, y), f), e);
  return logSpecial(a, x, z);
}

/** Reduces x by pi/2: returns [r in ~[-pi/4, pi/4], quadrant k & 3 as u32]. */
function trigReduce(a: Asm, x: number): [number, number] {
  const kf = a.glsl(a.f, GLSL.RoundEven, a.mul(x, a.cf(TWO_OVER_PI)));
  let r = x;
  for (const p of PIO2) r = a.sub(r, a.mul(kf, a.cf(p)));
  const q = a.and(a.u, a.v(Op.Bitcast, a.u, a.v(Op.ConvertFToS, a.i, kf)), a.cu(3));
  return [r, q];
}
function sinCore(a: Asm, r: number, z: number): number {
  return a.add(a.mul(a.mul(a.poly(z, SIN_P), z), r), r);
}
function cosCore(a: Asm, z: number): number {
  return a.add(a.sub(a.mul(a.mul(a.poly(z, COS_P), z), z), a.mul(a.cf(0.5), z)), a.cf(1));
}

export function sin(a: Asm, x: number): number {
  const [r, q] = trigReduce(a, x);
  const z = a.mul(r, r);
  const odd = a.v(Op.INotEqual, a.b, a.and(a.u, q, a.cu(1)), a.cu(0));
  const v = a.sel(a.f, odd, cosCore(a, z), sinCore(a, r, z));
  const neg = a.v(Op.INotEqual, a.b, a.and(a.u, q, a.cu(2)), a.cu(0));
  return a.sel(a.f, neg, a.v(Op.FNegate, a.f, v), v);
}

export function cos(a: Asm, x: number): number {
  const [r, q] = trigReduce(a, x);
  const z = a.mul(r, r);
  const odd = a.v(Op.INotEqual, a.b, a.and(a.u, q, a.cu(1)), a.cu(0));
  const v = a.sel(a.f, odd, sinCore(a, r, z), cosCore(a, z));
  const neg = a.v(Op.INotEqual, a.b, a.and(a.u, a.iadd(a.u, q, a.cu(1)), a.cu(2)), a.cu(0));
  return a.sel(a.f, neg, a.v(Op.FNegate, a.f, v), v);
}

export function tanh(a: Asm, x: number): number {
  const ax = a.glsl(a.f, GLSL.FAbs, x);
  const z = a.mul(x, x);
  const small = a.add(a.mul(a.mul(a.poly(z, TANH_P), z), x), x);
  const e = exp(a, a.add(ax, ax));
  const t = a.sub(a.cf(1), a.div(a.cf(2), a.add(e, a.cf(1))));
  const big = a.sel(a.f, a.v(Op.FOrdLessThan, a.b, x, a.cf(0)), a.v(Op.FNegate, a.f, t), t);
  return a.sel(a.f, a.v(Op.FOrdLessThan, a.b, ax, a.cf(0.625)), small, big);
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
