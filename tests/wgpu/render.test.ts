// The WGSL renderer's decisions, checked on the text (no device needed: these run under Bun too): declarations
// per access pattern, the control-flow scheme, capability refusals, exact constants, helpers only when used.
import { test } from "node:test";
import assert from "node:assert/strict";
import { KernelBuilder, KernelError } from "../../kernels/ir.ts";
import { renderWgsl, type WgslOptions } from "../../kernels/render/wgsl.ts";
import * as lib from "../../kernels/lib/mod.ts";
import { JS_CAPS } from "../../kernels/target.ts";

const ALL: WgslOptions = { f16: true, subgroups: true };
const NONE: WgslOptions = { f16: false, subgroups: false };

test("wgsl: narrow stores make the binding atomic; whole-word vector stores do not", () => {
  const k = new KernelBuilder("narrow", { workgroup: 64, grid: 1 });
  const a = k.buffer("bytes", "u8", "w"), b = k.buffer("halves", "f16", "w"), c = k.buffer("quads", "u8", "w");
  k.store(a, k.gid.x, 1);
  k.storev(b, k.gid.x.mul(2), [1, 2].map((v) => k.let(v, "f32")));
  k.storev(c, k.gid.x.mul(4), [1, 2, 3, 4].map((v) => k.let(v, "u32")));
  const s = renderWgsl(k.build(), NONE);
  assert.match(s.code, /var<storage, read_write> b0_bytes: array<atomic<u32>>/);
  // (the word arithmetic is kernels/decomp/narrow.ts's; the renderer maps its atomic statements)
  assert.match(s.code, /atomicAnd\(&b0_bytes\[v_\w+\], \(~\(255u << \(v_\w+ & 31u\)\)\)\);\n\s*atomicOr\(&b0_bytes\[v_\w+\]/);
  assert.match(s.code, /var<storage, read_write> b1_halves: array<u32>/);
  assert.match(s.code, /var<storage, read_write> b2_quads: array<u32>/);
  assert.deepEqual(s.bindings.map((b) => b.atomic), [true, false, false]);
});

test("wgsl: 16-byte vector access declares vec4 words; scalars pick a component", () => {
  const k = new KernelBuilder("vec", { workgroup: 64, grid: 1 });
  const a = k.buffer("a", "f32", "r"), o = k.buffer("o", "f32", "w");
  const v = k.loadv(a, k.gid.x.mul(4), 4);
  k.store(o, k.gid.x, v[0].add(k.load(a, k.gid.x)));
  const s = renderWgsl(k.build(), NONE);
  assert.match(s.code, /var<storage, read> b0_a: array<vec4<u32>>/);
  assert.match(s.code, /let wv = b0_a\[wi >> 2u\];/);
  assert.match(s.code, /fn w_b0_a\(i: u32\) -> u32 \{ return b0_a\[i >> 2u\]\[i & 3u\]; \}/);
  assert.equal(s.bindings[0].words, 4);
});

test("wgsl: barriers with early returns use the p_on flag; barrier-free kernels return", () => {
  const k = new KernelBuilder("flag", { workgroup: 64, grid: 1 });
  const o = k.buffer("o", "f32", "w");
  const s = k.shared("s", "f32", 64);
  k.if(k.lid.x.ge(32), () => k.return());
  k.sstore(s, k.lid.x, 1);
  k.barrier();
  k.store(o, k.lid.x, k.sload(s, 0));
  const code = renderWgsl(k.build(), NONE).code;
  assert.match(code, /var p_on = true;/);
  assert.match(code, /p_on = false;/);
  assert.doesNotMatch(code, /return;/);
  // the barrier stays outside any p_on guard
  assert.match(code, /\n {2}storageBarrier\(\); workgroupBarrier\(\);/);
  const p = new KernelBuilder("plain", { workgroup: 64, grid: 1 });
  const q = p.buffer("o", "f32", "w");
  p.if(p.gid.x.ge(10), () => p.return());
  p.store(q, p.gid.x, 1);
  assert.match(renderWgsl(p.build(), NONE).code, /return;/);
});

test("wgsl: checks append the fault word binding after the kernel's own", () => {
  const k = new KernelBuilder("checked", { workgroup: 64, grid: 1 });
  const a = k.buffer("a", "u32", "r"), o = k.buffer("o", "u32", "w");
  k.check(k.load(a, 0).lt(10), 77);
  k.store(o, k.gid.x, 1);
  const s = renderWgsl(k.build(), NONE);
  assert.equal(s.errorBinding, 2);
  assert.deepEqual(s.bindings[2], { binding: 2, name: "err", access: "read_write", atomic: true, words: 1 });
  assert.match(s.code, /atomicOr\(&p_err\[0\], 77u\); return;/);
});

test("wgsl: refuses subgroups and f16 compute the target lacks; enables what it has", () => {
  const caps = { ...JS_CAPS, subgroups: true, subgroupSize: 32 };
  const mm = lib.matmul(caps, { n: 64, k: 64, w: "f16" });
  assert.throws(() => renderWgsl(mm, NONE), KernelError);
  assert.doesNotThrow(() => renderWgsl(mm, { f16: false, subgroups: true }));
  assert.match(renderWgsl(mm, { ...ALL, enableSubgroups: true }).code, /^enable subgroups;/m);
  const k = new KernelBuilder("half", { workgroup: 1, grid: 1 });
  const h = k.buffer("h", "f16", "rw");
  k.store(h, 0, k.load(h, 0, "f16", "f16").mul(k.load(h, 1, "f16", "f16")));
  assert.throws(() => renderWgsl(k.build(), NONE), /shader-f16/);
  assert.match(renderWgsl(k.build(), ALL).code, /^enable f16;/);
  // the shared-memory variants the library picks without subgroups render without them
  assert.doesNotThrow(() => renderWgsl(lib.matmul({ ...caps, subgroups: false, subgroupSize: 0 }, { n: 64, k: 64, w: "f32" }), NONE));
});

test("wgsl: constants are exact; non-finite ones avoid const-expressions", () => {
  const k = new KernelBuilder("consts", { workgroup: 1, grid: 1 });
  const o = k.buffer("o", "f32", "w"), u = k.buffer("u", "i32", "w");
  k.store(o, 0, k.let(0.1, "f32").add(-Infinity).add(1e-40).add(3.4028234663852886e38).add(-0));
  k.store(u, 0, k.let(-2147483648, "i32"));
  const code = renderWgsl(k.build(), NONE).code;
  assert.match(code, /0\.1f/);
  assert.match(code, /p_fb\(0xff800000u\)/);
  assert.match(code, /p_fb\(0x80000000u\)/);
  assert.match(code, /\(-2147483647i - 1i\)/);
  // the shortest decimal that reads back as the same f32
  assert.match(code, /3\.4028235e\+38f/);
  assert.match(code, /1e-40f/);
  assert.equal(Math.fround(3.4028235e+38), Math.fround(3.4028234663852886e38));
});

test("wgsl: helpers appear only when used; readWrite declares every binding, or the listed ones, read_write", () => {
  const k = new KernelBuilder("plainadd", { workgroup: 64, grid: 1 });
  const a = k.buffer("a", "f32", "r"), o = k.buffer("o", "f32", "w");
  k.store(o, k.gid.x, k.load(a, k.gid.x).add(1));
  const s = renderWgsl(k.build(), NONE);
  assert.doesNotMatch(s.code, /fn p_/);
  assert.match(s.code, /var<storage, read> b0_a/);
  assert.match(renderWgsl(k.build(), { ...NONE, readWrite: true }).code, /var<storage, read_write> b0_a/);
  // A list names the bindings to declare read_write (the reads of an arena the dispatch also writes); the rest stay read-only.
  const k3 = new KernelBuilder("add3", { workgroup: 64, grid: 1 });
  const x3 = k3.buffer("x", "f32", "r"), w3 = k3.buffer("w", "f32", "r"), y3 = k3.buffer("y", "f32", "w");
  k3.store(y3, k3.gid.x, k3.load(x3, k3.gid.x).add(k3.load(w3, k3.gid.x)));
  const only = renderWgsl(k3.build(), { ...NONE, readWrite: [0] });
  assert.match(only.code, /var<storage, read_write> b0_x/);
  assert.match(only.code, /var<storage, read> b1_w/);
  assert.deepEqual(only.bindings.map((b) => b.access), ["read_write", "read", "read_write"]);
  const e = new KernelBuilder("exp", { workgroup: 64, grid: 1 });
  e.store(e.buffer("o", "f32", "w"), e.gid.x, e.gid.x.cast("f32").exp());
  // exp arrives as IR arithmetic (kernels/decomp/math_f32.ts), not WGSL's loosely bounded builtin
  const ec = renderWgsl(e.build(), NONE).code;
  assert.doesNotMatch(ec, /\bexp\(/);
  assert.match(ec, /floor\(/);
});

test("wgsl: every kernel-library kernel renders, with and without subgroups", () => {
  const variants = [{ ...JS_CAPS, subgroups: true, subgroupSize: 32 }, { ...JS_CAPS, subgroups: false, subgroupSize: 0, maxWorkgroupSize: 256 }];
  for (const caps of variants) {
    const ks = [
      lib.matmul(caps, { n: 33, k: 64, w: "q8_0", bias: true }), lib.matmul(caps, { n: 9, k: 64, w: "q4_0", batch: 3 }),
      lib.rmsnorm(caps, { rows: 2, n: 260, eps: 1e-5, weight: "bf16" }), lib.softmax(caps, { rows: 3, n: 100 }),
      lib.argmax(caps, { rows: 2, n: 70, out: "i32" }), lib.rope(caps, { rows: 1, heads: 4, hd: 16, style: "half", theta: 10000, pt: "u32" } as never),
    ];
    for (const k of ks) assert.match(renderWgsl(k, { f16: true, subgroups: caps.subgroups }).code, /@compute @workgroup_size/);
  }
});

test("wgsl: i32 / and % work on u32 magnitudes (Naga's i32 % is OpSRem, unsigned on NVIDIA), constants too", () => {
  const k = new KernelBuilder("idiv", { workgroup: 64, grid: 1 });
  const a = k.buffer("a", "i32", "r"), b = k.buffer("b", "i32", "r"), o = k.buffer("o", "i32", "w"), u = k.buffer("u", "u32", "w");
  const x = k.let(k.load(a, k.gid.x)), y = k.let(k.load(b, k.gid.x));
  [x.div(y), x.mod(y), x.div(7), x.mod(-5)].forEach((v, j) => k.store(o, k.gid.x.add(j * 64), v));
  const ux = x.bitcast("u32");
  [ux.div(y.bitcast("u32")), ux.mod(3)].forEach((v, j) => k.store(u, k.gid.x.add(j * 64), v));
  const code = renderWgsl(k.build(), NONE).code;
  assert.match(code, /p_divi\(v_\w+, v_\w+\)/);
  assert.match(code, /p_modi\(v_\w+, v_\w+\)/);
  assert.match(code, /p_divi\(v_\w+, 7i\)/);
  assert.match(code, /p_modi\(v_\w+, \(-5i\)\)/);
  assert.match(code, /fn p_absi\(a: i32\) -> u32/);
  // The only / and % left have u32 operands: the helpers' magnitudes, p_divu's, and the kernel's own u32 op.
  const ops = [...code.matchAll(/(\S+) ([/%]) (\S+)/g)].map((m) => `${m[1]} ${m[2]} ${m[3]}`).sort();
  assert.deepEqual(ops, ["(bitcast<u32>(v_v0) % 3u);", "p_absi(a) % select(d,", "p_absi(a) / select(d,", "select(a / b,"]);
});

test("wgsl: float compares (decompose) and max/min (helper) test NaN on the bits (a driver may assume no NaN, select(b, a, a < b) became a min)", () => {
  const k = new KernelBuilder("nan_cmp", { workgroup: 64, grid: 1 });
  const a = k.buffer("a", "f32", "r"), o = k.buffer("o", "f32", "w");
  const x = k.let(k.load(a, k.gid.x)), y = k.let(k.load(a, k.gid.x.add(64)));
  k.store(o, k.gid.x, x.lt(y).select(x, y));
  k.store(o, k.gid.x.add(64), x.eq(x).cast("f32"));
  k.store(o, k.gid.x.add(128), x.ne(y).cast("f32"));
  k.store(o, k.gid.x.add(192), x.cast("f16").ge(y.cast("f16")).cast("f32"));
  k.store(o, k.gid.x.add(256), x.cast("bool").cast("f32")); // NaN is true
  k.store(o, k.gid.x.add(320), x.max(y));
  const code = renderWgsl(k.build(), ALL).code;
  const unordered = (p: string, q: string) => `(p_isnan(${p}) || p_isnan(${q}))`;
  assert.ok(code.includes(`((v_v0 < v_v1) && (!${unordered("v_v0", "v_v1")}))`), code);
  assert.ok(code.includes(`((v_v0 == v_v0) && (!${unordered("v_v0", "v_v0")}))`));
  assert.ok(code.includes(`((v_v0 != v_v1) || ${unordered("v_v0", "v_v1")})`));
  assert.ok(code.includes(`(!${unordered("f32(p_tof16(v_v0))", "f32(p_tof16(v_v1))")})`));
  assert.ok(code.includes("((v_v0 != 0.0f) || p_isnan(v_v0))"));
  assert.ok(code.includes("p_maxf32(v_v0, v_v1)"));
  assert.match(code, /fn p_maxf32\(a: f32, b: f32\) -> f32 \{ return select\(max\(a, b\), a \+ b, p_isnan\(a\) \|\| p_isnan\(b\)\); \}/);
  assert.match(code, /fn p_isnan\(x: f32\) -> bool \{ return \(bitcast<u32>\(x\) & 0x7fffffffu\) > 0x7f800000u; \}/);
  const bare = [...code.matchAll(/\((v_v\d|p_tof16\(v_v\d\)) ([<>=!]=?) /g)].length;
  assert.equal(bare, 5, "each float compare once, each wrapped");
});

test("wgsl: casts to f16 round in integer ops (NVIDIA dropped a round trip f32(f16(x)))", () => {
  const k = new KernelBuilder("f16_cast", { workgroup: 64, grid: 1 });
  const a = k.buffer("a", "f32", "r"), o = k.buffer("o", "f32", "w"), n = k.buffer("n", "i32", "r");
  const x = k.let(k.load(a, k.gid.x));
  k.store(o, k.gid.x, x.cast("f16").cast("f32"));
  k.store(o, k.gid.x.add(64), k.load(n, k.gid.x).cast("f16").cast("f32"));
  k.store(o, k.gid.x.add(128), x.cast("f16").exp().cast("f32"));
  const code = renderWgsl(k.build(), ALL).code;
  assert.match(code, /f32\(p_tof16\(v_\w+\)\)/);
  assert.match(code, /p_tof16\(f32\(/);
  assert.doesNotMatch(code, /\bexp\(/, "exp expanded (through f32) by kernels/decomp");
  assert.equal(code.match(/p_tof16\(/g)?.length, 5, "x cast twice, n cast once, exp's result cast back, and the helper itself");
  assert.match(code, /fn p_tof16\(x: f32\) -> f16 \{ return f16\(unpack2x16float\(p_f2h\(x\)\)\.x\); \}/);
  assert.doesNotMatch(code, /(?<!\w)f16\((v_|f32\(v_)/, "no WGSL f16() conversion of a computed value");
});

test("wgsl: dot4 is dot4I8Packed under `requires packed_4x8_integer_dot_product` with opts.dot4, byte products without", () => {
  const k = new KernelBuilder("dot4", { workgroup: 64, grid: 1 });
  const a = k.buffer("a", "u32", "r"), o = k.buffer("o", "i32", "w");
  const x = k.let(k.load(a, k.gid.x), "u32");
  k.store(o, k.gid.x, x.dot4(k.let(k.load(a, k.gid.x.add(64)), "u32")));
  const native = renderWgsl(k.build(), { ...NONE, dot4: true }).code, bare = renderWgsl(k.build(), NONE).code;
  assert.match(native, /^requires packed_4x8_integer_dot_product;$/m);
  assert.match(native, /dot4I8Packed\(v_\w+, v_\w+\)/);
  assert.doesNotMatch(bare, /dot4I8Packed|requires/);
  assert.match(bare, />> 24u/); // the sign-extended bytes of decomp/arith.ts
});
