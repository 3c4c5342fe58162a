// The PTX renderer's f32 math routines (kernels/render/ptx/math.ts), run in exact f32 emulation of the very
// instruction sequence the renderer emits, against Math.*: the ulp bounds stated in math.ts and the special
// values JavaScript gives (what the JS device computes).
import { test } from "node:test";
import assert from "node:assert/strict";
import * as M from "../../kernels/render/ptx/math.ts";
import { emu, ulps } from "./f32emu.ts";

const fr = Math.fround;
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296);
}

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

const SPECIAL = [0, -0, 1, -1, 2, -2, 0.5, -0.5, 3, -3, 2.5, -2.5, Infinity, -Infinity, NaN, 1e-40, -1e-40, 1e30, -1e30, 88.72, -103.9];

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
    if (Math.abs(x) <= 1e5 || !Number.isFinite(x)) {
      same(`sin(${x})`, M.sinf(emu, x), Math.sin(x));
      same(`cos(${x})`, M.cosf(emu, x), Math.cos(x));
    }
    for (const y0 of SPECIAL) {
      const y = fr(y0);
      same(`pow(${x}, ${y})`, M.powf(emu, x, y), Math.pow(x, y), 1);
      // fmod is exact while |x/y| < 2^53 (math.ts); past that it is approximate.
      if (!(Math.abs(x / y) >= 2 ** 53 && Number.isFinite(x))) same(`fmod(${x}, ${y})`, M.fmodf(emu, x, y), x % y, 0);
    }
  }
  assert.deepEqual(bad, []);
});
