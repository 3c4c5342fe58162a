// Exact f32 emulation of the MathOps vocabulary (kernels/decomp/math.ts), with PTX's semantics for the
// edge cases (NaN-propagating max.NaN/min.NaN, saturating cvt.rzi, min.f64 ignoring a NaN). Lets the math
// routines' accuracy be measured on the CPU. Every op is bit-exact to the PTX instruction it stands for
// (fma included: a*b+c is rounded once), so the GPU computes what these tests measure.
import type { MathOps } from "../../kernels/decomp/math.ts";

const fr = Math.fround;
const F = new Float32Array(1);
const U = new Uint32Array(F.buffer);
const I = new Int32Array(F.buffer);

function sat32(x: number): number {
  if (Number.isNaN(x)) return 0;
  if (x >= 2147483647) return 2147483647;
  if (x <= -2147483648) return -2147483648;
  return Math.trunc(x) | 0;
}
function rint(x: number): number {
  if (!Number.isFinite(x)) return x;
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r; // ties to even (Math.round rounds ties up)
}
const nanMax = (a: number, b: number) => (Number.isNaN(a) || Number.isNaN(b) ? NaN : Math.max(a, b));
const nanMin = (a: number, b: number) => (Number.isNaN(a) || Number.isNaN(b) ? NaN : Math.min(a, b));

export const emu: MathOps<number, number, boolean, number> = {
  f: (x) => fr(x),
  i: (x) => x | 0,
  add: (a, b) => fr(a + b),
  sub: (a, b) => fr(a - b),
  mul: (a, b) => fr(a * b),
  fma: (a, b, c) => fma32(a, b, c),
  div: (a, b) => fr(a / b),
  rni: (a) => rint(a),
  trunc: (a) => Math.trunc(a),
  max: (a, b) => nanMax(a, b),
  min: (a, b) => nanMin(a, b),
  abs: (a) => Math.abs(a),
  bits: (a) => {
    F[0] = a;
    return I[0];
  },
  float: (a) => {
    I[0] = a;
    return F[0];
  },
  cvti: (a) => sat32(a),
  cvtf: (a) => fr(a),
  iadd: (a, b) => (a + b) | 0,
  isub: (a, b) => (a - b) | 0,
  iand: (a, b) => a & b,
  ior: (a, b) => a | b,
  ixor: (a, b) => a ^ b,
  ishl: (a, n) => a << n,
  ishr: (a, n) => a >> n,
  // PTX clamps shift amounts to 32 (JavaScript takes them mod 32); math.ts promises [0, 31] anyway.
  shlv: (a, n) => (n >>> 0 >= 32 ? 0 : a << n),
  ushrv: (a, n) => (n >>> 0 >= 32 ? 0 : (a >>> n) | 0),
  imul: (a, b) => Math.imul(a, b),
  umulhi: (a, b) => Number((BigInt(a >>> 0) * BigInt(b >>> 0)) >> 32n) | 0,
  flt: (a, b) => a < b,
  fle: (a, b) => a <= b,
  feq: (a, b) => a === b,
  isnan: (a) => Number.isNaN(a),
  ilt: (a, b) => a < b,
  iltu: (a, b) => a >>> 0 < b >>> 0,
  ine: (a, b) => a !== b,
  ieq: (a, b) => a === b,
  pand: (a, b) => a && b,
  por: (a, b) => a || b,
  pnot: (a) => !a,
  sel: (p, a, b) => (p ? a : b),
  isel: (p, a, b) => (p ? a : b),
  d: (x) => x,
  dcvt: (a) => a,
  dint: (a) => a | 0,
  duint: (a) => a >>> 0,
  dround: (a) => fr(a),
  dadd: (a, b) => a + b,
  dsub: (a, b) => a - b,
  dmul: (a, b) => a * b,
  ddiv: (a, b) => a / b,
  dfma: (a, b, c) => fma64(a, b, c),
  drni: (a) => rint(a),
  dtrunc: (a) => Math.trunc(a),
  dabs: (a) => Math.abs(a),
  dlt: (a, b) => a < b,
  dle: (a, b) => a <= b,
  deq: (a, b) => a === b,
  dmin: (a, b) => (Number.isNaN(a) ? b : Number.isNaN(b) ? a : Math.min(a, b)),
  dmax: (a, b) => (Number.isNaN(a) ? b : Number.isNaN(b) ? a : Math.max(a, b)),
  dcvti: (a) => sat32(a),
  dsel: (p, a, b) => (p ? a : b),
  disnan: (a) => Number.isNaN(a),
};

/**
 * a*b+c rounded once to f32 (f32 operands): a*b is exact in f64, s = a*b + c is rounded to f64 with error e
 * (TwoSum, exact), and rounding s to f32 can only be wrong when s lies exactly halfway between two floats,
 * where the sign of e decides.
 */
function fma32(a: number, b: number, c: number): number {
  const p = a * b, s = p + c, r = fr(s);
  if (r === s || !Number.isFinite(r)) return r;
  const bb = s - p, e = (p - (s - bb)) + (c - bb);
  const t = 2 * s - r; // the float on s's other side when s is a midpoint
  if (e === 0 || fr(t) !== t) return r;
  return e > 0 ? Math.max(r, t) : Math.min(r, t);
}

/** A double as an exact integer times 2^exp. */
function exact(x: number): [bigint, number] {
  let e = 0;
  while (!Number.isInteger(x)) {
    x *= 2;
    e--;
  }
  return [BigInt(x), e];
}
/** a*b+c rounded once (BigInt arithmetic; finite operands, results far from the double range's ends). */
function fma64(a: number, b: number, c: number): number {
  if (!Number.isFinite(a) || !Number.isFinite(b) || !Number.isFinite(c) || a === 0 || b === 0) return a * b + c;
  const [ma, ea] = exact(a), [mb, eb] = exact(b), [mc, ec] = exact(c);
  const e = Math.min(ea + eb, ec);
  const sum = ma * mb * 2n ** BigInt(ea + eb - e) + mc * 2n ** BigInt(ec - e);
  return sum === 0n ? a * b + c : Number(sum) * 2 ** e;
}

/** Distance in f32 ulps between a result and the exact value (rounded to f32 first). */
export function ulps(got: number, exact: number): number {
  const want = fr(exact);
  if (Number.isNaN(want) || Number.isNaN(got)) return Number.isNaN(want) && Number.isNaN(got) ? 0 : Infinity;
  if (want === got) return 0;
  if (!Number.isFinite(want) || !Number.isFinite(got)) return Infinity;
  const ord = (x: number) => {
    F[0] = x;
    const u = U[0];
    return u & 0x80000000 ? -(u & 0x7fffffff) : u;
  };
  return Math.abs(ord(got) - ord(want));
}
