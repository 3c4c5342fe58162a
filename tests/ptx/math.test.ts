// The PTX renderer's f32 math routines (kernels/decomp/math.ts), run in exact f32 emulation of the very
// instruction sequence the renderer emits, against Math.*: the ulp bounds stated in math.ts and the special
// values JavaScript gives (what the JS device computes).
import { test } from "node:test";
import assert from "node:assert/strict";
import * as M from "../../kernels/decomp/math.ts";
import { emu, ulps } from "./f32emu.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { featureCases } from "../devices/feature_kernels.ts";
import { compareRuns, runFeature } from "../devices/run.ts";
import { rng } from "../rng.ts";

const fr = Math.fround;

function worst(f: (x: number) => number, ref: (x: number) => number, gen: () => number, n = 20000): { ulps: number; at: number } {
  let w = 0, at = 0;
  for (let i = 0; i < n; i++) {
    const x = fr(gen());
    const u = ulps(f(x), ref(x));
    if (u > w) [w, at] = [u, x];
  }
  return { ulps: w, at };
}

const r = rng(42);
const CASES: [string, (x: number) => number, (x: number) => number, () => number, number][] = [
  ["exp", (x) => M.expf(emu, x), Math.exp, () => (r() - 0.5) * 200, 1],
  ["exp near 0", (x) => M.expf(emu, x), Math.exp, () => (r() - 0.5) * 2, 1],
  ["exp2", (x) => M.exp2f(emu, x), (x) => 2 ** x, () => (r() - 0.5) * 300, 1],
  ["log", (x) => M.logf(emu, x), Math.log, () => Math.exp((r() - 0.5) * 200), 2],
  ["log near 1", (x) => M.logf(emu, x), Math.log, () => 1 + (r() - 0.5) * 0.01, 2],
  ["log subnormal", (x) => M.logf(emu, x), Math.log, () => r() * 1e-38, 2],
  ["log2", (x) => M.log2f(emu, x), Math.log2, () => Math.exp((r() - 0.5) * 200), 2],
  ["log2 near 1", (x) => M.log2f(emu, x), Math.log2, () => 1 + (r() - 0.5) * 0.01, 2],
  ["sin |x| <= 1e5", (x) => M.sinf(emu, x), Math.sin, () => (r() - 0.5) * 2e5, 2],
  ["sin |x| <= 5", (x) => M.sinf(emu, x), Math.sin, () => (r() - 0.5) * 10, 2],
  ["cos |x| <= 1e5", (x) => M.cosf(emu, x), Math.cos, () => (r() - 0.5) * 2e5, 2],
  ["cos |x| <= 5", (x) => M.cosf(emu, x), Math.cos, () => (r() - 0.5) * 10, 2],
  ["tanh", (x) => M.tanhf(emu, x), Math.tanh, () => (r() - 0.5) * 20, 2],
  ["tanh small", (x) => M.tanhf(emu, x), Math.tanh, () => (r() - 0.5) * 1.5, 2],
  ["pow x^(-x/7)", (x) => M.powf(emu, x, fr(-x / 7)), (x) => Math.pow(x, fr(-x / 7)), () => r() * 100, 1],
  ["pow rope theta^-t", (x) => M.powf(emu, 500000, x), (x) => Math.pow(500000, x), () => -r(), 1],
  ["pow near-1 base, huge exponent", (x) => M.powf(emu, fr(1.0001), x), (x) => Math.pow(fr(1.0001), x), () => r() * 800000, 1],
  ["fmod", (x) => M.fmodf(emu, x, fr(0.37)), (x) => x % fr(0.37), () => (r() - 0.5) * 1000, 0],
  ["fmod large quotients", (x) => M.fmodf(emu, x, fr(3.1e-7)), (x) => x % fr(3.1e-7), () => (r() - 0.5) * 1e8, 0],
];

for (const [name, f, ref, gen, bound] of CASES) {
  test(`ptx math ${name}: within ${bound} ulp of Math`, () => {
    const w = worst(f, ref, gen);
    assert.ok(w.ulps <= bound, `${w.ulps} ulp at x = ${w.at}`);
  });
}

const SPECIAL = [
  0, -0, 1, -1, 2, -2, 0.5, -0.5, 3, -3, 2.5, -2.5, Infinity, -Infinity, NaN, 1e-40, -1e-40, 1e30, -1e30, 88.72, -103.9,
  3e38, -3e38, 3.4028234663852886e38, 2 ** 17, -(2 ** 17), 2 ** 24 + 2, 1e5,
];

test("ptx math special values match JavaScript (NaN, infinities, zeros, subnormals)", () => {
  const bad: string[] = [];
  const same = (name: string, got: number, want: number, tol = 2) => {
    const w = fr(want);
    if (!(Object.is(got, w) || (Number.isFinite(w) && ulps(got, w) <= tol))) bad.push(`${name}: got ${got}, want ${w}`);
  };
  for (const x0 of SPECIAL) {
    const x = fr(x0);
    same(`exp(${x})`, M.expf(emu, x), Math.exp(x));
    same(`exp2(${x})`, M.exp2f(emu, x), 2 ** x);
    same(`log(${x})`, M.logf(emu, x), Math.log(x));
    same(`log2(${x})`, M.log2f(emu, x), Math.log2(x));
    same(`tanh(${x})`, M.tanhf(emu, x), Math.tanh(x));
    same(`sin(${x})`, M.sinf(emu, x), Math.sin(x));
    same(`cos(${x})`, M.cosf(emu, x), Math.cos(x));
    for (const y0 of SPECIAL) {
      const y = fr(y0);
      same(`pow(${x}, ${y})`, M.powf(emu, x, y), Math.pow(x, y), 1);
      // fmod is exact while |x/y| < 2^53 (math.ts); past that it is approximate.
      if (!(Math.abs(x / y) >= 2 ** 53 && Number.isFinite(x))) same(`fmod(${x}, ${y})`, M.fmodf(emu, x, y), x % y, 0);
    }
  }
  assert.deepEqual(bad, []);
});

const F32 = new Float32Array(1), U32 = new Uint32Array(F32.buffer);
/** `per` random floats of each binade (every biased exponent, subnormals and infinities/NaN included), both signs. */
function binades(per: number, seed: number): number[] {
  const g = rng(seed), out: number[] = [];
  for (let e = 0; e < 256; e++) {
    for (let j = 0; j < per; j++) {
      U32[0] = ((e << 23) | Math.floor(g() * 2 ** 23) | (j & 1 ? 0x80000000 : 0)) >>> 0;
      out.push(F32[0]);
    }
  }
  return out;
}

// Each routine over the whole f32 range, not just where its reduction is simplest (sin/cos once returned NaN
// and +-1 for |x| ~ 3e38, a range the tests above never reached).
const UNARY: [string, (x: number) => number, (x: number) => number, number][] = [
  ["exp", (x) => M.expf(emu, x), Math.exp, 1],
  ["exp2", (x) => M.exp2f(emu, x), (x) => 2 ** x, 1],
  ["log", (x) => M.logf(emu, x), Math.log, 2],
  ["log2", (x) => M.log2f(emu, x), Math.log2, 2],
  ["sin", (x) => M.sinf(emu, x), Math.sin, 2],
  ["cos", (x) => M.cosf(emu, x), Math.cos, 2],
  ["tanh", (x) => M.tanhf(emu, x), Math.tanh, 2],
  ["pow(x, 2.5)", (x) => M.powf(emu, x, 2.5), (x) => Math.pow(x, 2.5), 1],
  ["pow(1.5, x)", (x) => M.powf(emu, 1.5, x), (x) => Math.pow(1.5, x), 1],
];
for (const [name, f, ref, bound] of UNARY) {
  test(`ptx math ${name} over every f32 binade: within ${bound} ulp of Math`, () => {
    let w = 0, at = 0;
    for (const x of binades(24, name.length)) {
      const u = ulps(f(x), ref(x));
      if (u > w) [w, at] = [u, x];
    }
    assert.ok(w <= bound, `${w} ulp at x = ${at}`);
  });
}

test("ptx sin/cos at the floats closest to multiples of pi/2 (the hardest reductions)", () => {
  const near: number[] = [16367173 * 2 ** 72]; // the f32 closest to a multiple of pi/2 (~1.6e-9 away)
  const g = rng(5);
  for (let k = 1; k < 4000; k++) near.push(fr((k * Math.PI) / 2));
  for (let j = 0; j < 4000; j++) near.push(fr((Math.floor(g() * 2 ** 20) * Math.PI) / 2)); // both reductions
  let w = 0, at = 0;
  for (const c of near) {
    for (const x of [c, -c, fr(c * (1 + 2 ** -23)), fr(c * (1 - 2 ** -24))]) {
      const u = Math.max(ulps(M.sinf(emu, x), Math.sin(x)), ulps(M.cosf(emu, x), Math.cos(x)));
      if (u > w) [w, at] = [u, x];
    }
  }
  assert.ok(w <= 2, `${w} ulp at x = ${at}`);
});

test("the 2/pi words of the large-argument reduction are 2/pi's bits", () => {
  // pi to 320 bits by Machin's formula: 16 atan(1/5) - 4 atan(1/239), in fixed point.
  const P = 320n, one = 1n << P;
  const atanInv = (n: bigint): bigint => {
    let sum = 0n, term = one / n, k = 1n, sign = 1n;
    const n2 = n * n;
    while (term !== 0n) {
      sum += (sign * term) / k;
      term /= n2;
      k += 2n;
      sign = -sign;
    }
    return sum;
  };
  const pi = 16n * atanInv(5n) - 4n * atanInv(239n);
  const twoOverPi = (2n * one * one) / pi; // 2/pi in fixed point with P fraction bits
  const words = M.TWO_OVER_PI_WORDS.slice(1);
  const want = words.map((_, j) => Number((twoOverPi >> (P - 32n * BigInt(j + 1))) & 0xffffffffn));
  assert.equal(M.TWO_OVER_PI_WORDS[0], 0);
  assert.deepEqual(words, want);
});

test("fma in the emulation is rounded once (the GPU's fma.rn.f32)", () => {
  // a*b = 2^-24 + 2^-60: 1 + a*b rounds to the f64 1 + 2^-24, the tie between two floats, which the f32
  // rounding would break to even (1); the exact sum lies above it.
  const a = fr(1 + 2 ** -12), b = fr(2 ** -24 * (1 - 2 ** -12 + 2 ** -24));
  assert.equal(a * b, 2 ** -24 + 2 ** -60);
  assert.equal(fr(a * b + 1), 1);
  assert.equal(emu.fma(a, b, 1), fr(1 + 2 ** -23));
  assert.equal(emu.fma(-a, b, -1), -fr(1 + 2 ** -23));
  assert.equal(emu.fma(a, -b, 1), fr(1 - 2 ** -24)); // no tie: same as rounding twice
});

// The device test compares PTX against the JS device on these feature kernels; the same inputs through the
// emulated routines must already pass its bounds, or the GPU cannot.
test("unary_f32 and binary_f32 feature inputs: the emulated math routines meet the device test's bounds", async () => {
  const js = new JsDevice({ caps: { subgroupSize: 32, f16: true } });
  const cases = featureCases();
  const bad: string[] = [];
  const unary: Record<string, (x: number) => number> = {
    exp: (x) => M.expf(emu, x), exp2: (x) => M.exp2f(emu, x), log: (x) => M.logf(emu, x), log2: (x) => M.log2f(emu, x),
    sin: (x) => M.sinf(emu, x), cos: (x) => M.cosf(emu, x), tanh: (x) => M.tanhf(emu, x),
  };
  const binary: Record<string, (a: number, b: number) => number> = {
    pow: (a, b) => M.powf(emu, a, b), mod: (a, b) => M.fmodf(emu, a, b),
  };
  for (const [name, ops, table] of [
    ["unary_f32", ["neg", "abs", "floor", "ceil", "sqrt", "recip", "rsqrt", "exp", "exp2", "log", "log2", "sin", "cos", "tanh"], unary],
    ["binary_f32", ["add", "sub", "mul", "div", "mod", "max", "min", "pow"], binary],
  ] as const) {
    const c = cases.find((k) => k.name === name)!;
    const want = await runFeature(js, c);
    const out = want.length - 1, n = c.inputs[0].byteLength / 4;
    const got = want.map((b) => b.slice());
    const y = new Float32Array(got[out].buffer), a = new Float32Array(c.inputs[0].buffer.slice(0));
    const b = name === "binary_f32" ? new Float32Array(c.inputs[1].buffer.slice(0)) : a;
    ops.forEach((op, j) => {
      const f = (table as Record<string, (a: number, b: number) => number>)[op];
      if (f) for (let i = 0; i < n; i++) y[j * n + i] = f(a[i], b[i]);
    });
    bad.push(...compareRuns(c, want, got));
  }
  assert.deepEqual(bad, []);
});
