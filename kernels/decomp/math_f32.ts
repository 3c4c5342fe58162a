// exp, exp2, log, log2, sin, cos and tanh for targets with f32 only and no promise about fusion: WGSL (no f64;
// `fma` need not be fused, lavapipe's is not; Naga declares no NoContraction, so Mesa may fuse or factor
// WGSL's own float ops) and SPIR-V (GLSL.std.450's Exp/Log/Sin/... are only loosely bounded, and drivers use
// their fast approximations). Written once over math.ts's f32 vocabulary plus floor and opaque; expand.ts
// turns them into kernel IR, so every such renderer computes the same operations.
//
// Why these stay accurate without fusion: every product in a range reduction is exact (the constant's
// significant bits plus the multiplier's fit in 24), so rounding each step on its own or fusing it gives the
// same bits; a step the compiler must not re-associate (k*C1 + k*C2 into k*(C1 + C2)) multiplies by a
// constant passed through `opaque`, which hides its value from the compiler's algebra. Cody-Waite reductions
// and Cephes' single-precision polynomials; sin/cos reduce by pi/2 in five parts (|x| <= 1e5, the IR's
// promise). Measured bounds (tests/decomp/math.test.ts in f32 emulation with an unfused fma; lavapipe in
// tests/vulkan/device.test.ts and tests/wgpu/math.test.ts): exp/exp2 <= 2 ulp, log/log2 <= 2 ulp (log2 near 1:
// 3), sin/cos <= 2 ulp on [-4, 4] and 4 ulp + 2^-32 over |x| <= 1e5, tanh <= 2 ulp.
import { copysign, expPoly, type F32Ops, scale2 } from "./math.ts";

/** The vocabulary these routines need beyond F32Ops. */
export interface F32MathOps<F, I, P> extends F32Ops<F, I, P> {
  /** Largest integer <= a, as a float (exact; NaN and infinities pass through). */
  floor(a: F): F;
  /**
   * The constant v, computed from x's bits so that no compiler can see its value (NaN x may give anything:
   * every routine's result for NaN is NaN anyway). Identity where the compiler keeps the kernel's order.
   */
  opaque(v: number, x: F): F;
}

type M<F, I, P> = F32MathOps<F, I, P>;

const LOG2E = 1.4426950408889634;
const LN2 = 0.6931471805599453;
const SQRT_HALF = 0.70710678118654752;
// pi/2 in five parts: the first four have at most 7 significant bits, so k * part is exact for |k| < 2^17
// (|x| up to ~2e5), and x - k*P1 - ... - k*P5 keeps ~54 bits of pi/2; only the last, tiny product rounds.
const PIO2 = [1.5625, 0.0081787109375, 0.00011730194091796875, 3.129243850708008e-07, 9.92093629470503e-10];
const LOG_P = [
  7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
  2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
];

/** A nearest integer of v (ties either way, which is all a range reduction needs), as a float. */
const near = <F, I, P>(m: M<F, I, P>, v: F): F => m.floor(m.add(v, m.f(0.5)));

/** Horner's rule with c[0] the highest coefficient. */
function poly<F, I, P>(m: M<F, I, P>, x: F, c: number[]): F {
  let p = m.f(c[0]);
  for (let j = 1; j < c.length; j++) p = m.fma(p, x, m.f(c[j]));
  return p;
}

export function exp<F, I, P>(m: M<F, I, P>, x: F): F {
  // Clamped so that k stays an integer in range; e^-104 and e^89 already round to 0 and inf.
  const t = m.min(m.max(x, m.f(-104)), m.f(89));
  const k = near(m, m.mul(t, m.f(LOG2E)));
  const r = m.add(m.sub(t, m.mul(k, m.f(0.693359375))), m.mul(k, m.opaque(2.12194440e-4, x)));
  return m.sel(m.isnan(x), x, scale2(m, expPoly(m, r), m.cvti(k)));
}

export function exp2<F, I, P>(m: M<F, I, P>, x: F): F {
  const t = m.min(m.max(x, m.f(-152)), m.f(130));
  const k = near(m, t);
  const r = m.mul(m.sub(t, k), m.f(LN2)); // t - k is exact
  return m.sel(m.isnan(x), x, scale2(m, expPoly(m, r), m.cvti(k)));
}

/**
 * x > 0 as 2^e (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)): [f, e as a float]. A subnormal x is mant * 2^-149,
 * so its significand converted as an integer (exact, and a normal float) stands in for it; no float op
 * touches the subnormal itself, which a flushing device (NVIDIA) would read as 0 and land a binade off.
 */
function logSplit<F, I, P>(m: M<F, I, P>, x: F): [F, F] {
  const bx = m.bits(x);
  const sub = m.iltu(bx, m.i(0x00800000));
  const b = m.isel(sub, m.bits(m.cvtf(bx)), bx);
  const e0 = m.iadd(m.isub(m.iand(m.ishr(b, 23), m.i(0xff)), m.i(126)), m.isel(sub, m.i(-149), m.i(0)));
  const m0 = m.float(m.ior(m.iand(b, m.i(0x007fffff)), m.i(0x3f000000))); // [0.5, 1)
  const small = m.flt(m0, m.f(SQRT_HALF));
  const f = m.sub(m.sel(small, m.add(m0, m0), m0), m.f(1)); // exact
  return [f, m.cvtf(m.isel(small, m.isub(e0, m.i(1)), e0))];
}

/** ln(1 + f) - f = f^3 P(f) - f^2/2 (Cephes logf). */
function logTail<F, I, P>(m: M<F, I, P>, f: F): F {
  const z = m.mul(f, f);
  return m.fma(m.mul(poly(m, f, LOG_P), f), z, m.mul(m.f(-0.5), z));
}

/** log of 0 is -inf, of a negative is NaN, of +inf is +inf, NaN stays. */
function logSpecial<F, I, P>(m: M<F, I, P>, x: F, r: F): F {
  const b = m.bits(x);
  let out = m.sel(m.ieq(m.iand(b, m.i(0x7fffffff)), m.i(0)), m.f(-Infinity), r); // on the bits: a device may flush
  out = m.sel(m.ieq(b, m.i(0x7f800000)), x, out);
  out = m.sel(m.iltu(m.i(0x80000000 | 0), b), m.f(NaN), out);
  return m.sel(m.isnan(x), x, out);
}

export function log<F, I, P>(m: M<F, I, P>, x: F): F {
  const [f, e] = logSplit(m, x);
  // ln2 in two parts, the first of 9 significant bits: e * 0.693359375 is exact
  const y = m.add(logTail(m, f), m.mul(e, m.f(-2.12194440e-4)));
  return logSpecial(m, x, m.add(m.add(f, y), m.mul(e, m.opaque(0.693359375, x))));
}

export function log2<F, I, P>(m: M<F, I, P>, x: F): F {
  const [f, e] = logSplit(m, x);
  const y = logTail(m, f);
  const l = m.f(LOG2E - 1); // log2(e) - 1, so that the leading f and y add exactly
  const z = m.add(m.mul(y, l), m.mul(f, l));
  return logSpecial(m, x, m.add(m.add(m.add(z, y), f), e));
}

/** x reduced by pi/2: [r in ~[-pi/4, pi/4], the quadrant as an i32 (only its low two bits matter)]. */
function reduce<F, I, P>(m: M<F, I, P>, x: F): [F, I] {
  const k = near(m, m.mul(x, m.f(2 / Math.PI)));
  let r = m.sub(x, m.mul(k, m.f(PIO2[0])));
  for (let j = 1; j < PIO2.length; j++) r = m.sub(r, m.mul(k, m.opaque(PIO2[j], x)));
  return [r, m.cvti(k)];
}

function sincos<F, I, P>(m: M<F, I, P>, x: F, cos: boolean): F {
  const [r, q] = reduce(m, x);
  const z = m.mul(r, r);
  const s = poly(m, z, [-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1]);
  const sinr = m.fma(m.mul(s, z), r, r);
  const c = poly(m, z, [2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2]);
  const cosr = m.fma(m.mul(c, z), z, m.fma(m.f(-0.5), z, m.f(1)));
  const odd = m.ine(m.iand(q, m.i(1)), m.i(0));
  const v = cos ? m.sel(odd, sinr, cosr) : m.sel(odd, cosr, sinr);
  const sign = m.ishl(m.iand(cos ? m.iadd(q, m.i(1)) : q, m.i(2)), 30);
  return m.float(m.ixor(m.bits(v), sign));
}
export const sin = <F, I, P>(m: M<F, I, P>, x: F): F => sincos(m, x, false);
export const cos = <F, I, P>(m: M<F, I, P>, x: F): F => sincos(m, x, true);

export function tanh<F, I, P>(m: M<F, I, P>, x: F): F {
  const a = m.abs(x);
  const z = m.mul(x, x); // Cephes tanhf below 0.625
  const p = poly(m, z, [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1]);
  const small = m.fma(m.mul(p, z), x, x);
  const big = copysign(m, m.sub(m.f(1), m.div(m.f(2), m.add(exp(m, m.add(a, a)), m.f(1)))), x);
  return m.sel(m.flt(a, m.f(0.625)), small, big);
}

/** The routines by the IR's unary op names. */
export const F32_MATH = { exp, exp2, log, log2, sin, cos, tanh } as const;
export type F32MathOp = keyof typeof F32_MATH;
