// Accuracy of the WGSL renderer's float functions on the wgpu device against JavaScript's double-precision
// Math (rounded to f32), and the 16-bit float conversions, exhaustively where that is cheap:
// - exp/log/log2/sin/cos/tanh are IR arithmetic (kernels/decomp/math_f32.ts via expand.ts): a few ulp where defined;
// - exp2, sqrt, rsqrt, recip are the driver's (lavapipe: exp2 <= 3 ulp, the others correctly rounded or 1 ulp;
//   NVIDIA's sqrt and 1 / x are 1 ulp off at times): within the IR's 2 ulp for div and sqrt;
// - every f16 bit pattern decodes exactly; f32 -> f16 and -> bf16 round to nearest even, ties included. The f16
//   reference is the runtime's own Float16Array (V8's, independent of this project); bf16 is graph/dtype.ts
//   f32ToBf16, which tests/graph/dtype.test.ts sweeps against an exact rounding of every case class.
// A device may flush f32 subnormals to zero (Vulkan and WGSL allow it; NVIDIA does, lavapipe does not): a
// result whose exact value is subnormal may be 0, and a subnormal argument may act as a zero of its sign.
// Everything else is held to the bound.
import { test } from "node:test";
import assert from "node:assert/strict";
import { KernelBuilder, un, type UnOp } from "../../kernels/ir.ts";
import type { WgpuDevice } from "../../backends/wgpu/mod.ts";
import { f32ToBf16 } from "../../graph/dtype.ts";
import { Rng } from "../kernels/data.ts";
import { bytesOf, flushed, isSubnormal, lacking, probe, runKernel, ulps } from "./util.ts";

const dev = await probe();

// f16 through the runtime's Float16Array (V8's IEEE binary16, round to nearest even): the independent reference.
const F16 = (globalThis as { Float16Array?: new (n: number | ArrayBufferLike) => { [i: number]: number; buffer: ArrayBufferLike } }).Float16Array;
const half = F16 ? new F16(1) : undefined, halfBits = half ? new Uint16Array(half.buffer) : undefined;
/** f32 value -> f16 bits, rounded by the runtime. */
function f2h(x: number): number {
  half![0] = x;
  return halfBits![0];
}
/** Every f16 bit pattern decoded by the runtime. */
const H2F = F16 ? Float64Array.from(new F16(new Uint16Array(65536).map((_, i) => i).buffer) as unknown as ArrayLike<number>) : new Float64Array(0);
const skip = typeof dev === "string" ? dev : false;

async function apply(op: UnOp, xs: Float32Array): Promise<Float32Array> {
  const k = new KernelBuilder(`fn_${op}`, { workgroup: 256, grid: Math.ceil(xs.length / 256) });
  const X = k.buffer("x", "f32", "r"), O = k.buffer("o", "f32", "w");
  k.store(O, k.gid.x, un(op, k.load(X, k.gid.x)));
  const out = await runKernel(dev as WgpuDevice, k.build(), [bytesOf(xs), bytesOf(new Float32Array(xs.length))]);
  return new Float32Array(out[1].buffer, 0, xs.length);
}

function grid(lo: number, hi: number, n: number, seed: string): Float32Array {
  const r = new Rng(seed), a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = i % 2 ? lo + (hi - lo) * i / n : r.uniform(lo, hi);
  return a;
}

/** Max ulp error of op over xs vs f32(ref(x)); where |ref| < floor the error counts in units of ulp(floor). */
async function worst(op: UnOp, xs: Float32Array, ref: (x: number) => number, floor = 0): Promise<{ ulp: number; at: number }> {
  const got = await apply(op, xs);
  let w = 0, at = NaN;
  for (let i = 0; i < xs.length; i++) {
    const want = Math.fround(ref(xs[i]));
    if (flushed(got[i], ref(xs[i]))) continue;
    let e = ulps(got[i], want);
    if (floor && Math.abs(want) < floor && Number.isFinite(got[i])) e = Math.abs(got[i] - want) / (floor * 2 ** -23);
    if (e > w) {
      w = e;
      at = xs[i];
    }
  }
  return { ulp: w, at };
}

const CASES: [UnOp, number, number, (x: number) => number, number, number?][] = [
  ["exp", -87, 88, Math.exp, 2],
  ["exp", -103, -87, Math.exp, 2], // subnormal results: exact where the device keeps them (lavapipe), else 0
  ["exp", -1, 1, Math.exp, 2],
  ["log", 1e-30, 1e30, Math.log, 2],
  ["log", 0.5, 2, Math.log, 2],
  ["log2", 1e-20, 1e20, Math.log2, 2],
  ["log2", 0.7, 1.4, Math.log2, 3],
  ["sin", -4, 4, Math.sin, 2],
  ["cos", -4, 4, Math.cos, 2],
  ["sin", -1e5, 1e5, Math.sin, 4, 1e-3],
  ["cos", -1e5, 1e5, Math.cos, 4, 1e-3],
  ["tanh", -1, 1, Math.tanh, 2],
  ["tanh", -20, 20, Math.tanh, 2],
  ["exp2", -126, 127, (x) => 2 ** x, 3],
  ["sqrt", 0, 1e30, Math.sqrt, 2],
  ["rsqrt", 1e-30, 1e30, (x) => 1 / Math.sqrt(x), 2],
  ["recip", -1e30, 1e30, (x) => 1 / x, 2],
];

for (const [op, lo, hi, ref, tol, floor] of CASES) {
  test(`wgpu math: ${op} on [${lo}, ${hi}] within ${tol} ulp`, { skip }, async () => {
    const r = await worst(op, grid(lo, hi, 1 << 15, `${op}${lo}`), ref, floor);
    assert.ok(r.ulp <= tol, `${op}: ${r.ulp} ulp at x = ${r.at}`);
  });
}

test("wgpu math: special values of exp/log/sin/cos/tanh", { skip }, async () => {
  const xs = new Float32Array([0, -0, Infinity, -Infinity, NaN, -1, 1e-45, 89, -104, 88.72283935546875, -103.97208404541015625]);
  for (const [op, ref] of [["exp", Math.exp], ["log", Math.log], ["log2", Math.log2], ["sin", Math.sin], ["cos", Math.cos], ["tanh", Math.tanh]] as const) {
    const got = await apply(op, xs);
    xs.forEach((x, i) => {
      const want = Math.fround(ref(x));
      // 1e-45 is subnormal: a flushing device may take it for +0 (log(1e-45) = -inf) and flush sin(1e-45)
      const asZero = isSubnormal(x) && ulps(got[i], Math.fround(ref(x < 0 ? -0 : 0))) <= 2;
      assert.ok(ulps(got[i], want) <= 2 || flushed(got[i], ref(x)) || asZero, `${op}(${x}) = ${got[i]}, want ${want}`);
    });
  }
});

const noF16 = F16 ? false : "this runtime has no Float16Array (the independent f16 reference)";

test("wgpu math: every f16 pattern decodes exactly (as f32 and through f16bits)", { skip: skip || noF16 }, async () => {
  const k = new KernelBuilder("f16_all", { workgroup: 256, grid: 256 });
  const H = k.buffer("h", "f16", "r"), O = k.buffer("o", "f32", "w"), P = k.buffer("p", "f32", "w");
  k.store(O, k.gid.x, k.load(H, k.gid.x));
  k.store(P, k.gid.x, un("f16bits", k.gid.x));
  const h = new Uint16Array(65536).map((_, i) => i);
  const out = await runKernel(dev as WgpuDevice, k.build(), [bytesOf(h), new Uint8Array(65536 * 4), new Uint8Array(65536 * 4)]);
  for (const b of [out[1], out[2]]) {
    const f = new Float32Array(b.buffer);
    for (let i = 0; i < 65536; i++) {
      if (!Object.is(f[i], H2F[i]) && !(Number.isNaN(f[i]) && Number.isNaN(H2F[i]))) assert.fail(`f16 0x${i.toString(16)} -> ${f[i]}, want ${H2F[i]}`);
    }
  }
});

test("wgpu math: f32 -> f16 / bf16 stores and the f16 cast round to nearest even", { skip: noF16 || lacking(dev, { f16: true }) }, async () => {
  const n = 1 << 16;
  const r = new Rng("rne"), bits = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    // exponents around the f16 range (subnormals, overflow) and exact ties in the low mantissa bits
    const e = 96 + r.int(56), m = r.int(1 << 23);
    bits[i] = (r.int(2) << 31) | (e << 23) | (i % 4 === 0 ? (m & ~0x1fff) | 0x1000 : i % 4 === 1 ? (m & ~0xffff) | 0x8000 : m);
  }
  bits.set([0x7f800000, 0xff800000, 0x7fc00000, 0x477fefff, 0x477ff000, 0x33000000, 0x33000001, 0x387fe000], 0);
  const k = new KernelBuilder("rne", { workgroup: 256, grid: n / 256 });
  const X = k.buffer("x", "f32", "r"), H = k.buffer("h", "f16", "w"), B = k.buffer("b", "bf16", "w"), C = k.buffer("c", "f16", "w");
  const x = k.load(X, k.gid.x);
  k.store(H, k.gid.x, x);
  k.store(B, k.gid.x, x);
  k.store(C, k.gid.x, x.cast("f16"));
  const out = await runKernel(dev as WgpuDevice, k.build(), [bytesOf(bits), new Uint8Array(2 * n), new Uint8Array(2 * n), new Uint8Array(2 * n)]);
  const h = new Uint16Array(out[1].buffer), b = new Uint16Array(out[2].buffer), c = new Uint16Array(out[3].buffer);
  const f = new Float32Array(bits.buffer);
  let castBad = 0;
  for (let i = 0; i < n; i++) {
    const want = f2h(f[i]), nan = Number.isNaN(f[i]);
    if (nan) assert.ok(Number.isNaN(H2F[h[i]]), `f16 store of 0x${bits[i].toString(16)} (NaN)`);
    else assert.equal(h[i], want, `f16 store of 0x${bits[i].toString(16)}`);
    if (nan) assert.ok((b[i] & 0x7f80) === 0x7f80 && (b[i] & 0x7f) !== 0, `bf16 store of 0x${bits[i].toString(16)} (NaN)`);
    else assert.equal(b[i], f32ToBf16(f[i]), `bf16 store of 0x${bits[i].toString(16)}`);
    if (c[i] !== want && !(Number.isNaN(H2F[c[i]]) && Number.isNaN(H2F[want]))) castBad++;
  }
  assert.equal(castBad, 0, "f16(x) in WGSL rounds to nearest even");
});
