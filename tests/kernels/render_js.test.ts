// The JS renderer against the IR's semantics: every op and cast with f32 rounding and 32-bit integer wrap,
// byte-reinterpreting views and 16-bit float conversions, vector loads/stores, the lockstep path (shared
// memory, barriers, subgroup reductions and shuffles under divergent if/for/return), faults and bounds.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type CType, type EType, f32, fma, i32, type Kernel, KernelBuilder, u32, un, type Val } from "../../kernels/ir.ts";
import { JsKernelFault, renderJs } from "../../kernels/render/js.ts";

type Arr = Float32Array | Int32Array | Uint32Array | Uint16Array | Uint8Array | Int8Array | Int16Array;

function exec(k: Kernel, bufs: Arr[], opts: { sg?: number; simt?: boolean; debug?: boolean } = {}): void {
  const jk = renderJs(k, { subgroupSize: opts.sg ?? 1, debug: opts.debug ?? true, forceSimt: opts.simt });
  jk.run(jk.bind(bufs.map((a) => ({ buffer: a.buffer, offset: a.byteOffset, bytes: a.byteLength }))));
}
const ARR: Record<string, new (n: number) => Arr> = { f32: Float32Array, i32: Int32Array, u32: Uint32Array };

/** out[i] = f(a[i], b[i]) over typed inputs, checked on both code paths (scalar and lockstep). */
function map2(ta: CType, tb: CType, to: "f32" | "i32" | "u32", xs: number[], ys: number[], f: (a: Val, b: Val) => Val): number[] {
  const n = xs.length;
  const mk = () => {
    const b = new KernelBuilder("map2", { workgroup: 4, grid: Math.ceil(n / 4) });
    const A = b.buffer("a", ta as EType, "r"), B = b.buffer("b", tb as EType, "r"), O = b.buffer("o", to, "w");
    const i = b.let(b.gid.x, "u32");
    b.if(i.ge(n), () => b.return());
    const r = f(b.load(A, i), b.load(B, i));
    b.store(O, i, r.t === "bool" ? r.select(1, 0).cast(to) : r);
    return b.build();
  };
  const results: number[][] = [];
  for (const simt of [false, true]) {
    const a = new ARR[ta](n), bb = new ARR[tb](n), o = new ARR[to](n);
    a.set(xs);
    bb.set(ys);
    exec(mk(), [a, bb, o], { simt, sg: 4 });
    results.push([...o]);
  }
  assert.deepEqual(results[0], results[1], "scalar and lockstep paths differ");
  return results[0];
}
const fr = Math.fround;
const same = (got: number[], want: number[]) =>
  assert.deepEqual(got.map((v) => Object.is(v, -0) ? "-0" : v), want.map((v) => Object.is(fr(v), -0) ? "-0" : fr(v)));

test("f32 arithmetic rounds every op to single precision", () => {
  const xs = [1, 0.1, 1e30, -3.5, 16777216, 0, 2, -0.75, 7];
  const ys = [3, 0.2, 1e10, 2, 1, -0, 0.5, 0.25, 2.5];
  same(map2("f32", "f32", "f32", xs, ys, (a, b) => a.add(b)), xs.map((x, i) => fr(fr(x) + fr(ys[i]))));
  same(map2("f32", "f32", "f32", xs, ys, (a, b) => a.sub(b)), xs.map((x, i) => fr(fr(x) - fr(ys[i]))));
  same(map2("f32", "f32", "f32", xs, ys, (a, b) => a.mul(b)), xs.map((x, i) => fr(fr(x) * fr(ys[i]))));
  same(map2("f32", "f32", "f32", xs, ys, (a, b) => a.div(b)), xs.map((x, i) => fr(fr(x) / fr(ys[i]))));
  same(map2("f32", "f32", "f32", xs, ys, (a, b) => a.mod(b)), xs.map((x, i) => fr(fr(x) % fr(ys[i]))));
  same(map2("f32", "f32", "f32", xs, ys, (a, b) => a.max(b)), xs.map((x, i) => Math.max(fr(x), fr(ys[i]))));
  same(map2("f32", "f32", "f32", xs, ys, (a, b) => a.min(b)), xs.map((x, i) => Math.min(fr(x), fr(ys[i]))));
  same(map2("f32", "f32", "f32", [2, 9, 0.5], [10, 0.5, -1], (a, b) => a.pow(b)), [1024, 3, 2]);
  // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: a rounded multiply drops the 2^-24 (tie to even), fma keeps it
  const e = 1 + 2 ** -12;
  same(map2("f32", "f32", "f32", [e], [e], (a, b) => a.mul(b).sub(1)), [2 ** -11]);
  same(map2("f32", "f32", "f32", [e], [e], (a, b) => fma(a, b, -1)), [2 ** -11 + 2 ** -24]);
});

test("f32 unary ops and predicates", () => {
  const xs = [0.5, 2, 10, -1.5, 4];
  const ops: [string, (x: Val) => Val, (x: number) => number][] = [
    ["neg", (x) => x.neg(), (x) => -x], ["abs", (x) => x.abs(), Math.abs], ["exp", (x) => x.exp(), Math.exp],
    ["exp2", (x) => un("exp2", x), (x) => 2 ** x], ["log", (x) => x.abs().log(), (x) => Math.log(Math.abs(x))],
    ["log2", (x) => un("log2", x.abs()), (x) => Math.log2(Math.abs(x))], ["sqrt", (x) => x.abs().sqrt(), (x) => Math.sqrt(Math.abs(x))],
    ["rsqrt", (x) => x.abs().rsqrt(), (x) => 1 / Math.sqrt(Math.abs(x))], ["recip", (x) => x.recip(), (x) => 1 / x],
    ["sin", (x) => x.sin(), Math.sin], ["cos", (x) => x.cos(), Math.cos], ["tanh", (x) => x.tanh(), Math.tanh],
    ["floor", (x) => x.floor(), Math.floor], ["ceil", (x) => un("ceil", x), Math.ceil],
  ];
  for (const [name, f, ref] of ops) {
    const got = map2("f32", "f32", "f32", xs, xs, (a) => f(a));
    got.forEach((g, i) => assert.ok(Math.abs(g - ref(fr(xs[i]))) <= 1e-6 * Math.max(1, Math.abs(ref(xs[i]))), `${name}(${xs[i]}) = ${g}`));
  }
  const sp = [0, Infinity, -Infinity, NaN, 1];
  assert.deepEqual(map2("f32", "f32", "u32", sp, sp, (a) => a.isfinite()), [1, 0, 0, 0, 1]);
  assert.deepEqual(map2("f32", "f32", "u32", sp, sp, (a) => un("isnan", a)), [0, 0, 0, 1, 0]);
  assert.deepEqual(map2("f32", "f32", "u32", [1, NaN, 2], [1, NaN, 3], (a, b) => a.eq(b)), [1, 0, 0]);
  assert.deepEqual(map2("f32", "f32", "u32", [1, NaN, 2], [1, NaN, 3], (a, b) => a.ne(b)), [0, 1, 1]);
  assert.deepEqual(map2("f32", "f32", "u32", [1, 2, 3], [2, 2, 2], (a, b) => a.lt(b).or(a.ge(b).and(a.le(b)))), [1, 1, 0]);
});

test("integers wrap at 32 bits; division by zero gives 0; shifts", () => {
  const I = 2 ** 31;
  assert.deepEqual(map2("i32", "i32", "i32", [I - 1, -I, 7, -7], [1, -1, 2, 2], (a, b) => a.add(b)), [-I, I - 1, 9, -5]);
  assert.deepEqual(map2("i32", "i32", "i32", [65536, -7, 7, -7, 5], [65536, 2, -2, 0, 3], (a, b) => a.mul(b)), [0, -14, -14, 0, 15]);
  assert.deepEqual(map2("i32", "i32", "i32", [7, -7, 7, -I, 5], [2, 2, -2, -1, 0], (a, b) => a.div(b)), [3, -3, -3, -I, 0]);
  assert.deepEqual(map2("i32", "i32", "i32", [7, -7, 7, 5], [2, 2, -2, 0], (a, b) => a.mod(b)), [1, -1, 1, 0]);
  assert.deepEqual(map2("i32", "i32", "i32", [-16, 1, 5], [2, 31, 1], (a, b) => a.shr(b)), [-4, 0, 2]);
  assert.deepEqual(map2("i32", "i32", "i32", [1, 3], [31, 30], (a, b) => a.shl(b)), [-I, -(2 ** 30)]);
  assert.deepEqual(map2("i32", "i32", "i32", [12, -1], [10, 5], (a, b) => a.and(b).or(a.xor(b))), [14, -1]);
  assert.deepEqual(map2("i32", "i32", "i32", [5, -I], [0, 0], (a) => a.neg()), [-5, -I]);
  assert.deepEqual(map2("i32", "i32", "i32", [5, -I, -3], [0, 0, 0], (a) => a.abs()), [5, -I, 3]);
  assert.deepEqual(map2("i32", "i32", "i32", [0, -1], [0, 0], (a) => a.not()), [-1, 0]);
  const U = 2 ** 32;
  assert.deepEqual(map2("u32", "u32", "u32", [U - 1, 0, 3e9], [1, 1, 2e9], (a, b) => a.add(b)), [0, 1, (3e9 + 2e9) % U]);
  assert.deepEqual(map2("u32", "u32", "u32", [0, 5], [1, 7], (a, b) => a.sub(b)), [U - 1, U - 2]);
  assert.deepEqual(map2("u32", "u32", "u32", [U - 1, 65536], [U - 1, 65537], (a, b) => a.mul(b)), [1, 65536]);
  assert.deepEqual(map2("u32", "u32", "u32", [U - 1, 7, 9], [2, 0, 4], (a, b) => a.div(b)), [2 ** 31 - 1, 0, 2]);
  assert.deepEqual(map2("u32", "u32", "u32", [U - 1, 7], [10, 0], (a, b) => a.mod(b)), [(U - 1) % 10, 0]);
  assert.deepEqual(map2("u32", "u32", "u32", [U - 1, 1], [28, 31], (a, b) => a.shr(b).add(a.shl(b))), [15 + (U - 2 ** 28), 2 ** 31]);
  assert.deepEqual(map2("u32", "u32", "u32", [0, U - 1], [0, 0], (a) => a.not()), [U - 1, 0]);
  assert.deepEqual(map2("u32", "u32", "u32", [3e9, 2], [2e9, 3], (a, b) => a.max(b).sub(a.min(b))), [1e9, 1]);
  assert.deepEqual(map2("u32", "u32", "u32", [3e9, 1], [1, 3e9], (a, b) => a.gt(b)), [1, 0]);
});

test("casts truncate and saturate; bitcasts keep bits", () => {
  const xs = [1.9, -1.9, 3e9, -3e9, NaN, Infinity, -0.5, 2 ** 31 - 128];
  assert.deepEqual(map2("f32", "f32", "i32", xs, xs, (a) => a.cast("i32")), [1, -1, 2 ** 31 - 1, -(2 ** 31), 0, 2 ** 31 - 1, 0, 2 ** 31 - 128]);
  assert.deepEqual(map2("f32", "f32", "u32", xs, xs, (a) => a.cast("u32")), [1, 0, 3e9, 0, 0, 2 ** 32 - 1, 0, 2 ** 31 - 128]);
  assert.deepEqual(map2("i32", "i32", "f32", [16777217, -3, 2 ** 31 - 1], [0, 0, 0], (a) => a.cast("f32")), [16777216, -3, 2 ** 31]);
  assert.deepEqual(map2("u32", "u32", "f32", [2 ** 32 - 1, 7], [0, 0], (a) => a.cast("f32")), [2 ** 32, 7]);
  assert.deepEqual(map2("u32", "u32", "i32", [2 ** 32 - 1, 7], [0, 0], (a) => a.cast("i32")), [-1, 7]);
  assert.deepEqual(map2("i32", "i32", "u32", [-1, 7], [0, 0], (a) => a.cast("u32")), [2 ** 32 - 1, 7]);
  assert.deepEqual(map2("f32", "f32", "u32", [1, -2], [0, 0], (a) => a.bitcast("u32")), [0x3f800000, 0xc0000000]);
  assert.deepEqual(map2("u32", "u32", "f32", [0x3f800000, 0x7f800000], [0, 0], (a) => a.bitcast("f32")), [1, Infinity]);
  assert.deepEqual(map2("f32", "f32", "i32", [-2], [0], (a) => a.bitcast("i32")), [0xc0000000 | 0]);
  assert.deepEqual(map2("i32", "i32", "f32", [0, 5], [0, 0], (a, b) => a.eq(b).cast("f32").add(a.ne(b).cast("i32").cast("f32"))), [1, 1]);
  // f32 -> f16 compute type rounds to nearest even (the cast) and f16 arithmetic rounds to f16
  const h = [1 + 2 ** -11, 1 + 3 * 2 ** -11, 65519, 65520, 2 ** -25, 3 * 2 ** -26];
  assert.deepEqual(map2("f32", "f32", "f32", h, h, (a) => a.cast("f16").cast("f32")), [1, 1 + 2 ** -9, 65504, Infinity, 0, 2 ** -24]);
  assert.deepEqual(map2("f32", "f32", "f32", [2048], [1], (a, b) => a.cast("f16").add(b.cast("f16")).cast("f32")), [2048]);
  assert.deepEqual(map2("u32", "u32", "f32", [0x3c00, 0x3c00f, 0x8001], [0, 0, 0], (a) => un("f16bits", a)), [1, -2.029296875, -(2 ** -24)]);
  assert.deepEqual(map2("u32", "u32", "f32", [0x3f80, 0xc040], [0, 0], (a) => un("bf16bits", a)), [1, -3]);
});

test("views reinterpret bytes; narrowing stores keep low bits; f16/bf16 stores round to nearest even", () => {
  const bytes = new Uint8Array([0x01, 0x80, 0xff, 0x7f, 0x00, 0x3c, 0x80, 0x3f]);
  const views: [EType, number[]][] = [
    ["u8", [1, 128, 255, 127, 0, 60, 128, 63]], ["i8", [1, -128, -1, 127, 0, 60, -128, 63]],
    ["u16", [0x8001, 0x7fff, 0x3c00, 0x3f80]], ["i16", [-32767, 32767, 0x3c00, 0x3f80]],
    ["f16", [-(2 ** -24), NaN, 1, 1.875]], ["bf16", [-(2 ** -133), NaN, 2 ** -7, 1]],
  ];
  for (const [v, want] of views) {
    const n = want.length;
    const b = new KernelBuilder(`view_${v}`, { workgroup: 1, grid: n });
    const src = b.buffer("src", "u8", "r"), out = b.buffer("out", "f32", "w");
    b.store(out, b.gid.x, b.load(src, b.gid.x, v).cast("f32"));
    const o = new Float32Array(n);
    exec(b.build(), [bytes, o]);
    assert.deepEqual([...o], want, v);
  }
  // stores: ints keep low bits; floats round to nearest even with ties, overflow, subnormals, NaN
  const b = new KernelBuilder("narrow", { workgroup: 1, grid: 1 });
  const o8 = b.buffer("o8", "i8", "w"), o16 = b.buffer("o16", "u16", "w"), h = b.buffer("h", "f16", "w"), bf = b.buffer("bf", "bf16", "w");
  b.store(o8, 0, i32(300));
  b.store(o8, 1, i32(-129));
  b.store(o16, 0, u32(0x12345));
  const hv = [1 + 2 ** -11, 1 + 3 * 2 ** -11, 65520, -(2 ** -25), 1.5 * 2 ** -24, NaN, -0, 1e-10, 65519];
  hv.forEach((v, i) => b.store(h, i, f32(v)));
  const bv = [0x3f808000, 0x3f818000, 0x3f808001, 0x7f7fffff, 0x7fc00001];
  bv.forEach((bits, i) => b.store(bf, i, u32(bits).bitcast("f32")));
  const O8 = new Int8Array(2), O16 = new Uint16Array(1), H = new Uint16Array(hv.length), BF = new Uint16Array(bv.length);
  exec(b.build(), [O8, O16, H, BF]);
  assert.deepEqual([...O8], [44, 127]);
  assert.deepEqual([...O16], [0x2345]);
  assert.deepEqual([...H].map((x) => x.toString(16)), ["3c00", "3c02", "7c00", "8000", "2", "7e00", "8000", "0", "7bff"]);
  assert.deepEqual([...BF].map((x) => x.toString(16)), ["3f80", "3f82", "3f81", "7f80", "7fc0"]);
});

test("vector loads and stores move consecutive elements through views", () => {
  const b = new KernelBuilder("vec", { workgroup: 2, grid: 2 });
  const src = b.buffer("src", "f32", "r"), dst = b.buffer("dst", "u32", "w"), hs = b.buffer("hs", "f16", "w");
  const i = b.gid.x;
  const v = b.loadv(src, i.mul(4), 4);
  b.storev(dst, i.mul(4), v.map((x) => x.bitcast("u32")));
  b.storev(hs, i.mul(8), [...v, ...v].map((x) => x.mul(2)));
  const bytes = b.loadv(src, i.mul(16), 16, "u8"); // the same bytes, as 16 u8
  b.store(dst, i.add(16), bytes.reduce((a, x) => a.add(x), u32(0) as Val));
  const s = Float32Array.from({ length: 16 }, (_, j) => j + 0.5);
  const d = new Uint32Array(20), h = new Uint16Array(32);
  exec(b.build(), [s, d, h]);
  assert.deepEqual([...new Float32Array(d.buffer, 0, 16)], [...s]);
  const sumBytes = (lo: number) => [...new Uint8Array(s.buffer, lo, 16)].reduce((a, x) => a + x, 0);
  assert.deepEqual([...d.subarray(16)], [sumBytes(0), sumBytes(16), sumBytes(32), sumBytes(48)]);
  assert.deepEqual([...new Float16Array(h.buffer, 16, 8)], [4.5, 5.5, 6.5, 7.5, 4.5, 5.5, 6.5, 7.5].map((v) => v * 2));
});

test("loops: start/end/step, nesting, divergent bounds and return inside a loop", () => {
  const mk = () => {
    const b = new KernelBuilder("loops", { workgroup: 8, grid: 1 });
    const o = b.buffer("o", "u32", "w");
    const l = b.lid.x;
    const acc = b.let(u32(0));
    b.for(u32(1), l.add(2), 2, (i) => { // per-lane trip counts
      b.for(u32(0), i, 1, (j) => b.set(acc, acc.add(j.add(1))));
      b.if(acc.gt(20), () => {
        b.store(o, l, acc.add(1000));
        b.return();
      });
    });
    b.store(o, l, acc);
    return b.build();
  };
  const want: number[] = [];
  for (let l = 0; l < 8; l++) {
    let acc = 0, done = false;
    for (let i = 1; i < l + 2 && !done; i += 2) {
      for (let j = 0; j < i; j++) acc += j + 1;
      if (acc > 20) (want.push(acc + 1000), done = true);
    }
    if (!done) want.push(acc);
  }
  for (const simt of [false, true]) {
    const o = new Uint32Array(8);
    exec(mk(), [o], { simt, sg: 4 });
    assert.deepEqual([...o], want);
  }
});

test("lockstep path: shared memory, barriers, subgroup reduce and shuffles, divergent if/return", () => {
  const WG = 32, SG = 8;
  const b = new KernelBuilder("simt", { workgroup: WG, grid: 3 });
  const x = b.buffer("x", "f32", "r"), out = b.buffer("out", "f32", "w"), ints = b.buffer("ints", "i32", "w");
  const sh = b.shared("tile", "f32", WG);
  const l = b.lid.x, g = b.gid.x;
  const v = b.let(b.load(x, g));
  b.sstore(sh, l, v);
  b.barrier();
  // neighbour through shared memory (written by another lane before the barrier)
  const nb = b.let(b.sload(sh, l.add(1).mod(WG)));
  b.barrier();
  const tot = b.let(b.subgroupReduce("add", v), "f32");
  const mx = b.let(b.subgroupReduce("max", v), "f32");
  const lane = b.builtin("lane");
  const xr = b.let(b.shuffle("xor", v, 1), "f32");
  const dn = b.let(b.shuffle("down", v, 2), "f32");
  const ix = b.let(b.shuffle("idx", v, 3), "f32");
  b.store(out, g.mul(8), nb);
  b.store(out, g.mul(8).add(1), tot);
  b.store(out, g.mul(8).add(2), mx);
  b.store(out, g.mul(8).add(3), xr);
  b.store(out, g.mul(8).add(4), dn);
  b.store(out, g.mul(8).add(5), ix);
  // divergent: odd lanes return; even lanes reduce among themselves only
  b.if(lane.and(1).eq(1), () => {
    b.store(ints, g, i32(-1));
    b.return();
  });
  const cnt = b.let(b.subgroupReduce("add", i32(1)), "i32");
  const evenMin = b.let(b.subgroupReduce("min", v), "f32");
  b.if(lane.lt(4), () => b.store(out, g.mul(8).add(6), evenMin), () => b.store(out, g.mul(8).add(6), f32(-7)));
  b.store(ints, g, cnt.add(b.builtin("sgid").cast("i32").mul(100)));
  const k = b.build();

  const n = WG * 3;
  const xs = Float32Array.from({ length: n }, (_, i) => Math.fround(Math.sin(i * 1.7) * 10));
  const out0 = new Float32Array(n * 8), ints0 = new Int32Array(n);
  exec(k, [xs, out0, ints0], { sg: SG });
  for (let wg = 0; wg < 3; wg++) {
    for (let li = 0; li < WG; li++) {
      const gi = wg * WG + li, o = gi * 8, s0 = wg * WG + Math.floor(li / SG) * SG, ln = li % SG;
      const grp = Array.from(xs.subarray(s0, s0 + SG));
      let sum = 0;
      for (const y of grp) sum = fr(sum + y);
      assert.equal(out0[o], xs[wg * WG + (li + 1) % WG]);
      assert.equal(out0[o + 1], sum);
      assert.equal(out0[o + 2], Math.max(...grp));
      assert.equal(out0[o + 3], grp[ln ^ 1]);
      assert.equal(out0[o + 4], ln + 2 < SG ? grp[ln + 2] : grp[ln]);
      assert.equal(out0[o + 5], grp[3]);
      if (ln % 2) assert.equal(ints0[gi], -1);
      else {
        assert.equal(ints0[gi], SG / 2 + Math.floor(li / SG) * 100);
        assert.equal(out0[o + 6], ln < 4 ? Math.min(...grp.filter((_, j) => j % 2 === 0)) : -7);
      }
    }
  }
});

test("path choice: scalar for barrier-free subgroup-free kernels, one-lane subgroups and 1-invocation workgroups", () => {
  const b = new KernelBuilder("p", { workgroup: 4, grid: 1 });
  const o = b.buffer("o", "f32", "w");
  b.store(o, b.lid.x, b.subgroupReduce("add", f32(1)));
  const k = b.build();
  assert.equal(renderJs(k, { subgroupSize: 1 }).path, "scalar");
  assert.equal(renderJs(k, { subgroupSize: 4 }).path, "simt");
  const b2 = new KernelBuilder("q", { workgroup: 1, grid: 1 });
  b2.barrier();
  assert.equal(renderJs(b2.build(), { subgroupSize: 32 }).path, "scalar");
});

test("a failing check throws JsKernelFault with the kernel name and code, on both paths", () => {
  for (const simt of [false, true]) {
    const b = new KernelBuilder("checker", { workgroup: 4, grid: 2 });
    const x = b.buffer("x", "u32", "r");
    b.check(b.load(x, b.gid.x).lt(10), 0x1234);
    const xs = Uint32Array.from([1, 2, 3, 4, 5, 6, 70, 8]);
    assert.throws(() => exec(b.build(), [xs], { simt, sg: 4 }), (e: unknown) =>
      e instanceof JsKernelFault && e.kernel === "checker" && e.code === 0x1234);
  }
});

test("out of bounds: debug mode faults with code 0; without it a stray store never reaches another binding", () => {
  const mk = () => {
    const b = new KernelBuilder("stray", { workgroup: 1, grid: 1 });
    const a = b.buffer("a", "f32", "rw");
    b.store(a, 4, f32(9));
    b.store(a, 0, b.load(a, 5).add(1));
    return b.build();
  };
  const arena = new Float32Array(8);
  const bind = (k: Kernel, debug: boolean) => {
    const jk = renderJs(k, { subgroupSize: 1, debug });
    return () => jk.run(jk.bind([{ buffer: arena.buffer, offset: 0, bytes: 16 }])); // a = arena[0..4)
  };
  assert.throws(bind(mk(), true), (e: unknown) => e instanceof JsKernelFault && e.code === 0);
  bind(mk(), false)();
  assert.deepEqual([...arena.subarray(4)], [0, 0, 0, 0]);
  assert.ok(Number.isNaN(arena[0]));
  // misaligned vector access is caught too
  const b = new KernelBuilder("misaligned", { workgroup: 1, grid: 1 });
  const a = b.buffer("a", "f32", "r"), o = b.buffer("o", "f32", "w");
  b.store(o, 0, b.loadv(a, 2, 4)[0]);
  assert.throws(() => exec(b.build(), [new Float32Array(8), new Float32Array(1)]), (e: unknown) => e instanceof JsKernelFault && e.code === 0);
});

test("debug mode rejects a barrier that part of the workgroup skipped", () => {
  const b = new KernelBuilder("badbarrier", { workgroup: 4, grid: 1 });
  const o = b.buffer("o", "f32", "w");
  b.if(b.lid.x.eq(0), () => b.return());
  b.barrier();
  b.store(o, b.lid.x, f32(1));
  assert.throws(() => exec(b.build(), [new Float32Array(4)], { sg: 4 }), (e: unknown) => e instanceof JsKernelFault && /barrier/.test(e.message));
});

test("bindings may be windows of one ArrayBuffer (an arena) at aligned offsets", () => {
  const b = new KernelBuilder("win", { workgroup: 1, grid: 4 });
  const x = b.buffer("x", "f32", "r"), y = b.buffer("y", "f16", "w");
  b.store(y, b.gid.x, b.load(x, b.gid.x).mul(3));
  const k = b.build();
  const jk = renderJs(k, { subgroupSize: 1, debug: true });
  const arena = new ArrayBuffer(64);
  new Float32Array(arena, 16, 4).set([1, 2, 3, 4]);
  jk.run(jk.bind([{ buffer: arena, offset: 16, bytes: 16 }, { buffer: arena, offset: 48, bytes: 8 }]));
  assert.deepEqual([...new Float16Array(arena, 48, 4)], [3, 6, 9, 12]);
  assert.throws(() => jk.bind([{ buffer: arena, offset: 2, bytes: 16 }, { buffer: arena, offset: 48, bytes: 8 }]));
});

test("f16 compute type: loads as f16 and rounds every f16 op to half precision", () => {
  const b = new KernelBuilder("half", { workgroup: 1, grid: 1 });
  const h = b.buffer("h", "f16", "r"), o = b.buffer("o", "f32", "w");
  const x = b.load(h, 0, "f16", "f16"), y = b.load(h, 1, "f16", "f16");
  b.store(o, 0, x.add(y).cast("f32")); // 2048 + 1 is not an f16: ties to even 2048
  b.store(o, 1, x.add(y).add(y).cast("f32")); // rounded twice: 2048
  b.store(o, 2, x.cast("f32").add(y.cast("f32")).add(y.cast("f32"))); // in f32: 2050
  b.store(o, 3, x.mul(x).cast("f32")); // overflow to inf
  const k = b.build();
  assert.equal(k.uses.f16, true);
  const out = new Float32Array(4);
  exec(k, [new Uint16Array([0x6800, 0x3c00]), out]);
  assert.deepEqual([...out], [2048, 2048, 2050, Infinity]);
});
