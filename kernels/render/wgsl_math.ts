// WGSL helper functions the WGSL renderer emits on demand: float special-value tests, 16-bit float packing,
// JS-compatible integer division and float->int casts.
//
// exp/log/log2/sin/cos/tanh are not here: WGSL leaves their accuracy to the driver, and drivers differ a lot
// (lavapipe, Deno 2.9: exp over [-80, 80] off by up to 58 ulp, log near 1 by ~5000 ulp, tanh near 0 by ~300
// ulp; NVIDIA lowers sin/cos to approximate units only good on [-pi, pi]), so they arrive expanded into IR
// arithmetic by kernels/decomp (math_f32.ts, expand.ts; the renderer asks for it through Needs.math).
//
// Non-finite constants go through p_fb (a function call is never a const-expression, and WGSL forbids a
// const-expression that evaluates to inf or NaN).

/** name -> [code, helpers it calls]. */
export const WGSL_MATH: Record<string, [string, string[]]> = {
  p_fb: [`fn p_fb(b: u32) -> f32 { return bitcast<f32>(b); }`, []],
  p_isnan: [`fn p_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }`, []],
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
