// The kernel IR's semantics held differentially on every device of tests/devices against the JS device (the
// executable statement of the IR contract): each kernel runs on both, integer, movement and IEEE-exact float
// results compare bit for bit (NaN equal to NaN whatever its payload), library-quality math within a few
// ulps. Where the contract leaves a target a freedom, the test names it and accepts exactly that, on every
// device alike: division and sqrt within 2 ulp, a subnormal result flushed to zero, a*b + c contracted into an
// fma, the payload of a NaN that arithmetic made. What a case needs of a device (f16, subgroups, bindings per
// kernel) is read from its caps and limits, and a device lacking it skips the case naming what it lacks.
// (tests/devices/features.test.ts holds the same semantics against references written without any device.)
// Also here: the feature kernels of feature_kernels.ts (PTX's bounds on ptx, the IR's elsewhere; ptxas checks
// their PTX on the CPU in tests/ptx/render.test.ts), and what only the WGSL renderer promises beyond the
// contract (a return before a barrier), skipped elsewhere with the reason.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device } from "../../backends/device.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { type Expr, exprKids, fma, type Kernel, KernelBuilder, stmtExprs, un, type Val, walkStmts } from "../../kernels/ir.ts";
import { JS_CAPS } from "../../kernels/target.ts";
import { Rng } from "../kernels/data.ts";
import { bytesOf, flushed, halfDiffs, runKernel, ulps, wordDiffs } from "../wgpu/util.ts";
import { openDevice, selectedBackends } from "./index.ts";
import { atomicKernel, type FeatureCase, featureCases } from "./feature_kernels.ts";
import { compareRuns, flushedInputs, runFeature } from "./run.ts";

/** Extra ulps the feature kernels' float outputs get off PTX (the IR's few-ulp math, 2-ulp div and sqrt). */
const FEATURE_SLACK = 4;
/**
 * Feature kernels whose bounds are PTX's own, past the IR contract; the same constructs are held to the
 * contract on every device by the tests above and by features.test.ts.
 */
const PTX_BOUNDS: Record<string, string> = {
  unary_f32: "sin/cos of 3e38 (the IR promises |x| <= 1e5; PTX reduces exactly) at PTX's 4 ulp",
  binary_f32: "float mod exact (PTX's fmod; the IR, WGSL and SPIR-V give x - y*trunc(x/y), close)",
  f16_math: "an f16 fma rounded once (PTX fuses; the IR lets a target multiply and add, as lavapipe does)",
};
const usesSubgroupBuiltins = (k: Kernel): boolean => {
  let found = false;
  const see = (e: Expr): void => {
    if (e.k === "builtin" && (e.b === "lane" || e.b === "sgsize" || e.b === "sgid")) found = true;
    exprKids(e).forEach(see);
  };
  walkStmts(k.body, (s) => stmtExprs(s).forEach(see));
  return found;
};
/** Why a feature kernel cannot run on a device (its caps), or false. */
function featureLacks(dev: Device, c: FeatureCase): string | false {
  const caps = dev.target.caps, why: string[] = [];
  if (dev.target.backend !== "ptx" && PTX_BOUNDS[c.name]) return `${dev.target.backend}: PTX's bounds, past the IR contract: ${PTX_BOUNDS[c.name]}`;
  if (c.kernel.uses.f16 && !caps.f16) why.push("f16 arithmetic");
  const sg = c.kernel.uses.subgroups || usesSubgroupBuiltins(c.kernel);
  if (sg && !caps.subgroups) why.push("subgroups");
  if (sg && dev.target.backend === "wgpu" && c.kernel.workgroup.filter((n) => n > 1).length > 1) {
    // (open: the WGSL renderer could derive lane and sgid from the linear index instead)
    return "wgpu: Naga refuses subgroup builtins in a multi-dimensional workgroup";
  }
  if (c.kernel.uses.mma && !caps.mma) why.push("mma");
  const shared = c.kernel.shared.reduce((n, x) => n + x.count * 4, 0);
  if (shared > caps.maxSharedBytes) why.push(`${shared} bytes of shared memory`);
  const wg = c.kernel.workgroup[0] * c.kernel.workgroup[1] * c.kernel.workgroup[2];
  if (wg > caps.maxWorkgroupSize) why.push(`workgroups of ${wg}`);
  return why.length ? `${dev.target.backend} device (${dev.target.device}) lacks ${why.join(", ")}` : false;
}

/** What a case needs of a device beyond the IR's core. */
interface Needs {
  f16?: boolean;
  subgroups?: boolean;
  /** Buffers bound to one kernel (WebGPU adapters may allow as few as 8 per stage). */
  bindings?: number;
}

/** Why a case cannot run on `dev` (the skip reason), or false. */
function lacking(dev: Device | string, need: Needs): string | false {
  if (typeof dev === "string") return dev;
  const caps = dev.target.caps, why: string[] = [];
  if (need.f16 && !caps.f16) why.push("f16 arithmetic");
  if (need.subgroups && !caps.subgroups) why.push("subgroups");
  const lim = (dev as { gpu?: { limits?: { maxStorageBuffersPerShaderStage?: number } } }).gpu?.limits?.maxStorageBuffersPerShaderStage;
  if (need.bindings && lim !== undefined && need.bindings > lim) why.push(`${need.bindings} storage buffers per stage (it allows ${lim})`);
  return why.length ? `${dev.target.backend} device (${dev.target.device}) lacks ${why.join(", ")}` : false;
}

/**
 * How a binding compares: bytewise when absent; a number: as f32 within that many ulps (NaN == NaN); a
 * function: the test's own rule, returning what breaks it.
 */
type Rule = number | ((got: Uint8Array, want: Uint8Array) => string[]);

/** Elements of two f32 bindings where ok(got, want, element) fails (the first 6, and how many in all). */
function f32Diffs(a: Uint8Array, b: Uint8Array, ok: (got: number, want: number, i: number) => boolean): string[] {
  const x = new Float32Array(a.buffer, a.byteOffset, a.byteLength >> 2), y = new Float32Array(b.buffer, b.byteOffset, b.byteLength >> 2);
  const out: string[] = [];
  let n = 0;
  for (let i = 0; i < x.length; i++) if (!ok(x[i], y[i], i) && n++ < 6) out.push(`[${i}] ${x[i]} vs ${y[i]}`);
  if (n > out.length) out.push(`... ${n} in all`);
  return out;
}
const zeros = (n: number) => new Uint8Array(Math.max(16, Math.ceil(n / 16) * 16));
const INTS = [0, 1, -1, 2, -2, 3, 7, -7, 31, 32, 33, -33, 100000, -100000, 2147483647, -2147483648, 65535, 255, -256, 12345];
const FLOATS = [0, -0, 1, -1, 0.5, 1.5, 2.5, -2.5, 1e30, -1e30, Infinity, -Infinity, NaN, 3.4e38, 1e-30, 65504, 1 / 3, -7.25, 100, 0.1];

function ints(n: number, seed: string): Int32Array {
  const r = new Rng(seed), a = new Int32Array(n);
  for (let i = 0; i < n; i++) a[i] = i < INTS.length ? INTS[i] : (r.next() * 2 ** 32) | 0;
  return a;
}
function floats(n: number, seed: string, specials = FLOATS): Float32Array {
  const r = new Rng(seed), a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = i < specials.length ? specials[i] : r.uniform(-50, 50);
  return a;
}

for (const backend of selectedBackends().filter((b) => b !== "js")) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;
  // The reference: a JS device with the device's subgroup size, so subgroup kernels mean the same on both.
  const js = new JsDevice({ debug: true, caps: { ...JS_CAPS, subgroups: true, subgroupSize: typeof dev === "string" ? 8 : dev.target.caps.subgroupSize || 8 } });

  /** Runs k on both devices and compares every binding; all that differ are reported together. */
  const same = async (k: Kernel, inputs: Uint8Array[], rules: Record<number, Rule> = {}, ref: Device = js): Promise<void> => {
    const g = await runKernel(dev as Device, k, inputs.map((b) => b.slice()));
    const j = await runKernel(ref, k, inputs.map((b) => b.slice()));
    const bad: string[] = [];
    for (let i = 0; i < g.length; i++) {
      const r = rules[i];
      const d = r === undefined ? wordDiffs(g[i], j[i]) : typeof r === "number" ? f32Diffs(g[i], j[i], (x, y) => ulps(x, y) <= r) : r(g[i], j[i]);
      if (d.length) bad.push(`binding ${i} (${k.buffers[i].name}): ${d.join(", ")}`);
    }
    assert.deepEqual(bad, [], `${k.name}: ${backend} vs js`);
  };

  test(`IR vs js on ${backend}: i32 and u32 arithmetic, bit ops, shifts, compares`, { skip }, async () => {
    const N = 64;
    const k = new KernelBuilder("int_ops", { workgroup: 64, grid: 1 });
    const A = k.buffer("a", "i32", "r"), B = k.buffer("b", "i32", "r"), O = k.buffer("o", "i32", "w"), U = k.buffer("u", "u32", "w");
    const i = k.gid.x;
    const a = k.let(k.load(A, i)), b = k.let(k.load(B, i));
    const ops: Val[] = [a.add(b), a.sub(b), a.mul(b), a.div(b), a.mod(b), a.max(b), a.min(b), a.and(b), a.or(b), a.xor(b),
      a.shl(b), a.shr(b), a.neg(), a.abs(), a.not(), a.lt(b).cast("i32"), a.le(b).cast("i32"), a.eq(b).cast("i32"),
      a.ne(b).cast("i32"), a.gt(b).select(a, b), a.div(7), a.mod(-3), a.shr(3), a.shl(40)];
    ops.forEach((v, j) => k.store(O, i.mul(ops.length).add(j), v));
    const ua = k.let(a.bitcast("u32")), ub = k.let(b.bitcast("u32"));
    const uops: Val[] = [ua.add(ub), ua.sub(ub), ua.mul(ub), ua.div(ub), ua.mod(ub), ua.max(ub), ua.min(ub), ua.shr(ub),
      ua.shl(ub), ua.ge(ub).cast("u32"), ua.neg(), ua.not(), ua.abs(), ua.cast("i32").cast("u32"), ua.div(10), ua.xor(0xdeadbeef)];
    uops.forEach((v, j) => k.store(U, i.mul(uops.length).add(j), v));
    const a0 = ints(N, "a"), b0 = ints(N, "b").reverse();
    a0[N - 3] = -2147483648; // over b0[N - 3] = -1: INT_MIN / -1 wraps, INT_MIN % -1 is 0
    await same(k.build(), [bytesOf(a0), bytesOf(b0), zeros(N * ops.length * 4), zeros(N * uops.length * 4)]);
  });

  test(`IR vs js on ${backend}: f32 arithmetic, compares, classification (IEEE exact), mod/pow (close)`, { skip }, async () => {
    const N = 64;
    const k = new KernelBuilder("float_ops", { workgroup: 64, grid: 1 });
    const A = k.buffer("a", "f32", "r"), B = k.buffer("b", "f32", "r");
    const O = k.buffer("exact", "f32", "w"), C = k.buffer("flags", "u32", "w"), T = k.buffer("close", "f32", "w");
    const E = k.buffer("e", "f32", "r");
    const i = k.gid.x;
    const a = k.let(k.load(A, i)), b = k.let(k.load(B, i));
    const ex: Val[] = [a.add(b), a.sub(b), a.mul(b), a.div(b), a.max(b), a.min(b), a.floor(), un("ceil", a), a.abs(), a.neg(),
      a.abs().sqrt(), a.lt(b).select(a, b), a.recip(), a.mul(0.1).add(b)];
    ex.forEach((v, j) => k.store(O, i.mul(ex.length).add(j), v));
    const fl: Val[] = [a.lt(b), a.le(b), a.gt(b), a.ge(b), a.eq(b), a.ne(b), a.isfinite(), un("isnan", a), a.ne(a), a.eq(a)];
    fl.forEach((v, j) => k.store(C, i.mul(fl.length).add(j), v.cast("u32")));
    // mod and pow are the driver's; WGSL's fma need not be fused (lavapipe's is a multiply and an add); a sum of
    // two products may be fused by the driver (WGSL cannot forbid contraction): within a few ulps, not exact.
    // (On moderate finite inputs only: WGSL's x % y is x - y * trunc(x / y), not C's exact fmod, and pow is
    // exp2(y * log2(x)), undefined for x < 0.)
    const c = k.let(k.load(E, i.mul(2))), d = k.let(k.load(E, i.mul(2).add(1)));
    const cl: Val[] = [c.mod(d), c.pow(d.mul(0.01)), a.mul(0.1).add(b.mul(3)), fma(a, b, a)];
    cl.forEach((v, j) => k.store(T, i.mul(cl.length).add(j), v));
    const a0 = floats(N, "fa"), b0 = floats(N, "fb", [...FLOATS].reverse().map((x) => Object.is(x, 0) ? 2 : x));
    const e0 = new Rng("fe").f32(2 * N, 1, 100).map(Math.round); // integers: x % y is exact given the quotient
    // Bit-exact but for the driver freedoms WGSL and Vulkan give and the IR contract allows: div, sqrt, recip
    // (1 / x) within 2 ulp, or zero where the exact result is subnormal (NVIDIA flushes: 2.5 / 3.4e38 gave
    // 0); a*0.1 + b contracted into one fma (NVIDIA fuses; WGSL has no way to forbid it).
    const exact = (g: number, w: number, x: number): boolean => {
      const col = x % ex.length, row = Math.floor(x / ex.length);
      if (ulps(g, w) === 0) return true;
      if (col === 3 || col === 10 || col === 12) return ulps(g, w) <= 2 || flushed(g, w);
      return col === 13 && ulps(g, Math.fround(a0[row] * Math.fround(0.1) + b0[row])) === 0;
    };
    // WGSL's float x % y is x - y * trunc(x / y) with the driver's division: a quotient within 3 ulp below an
    // integer truncates one lower (6 % 3 may be 3).
    const close = (g: number, w: number, x: number): boolean => {
      if (ulps(g, w) <= 64) return true;
      if (x % cl.length !== 0) return false;
      const row = Math.floor(x / cl.length), c0 = e0[2 * row], d0 = e0[2 * row + 1], q = Math.fround(c0 / d0);
      for (let t = Math.trunc(q * (1 - 3 * 2 ** -23)); t <= Math.trunc(q * (1 + 3 * 2 ** -23)); t++) {
        if (ulps(g, Math.fround(c0 - d0 * t)) <= 64) return true;
      }
      return false;
    };
    await same(k.build(), [bytesOf(a0), bytesOf(b0), zeros(N * ex.length * 4), zeros(N * fl.length * 4), zeros(N * cl.length * 4), bytesOf(e0)],
      { 2: (g, w) => f32Diffs(g, w, exact), 4: (g, w) => f32Diffs(g, w, close) });
  });

  test(`IR vs js on ${backend}: casts and bitcasts between f32/f16/i32/u32/bool, f16bits/bf16bits`, { skip: lacking(dev, { f16: true }) }, async () => {
    const N = 64;
    const k = new KernelBuilder("casts", { workgroup: 64, grid: 1 });
    const F = k.buffer("f", "f32", "r"), I = k.buffer("i", "i32", "r");
    const OI = k.buffer("oi", "i32", "w"), OF = k.buffer("of", "f32", "w");
    const i = k.gid.x;
    const f = k.let(k.load(F, i)), n = k.let(k.load(I, i));
    const io: Val[] = [f.cast("i32"), f.cast("u32").bitcast("i32"), n.cast("u32").bitcast("i32"), f.cast("bool").cast("i32"),
      n.cast("bool").cast("i32"), f.bitcast("i32"), f.bitcast("u32").shr(3).bitcast("i32"), f.cast("f16").cast("i32"),
      f.lt(0).cast("i32"), n.bitcast("u32").cast("f32").cast("i32")];
    io.forEach((v, j) => k.store(OI, i.mul(io.length).add(j), v));
    const fo: Val[] = [n.cast("f32"), n.bitcast("u32").cast("f32"), f.cast("f16").cast("f32"), f.lt(0).cast("f32"),
      un("f16bits", n.bitcast("u32").and(0xffff)), un("bf16bits", n.bitcast("u32").and(0xffff)), n.cast("f16").cast("f32"),
      f.bitcast("u32").bitcast("f32")];
    fo.forEach((v, j) => k.store(OF, i.mul(fo.length).add(j), v));
    const big = [3e9, -3e9, 4.5e9, 2147483520, -2147483904, 0.99, -0.99, 65519, 65520, 70000, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 5.960464477539063e-8, 2.9802322387695312e-8];
    const f0 = floats(N, "cf", [...FLOATS, ...big]), n0 = ints(N, "ci");
    for (let x = 0; x < N; x++) if (((n0[x] >> 10) & 31) === 31) n0[x] ^= 0x4000; // keep f16 patterns NaN-free
    await same(k.build(), [bytesOf(f0), bytesOf(n0), zeros(N * io.length * 4), zeros(N * fo.length * 4)], { 3: 0 });
  });

  test(`IR vs js on ${backend}: loads through every element view (8/16/32-bit, f16 as f16)`, { skip: lacking(dev, { f16: true }) }, async () => {
    const bytes = 256;
    const k = new KernelBuilder("views_load", { workgroup: 64, grid: 2 });
    const D = k.buffer("d", "u8", "r");
    const views = ["f32", "i32", "u32", "f16", "bf16", "u16", "i16", "u8", "i8"] as const;
    const outs = views.map((v) => k.buffer(`o_${v}`, v === "f32" || v === "f16" || v === "bf16" ? "f32" : v.startsWith("i") ? "i32" : "u32", "w"));
    const H = k.buffer("h", "f16", "w");
    const i = k.gid.x;
    views.forEach((v, j) => {
      const count = bytes / (v === "f32" || v === "i32" || v === "u32" ? 4 : v.endsWith("8") ? 1 : 2);
      k.if(i.lt(count), () => k.store(outs[j], i, k.load(D, i, v)));
    });
    k.if(i.lt(bytes / 2), () => k.store(H, i, k.load(D, i, "f16", "f16").mul(k.load(D, i, "f16", "f16"))));
    const d = new Uint8Array(bytes);
    new Rng("views").f32(bytes / 4).forEach((x, j) => new DataView(d.buffer).setFloat32(j * 4, x * 1000, true));
    for (let j = 0; j < bytes; j += 2) if (((d[j + 1] >> 2) & 31) === 31) d[j + 1] ^= 0x40; // no f16 NaN/inf
    const outBytes = views.map((v) => zeros(bytes * 4 / (v === "f32" || v === "i32" || v === "u32" ? 4 : v.endsWith("8") ? 1 : 2)));
    await same(k.build(), [d, ...outBytes, zeros(bytes)], { 1: 0, 4: 0, 5: 0 });
  });

  test(`IR vs js on ${backend}: narrow stores from concurrent invocations (atomic words), RNE to f16/bf16`, { skip }, async () => {
    const N = 256;
    const k = new KernelBuilder("views_store", { workgroup: 64, grid: 4 });
    const F = k.buffer("f", "f32", "r");
    const o8 = k.buffer("u8", "u8", "w"), s8 = k.buffer("i8", "i8", "w"), o16 = k.buffer("u16", "u16", "w");
    const s16 = k.buffer("i16", "i16", "w"), h = k.buffer("f16", "f16", "w"), bf = k.buffer("bf16", "bf16", "w");
    const h2 = k.buffer("f16b", "f16", "rw"), v2 = k.buffer("u8pair", "u8", "w");
    const i = k.gid.x;
    const x = k.let(k.load(F, i));
    k.store(o8, i, i.mul(7).add(3));
    k.store(s8, i, c100(i));
    k.store(o16, i, i.mul(1000));
    k.store(s16, i, i.cast("i32").mul(-300));
    k.store(h, i, x);
    k.store(bf, i, x.mul(1.0000001));
    k.store(h2, i, i.cast("f32").mul(2 ** -11).add(1)); // exact ties at every other element
    k.storev(v2, i.mul(2), [i, i.add(100)]);
    function c100(v: Val): Val {
      return v.cast("i32").sub(100);
    }
    const specials = [0, -0, 65504, 65519, 65520, 70000, -70000, 2 ** -24, 2 ** -25, 3 * 2 ** -26, 2 ** -14, 1e-8, NaN, Infinity,
      -Infinity, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 0.1, 1 / 3, 3.4e38];
    const f0 = floats(N, "st", specials);
    // 16-bit floats compare as values, NaN equal to NaN: NaN * 1.0000001 is the driver's NaN, whose payload
    // (NVIDIA's is 0x7fffffff) the bf16 keeps the top of.
    const f16 = (g: Uint8Array, w: Uint8Array) => halfDiffs(g, w), bf16 = (g: Uint8Array, w: Uint8Array) => halfDiffs(g, w, { bf16: true });
    await same(k.build(), [bytesOf(f0), zeros(N), zeros(N), zeros(2 * N), zeros(2 * N), zeros(2 * N), zeros(2 * N), zeros(2 * N), zeros(2 * N)],
      { 5: f16, 6: bf16, 7: f16 });
  });

  test(`IR vs js on ${backend}: vector loads/stores of 1..16 bytes in every view, wide and mixed declarations`, { skip: lacking(dev, { bindings: 26 }) }, async () => {
    const combos = [["f32", 4], ["u32", 2], ["i32", 1], ["f16", 8], ["f16", 2], ["bf16", 4], ["u16", 8], ["i16", 2],
      ["u8", 16], ["u8", 4], ["u8", 2], ["i8", 8]] as const;
    const T = 16;
    const k = new KernelBuilder("vectors", { workgroup: T, grid: 1 });
    const bufs = combos.map(([v, n], j) => [k.buffer(`src${j}_${v}x${n}`, v, "r"), k.buffer(`dst${j}_${v}x${n}`, v, "w")] as const);
    const M = k.buffer("mixed", "f32", "r"), MO = k.buffer("mixed_out", "f32", "w");
    const i = k.gid.x;
    combos.forEach(([v, n], j) => {
      const vals = k.loadv(bufs[j][0], i.mul(n), n, v);
      const f = v === "f32" || v === "f16" || v === "bf16";
      k.storev(bufs[j][1], i.mul(n), vals.map((x) => f ? x.mul(2) : x.add(1)), v);
    });
    const q = k.loadv(M, i.mul(4), 4);
    k.store(MO, i, q[0].add(q[3]).add(k.load(M, i.mul(4).add(1))).sub(k.load(M, i.mul(3))));
    const r = new Rng("vec");
    const inputs: Uint8Array[] = [];
    for (const [v, n] of combos) {
      const size = T * n * (v === "f32" || v === "u32" || v === "i32" ? 4 : v.endsWith("8") ? 1 : 2);
      const src = new Uint8Array(size);
      if (v === "f32") new Float32Array(src.buffer).set(r.f32(size / 4, -100, 100));
      else for (let x = 0; x < size; x++) src[x] = r.int(256);
      if (v === "f16") for (let x = 1; x < size; x += 2) if (((src[x] >> 2) & 31) >= 30) src[x] ^= 0x40;
      if (v === "bf16") for (let x = 1; x < size; x += 2) src[x] &= 0xbf; // keep exponents small: no overflow to inf
      inputs.push(bytesOf(src), zeros(size));
    }
    inputs.push(bytesOf(r.f32(T * 4)), zeros(T * 4));
    await same(k.build(), inputs);
  });

  test(`IR vs js on ${backend}: subgroup reductions, shuffles (xor/idx/down, out-of-range lanes), lane/sgsize/sgid`, { skip: lacking(dev, { subgroups: true }) }, async () => {
    const k = new KernelBuilder("subgroups", { workgroup: 32, grid: 2 });
    const X = k.buffer("x", "f32", "r"), O = k.buffer("o", "u32", "w"), F = k.buffer("of", "f32", "w");
    const g = k.gid.x;
    const x = k.let(k.load(X, g));
    const n = k.let(x.cast("i32"));
    const lane = k.builtin("lane");
    const u: Val[] = [lane, k.builtin("sgsize"), k.builtin("sgid"), k.subgroupReduce("add", n).bitcast("u32"),
      k.subgroupReduce("max", n).bitcast("u32"), k.subgroupReduce("min", lane), k.shuffle("xor", lane, 1),
      k.shuffle("xor", lane, 8), k.shuffle("idx", g, lane.mul(3).mod(11)), k.shuffle("down", g, 3), k.shuffle("down", g, 7),
      k.shuffle("xor", x.gt(0), 2).cast("u32"), k.shuffle("idx", n, 0).bitcast("u32")];
    u.forEach((v, j) => k.store(O, g.mul(u.length + 1).add(j), v));
    const f: Val[] = [k.subgroupReduce("add", x), k.subgroupReduce("max", x), k.subgroupReduce("min", x), k.shuffle("xor", x, 4)];
    f.forEach((v, j) => k.store(F, g.mul(f.length).add(j), v));
    const xs = new Float32Array(64).map((_, j) => ((j * 13) % 23) - 11);
    await same(k.build(), [bytesOf(xs), zeros(64 * (u.length + 1) * 4), zeros(64 * f.length * 4)]);
  });

  // Known on ptx (H200, session 3): the PTX renderer's subgroup ops use a full-warp member mask, so a reduction
  // inside a divergent branch waits for lanes that never arrive and the kernel hangs (the case ran into its
  // 60 s bound and poisoned the context). The kernel library never reduces in divergent code; the renderer
  // needs activemask/redux.sync before this can run there.
  const divergentSkip = backend === "ptx" && !skip ? "ptx: subgroup ops use a full-warp mask; a reduction in a divergent branch hangs (open)" : false;
  test(`IR vs js on ${backend}: a subgroup reduction inside a divergent branch covers the active lanes only`, { skip: lacking(dev, { subgroups: true }) || divergentSkip }, async () => {
    const k = new KernelBuilder("subgroup_divergent", { workgroup: 32, grid: 2 });
    const O = k.buffer("o", "u32", "w");
    const lane = k.builtin("lane");
    k.if(lane.mod(2).eq(0), () => k.store(O, k.gid.x, k.subgroupReduce("add", lane)));
    await same(k.build(), [zeros(64 * 4)]);
  });

  test(`IR vs js on ${backend}: atomic and/or on u32 words from concurrent invocations`, { skip }, async () => {
    const k = atomicKernel();
    const clear = new Uint32Array(8).fill(0xffffffff);
    await same(k, [zeros(8 * 4), bytesOf(clear)]);
  });

  test(`IR vs js on ${backend}: 3-D builtins (gid/lid/wgid/nwg)`, { skip }, async () => {
    const k = new KernelBuilder("builtins", { workgroup: [4, 2, 2], grid: [2, 3, 2] });
    const O = k.buffer("o", "u32", "w");
    const { x, y, z } = k.gid;
    const lin = k.let(z.mul(6).add(y).mul(8).add(x));
    const parts = [k.gid.x, k.gid.y, k.gid.z, k.lid.x, k.lid.y, k.lid.z, k.wgid.x, k.wgid.y, k.wgid.z, k.nwg.x, k.nwg.y, k.nwg.z];
    parts.forEach((v, j) => k.store(O, lin.mul(12).add(j), v));
    await same(k.build(), [zeros(8 * 6 * 4 * 12 * 4)]);
  });

  test(`IR vs js on ${backend}: loops (u32/i32, steps), nested if/else, return inside a loop, let/set`, { skip }, async () => {
    const k = new KernelBuilder("control", { workgroup: 16, grid: 2 });
    const O = k.buffer("o", "i32", "w");
    const g = k.gid.x;
    const acc = k.let(0, "i32");
    k.for(-5, g.cast("i32"), 3, (j) => {
      k.if(j.mod(2).eq(0), () => k.set(acc, acc.add(j)), () => {
        k.if(j.gt(10), () => k.set(acc, acc.mul(3)), () => k.set(acc, acc.sub(1)));
      });
    }, { t: "i32" });
    k.store(O, g.mul(2), acc);
    k.for(0, 100, 7, (j) => {
      k.if(j.gt(g.mul(4)), () => {
        k.store(O, g.mul(2).add(1), j.cast("i32"));
        k.return();
      });
    }, { unroll: 4 });
    k.store(O, g.mul(2).add(1), -1);
    await same(k.build(), [zeros(64 * 4)]);
  });

  test(`IR vs js on ${backend}: f16 arithmetic (shader-f16)`, { skip: lacking(dev, { f16: true }) }, async () => {
    const k = new KernelBuilder("f16_math", { workgroup: 64, grid: 1 });
    const A = k.buffer("a", "f16", "r"), O = k.buffer("o", "f16", "w"), OF = k.buffer("of", "f32", "w");
    const i = k.gid.x;
    const a = k.let(k.load(A, i, "f16", "f16")), b = k.let(k.load(A, i.add(1).mod(64), "f16", "f16"));
    const hs: Val[] = [a.add(b), a.mul(b), a.sub(b), a.max(b), a.min(b), a.neg(), a.abs(), a.div(b)];
    hs.forEach((v, j) => k.store(O, i.mul(hs.length).add(j), v));
    const fs: Val[] = [a.cast("f32"), a.exp().cast("f32"), a.lt(b).select(a, b).cast("f32"), a.isfinite().cast("f32")];
    fs.forEach((v, j) => k.store(OF, i.mul(fs.length).add(j), v));
    const r = new Rng("h"), h = new Uint16Array(64);
    for (let j = 0; j < 64; j++) h[j] = (r.int(2) << 15) | ((r.int(14) + 8) << 10) | r.int(1024); // |x| in [2^-7, 2^7)
    // f16 division within 2 ulp as the IR allows (NVIDIA's is 1 ulp off at times), a subnormal f16 result may
    // be flushed to zero; the rest exact. exp: f16(exp in f32) may differ by one f16 ulp.
    const div = hs.length - 1;
    await same(k.build(), [bytesOf(h), zeros(64 * hs.length * 2), zeros(64 * fs.length * 4)],
      { 1: (g, w) => halfDiffs(g, w, { tol: (e) => e % hs.length === div ? 2 : 0, flush: true }), 2: 8192 });
  });

  // Beyond the contract: the IR asks kernels not to return before a barrier, but the WGSL renderer keeps such a
  // kernel well-defined (its p_on flag) rather than hung; checked against the lenient JS device (the debug one
  // refuses a barrier that returned invocations skip). Vulkan and PTX leave it undefined.
  const beyond = skip || (backend !== "wgpu" ? `${backend}: returning before a barrier is outside the IR contract (only the WGSL renderer keeps it defined)` : false);
  const jsLenient = new JsDevice({ debug: false, caps: { ...JS_CAPS, subgroups: true, subgroupSize: typeof dev === "string" ? 8 : dev.target.caps.subgroupSize || 8 } });
  test(`IR vs js on ${backend}: shared memory tree reduction, barriers, return before a barrier, passing check`, { skip: beyond }, async () => {
    const k = new KernelBuilder("reduce_shared", { workgroup: 64, grid: 3 });
    const X = k.buffer("x", "f32", "r"), O = k.buffer("o", "f32", "w"), OB = k.buffer("ob", "u32", "w");
    const S = k.shared("s", "f32", 64), SB = k.shared("flag", "bool", 64);
    const l = k.lid.x, g = k.gid.x;
    k.sstore(S, l, 0);
    k.sstore(SB, l, false);
    k.barrier();
    k.if(l.ge(48), () => k.return()); // invocations 48..63 stop here but the others still reach every barrier
    k.check(l.lt(48), 9);
    k.sstore(S, l, k.load(X, g));
    k.sstore(SB, l, k.load(X, g).gt(0));
    k.barrier();
    for (const st of [32, 16, 8, 4, 2, 1]) {
      k.if(l.lt(st), () => {
        k.sstore(S, l, k.sload(S, l).add(k.sload(S, l.add(st))));
        k.sstore(SB, l, k.sload(SB, l).or(k.sload(SB, l.add(st))));
      });
      k.barrier();
    }
    k.if(l.eq(0), () => {
      k.store(O, k.wgid.x, k.sload(S, 0));
      k.store(OB, k.wgid.x, k.sload(SB, 0).cast("u32"));
    });
    const x = new Float32Array(192).map((_, j) => ((j * 37) % 19) - 9); // integers: any summation order is exact
    await same(k.build(), [bytesOf(x), zeros(12), zeros(12)], {}, jsLenient);
  });

  test(`IR vs js on ${backend}: a loop holding a barrier, with invocations returning inside it`, { skip: beyond }, async () => {
    const k = new KernelBuilder("loop_barrier", { workgroup: 32, grid: 2 });
    const O = k.buffer("o", "u32", "w");
    const S = k.shared("s", "u32", 32);
    const l = k.lid.x;
    const acc = k.let(0, "u32");
    k.sstore(S, l, l);
    k.barrier();
    k.for(0, 8, 1, (r) => {
      k.if(l.eq(r.mul(3)), () => k.return()); // lanes 0, 3, 6, ... drop out in round r
      k.set(acc, acc.add(k.sload(S, l.add(r).mod(32))));
      k.barrier();
      k.sstore(S, l, k.sload(S, l).add(1));
      k.barrier();
    });
    k.store(O, k.gid.x, acc.add(1000));
    await same(k.build(), [zeros(64 * 4)], {}, jsLenient);
  });

  // The feature kernels (feature_kernels.ts: every IR construct in a few kernels) against the JS device at
  // each output's stated bound. The bounds are PTX's (its math is more accurate than the IR promises); elsewhere
  // float outputs get the IR's few ulps (FEATURE_SLACK), integer, movement and exact-float outputs stay exact.
  const fjs = new JsDevice({ caps: { subgroupSize: typeof dev === "string" ? 32 : dev.target.caps.subgroupSize || 32, f16: true } });
  for (const c of featureCases()) {
    test(`IR feature kernel vs js on ${backend}: ${c.name}`, { skip: skip || featureLacks(dev as Device, c) }, async () => {
      const slack = backend === "ptx" ? 0 : FEATURE_SLACK;
      const checks = c.checks.map((x) => x.ulps ? { ...x, ulps: x.ulps + slack } : x);
      // SPIR-V and WGSL let a device flush f32 subnormal operands (NVIDIA does): an element may instead match
      // the reference computed from the inputs flushed to signed zeros (casts: 1e-40 > 0 is false there).
      const flushed = backend === "ptx" ? undefined : flushedInputs(c);
      const alt = flushed && await runFeature(fjs, flushed);
      const bad = compareRuns({ ...c, checks }, await runFeature(fjs, c), await runFeature(dev as Device, c), 6, alt);
      assert.deepEqual(bad, []);
    });
  }
}
