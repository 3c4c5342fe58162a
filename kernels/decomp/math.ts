// Accurate f32 math written once over a tiny instruction vocabulary (MathOps): a target implements the
// vocabulary (kernels/render/ptx/math.ts emits PTX; tests/ptx/f32emu.ts runs it on the CPU in exact f32
// emulation, where its ulp error is measured against Math.* without a GPU), and gets exp, exp2, log, log2,
// sin, cos, tanh, pow and fmod with the bounds below.
//
// Why not the hardware approximations: ex2.approx / lg2.approx have absolute (not relative) error near the
// interesting points (log near 1, exp after a rounded x*log2e is ~40 ulp at |x| = 80), and sin.approx is only
// good on [-pi, pi]. So: Cody-Waite range reduction plus short minimax polynomials (Cephes' coefficients,
// FreeBSD's logf reduction), all fma-based. pow runs in f64 (the H200 has full-rate FP64), which makes it
// nearly correctly rounded even when y*log2(x) is large.
//
// The vocabulary asks for a fused fma and f64 (pow, fmod and the exact large-argument sin/cos reduction). A
// target without them (WGSL has no f64, lavapipe's fma is not fused) takes math_f32.ts's routines instead, over
// the f32 part of the same vocabulary, expanded into kernel IR by expand.ts; their accuracy is tested per
// device (tests/vulkan/device.test.ts, tests/wgpu/math.test.ts) and in f32 emulation (tests/decomp/math.test.ts).
//
// Bounds measured by tests/ptx/math.test.ts: exp/exp2 <= 1 ulp, log/log2 <= 2 ulp, sin/cos <= 2 ulp over
// all of f32, tanh <= 2 ulp, pow <= 1 ulp; fmod is exact while |a/b| < 2^53 (the IR's "mod" on floats).

/**
 * The f32 / i32 / predicate part of the vocabulary: all that math_f32.ts (the routines for targets without
 * f64 or a guaranteed fused fma) needs besides floor and opaque. F: f32, I: i32, P: predicate.
 */
export interface F32Ops<F, I, P> {
  f(x: number): F;
  i(x: number): I;
  add(a: F, b: F): F;
  sub(a: F, b: F): F;
  mul(a: F, b: F): F;
  /** a*b+c; fused (rounded once) in MathOps, possibly a rounded multiply and add in math_f32.ts. */
  fma(a: F, b: F, c: F): F;
  /** Correctly rounded division (math_f32.ts: within the IR's 2 ulp). */
  div(a: F, b: F): F;
  /** NaN-propagating. */
  max(a: F, b: F): F;
  min(a: F, b: F): F;
  abs(a: F): F;
  bits(a: F): I;
  float(a: I): F;
  /** f32 -> i32 toward zero, saturating, NaN -> 0; i32 -> f32 round to nearest. */
  cvti(a: F): I;
  cvtf(a: I): F;
  iadd(a: I, b: I): I;
  isub(a: I, b: I): I;
  iand(a: I, b: I): I;
  ior(a: I, b: I): I;
  ixor(a: I, b: I): I;
  ishl(a: I, n: number): I;
  /** Arithmetic shift right. */
  ishr(a: I, n: number): I;
  flt(a: F, b: F): P;
  fle(a: F, b: F): P;
  feq(a: F, b: F): P;
  isnan(a: F): P;
  ilt(a: I, b: I): P;
  iltu(a: I, b: I): P;
  ine(a: I, b: I): P;
  ieq(a: I, b: I): P;
  pand(a: P, b: P): P;
  por(a: P, b: P): P;
  pnot(a: P): P;
  sel(p: P, a: F, b: F): F;
  isel(p: P, a: I, b: I): I;
}

/** The instruction vocabulary the accurate routines are written in (fused fma, f64). D: f64. */
export interface MathOps<F, I, P, D> extends F32Ops<F, I, P> {
  /** Fused: rounded once. */
  fma(a: F, b: F, c: F): F;
  /** Round to nearest even integer / toward zero, as floats (NaN and infinities pass through). */
  rni(a: F): F;
  trunc(a: F): F;
  /** Shifts by a register amount, which must lie in [0, 31] (PTX clamps larger amounts, JavaScript wraps them). */
  shlv(a: I, n: I): I;
  /** Logical shift right by an amount in [0, 31]. */
  ushrv(a: I, n: I): I;
  /** The low / high 32 bits of the unsigned 64-bit product. */
  imul(a: I, b: I): I;
  umulhi(a: I, b: I): I;
  d(x: number): D;
  dcvt(a: F): D;
  /** i32 / u32 -> f64 (exact). */
  dint(a: I): D;
  duint(a: I): D;
  /** f64 -> f32, round to nearest even. */
  dround(a: D): F;
  dadd(a: D, b: D): D;
  dsub(a: D, b: D): D;
  dmul(a: D, b: D): D;
  ddiv(a: D, b: D): D;
  /** Fused a*b+c, rounded once. */
  dfma(a: D, b: D, c: D): D;
  drni(a: D): D;
  dtrunc(a: D): D;
  dabs(a: D): D;
  dlt(a: D, b: D): P;
  dle(a: D, b: D): P;
  deq(a: D, b: D): P;
  /** f64 min/max: a NaN operand yields the other one (PTX min.f64). */
  dmin(a: D, b: D): D;
  dmax(a: D, b: D): D;
  dcvti(a: D): I;
  dsel(p: P, a: D, b: D): D;
  disnan(a: D): P;
}

const LOG2E = 1.4426950408889634;
const LN2 = 0.6931471805599453;
const INF = Infinity;
const SIGN = 0x80000000 | 0;

export function copysign<F, I, P>(m: F32Ops<F, I, P>, mag: F, sgn: F): F {
  return m.float(m.ior(m.iand(m.bits(mag), m.i(0x7fffffff)), m.iand(m.bits(sgn), m.i(SIGN))));
}

/** p * 2^k for integer k in [-152, 130] and p in [0.5, 2]: two exact power-of-two factors, one rounding. */
export function scale2<F, I, P>(m: F32Ops<F, I, P>, p: F, k: I): F {
  const k1 = m.ishr(k, 1), k2 = m.isub(k, k1);
  const s1 = m.float(m.ishl(m.iadd(k1, m.i(127)), 23)), s2 = m.float(m.ishl(m.iadd(k2, m.i(127)), 23));
  return m.mul(m.mul(p, s1), s2);
}

/** e^r for |r| <= ln2/2 (Cephes expf's minimax polynomial). */
export function expPoly<F, I, P>(m: F32Ops<F, I, P>, r: F): F {
  let p = m.fma(m.f(1.9875691500e-4), r, m.f(1.3981999507e-3));
  p = m.fma(p, r, m.f(8.3334519073e-3));
  p = m.fma(p, r, m.f(4.1665795894e-2));
  p = m.fma(p, r, m.f(1.6666665459e-1));
  p = m.fma(p, r, m.f(5.0000001201e-1));
  return m.add(m.fma(p, m.mul(r, r), r), m.f(1));
}

export function expf<F, I, P, D>(m: MathOps<F, I, P, D>, x: F): F {
  // Clamped so that k stays an integer in range; e^-104 and e^89 already round to 0 and inf. NaN passes.
  const t = m.min(m.max(x, m.f(-104)), m.f(89));
  const k = m.rni(m.mul(t, m.f(LOG2E)));
  let r = m.fma(k, m.f(-0.693359375), t); // ln2 split in two: the first part has 9 bits, so k*part is exact
  r = m.fma(k, m.f(2.12194440e-4), r);
  return scale2(m, expPoly(m, r), m.cvti(k));
}

export function exp2f<F, I, P, D>(m: MathOps<F, I, P, D>, x: F): F {
  const t = m.min(m.max(x, m.f(-152)), m.f(130));
  const k = m.rni(t);
  const r = m.mul(m.sub(t, k), m.f(LN2)); // t - k is exact
  return scale2(m, expPoly(m, r), m.cvti(k));
}

interface LogParts<F> {
  f: F; // m - 1 with m in [sqrt(1/2), sqrt(2))
  s: F; // f / (2 + f)
  hfsq: F; // f^2 / 2
  r: F; // the polynomial tail
  k: F; // the exponent, as a float
}
/** x = 2^k * m (FreeBSD logf's reduction; subnormals are scaled first); only meaningful for finite x > 0. */
function logParts<F, I, P, D>(m: MathOps<F, I, P, D>, x: F): LogParts<F> {
  const sub = m.iltu(m.bits(x), m.i(0x00800000));
  const xs = m.sel(sub, m.mul(x, m.f(2 ** 25)), x);
  const kadj = m.isel(sub, m.i(-25), m.i(0));
  const ix = m.iadd(m.bits(xs), m.i(0x3f800000 - 0x3f3504f3));
  const k = m.iadd(m.isub(m.ishr(ix, 23), m.i(0x7f)), kadj);
  const f = m.sub(m.float(m.iadd(m.iand(ix, m.i(0x007fffff)), m.i(0x3f3504f3))), m.f(1));
  const s = m.div(f, m.add(m.f(2), f));
  const z = m.mul(s, s), w = m.mul(z, z);
  const t1 = m.mul(w, m.fma(w, m.f(0xf89e26 / 2 ** 26), m.f(0xccce13 / 2 ** 25)));
  const t2 = m.mul(z, m.fma(w, m.f(0x91e9ee / 2 ** 25), m.f(0xaaaaaa / 2 ** 24)));
  return { f, s, hfsq: m.mul(m.mul(m.f(0.5), f), f), r: m.add(t2, t1), k: m.cvtf(k) };
}
/** log's special values: NaN and +inf pass, negative -> NaN, zero -> -inf. */
function logSpecial<F, I, P, D>(m: MathOps<F, I, P, D>, x: F, res: F): F {
  res = m.sel(m.por(m.isnan(x), m.feq(x, m.f(INF))), x, res);
  res = m.sel(m.flt(x, m.f(0)), m.f(NaN), res);
  return m.sel(m.feq(x, m.f(0)), m.f(-INF), res);
}

export function logf<F, I, P, D>(m: MathOps<F, I, P, D>, x: F): F {
  const p = logParts(m, x);
  let a = m.mul(p.s, m.add(p.hfsq, p.r));
  a = m.fma(p.k, m.f(9.0580006145e-06), a); // ln2 = 0x3f317180 + 0x3717f7d1
  a = m.sub(a, p.hfsq);
  a = m.add(a, p.f);
  return logSpecial(m, x, m.fma(p.k, m.f(6.9313812256e-01), a));
}

export function log2f<F, I, P, D>(m: MathOps<F, I, P, D>, x: F): F {
  const p = logParts(m, x);
  const lo = m.mul(p.s, m.add(p.hfsq, p.r));
  const ln = m.add(m.sub(p.f, p.hfsq), lo);
  return logSpecial(m, x, m.fma(ln, m.f(LOG2E), p.k));
}

// pi/2 in three f32 parts (C1 + C2 + C3 to ~2^-75): with fma, x - q*C1 is exact for |x| < 2^17, and the
// reduction stays within 2 ulp there even for the f32 closest to a multiple of pi/2 (tests/ptx/math.test.ts).
const PIO2 = [1.5707963705062866, -4.371138828673793e-8, -1.7151245100058819e-15];
/** Where sin/cos switch from that reduction to the exact one below. */
const LARGE = 2 ** 17;
/** 2/pi in 32-bit words after 32 zero bits (so that windows starting before the binary point read zeros). */
export const TWO_OVER_PI_WORDS = [0, 0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0, 0xdb629599, 0x3c439041, 0xfe5163ab];

/**
 * Payne-Hanek reduction of a finite |x| >= 2^17 given its bits (sign cleared): |x| = q*pi/2 + r, |r| <= pi/4.
 * |x| = mi * 2^e with a 24-bit integer mi, so frac(|x| * 2/pi / 4) only needs the 96 bits of 2/pi that
 * start e-2 bits after its binary point; their product with mi, in integer arithmetic, holds the quadrant in
 * its top 2 bits and the remainder to 2^-62 quadrants. (The f32 closest to a multiple of pi/2 is ~2^-29 away,
 * so that is plenty.) Integer ops and one f64 conversion: exact, and identical on the GPU and in emulation.
 * (The f32 chain above needs q = rni(x * 2/pi) exact; far past 2^17 r grows out of [-pi/4, pi/4], and near
 * 1e19 r*r overflows: sin(3e38) was NaN and cos(3e38) -1, on the H200 and in emulation alike.)
 */
function reduceLarge<F, I, P, D>(m: MathOps<F, I, P, D>, axb: I): { q: I; r: F } {
  const mi = m.ior(m.iand(axb, m.i(0x007fffff)), m.i(0x00800000));
  const o = m.isub(m.ishr(axb, 23), m.i(150 + 2 - 32)); // bit offset of the window in TWO_OVER_PI_WORDS
  const wi = m.ishr(o, 5), sh = m.iand(o, m.i(31)), rsh = m.ixor(sh, m.i(31)); // 31 - sh
  // wi is in [0, 4] for |x| >= 2^17 (o in [24, 135]); the words are picked by selects, not an indexed load.
  const at = [1, 2, 3, 4].map((j) => m.ieq(wi, m.i(j)));
  const word = (k: number): I => at.reduce((w, p, j) => m.isel(p, m.i(TWO_OVER_PI_WORDS[j + 1 + k]), w), m.i(TWO_OVER_PI_WORDS[k]));
  const a = [word(0), word(1), word(2), word(3)];
  // Funnel shifts; (a >>> 1) >>> (31 - sh) keeps both amounts in [0, 31] (a shift by 32 means 0 on PTX but a
  // no-op in JavaScript).
  const w = [0, 1, 2].map((k) => m.ior(m.shlv(a[k], sh), m.ushrv(m.ushrv(a[k + 1], m.i(1)), rsh)));
  // The low 64 bits (of 120) of mi * w0:w1:w2, without the lowest word's low half.
  const lo1 = m.imul(mi, w[1]);
  const r1 = m.iadd(lo1, m.umulhi(mi, w[2]));
  const carry = m.isel(m.iltu(r1, lo1), m.i(1), m.i(0));
  const r0 = m.iadd(m.iadd(m.imul(mi, w[0]), m.umulhi(mi, w[1])), carry);
  // Nearest quadrant; the rest is a signed fraction of a quadrant, 2^30 per quadrant in r0 (62 bits in all).
  const d = m.iadd(r0, m.i(0x20000000));
  const q = m.iand(m.ishr(d, 30), m.i(3));
  const fhi = m.isub(m.iand(d, m.i(0x3fffffff)), m.i(0x20000000));
  const frac = m.dfma(m.dint(fhi), m.d(2 ** 32), m.duint(r1));
  return { q, r: m.dround(m.dmul(frac, m.d((Math.PI / 2) * 2 ** -62))) };
}

function sincos<F, I, P, D>(m: MathOps<F, I, P, D>, x: F, cos: boolean): F {
  const qf = m.rni(m.mul(x, m.f(2 / Math.PI)));
  let r = m.fma(qf, m.f(-PIO2[0]), x);
  r = m.fma(qf, m.f(-PIO2[1]), r);
  r = m.fma(qf, m.f(-PIO2[2]), r);
  let qi = m.cvti(qf);
  // Large arguments: reduce |x| exactly, then x = -q*pi/2 - r for negative x.
  const xb = m.bits(x);
  const ax = m.abs(x);
  const big = reduceLarge(m, m.iand(xb, m.i(0x7fffffff)));
  const neg = m.ilt(xb, m.i(0));
  const large = m.fle(m.f(LARGE), ax);
  r = m.sel(large, m.float(m.ixor(m.bits(big.r), m.iand(xb, m.i(SIGN)))), r);
  qi = m.isel(large, m.isel(neg, m.isub(m.i(0), big.q), big.q), qi);
  const z = m.mul(r, r);
  // Cephes sinf / cosf polynomials on [-pi/4, pi/4].
  let s = m.fma(m.f(-1.9515295891e-4), z, m.f(8.3321608736e-3));
  s = m.fma(s, z, m.f(-1.6666654611e-1));
  const sinr = m.fma(m.mul(s, z), r, r);
  let c = m.fma(m.f(2.443315711809948e-5), z, m.f(-1.388731625493765e-3));
  c = m.fma(c, z, m.f(4.166664568298827e-2));
  const cosr = m.fma(m.mul(c, z), z, m.fma(m.f(-0.5), z, m.f(1)));
  const odd = m.ine(m.iand(qi, m.i(1)), m.i(0));
  const v = cos ? m.sel(odd, sinr, cosr) : m.sel(odd, cosr, sinr);
  const sign = m.ishl(m.iand(cos ? m.iadd(qi, m.i(1)) : qi, m.i(2)), 30);
  // Infinities (which took the large path) and NaN give NaN.
  return m.sel(m.flt(ax, m.f(INF)), m.float(m.ixor(m.bits(v), sign)), m.f(NaN));
}
export const sinf = <F, I, P, D>(m: MathOps<F, I, P, D>, x: F): F => sincos(m, x, false);
export const cosf = <F, I, P, D>(m: MathOps<F, I, P, D>, x: F): F => sincos(m, x, true);

export function tanhf<F, I, P, D>(m: MathOps<F, I, P, D>, x: F): F {
  const a = m.abs(x);
  const e = expf(m, m.add(a, a));
  const big = copysign(m, m.sub(m.f(1), m.div(m.f(2), m.add(e, m.f(1)))), x);
  const z = m.mul(x, x); // Cephes tanhf below 0.625
  let p = m.fma(m.f(-5.70498872745e-3), z, m.f(2.06390887954e-2));
  p = m.fma(p, z, m.f(-5.37397155531e-2));
  p = m.fma(p, z, m.f(1.33314422036e-1));
  p = m.fma(p, z, m.f(-3.33332819422e-1));
  const small = m.fma(m.mul(p, z), x, x);
  return m.sel(m.flt(a, m.f(0.625)), small, big);
}

/** pow with JavaScript's (IEEE pow's) special cases, computed as 2^(y*log2|x|) in f64. */
export function powf<F, I, P, D>(m: MathOps<F, I, P, D>, x: F, y: F): F {
  const ax = m.abs(x);
  // log2|x| = k + log2(mm), mm in [sqrt(1/2), sqrt(2)), via 2*atanh(s) with s = (mm-1)/(mm+1), |s| <= 0.172.
  const sub = m.iltu(m.bits(ax), m.i(0x00800000));
  const axs = m.sel(sub, m.mul(ax, m.f(2 ** 25)), ax);
  const ix = m.iadd(m.bits(axs), m.i(0x3f800000 - 0x3f3504f3));
  const k = m.iadd(m.isub(m.ishr(ix, 23), m.i(0x7f)), m.isel(sub, m.i(-25), m.i(0)));
  const mm = m.float(m.iadd(m.iand(ix, m.i(0x007fffff)), m.i(0x3f3504f3)));
  const fd = m.dsub(m.dcvt(mm), m.d(1));
  const s = m.ddiv(fd, m.dadd(m.d(2), fd));
  const z = m.dmul(s, s);
  let poly = m.d(1 / 17);
  for (const c of [1 / 15, 1 / 13, 1 / 11, 1 / 9, 1 / 7, 1 / 5, 1 / 3, 1]) poly = m.dadd(m.dmul(poly, z), m.d(c));
  let l2 = m.dadd(m.dcvt(m.cvtf(k)), m.dmul(m.dmul(s, m.d(2 * LOG2E)), poly));
  l2 = m.dsel(m.feq(ax, m.f(0)), m.d(-INF), l2);
  l2 = m.dsel(m.feq(ax, m.f(INF)), m.d(INF), l2);
  const t = m.dmul(m.dcvt(y), l2);
  // 2^t = 2^n * e^(r ln2), |r| <= 1/2; degree 11 Taylor is below 2^-40 relative.
  const tc = m.dmin(m.dmax(t, m.d(-200)), m.d(200));
  const n = m.drni(tc);
  const u = m.dmul(m.dsub(tc, n), m.d(LN2));
  let fact = 1;
  for (let j = 2; j <= 11; j++) fact *= j;
  let e = m.d(1 / fact);
  for (let j = 10; j >= 0; j--) {
    fact /= j + 1;
    e = m.dadd(m.dmul(e, u), m.d(1 / fact));
  }
  const ni = m.dcvti(n), n1 = m.ishr(ni, 1), n2 = m.isub(ni, n1);
  const s1 = m.dcvt(m.float(m.ishl(m.iadd(n1, m.i(127)), 23)));
  const s2 = m.dcvt(m.float(m.ishl(m.iadd(n2, m.i(127)), 23)));
  let res = m.dround(m.dmul(m.dmul(e, s1), s2));
  res = m.sel(m.disnan(t), m.f(NaN), res);
  // Signs and domain: (-x)^y is -(x^y) for odd integer y, NaN for finite x < 0 and finite non-integer y.
  const ay = m.abs(y);
  const yInt = m.feq(m.trunc(y), y);
  const yOdd = m.pand(m.pand(yInt, m.flt(ay, m.f(2 ** 24))), m.ine(m.iand(m.cvti(y), m.i(1)), m.i(0)));
  const xNeg = m.ilt(m.bits(x), m.i(0));
  res = m.sel(m.pand(xNeg, yOdd), m.float(m.ixor(m.bits(res), m.i(SIGN))), res);
  const xNegFinite = m.pand(m.flt(x, m.f(0)), m.flt(ax, m.f(INF)));
  res = m.sel(m.pand(m.pand(xNegFinite, m.pnot(yInt)), m.flt(ay, m.f(INF))), m.f(NaN), res);
  res = m.sel(m.por(m.isnan(x), m.isnan(y)), m.f(NaN), res);
  return m.sel(m.feq(y, m.f(0)), m.f(1), res);
}

/**
 * C fmod (JavaScript's %), in f64: q = trunc(a/b) and a - q*b by one fma are exact while |a/b| < 2^53 (a
 * quotient rounded across an integer is stepped back); beyond that (|a| > 2^53 |b|) it is approximate.
 * The sign is a's; NaN for b = 0 or infinite a; a finite a % inf is a.
 */
export function fmodf<F, I, P, D>(m: MathOps<F, I, P, D>, a: F, b: F): F {
  const ad = m.dcvt(a), bd = m.dcvt(b);
  const q = m.dtrunc(m.ddiv(ad, bd));
  let r = m.dfma(q, m.dsub(m.d(0), bd), ad);
  const sb = m.dcvt(copysign(m, m.abs(b), a)); // |b| with a's sign
  const wrong = m.pand(m.pnot(m.deq(r, m.d(0))), m.dlt(m.dmul(r, ad), m.d(0)));
  r = m.dsel(wrong, m.dadd(r, sb), r);
  r = m.dsel(m.dle(m.dabs(sb), m.dabs(r)), m.dsub(r, sb), r);
  let res = m.dround(r);
  res = m.sel(m.isnan(res), res, copysign(m, res, a));
  return m.sel(m.pand(m.feq(m.abs(b), m.f(INF)), m.flt(m.abs(a), m.f(INF))), a, res);
}

/**
 * The IR's transcendental unary ops as f32 routines over a target's MathOps: a renderer without native ones
 * (PTX, AMDGPU) looks the op up here instead of listing the routines itself.
 */
export const UNARY_ROUTINES: Readonly<Record<string, <F, I, P, D>(m: MathOps<F, I, P, D>, x: F) => F>> = {
  exp: expf, exp2: exp2f, log: logf, log2: log2f, sin: sinf, cos: cosf, tanh: tanhf,
};
