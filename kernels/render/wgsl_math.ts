// WGSL helper functions the WGSL renderer emits on demand: float special-value tests, 16-bit float packing,
// JS-compatible integer division and float->int casts, and f32 exp/log/sin/cos/tanh.
//
// Why software exp/log/sin/cos/tanh: WGSL leaves their accuracy to the driver, and drivers differ a lot.
// Measured on lavapipe (Deno 2.9 WebGPU): exp over [-80, 80] is off by up to 58 ulp, log near 1 by ~5000 ulp,
// tanh near 0 by ~300 ulp; NVIDIA lowers sin/cos to approximate units that are only good on [-pi, pi].
// These are Cephes-style polynomials after a Cody-Waite reduction (sin/cos: a three-part pi/2 with exact partial
// products, good for |x| <= 1e5 as the IR promises), within a few ulp, and the same code on every adapter.
// WGSL's fma need not be fused (lavapipe's is not), so nothing here depends on fusion, and the steps that must not
// be re-associated go through p_opaque.
//
// Non-finite constants go through p_fb (a function call is never a const-expression, and WGSL forbids a
// const-expression that evaluates to inf or NaN).

/** name -> [code, helpers it calls]. */
export const WGSL_MATH: Record<string, [string, string[]]> = {
  p_fb: [`fn p_fb(b: u32) -> f32 { return bitcast<f32>(b); }`, []],
  p_isnan: [`fn p_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }`, []],
  // v, hidden from the shader compiler's algebra: Mesa's NIR treats WGSL float ops as inexact and may factor
  // n*C1 + n*C2 into n*(C1 + C2) or fuse products, which ruins a Cody-Waite reduction. The select depends on x's
  // bits, so no rule sees through it; for NaN x the caller's result is NaN anyway.
  p_opaque: [`fn p_opaque(v: f32, x: f32) -> f32 { return select(v, 0.0f, p_isnan(x)); }`, ["p_isnan"]],
  p_isfinite: [`fn p_isfinite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u; }`, []],

  // f32 -> f16 bits, round to nearest even; NaN stays a quiet NaN, overflow goes to infinity.
  p_f2h: [
    `fn p_f2h(x: f32) -> u32 {
  let u = bitcast<u32>(x);
  let s = (u >> 16u) & 0x8000u;
  let a = u & 0x7fffffffu;
  if (a > 0x7f800000u) { return s | 0x7e00u | ((a >> 13u) & 0x3ffu); }
  if (a >= 0x47800000u) { return s | 0x7c00u; }
  if (a >= 0x38800000u) {
    let r = a - 0x38000000u;
    return s | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
  }
  if (a <= 0x33000000u) { return s; }
  let sh = 126u - (a >> 23u);
  let m = (a & 0x7fffffu) | 0x800000u;
  let q = m >> sh;
  let rem = m & ((1u << sh) - 1u);
  let half = 1u << (sh - 1u);
  return s | (q + select(0u, 1u, rem > half || (rem == half && (q & 1u) == 1u)));
}`,
    [],
  ],
  // f32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN.
  p_f2bf: [
    `fn p_f2bf(x: f32) -> u32 {
  let u = bitcast<u32>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; }
  return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}`,
    [],
  ],
  // float -> int: truncate, saturate, NaN -> 0 (the JS renderer's and PTX cvt.rzi.sat's answer).
  // (WGSL's own conversion clamps to the largest f32 below 2^31 / 2^32, not to the integer maximum.)
  p_f2i: [
    `fn p_f2i(x: f32) -> i32 { return select(select(i32(x), 2147483647i, x >= 2147483648.0f), 0i, p_isnan(x)); }`,
    ["p_isnan"],
  ],
  p_f2u: [
    `fn p_f2u(x: f32) -> u32 { return select(select(u32(x), 4294967295u, x >= 4294967296.0f), 0u, p_isnan(x)); }`,
    ["p_isnan"],
  ],
  // x / 0 and x % 0 give 0 (WGSL gives x for the division).
  // i32 / and % on u32 magnitudes, signs put back explicitly: Naga lowers i32 % to OpSRem, which Vulkan
  // leaves undefined for negative operands (NVIDIA computes it unsigned: -19 % 3 gave 0). Truncating
  // quotient, remainder with the dividend's sign, x / 0 = x % 0 = 0, INT_MIN / -1 = INT_MIN (as in JS).
  p_absi: [`fn p_absi(a: i32) -> u32 { return select(bitcast<u32>(a), 0u - bitcast<u32>(a), a < 0i); }`, []],
  p_divi: [
    `fn p_divi(a: i32, b: i32) -> i32 { let d = p_absi(b); let q = p_absi(a) / select(d, 1u, d == 0u); ` +
    `return bitcast<i32>(select(select(q, 0u - q, (a < 0i) != (b < 0i)), 0u, d == 0u)); }`,
    ["p_absi"],
  ],
  p_divu: [`fn p_divu(a: u32, b: u32) -> u32 { return select(a / b, 0u, b == 0u); }`, []],
  p_modi: [
    `fn p_modi(a: i32, b: i32) -> i32 { let d = p_absi(b); let r = p_absi(a) % select(d, 1u, d == 0u); ` +
    `return bitcast<i32>(select(select(r, 0u - r, a < 0i), 0u, d == 0u)); }`,
    ["p_absi"],
  ],
  p_modu: [`fn p_modu(a: u32, b: u32) -> u32 { return select(a % b, 0u, b == 0u); }`, []],

  p_exp: [
    `fn p_exp(x: f32) -> f32 {
  let n = round(clamp(x, -104.0f, 89.0f) * 1.44269504088896341f);
  var r = x - n * 0.693359375f;
  r = r + p_opaque(n, x) * 2.12194440e-4f;
  var p = fma(1.9875691500e-4f, r, 1.3981999507e-3f);
  p = fma(p, r, 8.3334519073e-3f);
  p = fma(p, r, 4.1665795894e-2f);
  p = fma(p, r, 1.6666665459e-1f);
  p = fma(p, r, 5.0000001201e-1f);
  let y = fma(p, r * r, r) + 1.0f;
  let ni = i32(n);
  let h = ni / 2i;
  let v = (y * bitcast<f32>(u32(h + 127i) << 23u)) * bitcast<f32>(u32(ni - h + 127i) << 23u);
  if (x > 88.72283935546875f) { return p_fb(0x7f800000u); }
  if (x < -103.97208404541015625f) { return 0.0f; }
  return select(v, x, p_isnan(x));
}`,
    ["p_fb", "p_isnan", "p_opaque"],
  ],
  // (exponent, log of the reduced mantissa) of x > 0: x = 2^e * (1 + m), log(1 + m) by Cephes' logf polynomial.
  p_logr: [
    `fn p_logr(x: f32) -> vec2<f32> {
  var b = bitcast<u32>(x);
  var e = 0i;
  if (b < 0x00800000u) { b = bitcast<u32>(x * 8388608.0f); e = -23i; }
  e += i32((b >> 23u) & 0xffu) - 126i;
  var m = bitcast<f32>((b & 0x807fffffu) | 0x3f000000u);
  if (m < 0.707106781186547524f) { e -= 1i; m = m + m - 1.0f; } else { m = m - 1.0f; }
  let z = m * m;
  var y = fma(7.0376836292e-2f, m, -1.1514610310e-1f);
  y = fma(y, m, 1.1676998740e-1f);
  y = fma(y, m, -1.2420140846e-1f);
  y = fma(y, m, 1.4249322787e-1f);
  y = fma(y, m, -1.6668057665e-1f);
  y = fma(y, m, 2.0000714765e-1f);
  y = fma(y, m, -2.4999993993e-1f);
  y = fma(y, m, 3.3333331174e-1f);
  y = fma(y * m, z, -0.5f * z);
  return vec2<f32>(f32(e), m + y);
}`,
    [],
  ],
  p_logs: [
    `fn p_logs(x: f32, v: f32) -> f32 {
  if (x == 0.0f) { return p_fb(0xff800000u); }
  if (x < 0.0f || p_isnan(x)) { return p_fb(0x7fc00000u); }
  if (bitcast<u32>(x) == 0x7f800000u) { return x; }
  return v;
}`,
    ["p_fb", "p_isnan"],
  ],
  p_log: [
    `fn p_log(x: f32) -> f32 {
  let r = p_logr(x);
  return p_logs(x, fma(r.x, 0.693359375f, fma(r.x, -2.12194440e-4f, r.y)));
}`,
    ["p_logr", "p_logs"],
  ],
  p_log2: [
    `fn p_log2(x: f32) -> f32 {
  let r = p_logr(x);
  return p_logs(x, fma(r.y, 1.44269504088896341f, r.x));
}`,
    ["p_logr", "p_logs"],
  ],
  // sin(x + q*pi/2): reduce by the nearest multiple j of pi/2, then a quadrant-selected sin or cos polynomial on
  // [-pi/4, pi/4]. The reduction must not rely on a fused fma (lavapipe's fma is a separate multiply and add):
  // pi/2 = C1 + C2 + C3 with C1, C2 of 16 significant bits, and j (<= 2^16 for |x| <= 1e5) split into 8-bit
  // halves, so every product but the last is exact and x - j*(C1 + C2) loses nothing.
  p_sinq: [
    `fn p_sinq(x: f32, q0: u32) -> f32 {
  let j = round(x * 0.636619772367581343f);
  let jh = trunc(j * 0.00390625f) * 256.0f;
  let jl = j - jh;
  var r = x - jh * bitcast<f32>(0x3fc91000u);
  r = r - jl * p_opaque(bitcast<f32>(0x3fc91000u), x);
  r = r - jh * bitcast<f32>(0xb6957700u);
  r = r - jl * p_opaque(bitcast<f32>(0xb6957700u), x);
  r = r - j * bitcast<f32>(0xae74ba00u);
  let q = (bitcast<u32>(i32(j)) + q0) & 3u;
  let z = r * r;
  var s = fma(-1.9515295891e-4f, z, 8.3321608736e-3f);
  s = fma(s, z, -1.6666654611e-1f);
  let sn = fma(s * z, r, r);
  var c = fma(2.443315711809948e-5f, z, -1.388731625493765e-3f);
  c = fma(c, z, 4.166664568298827e-2f);
  let cs = fma(c * z, z, fma(-0.5f, z, 1.0f));
  let v = select(sn, cs, (q & 1u) == 1u);
  return select(v, -v, (q & 2u) == 2u);
}`,
    ["p_opaque"],
  ],
  p_sin: [`fn p_sin(x: f32) -> f32 { return p_sinq(x, 0u); }`, ["p_sinq"]],
  p_cos: [`fn p_cos(x: f32) -> f32 { return p_sinq(x, 1u); }`, ["p_sinq"]],
  p_tanh: [
    `fn p_tanh(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.625f) {
    let z = x * x;
    var p = fma(-5.70498872745e-3f, z, 2.06390887954e-2f);
    p = fma(p, z, -5.37397155531e-2f);
    p = fma(p, z, 1.33314422036e-1f);
    p = fma(p, z, -3.33332819422e-1f);
    return fma(p * z, x, x);
  }
  let t = 1.0f - 2.0f / (p_exp(2.0f * a) + 1.0f);
  return select(t, -t, x < 0.0f);
}`,
    ["p_exp"],
  ],
};

/** The code of the named helpers and everything they call, each once, callees first. */
export function wgslMath(names: Iterable<string>): string[] {
  const out: string[] = [];
  const done = new Set<string>();
  const visit = (n: string): void => {
    if (done.has(n)) return;
    done.add(n);
    const h = WGSL_MATH[n];
    if (!h) throw new Error(`no WGSL helper ${n}`);
    for (const d of h[1]) visit(d);
    out.push(h[0]);
  };
  for (const n of names) visit(n);
  return out;
}
