// The decomposition every renderer runs first (kernels/decomp/mod.ts) keeps a kernel's meaning: each IR
// feature kernel (tests/devices/feature_kernels.ts, bool subgroup reductions included) and each kernel-library case
// (tests/kernels/cases.ts) gives bit-identical bindings on the JS device as written and decomposed, with
// every rule a language may ask for (NaN-safe compares and max/min, integer div/mod, 8/16-bit storage through
// u32 words and atomics: the JS device computes
// the plain instructions with the IR's meaning, so the rewritten kernel must give the same bits); the default
// pass is idempotent, and a kernel it has nothing to do for comes back as the same object.
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsDevice } from "../../backends/js/device.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { c, KernelBuilder } from "../../kernels/ir.ts";
import { decompose, type Needs } from "../../kernels/decomp/mod.ts";
import { dot4Case, featureCases } from "../devices/feature_kernels.ts";
import { runFeature } from "../devices/run.ts";
import { cases } from "./cases.ts";
import { Rng } from "./data.ts";
import { runCase } from "./harness.ts";

const ALL: Needs = { nanCompare: true, nanMinMax: true, intDivMod: true, dot4: true, narrow: { bits8: true, bits16: true } };
/** Bytes equal, except that in an f32 output any NaN equals any NaN (the IR leaves a made NaN's sign and payload open). */
function sameUpToNaN(a: Uint8Array[], b: Uint8Array[], f32: Set<number>): boolean {
  return a.length === b.length && a.every((x, i) => {
    if (!f32.has(i)) return same([x], [b[i]]);
    const p = new Float32Array(x.slice().buffer), q = new Float32Array(b[i].slice().buffer);
    return p.length === q.length && p.every((v, j) => Object.is(v, q[j]) || (Number.isNaN(v) && Number.isNaN(q[j])));
  });
}
const same = (a: Uint8Array[], b: Uint8Array[]) => a.length === b.length && a.every((x, i) => x.length === b[i].length && x.every((v, j) => v === b[i][j]));

test("decomposed IR feature kernels give the same bytes on the JS device", { timeout: 120_000 }, async () => {
  const js = new JsDevice({ caps: { subgroupSize: 32, f16: true } });
  const bad: string[] = [];
  let changed = 0;
  for (const fc of featureCases()) {
    const d = decompose(fc.kernel), all = decompose(fc.kernel, ALL);
    if (d !== fc.kernel) assert.deepEqual(decompose(d), d, `${fc.name}: idempotent`);
    if (all === fc.kernel) continue;
    changed++;
    const want = await runFeature(js, fc);
    if (!same(want, await runFeature(js, { ...fc, kernel: d }))) bad.push(fc.name);
    const f32 = new Set(fc.checks.filter((c) => c.as === "f32").map((c) => c.binding));
    if (!sameUpToNaN(want, await runFeature(js, { ...fc, kernel: all }), f32)) bad.push(`${fc.name} (all rules)`);
  }
  assert.ok(changed > 0, "some feature kernel decomposes");
  assert.deepEqual(bad, []);
});

test("decomposed kernel-library cases give the same bytes on the JS device", { timeout: 300_000 }, async () => {
  const js = new JsDevice({ caps: { subgroupSize: 32, f16: true } });
  const bad: string[] = [];
  for (const kc of cases.filter((x) => x.fault === undefined)) {
    const plain = await runCase(js, kc);
    const dec = await runCase(js, { ...kc, make: (caps) => decompose(kc.make(caps)) });
    if (!plain.outputs || !dec.outputs || !same(plain.outputs, dec.outputs)) bad.push(kc.name);
    const all = await runCase(js, { ...kc, make: (caps) => decompose(kc.make(caps), ALL) });
    if (!plain.outputs || !all.outputs || !same(plain.outputs, all.outputs)) bad.push(`${kc.name} (all rules)`);
  }
  assert.deepEqual(bad, []);
});

test("dot4 on the JS device (native and decomposed) equals the signed-byte dot product computed here", { timeout: 60_000 }, async () => {
  const js = new JsDevice({ caps: { subgroupSize: 32, f16: true } });
  const fc = dot4Case();
  const [a, b] = fc.inputs.map((x) => new Uint32Array(x.slice().buffer));
  const sb = (w: number, k: number) => ((w >>> (8 * k)) & 0xff) - (((w >>> (8 * k)) & 0x80) << 1);
  const dot = (x: number, y: number) => [0, 1, 2, 3].reduce((s, k) => s + sb(x, k) * sb(y, k), 0);
  const n = a.length, want = new Int32Array(3 * n);
  for (let i = 0; i < n; i++) {
    want[i] = dot(a[i], b[i]);
    want[n + i] = dot(a[i], 0x01010101) + dot(b[i], a[i]) - dot(a[i], a[i]);
    want[2 * n + i] = dot(a[i] & 0x0f0f0f0f, b[i]);
  }
  for (const k of [fc.kernel, decompose(fc.kernel, { dot4: true })]) {
    const out = await runFeature(js, { ...fc, kernel: k });
    assert.deepEqual(new Int32Array(out[2].slice().buffer), want);
  }
  assert.ok(JSON.stringify(decompose(fc.kernel, { dot4: true }).body).indexOf('"dot4"') < 0, "decomposed: no dot4 left");
});

test("a kernel with nothing to decompose is returned as it is", () => {
  const b = new KernelBuilder("plain", { workgroup: 64, grid: 1 });
  const out = b.buffer("out", "u32", "w");
  b.store(out, b.gid.x, b.gid.x.mul(c(3, "u32")));
  const k: Kernel = b.build();
  assert.equal(decompose(k), k);
});

test("integer div/mod and float compares/max/min decomposed give the IR's results on every edge operand", async () => {
  const js = new JsDevice({ caps: { subgroupSize: 1 } });
  const edges = [0, 1, -1, 2, -2, 7, -7, 2147483647, -2147483648, 65536, -65537, 1000000007];
  const n = edges.length * edges.length;
  const b = new KernelBuilder("divmod_edges", { workgroup: 16, grid: Math.ceil(n / 16) });
  const X = b.buffer("x", "i32", "r"), Y = b.buffer("y", "i32", "r"), O = b.buffer("o", "i32", "w"), F = b.buffer("f", "f32", "w");
  const i = b.gid.x;
  b.if(i.lt(n), () => {
    const x = b.let(b.load(X, i)), y = b.let(b.load(Y, i));
    const ux = x.bitcast("u32"), uy = y.bitcast("u32");
    const outs = [x.div(y), x.mod(y), x.div(-3), x.mod(-3), x.div(-1), x.mod(-1), x.div(0), x.mod(0), x.div(5), x.mod(5),
      ux.div(uy).bitcast("i32"), ux.mod(uy).bitcast("i32"), ux.div(0).bitcast("i32")];
    outs.forEach((v, j) => b.store(O, i.mul(outs.length).add(j), v));
    // floats from the same bits: NaNs, infinities, zeros of both signs, denormals among them
    const fx = x.bitcast("f32"), fy = y.bitcast("f32");
    const fl = [fx.lt(fy).cast("f32"), fx.ne(fy).cast("f32"), fx.eq(fx).cast("f32"), fx.max(fy), fx.min(fy), fx.cast("bool").cast("f32")];
    fl.forEach((v, j) => b.store(F, i.mul(fl.length).add(j), v));
  });
  const k = b.build();
  const xs = new Int32Array(n), ys = new Int32Array(n);
  edges.forEach((x, p) => edges.forEach((y, q) => [xs[p * edges.length + q], ys[p * edges.length + q]] = [x, y]));
  xs[0] = 0x7fc00000; ys[1] = 0xff800000 | 0; xs[2] = 0x80000000 | 0; // a NaN, -inf and -0 among the floats
  const bytes = (a: Int32Array) => new Uint8Array(a.buffer.slice(0));
  const fc = { name: "divmod_edges", kernel: k, inputs: [bytes(xs), bytes(ys), new Uint8Array(n * 13 * 4), new Uint8Array(n * 6 * 4)], checks: [] };
  const want = await runFeature(js, fc), got = await runFeature(js, { ...fc, kernel: decompose(k, ALL) });
  assert.ok(sameUpToNaN(want, got, new Set([3])));
  assert.notDeepEqual(decompose(k, ALL), k);
});

test("pack2 in integers (bf16 and f16 rounded to nearest even, NaN kept quiet) gives the JS device's bits", async () => {
  const js = new JsDevice({ caps: { subgroupSize: 1 } });
  const n = 2048;
  const b = new KernelBuilder("pack2_edges", { workgroup: 64, grid: n / 64 });
  const X = b.buffer("x", "f32", "r"), Y = b.buffer("y", "u32", "w");
  const i = b.gid.x, lo = b.let(b.load(X, i.mul(2))), hi = b.let(b.load(X, i.mul(2).add(1)));
  b.store(Y, i, b.pack2("bf16", lo, hi));
  b.store(Y, i.add(n), b.pack2("f16", lo, hi));
  const k = b.build();
  // NaNs (payloads in either half, both signs), bf16 ties (even and odd kept bit), the largest finite values
  // (round up to infinity), f16 ties, overflow and subnormal halves, zeros; then random bits, every fourth a tie
  const edges = [0x7f800001, 0x7fffffff, 0xffc00001, 0x7fc00000, 0x3f808000, 0x3f818000, 0x3f808001, 0x7f7fffff,
    0xff7fffff, 0x00008000, 0x00018000, 0x80000000, 0x7f800000, 0xff800000, 0x3f80ffff, 0x477ff000, 0x477fefff,
    0x33000000, 0x33000001, 0xb3c00000, 0x3f801000, 0x3f803000];
  const xs = new Uint32Array(2 * n), rng = new Rng("pack2 edges");
  for (let j = 0; j < 2 * n; j++) {
    const r = rng.u32();
    xs[j] = j < edges.length ? edges[j] : j % 4 === 0 ? ((r & 0xffff0000) | 0x8000) >>> 0 : r;
  }
  const fc = { name: "pack2_edges", kernel: k, inputs: [new Uint8Array(xs.buffer), new Uint8Array(2 * n * 4)], checks: [] };
  const dec = decompose(k, { pack2: "all" });
  assert.notDeepEqual(dec, k);
  assert.deepEqual(await runFeature(js, { ...fc, kernel: dec }), await runFeature(js, fc));
});
