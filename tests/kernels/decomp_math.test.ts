// The f32 math routines the SPIR-V and WGSL renderers expand into IR (kernels/decomp/math_f32.ts through
// expand.ts), on the CPU:
// - in exact f32 emulation with an unfused fma (a rounded multiply, then a rounded add: lavapipe) and with a
//   fused one (NVIDIA), against Math.* rounded to f32: the bounds math_f32.ts states, and JavaScript's special
//   values (NaN, infinities, zeros, negative arguments to log);
// - expanded into IR by decompose(k, { math }) and run on the JS renderer, bit-identical to the emulation
//   with the JS renderer's own fma (a*b+c in f64, rounded once to f32): expand.ts emits exactly the routine;
// - the expansion leaves a kernel without those ops as the same object and refuses math in a loop bound.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as M from "../../kernels/decomp/math_f32.ts";
import type { F32MathOps } from "../../kernels/decomp/math_f32.ts";
import { decompose } from "../../kernels/decomp/mod.ts";
import { c, KernelBuilder, KernelError, un, type UnOp } from "../../kernels/ir.ts";
import { renderJs } from "../../kernels/render/js.ts";
import { emu, ulps } from "../ptx/f32emu.ts";
import { rng } from "../rng.ts";

const fr = Math.fround;
const base: F32MathOps<number, number, boolean> = { ...emu, floor: Math.floor, opaque: (v) => fr(v) };
const unfused: F32MathOps<number, number, boolean> = { ...base, fma: (a, b, c) => fr(fr(a * b) + c) };
const jsFma: F32MathOps<number, number, boolean> = { ...base, fma: (a, b, c) => fr(a * b + c) };
const OPS = Object.keys(M.F32_MATH) as M.F32MathOp[];
const REF: Record<M.F32MathOp, (x: number) => number> = {
  exp: Math.exp, exp2: (x) => 2 ** x, log: Math.log, log2: Math.log2, sin: Math.sin, cos: Math.cos, tanh: Math.tanh,
};

const r = rng(7);
/** [op, generator, ulp bound, absolute slack near zero]. */
const CASES: [M.F32MathOp, () => number, number, number][] = [
  ["exp", () => (r() - 0.5) * 176, 2, 0],
  ["exp", () => (r() - 0.5) * 2, 2, 0],
  ["exp2", () => (r() - 0.5) * 250, 2, 0],
  ["log", () => Math.exp((r() - 0.5) * 200), 2, 0],
  ["log", () => 1 + (r() - 0.5) * 0.01, 2, 0],
  ["log", () => r() * 1e-38, 2, 0],
  ["log2", () => Math.exp((r() - 0.5) * 200), 2, 0],
  ["log2", () => 1 + (r() - 0.5) * 0.6, 3, 0],
  ["sin", () => (r() - 0.5) * 8, 2, 0],
  ["cos", () => (r() - 0.5) * 8, 2, 0],
  ["sin", () => (r() - 0.5) * 2e5, 4, 2 ** -32],
  ["cos", () => (r() - 0.5) * 2e5, 4, 2 ** -32],
  ["tanh", () => (r() - 0.5) * 2, 2, 0],
  ["tanh", () => (r() - 0.5) * 40, 2, 0],
];

for (const [name, m] of [["unfused", unfused], ["fused", base]] as const) {
  test(`math_f32 in f32 emulation, ${name} fma: within the stated bounds`, () => {
    const bad: string[] = [];
    for (const [op, gen, bound, slack] of CASES) {
      let worst = 0, at = 0;
      for (let i = 0; i < 20000; i++) {
        const x = fr(gen());
        const got = M.F32_MATH[op](m, x), want = REF[op](x);
        if (slack && Math.abs(got - want) <= slack) continue;
        const u = ulps(got, want);
        if (u > worst) [worst, at] = [u, x];
      }
      if (worst > bound) bad.push(`${op}: ${worst} ulp at ${at} (bound ${bound})`);
    }
    assert.deepEqual(bad, []);
  });
}

const SPECIAL = [NaN, Infinity, -Infinity, 0, -0, 1, -1, 1e-45, -1e-45, 1.17549435e-38, 88.7, -103.9, 89, -105, 3e38, -3e38];
test("math_f32: JavaScript's special values (NaN, infinities, zeros, the ends of the range)", () => {
  const bad: string[] = [];
  for (const op of OPS) {
    for (const x of SPECIAL.map(fr)) {
      if ((op === "sin" || op === "cos") && Math.abs(x) > 1e5 && Number.isFinite(x)) continue; // out of the IR's range
      const got = M.F32_MATH[op](unfused, x), want = fr(REF[op](x));
      // (sin and tanh of -0 give +0, as the renderers' own routines did: the IR does not promise a zero's sign)
      const ok = Number.isNaN(want) ? Number.isNaN(got) : got === want || (Number.isFinite(want) && ulps(got, want) <= 2);
      if (!ok) bad.push(`${op}(${x}) = ${got}, want ${want}`);
    }
  }
  assert.deepEqual(bad, []);
});

// A device that flushes f32 subnormals (NVIDIA's SPIR-V and WGSL): every float operation reads a subnormal
// operand as a zero of its sign and writes a subnormal result as one; bit casts, selects and integer work are
// untouched. log/log2 of a subnormal must still be right (NVIDIA gave ln 2^-150 for log(2^-149): a binade
// off), or -inf where the routine saw a flushed zero; exp into the subnormal range may give 0.
const ftz = (x: number): number => (x !== 0 && Math.abs(x) < 2 ** -126 ? (x < 0 ? -0 : 0) : x);
const flushing: F32MathOps<number, number, boolean> = {
  ...unfused,
  add: (a, b) => ftz(fr(ftz(a) + ftz(b))),
  sub: (a, b) => ftz(fr(ftz(a) - ftz(b))),
  mul: (a, b) => ftz(fr(ftz(a) * ftz(b))),
  fma: (a, b, c) => ftz(fr(fr(ftz(a) * ftz(b)) + ftz(c))),
  div: (a, b) => ftz(fr(ftz(a) / ftz(b))),
  max: (a, b) => unfused.max(ftz(a), ftz(b)),
  min: (a, b) => unfused.min(ftz(a), ftz(b)),
  flt: (a, b) => ftz(a) < ftz(b),
  fle: (a, b) => ftz(a) <= ftz(b),
  feq: (a, b) => ftz(a) === ftz(b),
  floor: (a) => Math.floor(ftz(a)),
  cvti: (a) => unfused.cvti(ftz(a)),
};
test("math_f32 on a device that flushes subnormals: log/log2 of subnormals stay right", () => {
  const bad: string[] = [];
  const xs = [2 ** -149, 3 * 2 ** -149, 2 ** -140, 1e-40, 1.1e-38, 2 ** -126 - 2 ** -149].map(fr);
  for (const op of ["log", "log2"] as const) {
    for (const x of xs) {
      const got = M.F32_MATH[op](flushing, x), want = fr(REF[op](x));
      if (!(ulps(got, want) <= 2)) bad.push(`${op}(${x}) = ${got}, want ${want}`);
    }
  }
  assert.deepEqual(bad, []);
});

function mathKernel(op: UnOp, n: number) {
  const k = new KernelBuilder(`m_${op}`, { workgroup: 64, grid: Math.ceil(n / 64) });
  const X = k.buffer("x", "f32", "r"), O = k.buffer("o", "f32", "w");
  k.if(k.gid.x.lt(c(n, "u32")), () => {
    const x = k.load(X, k.gid.x);
    // the argument is an expression and the result feeds another op: both sides of the expansion
    k.store(O, k.gid.x, un(op, x.add(0)).mul(1));
  });
  return k.build();
}

test("expand.ts: each op expanded into IR and run on the JS renderer equals the routine, bit for bit", () => {
  const xs = Float32Array.from([...SPECIAL, ...CASES.flatMap(([, gen]) => Array.from({ length: 200 }, gen))]);
  for (const op of OPS) {
    const k = decompose(mathKernel(op, xs.length), { math: OPS });
    const src = renderJs(k, { subgroupSize: 1 });
    assert.ok(!new RegExp(`Math\\.(${op})\\b`).test(src.source), `${op}: no Math.${op} left in the JS source`);
    const out = new Float32Array(xs.length);
    src.run(src.bind([{ buffer: xs.slice().buffer }, { buffer: out.buffer }]));
    for (let i = 0; i < xs.length; i++) {
      const want = fr(M.F32_MATH[op](jsFma, fr(xs[i] + 0)));
      assert.ok(Object.is(out[i], want) || (Number.isNaN(out[i]) && Number.isNaN(want)), `${op}(${xs[i]}): ${out[i]} vs ${want}`);
    }
  }
});

test("expand.ts: a kernel without those ops is the same object; math in a loop bound is refused", () => {
  const k = new KernelBuilder("plain", { workgroup: 1, grid: 1 });
  const O = k.buffer("o", "f32", "w");
  k.store(O, c(0, "u32"), c(1.5, "f32").add(k.load(O, c(0, "u32"))));
  const plain = k.build();
  assert.equal(decompose(plain, { math: OPS }), decompose(plain));
  const b = new KernelBuilder("bound", { workgroup: 1, grid: 1 });
  const P = b.buffer("p", "f32", "rw");
  b.for(c(0, "i32"), b.load(P, c(0, "u32")).exp().cast("i32"), 1, (i) => b.store(P, c(1, "u32"), i.cast("f32")), { t: "i32" });
  assert.throws(() => decompose(b.build(), { math: ["exp"] }), KernelError);
});
