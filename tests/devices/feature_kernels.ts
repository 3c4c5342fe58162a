// Kernels that together exercise every construct of the kernel IR, with deterministic inputs and how to
// compare their outputs across devices. tests/ptx/render.test.ts assembles them with ptxas (on the CPU);
// tests/devices/ir.test.ts runs them on every device and on the JS device and compares (PTX at its own,
// tighter bounds; the cases whose bounds are only PTX's skip elsewhere, naming why).
import { fma, type Kernel, KernelBuilder, u32, un, type Val } from "../../kernels/ir.ts";
import { rng } from "../rng.ts";

/** How one output binding is compared (elements of `as`; NaN equals NaN whatever its payload). */
export interface OutputCheck {
  binding: number;
  as: "f32" | "f16" | "bf16" | "i32" | "u32" | "u16" | "u8";
  /** Element range [start, end) this rule covers (default: all). */
  range?: [number, number];
  /** Allowed distance in ulps of `as` (floats); 0 = bit-exact (+0 and -0 differ). */
  ulps?: number;
  /** Allowed absolute difference (reassociated sums). */
  abs?: number;
}
export interface FeatureCase {
  name: string;
  kernel: Kernel;
  /** Initial bytes of every binding, in binding order. */
  inputs: Uint8Array[];
  checks: OutputCheck[];
}

// ---- data ---------------------------------------------------------------------------------------------

const SPECIAL = [0, -0, 1, -1, 0.5, -2.5, Infinity, -Infinity, NaN, 1e-40, -1e-40, 3e38, -3e38, 88.5, -87.5, 1e5];

function f32s(n: number, seed: number, lo: number, hi: number, specials = true): Float32Array {
  const r = rng(seed), a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = lo + (hi - lo) * r();
  if (specials) SPECIAL.forEach((v, i) => (a[(i * 7) % n] = v));
  return a;
}
function u32s(n: number, seed: number): Uint32Array {
  const r = rng(seed), a = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const k = r();
    a[i] = k < 0.3 ? Math.floor(r() * 64) : k < 0.4 ? [0, 1, 31, 32, 0x7fffffff, 0x80000000, 0xffffffff][i % 7] : Math.floor(r() * 2 ** 32);
  }
  return a;
}
const bytesOf = (a: ArrayBufferView): Uint8Array => new Uint8Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength));
const zeros = (n: number): Uint8Array => new Uint8Array(n);
function f16bits(x: number): number {
  const a = new Float16Array(1);
  a[0] = x;
  return new Uint16Array(a.buffer)[0];
}

// ---- cases --------------------------------------------------------------------------------------------

const N = 256;
const UNARY = ["neg", "abs", "floor", "ceil", "sqrt", "recip", "rsqrt", "exp", "exp2", "log", "log2", "sin", "cos", "tanh"] as const;

function unaryF32(): FeatureCase {
  const b = new KernelBuilder("unary_f32", { workgroup: 64, grid: N / 64 });
  const x = b.buffer("x", "f32", "r"), y = b.buffer("y", "f32", "w");
  const i = b.gid.x;
  const v = b.let(b.load(x, i), "f32");
  UNARY.forEach((op, j) => {
    const r = un(op, v);
    b.store(y, i.add(j * N), r);
  });
  const xs = f32s(N, 1, -10, 10);
  for (let k = 0; k < 40; k++) xs[100 + k] = (k - 20) * 4987.3; // sin/cos arguments up to 1e5
  const ulps: Record<string, number> = { sqrt: 0, recip: 0, neg: 0, abs: 0, floor: 0, ceil: 0, rsqrt: 2 };
  return {
    name: "unary_f32",
    kernel: b.build(),
    inputs: [bytesOf(xs), zeros(N * UNARY.length * 4)],
    checks: UNARY.map((op, j) => ({ binding: 1, as: "f32" as const, range: [j * N, (j + 1) * N] as [number, number], ulps: ulps[op] ?? 4 })),
  };
}

const BINARY = ["add", "sub", "mul", "div", "mod", "max", "min", "pow", "fma", "lt", "le", "gt", "ge", "eq", "ne", "select"] as const;
function binaryF32(): FeatureCase {
  const b = new KernelBuilder("binary_f32", { workgroup: 128, grid: N / 128 });
  const xa = b.buffer("a", "f32", "r"), xb = b.buffer("b", "f32", "r"), y = b.buffer("y", "f32", "w");
  const i = b.gid.x;
  const a = b.let(b.load(xa, i), "f32"), c = b.let(b.load(xb, i), "f32");
  BINARY.forEach((op, j) => {
    let r: Val;
    if (op === "fma") r = fma(a, c, a.mul(0.25));
    else if (op === "select") r = a.gt(c).select(a.mul(2), c.add(1.5));
    else if (["lt", "le", "gt", "ge", "eq", "ne"].includes(op)) r = (a[op as "lt"](c) as Val).select(1, 0);
    else r = a[op as "add"](c);
    b.store(y, i.add(j * N), r);
  });
  const as = f32s(N, 2, -8, 8), bs = f32s(N, 3, -3, 3);
  for (let k = 0; k < N; k += 5) bs[k] = as[k]; // ties for the comparisons
  for (let k = 1; k < N; k += 9) bs[k] = Math.round(bs[k]); // integer exponents of negative bases
  const ulps: Record<string, number> = { pow: 2, fma: 1, mod: 0 };
  return {
    name: "binary_f32",
    kernel: b.build(),
    inputs: [bytesOf(as), bytesOf(bs), zeros(N * BINARY.length * 4)],
    checks: BINARY.map((op, j) => ({ binding: 2, as: "f32" as const, range: [j * N, (j + 1) * N] as [number, number], ulps: ulps[op] ?? 0 })),
  };
}

const IOPS = ["add", "sub", "mul", "div", "mod", "max", "min", "and", "or", "xor", "shl", "shr", "lt", "ge", "eq", "ne"] as const;
function intOps(t: "i32" | "u32"): FeatureCase {
  const b = new KernelBuilder(`int_ops_${t}`, { workgroup: 64, grid: N / 64 });
  const xa = b.buffer("a", t, "r"), xb = b.buffer("b", t, "r"), y = b.buffer("y", t, "w");
  const i = b.gid.x;
  const a = b.let(b.load(xa, i), t), c = b.let(b.load(xb, i), t);
  const ops = [...IOPS, "neg", "abs", "not", "divc", "modc", "shlc", "shrc"] as const;
  ops.forEach((op, j) => {
    let r: Val;
    if (op === "neg" || op === "abs" || op === "not") r = a[op]();
    else if (op === "divc") r = a.div(7);
    else if (op === "modc") r = a.mod(t === "i32" ? -5 : 5);
    else if (op === "shlc") r = a.shl(35); // shift counts are taken mod 32
    else if (op === "shrc") r = a.shr(4);
    else if (["lt", "ge", "eq", "ne"].includes(op)) r = (a[op as "lt"](c) as Val).select(c, a);
    else r = a[op as "add"](c);
    b.store(y, i.add(j * N), r);
  });
  return {
    name: `int_ops_${t}`,
    kernel: b.build(),
    inputs: [bytesOf(u32s(N, 4)), bytesOf(u32s(N, 5)), zeros(N * ops.length * 4)],
    checks: [{ binding: 2, as: t }],
  };
}

function casts(): FeatureCase {
  const b = new KernelBuilder("casts", { workgroup: 64, grid: N / 64 });
  const x = b.buffer("x", "f32", "r"), n = b.buffer("n", "i32", "r");
  const yf = b.buffer("yf", "f32", "w"), yi = b.buffer("yi", "i32", "w"), yu = b.buffer("yu", "u32", "w");
  const yh = b.buffer("yh", "f16", "w"), ybf = b.buffer("ybf", "bf16", "w");
  const i = b.gid.x;
  const v = b.let(b.load(x, i), "f32"), k = b.let(b.load(n, i), "i32");
  b.store(yi, i, v.cast("i32"));
  b.store(yi, i.add(N), v.bitcast("i32"));
  b.store(yi, i.add(2 * N), v.gt(0).cast("i32"));
  b.store(yi, i.add(3 * N), v.cast("bool").select(1, 2));
  b.store(yu, i, v.cast("u32"));
  b.store(yu, i.add(N), k.cast("u32"));
  b.store(yu, i.add(2 * N), v.cast("f16").cast("u32"));
  b.store(yf, i, k.cast("f32"));
  b.store(yf, i.add(N), k.cast("u32").cast("f32"));
  b.store(yf, i.add(2 * N), k.bitcast("f32"));
  b.store(yf, i.add(3 * N), v.cast("f16").cast("f32"));
  b.store(yf, i.add(4 * N), un("f16bits", k.cast("u32").and(0xffff)));
  b.store(yf, i.add(5 * N), un("bf16bits", k.cast("u32")));
  b.store(yf, i.add(6 * N), k.cast("f16").cast("f32"));
  b.store(yf, i.add(7 * N), v.isfinite().select(v, -1));
  b.store(yf, i.add(8 * N), un("isnan", v).select(7, v));
  b.store(yh, i, v); // f32 -> f16 on store (round to nearest even)
  b.store(ybf, i, v); // f32 -> bf16 on store
  const xs = f32s(N, 6, -70000, 70000);
  for (let j = 0; j < 32; j++) xs[200 + j] = (j - 16) * 0.37 + 1 / 3; // ordinary f16 values and ties
  xs[233] = 65520; // rounds to inf in f16
  xs[234] = 3.0e9; // saturates in i32
  return {
    name: "casts",
    kernel: b.build(),
    inputs: [bytesOf(xs), bytesOf(u32s(N, 7)), zeros(9 * N * 4), zeros(4 * N * 4), zeros(3 * N * 4), zeros(N * 2), zeros(N * 2)],
    checks: [{ binding: 2, as: "f32" }, { binding: 3, as: "i32" }, { binding: 4, as: "u32" }, { binding: 5, as: "f16" }, { binding: 6, as: "bf16" }],
  };
}

function views(): FeatureCase {
  const b = new KernelBuilder("views", { workgroup: 32, grid: 2 });
  const x = b.buffer("x", "u8", "rw"), y = b.buffer("y", "i32", "w"), h = b.buffer("h", "f16", "rw");
  const i = b.gid.x;
  b.store(y, i, b.load(x, i, "i8"));
  b.store(y, i.add(64), b.load(x, i, "u8"));
  b.store(y, i.add(128), b.load(x, i, "i16"));
  b.store(y, i.add(192), b.load(x, i, "u16"));
  b.store(y, i.add(256), b.load(x, i, "i32"));
  const hv = b.let(b.load(h, i, "f16", "f16"), "f16");
  b.store(y, i.add(320), b.load(h, i, "bf16").bitcast("i32"));
  b.store(h, i.add(64), hv); // f16 value stored unchanged
  b.store(x, i.add(256), b.load(x, i, "u8").add(200), "u8"); // keeps the low 8 bits
  b.store(x, i.add(160), b.load(x, i, "i16").mul(3), "i16");
  const r = rng(8), xs = new Uint8Array(512), hs = new Uint16Array(128);
  for (let j = 0; j < 256; j++) xs[j] = Math.floor(r() * 256);
  // No NaN or infinity as f16 or as bf16 (bit 14 clear): NaN payloads are not specified across devices.
  for (let j = 0; j < 64; j++) hs[j] = Math.floor(r() * 65536) & 0xbfff;
  return {
    name: "views",
    kernel: b.build(),
    inputs: [xs, zeros(384 * 4), bytesOf(hs)],
    checks: [{ binding: 0, as: "u8" }, { binding: 1, as: "i32" }, { binding: 2, as: "f16" }],
  };
}

function vectors(): FeatureCase {
  const b = new KernelBuilder("vectors", { workgroup: 64, grid: 1 });
  const f = b.buffer("f", "f32", "r"), u = b.buffer("u", "u32", "r"), h = b.buffer("h", "f16", "r");
  const bf = b.buffer("bf", "bf16", "r"), q = b.buffer("q", "u8", "r");
  const of = b.buffer("of", "f32", "w"), ou = b.buffer("ou", "u32", "w"), oh = b.buffer("oh", "f16", "w");
  const obf = b.buffer("obf", "bf16", "w"), oq = b.buffer("oq", "u8", "w");
  const i = b.lid.x;
  const v4 = b.loadv(f, i.mul(4), 4);
  b.storev(of, i.mul(4), v4.map((x, j) => x.add(j)));
  const v2 = b.loadv(f, i.mul(2).add(256), 2);
  b.storev(of, i.mul(2).add(256), [v2[1], v2[0]]);
  const w4 = b.loadv(u, i.mul(4), 4);
  b.storev(ou, i.mul(4), w4.map((x) => x.xor(0xff)));
  const h8 = b.loadv(h, i.mul(8), 8);
  b.storev(oh, i.mul(8), h8.map((x) => x.mul(2)));
  const h2 = b.loadv(h, i.mul(2).add(512), 2);
  b.storev(oh, i.mul(2).add(512), h2);
  const b4 = b.loadv(bf, i.mul(4), 4);
  b.storev(obf, i.mul(4), b4.map((x) => x.add(1)));
  const q16 = b.loadv(q, i.mul(16), 16);
  b.storev(oq, i.mul(16), q16.map((x) => x.add(1)));
  const s4 = b.loadv(q, i.mul(4).add(1024), 4, "i8");
  b.storev(oq, i.mul(4).add(1024), s4.map((x) => x.mul(-1)), "i8");
  // Indices count elements of the view: byte 1280 is u16 element 640, byte 2304 is i16 element 1152.
  const u8 = b.loadv(q, i.mul(8).add(640), 8, "u16"); // u16 x 8 through a u8 buffer
  b.storev(oq, i.mul(8).add(640), u8.map((x) => x.add(0x101)), "u16");
  const i2 = b.loadv(q, i.mul(2).add(1152), 2, "i16");
  b.storev(oq, i.mul(2).add(1152), [i2[1], i2[0]], "i16");
  const q2 = b.loadv(q, i.mul(2).add(2560), 2);
  b.storev(oq, i.mul(2).add(2560), [q2[1], q2[0]]);
  b.store(ou, i.add(256), w4[0].add(w4[3]));
  const r = rng(9);
  const fs = f32s(384, 10, -4, 4, false), us = u32s(320, 11), hs = new Uint16Array(640), bs = new Uint16Array(256);
  for (let j = 0; j < 640; j++) hs[j] = f16bits((r() - 0.5) * 100);
  for (let j = 0; j < 256; j++) bs[j] = Math.floor(r() * 65536) & 0x7f7f;
  const qs = new Uint8Array(2688);
  for (let j = 0; j < qs.length; j++) qs[j] = Math.floor(r() * 256);
  return {
    name: "vectors",
    kernel: b.build(),
    inputs: [bytesOf(fs), bytesOf(us), bytesOf(hs), bytesOf(bs), qs, zeros(384 * 4), zeros(320 * 4), zeros(640 * 2), zeros(256 * 2), zeros(2688)],
    checks: [{ binding: 5, as: "f32" }, { binding: 6, as: "u32" }, { binding: 7, as: "u16" }, { binding: 8, as: "u16" }, { binding: 9, as: "u8" }],
  };
}

function sharedBarrier(): FeatureCase {
  const W = 128;
  const b = new KernelBuilder("shared_barrier", { workgroup: W, grid: 2 });
  const x = b.buffer("x", "f32", "r"), y = b.buffer("y", "f32", "w"), yu = b.buffer("yu", "u32", "w");
  const s = b.shared("s", "f32", W), su = b.shared("su", "u32", W), sb = b.shared("sb", "bool", W);
  const sh = b.shared("sh", "f16", W);
  const l = b.lid.x, g = b.gid.x;
  const v = b.let(b.load(x, g), "f32");
  b.sstore(s, l, v);
  b.sstore(su, l, g.mul(3));
  b.sstore(sb, l, v.gt(0));
  b.sstore(sh, l, v.cast("f16"));
  b.barrier();
  b.store(y, g, b.sload(s, l.xor(W - 1)).add(b.sload(s, l.add(1).mod(W))));
  b.store(y, g.add(2 * W), b.sload(sh, u32(W - 1).sub(l)).cast("f32"));
  b.store(yu, g, b.sload(su, u32(W - 1).sub(l)).add(b.sload(sb, l.add(3).mod(W)).select(u32(1000), u32(0))));
  b.barrier();
  // A tree reduction in shared memory with a barrier inside a loop.
  b.for(0, 7, 1, (k) => {
    const stride = u32(W).shr(k.add(1));
    b.if(l.lt(stride), () => b.sstore(s, l, b.sload(s, l).add(b.sload(s, l.add(stride)))));
    b.barrier();
  });
  b.if(l.eq(0), () => b.store(y, b.wgid.x.add(4 * W), b.sload(s, 0)));
  return {
    name: "shared_barrier",
    kernel: b.build(),
    inputs: [bytesOf(f32s(2 * W, 12, -2, 2, false)), zeros((4 * W + 2) * 4), zeros(2 * W * 4)],
    checks: [{ binding: 1, as: "f32", range: [0, 4 * W] }, { binding: 1, as: "f32", range: [4 * W, 4 * W + 2], abs: 1e-4 }, { binding: 2, as: "u32" }],
  };
}

function subgroups(W: number): FeatureCase {
  const b = new KernelBuilder(`subgroups_${W}`, { workgroup: W, grid: 2 });
  const x = b.buffer("x", "f32", "r"), n = b.buffer("n", "i32", "r");
  const y = b.buffer("y", "f32", "w"), yi = b.buffer("yi", "i32", "w"), yu = b.buffer("yu", "u32", "w");
  const g = b.gid.x;
  const v = b.let(b.load(x, g), "f32"), k = b.let(b.load(n, g), "i32");
  const M = 2 * W;
  b.store(y, g, b.subgroupReduce("add", v));
  b.store(y, g.add(M), b.subgroupReduce("max", v));
  b.store(y, g.add(2 * M), b.subgroupReduce("min", v));
  b.store(y, g.add(3 * M), b.shuffle("xor", v, 1));
  b.store(y, g.add(4 * M), b.shuffle("idx", v, 0));
  b.store(y, g.add(5 * M), b.shuffle("down", v, 1));
  b.store(y, g.add(6 * M), b.shuffle("idx", v, k.cast("u32").and(63))); // dynamic lanes, some >= 32
  b.store(y, g.add(7 * M), b.shuffle("xor", v, k.cast("u32").and(15)));
  b.store(y, g.add(8 * M), b.subgroupReduce("add", v.cast("f16")).cast("f32"));
  b.store(yi, g, b.subgroupReduce("add", k));
  b.store(yi, g.add(M), b.subgroupReduce("max", k));
  b.store(yi, g.add(2 * M), b.subgroupReduce("min", k));
  b.store(yi, g.add(3 * M), b.subgroupReduce("max", v.gt(1.5)).select(1, 0));
  b.store(yi, g.add(4 * M), b.subgroupReduce("min", v.gt(-1.9)).select(1, 0));
  b.store(yi, g.add(5 * M), b.shuffle("down", k, 3));
  b.store(yu, g, b.subgroupReduce("max", k.cast("u32")));
  b.store(yu, g.add(M), b.subgroupReduce("min", k.cast("u32")));
  b.store(yu, g.add(2 * M), b.builtin("lane").add(b.builtin("sgid").mul(100)).add(b.builtin("sgsize").mul(10000)));
  b.store(yu, g.add(3 * M), b.shuffle("xor", v.gt(0), 2).select(1, 0).cast("u32"));
  const ks = new Int32Array(M), r = rng(13);
  for (let j = 0; j < M; j++) ks[j] = Math.floor((r() - 0.5) * 2 ** 20);
  return {
    name: `subgroups_${W}`,
    kernel: b.build(),
    inputs: [bytesOf(f32s(M, 14, -2, 2, false)), bytesOf(ks), zeros(9 * M * 4), zeros(6 * M * 4), zeros(4 * M * 4)],
    checks: [
      { binding: 2, as: "f32", range: [0, M], abs: 2e-5 },
      { binding: 2, as: "f32", range: [M, 8 * M] },
      { binding: 2, as: "f32", range: [8 * M, 9 * M], abs: 0.5 }, // 32 f16 additions in another order
      { binding: 3, as: "i32" },
      { binding: 4, as: "u32" },
    ],
  };
}

function control(): FeatureCase {
  const b = new KernelBuilder("control", { workgroup: 64, grid: 2 });
  const p = b.buffer("p", "u32", "r"), x = b.buffer("x", "f32", "r"), y = b.buffer("y", "f32", "w");
  const yu = b.buffer("yu", "u32", "rw");
  const g = b.gid.x;
  const n = b.let(b.load(p, 0), "u32");
  b.if(g.ge(n), () => b.return());
  const acc = b.let(0, "f32");
  b.for(g, b.load(p, 1), 7, (i) => b.set(acc, acc.add(b.load(x, i))), { unroll: 4 }); // dynamic bound
  b.store(y, g, acc);
  const c = b.let(0, "i32");
  b.for(-5, 12, 3, (i) => b.set(c, c.add(i.mul(i))), { t: "i32", unroll: 8 }); // constant, fully unrolled
  b.for(0, 10, 1, (i) => b.set(c, c.add(i)), { unroll: 3, t: "i32" }); // constant, partly unrolled
  const lim = b.let(g.add(3), "u32");
  b.for(0, lim, 1, () => b.set(lim, lim.sub(1))); // the bound changes in the body: re-evaluated
  b.if(g.mod(3).eq(0), () => {
    b.store(yu, g, c.cast("u32").add(lim));
  }, () => {
    b.if(g.mod(3).eq(1), () => b.store(yu, g, 77), () => b.store(yu, g, lim.mul(2)));
  });
  b.store(yu, g.add(128), b.load(yu, g).add(1));
  const xs = f32s(1024, 15, -1, 1, false);
  return {
    name: "control",
    kernel: b.build(),
    inputs: [bytesOf(new Uint32Array([100, 1000])), bytesOf(xs), zeros(128 * 4), zeros(256 * 4)],
    checks: [{ binding: 2, as: "f32" }, { binding: 3, as: "u32" }],
  };
}

function grid3d(): FeatureCase {
  const b = new KernelBuilder("grid3d", { workgroup: [4, 4, 2], grid: [2, 3, 2] });
  const y = b.buffer("y", "u32", "w");
  const gx = b.gid.x, gy = b.gid.y, gz = b.gid.z;
  const lin = gz.mul(12).add(gy).mul(8).add(gx);
  const pack = (xv: Val, yv: Val, zv: Val) => xv.add(yv.mul(100)).add(zv.mul(10000));
  b.store(y, lin.mul(4), pack(gx, gy, gz));
  b.store(y, lin.mul(4).add(1), pack(b.lid.x, b.lid.y, b.lid.z));
  b.store(y, lin.mul(4).add(2), pack(b.wgid.x, b.wgid.y, b.wgid.z));
  b.store(y, lin.mul(4).add(3), pack(b.nwg.x, b.nwg.y, b.nwg.z).add(b.builtin("sgid").mul(1000000)));
  return { name: "grid3d", kernel: b.build(), inputs: [zeros(8 * 12 * 4 * 4 * 4)], checks: [{ binding: 0, as: "u32" }] };
}

function f16Math(): FeatureCase {
  const b = new KernelBuilder("f16_math", { workgroup: 64, grid: 2 });
  const h = b.buffer("h", "f16", "r"), y = b.buffer("y", "f16", "w"), yp = b.buffer("yp", "u32", "w");
  const i = b.gid.x;
  const a = b.let(b.load(h, i, "f16", "f16"), "f16"), c = b.let(b.load(h, i.add(128), "f16", "f16"), "f16");
  const outs: Val[] = [a.add(c), a.sub(c), a.mul(c), fma(a, c, a), a.max(c), a.min(c), a.neg(), a.abs(), a.div(c), a.exp(), a.floor(), a.gt(c).select(a, c)];
  outs.forEach((v, j) => b.store(y, i.add(j * 128), v));
  b.store(yp, i, a.lt(c).select(1, 0).add(a.eq(c).select(2, 0)).cast("u32"));
  const r = rng(16), hs = new Uint16Array(256);
  for (let j = 0; j < 256; j++) hs[j] = f16bits((r() - 0.5) * 8);
  return {
    name: "f16_math",
    kernel: b.build(),
    inputs: [bytesOf(hs), zeros(12 * 128 * 2), zeros(128 * 4)],
    // div and exp go through f32 and round to f16 once more (JS rounds the double): 1 f16 ulp.
    checks: [{ binding: 1, as: "f16", range: [0, 8 * 128] }, { binding: 1, as: "f16", range: [8 * 128, 10 * 128], ulps: 1 }, { binding: 1, as: "f16", range: [10 * 128, 12 * 128] }, { binding: 2, as: "u32" }],
  };
}

function bigShared(): FeatureCase {
  const W = 256, S = 16384; // 64 KiB: past the static limit, so dynamic shared memory
  const b = new KernelBuilder("big_shared", { workgroup: W, grid: 1 });
  const y = b.buffer("y", "f32", "w");
  const s = b.shared("s", "f32", S);
  const l = b.lid.x;
  b.for(l, S, W, (i) => b.sstore(s, i, i.cast("f32")), { unroll: 4 });
  b.barrier();
  const acc = b.let(0, "f32");
  b.for(0, S / W, 1, (j) => b.set(acc, acc.add(b.sload(s, j.mul(W).add(u32(W - 1).sub(l))))));
  b.store(y, l, acc);
  return { name: "big_shared", kernel: b.build(), inputs: [zeros(W * 4)], checks: [{ binding: 0, as: "f32" }] };
}

/** A kernel whose check fails for an input value of 1000 or more (code 7); `fail` plants one. */
export function checkCase(fail: boolean): FeatureCase {
  const b = new KernelBuilder("checked", { workgroup: 64, grid: 4 });
  const x = b.buffer("x", "f32", "r"), y = b.buffer("y", "f32", "w");
  const i = b.gid.x;
  const v = b.let(b.load(x, i), "f32");
  b.check(v.lt(1000), 7);
  b.store(y, i, v.mul(2));
  const xs = f32s(N, 17, -10, 10, false);
  if (fail) xs[77] = 5000;
  return { name: fail ? "checked_failing" : "checked", kernel: b.build(), inputs: [bytesOf(xs), zeros(N * 4)], checks: [{ binding: 1, as: "f32" }] };
}

/**
 * Workgroups meeting through memory: every invocation writes a word and adds 1 to a counter between two device
 * barriers; the workgroup whose invocation saw the count reach its end sums every workgroup's words (so it must
 * see all of them) and zeroes the counter. Also stores whether each invocation's old count was in range.
 */
function lastBlock(): FeatureCase {
  const W = 64, G = 8, n = W * G;
  const b = new KernelBuilder("last_block", { workgroup: W, grid: G });
  const x = b.buffer("x", "u32", "r"), part = b.buffer("part", "u32", "rw"), y = b.buffer("y", "u32", "w");
  const S = b.shared("last", "u32", 1);
  const l = b.lid.x, g = b.gid.x;
  b.if(l.eq(0), () => b.sstore(S, 0, 0));
  b.store(part, g, b.load(x, g).mul(3).add(1));
  b.barrier("device");
  const seen = b.atomicFetch(part, n, "add", 1);
  b.barrier("device");
  b.store(y, g.add(W), seen.lt(n).select(u32(1), u32(0)));
  b.if(seen.eq(n - 1), () => b.sstore(S, 0, 1));
  b.barrier();
  b.if(b.sload(S, 0).eq(1), () => {
    const acc = b.let(u32(0), "u32", "acc");
    b.for(0, G, 1, (k) => b.set(acc, acc.add(b.load(part, k.mul(W).add(l)))));
    b.store(y, l, acc);
    b.if(l.eq(0), () => b.atomic(part, n, "and", 0));
  });
  return {
    name: "last_block",
    kernel: b.build(),
    inputs: [bytesOf(u32s(n, 19)), zeros((n + 1) * 4), zeros((W + n) * 4)],
    checks: [{ binding: 1, as: "u32" }, { binding: 2, as: "u32" }],
  };
}

/** Every feature case (built fresh on each call: kernels are plain data). */
export function featureCases(): FeatureCase[] {
  return [
    unaryF32(), binaryF32(), intOps("i32"), intOps("u32"), casts(), views(), vectors(), sharedBarrier(),
    subgroups(128), subgroups(48), subgroups(44), control(), grid3d(), f16Math(), bigShared(), checkCase(false),
    lastBlock(), dot4Case(),
  ];
}

/**
 * Words at the int8 edges (every byte -128, every byte 127, mixed signs, 0, -1), each paired with each other,
 * at the front of dot4Case's inputs: the extremes of a signed-byte dot (4·128·128 = 65536, 4·-128·127).
 */
export const DOT4_EDGES = [0x80808080, 0x7f7f7f7f, 0x807f01ff, 0x7f80ff01, 0x00000000, 0xffffffff, 0x01fe7f80, 0x80000080];

/**
 * dot4 (int8x4 dot of u32 words): native on ptx (dp4a), on vulkan/wgpu where caps.dot4Native (OpSDot,
 * dot4I8Packed), decomposed elsewhere; bit-exact everywhere.
 */
export function dot4Case(): FeatureCase {
  const b = new KernelBuilder("dot4", { workgroup: 64, grid: N / 64 });
  const xa = b.buffer("a", "u32", "r"), xb = b.buffer("b", "u32", "r"), y = b.buffer("y", "i32", "w");
  const i = b.gid.x;
  const a = b.let(b.load(xa, i), "u32"), c = b.let(b.load(xb, i), "u32");
  b.store(y, i, a.dot4(c));
  b.store(y, i.add(N), a.dot4(u32(0x01010101)).add(c.dot4(a)).sub(a.dot4(a)));
  b.store(y, i.add(2 * N), a.and(0x0f0f0f0f).dot4(c)); // a q4 nibble word, as the quantized gemv takes it
  const xs = u32s(N, 21), ys = u32s(N, 22), E = DOT4_EDGES.length;
  for (let j = 0; j < E * E; j++) xs[j] = DOT4_EDGES[Math.floor(j / E)], ys[j] = DOT4_EDGES[j % E];
  return { name: "dot4", kernel: b.build(), inputs: [bytesOf(xs), bytesOf(ys), zeros(3 * N * 4)], checks: [{ binding: 2, as: "i32" }] };
}

/**
 * 256 invocations over 8 words: each sets its own bit of word gid / 32 with an atomic or and clears it in the
 * second buffer with an atomic and (every word is shared by 32 invocations, of several workgroups).
 */
export function atomicKernel(): Kernel {
  const k = new KernelBuilder("atomic_bits", { workgroup: 64, grid: 4 });
  const S = k.buffer("set", "u32", "rw"), C = k.buffer("cleared", "u32", "rw");
  const g = k.gid.x, bit = k.let(u32(1).shl(g.mod(32)));
  k.atomic(S, g.div(32), "or", bit);
  k.atomic(C, g.div(32), "and", bit.not());
  return k.build();
}
