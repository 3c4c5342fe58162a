import { test } from "node:test";
import assert from "node:assert/strict";
import { dequantize, f16ToF32, f32ToF16, type Storage } from "../../graph/dtype.ts";
import { expandComposites } from "../../graph/composites.ts";
import { evaluate } from "../../graph/eval.ts";
import { COMPOSITE } from "../../graph/ops.ts";
import { type Tensor, Tracer } from "../../graph/tracer.ts";
import { assertClose, assertMeaningful, boundStats, checkClose, dotTolerance, MAX_BOUND_FRACTION } from "../../graph/tolerance.ts";
import { rng } from "./random_graph.ts";

const fr = Math.fround;

// Builds a one-output graph and evaluates it.
function run(build: (g: Tracer) => Tensor, slots: Record<string, ArrayLike<number>> = {}, consts = {}): Storage {
  const g = new Tracer();
  g.output("y", build(g));
  return evaluate(g.build(), { slots, consts }).output.y;
}

test("integer ops wrap, divide by truncation, and define x/0 = x%0 = 0", () => {
  const y = (op: "add" | "mul" | "div" | "mod" | "sub", a: number[], b: number[]) =>
    Array.from(run((g) => g.binary(op, g.tensor(a, "i32", [a.length]), g.tensor(b, "i32", [b.length]))));
  assert.deepEqual(y("add", [2147483647, -5], [1, 3]), [-2147483648, -2]);
  assert.deepEqual(y("mul", [65536, -3], [65536, 7]), [0, -21]);
  assert.deepEqual(y("div", [7, -7, 5, -2147483648], [2, 2, 0, -1]), [3, -3, 0, -2147483648]);
  assert.deepEqual(y("mod", [7, -7, 5], [3, 3, 0]), [1, -1, 0]);
  assert.deepEqual(Array.from(run((g) => g.add(g.tensor([250, 3], "u8", [2]), 10))), [4, 13]);
});

test("casts: float->int truncates and saturates (NaN -> 0), ->f16 rounds to nearest even", () => {
  const xs = [1.9, -1.9, 3e9, -3e9, NaN, 300, -1];
  assert.deepEqual(Array.from(run((g) => g.cast(g.tensor(xs, "f32", [7]), "i32"))), [1, -1, 2147483647, -2147483648, 0, 300, -1]);
  assert.deepEqual(Array.from(run((g) => g.cast(g.tensor(xs, "f32", [7]), "u8"))), [1, 0, 255, 0, 0, 255, 0]);
  assert.deepEqual(Array.from(run((g) => g.cast(g.tensor([0, -0, 2, NaN], "f32", [4]), "bool"))), [0, 0, 1, 1]);
  const h = run((g) => g.cast(g.tensor([1 + 2 ** -11, 65520, 1e-8], "f32", [3]), "f16"));
  assert.deepEqual(Array.from(h), [0x3c00, 0x7c00, f32ToF16(1e-8)]);
});

test("f16 elementwise: computed on f32 values, rounded once to f16", () => {
  const a = [1, 2049, 0.1], b = [2 ** -11, 1, 0.2];
  const y = run((g) => g.add(g.tensor(a, "f16", [3]), g.tensor(b, "f16", [3])));
  const h = (x: number) => f16ToF32(f32ToF16(x));
  assert.deepEqual(Array.from(y), a.map((x, i) => f32ToF16(fr(h(x) + h(b[i])))));
  assert.equal(y[0], 0x3c00); // 1 + 2^-11 ties to even 1 in f16
});

test("reduce-sum accumulates in f32 in index order; argmax takes the first maximum", () => {
  const xs = [1e8, 1, -1e8, 1, 3];
  let acc = 0;
  for (const x of xs) acc = fr(acc + x);
  assert.equal(run((g) => g.sum(g.tensor(xs, "f32", [5])))[0], acc);
  assert.equal(acc, 4); // the 1 added to 1e8 is lost: index order, not exact
  assert.equal(run((g) => g.argmax(g.tensor([1, 5, 5, 2], "f32", [4])))[0], 1);
  assert.equal(run((g) => g.argmax(g.tensor([NaN, 5, 5], "f32", [3])))[0], 0);
  assert.deepEqual(Array.from(run((g) => g.reduceMax(g.tensor([1, 2, 9, 4, 0, 6], "f32", [2, 3]), 0))), [4, 2, 9]);
});

test("matmul is x·wᵀ with sequential f32 dots; a block-type weight gives the dot of its dequantized values", () => {
  const r = rng(7);
  const K = 64, N = 3;
  const x = Array.from({ length: 2 * K }, () => r() - 0.5);
  const blocks = new Uint8Array(N * 2 * 34);
  for (let b = 0; b < N * 2; b++) {
    const h = f32ToF16(0.01 * (b + 1));
    blocks[b * 34] = h & 0xff;
    blocks[b * 34 + 1] = h >> 8;
    for (let j = 0; j < 32; j++) blocks[b * 34 + 2 + j] = Math.floor(r() * 256);
  }
  const wf = dequantize("q8_0", blocks, N * K);
  const yq = run((g) => g.matmul(g.tensor(x, "f32", [2, K]), g.const({ role: "w" }, "q8_0", [N, K])), {}, { w: blocks });
  const yf = run((g) => g.matmul(g.tensor(x, "f32", [2, K]), g.const({ role: "w" }, "f32", [N, K])), {}, { w: wf });
  assert.deepEqual(Array.from(yq), Array.from(yf));
  for (let m = 0; m < 2; m++) {
    for (let n = 0; n < N; n++) {
      let acc = 0;
      for (let k = 0; k < K; k++) acc = fr(acc + fr(fr(x[m * K + k]) * wf[n * K + k]));
      assert.equal(yf[m * N + n], acc);
    }
  }
  // gather from a block table dequantizes its rows.
  const rows = run((g) => g.gather(g.const({ role: "w" }, "q8_0", [N, K]), g.tensor([2, 0], "i32", [2])), {}, { w: blocks });
  assert.deepEqual(Array.from(rows), [...wf.subarray(2 * K, 3 * K), ...wf.subarray(0, K)]);
});

test("dynamic_update_slice writes at a slot offset; scatter_update writes rows, skipping negative indices", () => {
  const t = Array.from({ length: 8 }, (_, i) => i);
  const y = run((g) => g.updateSlice(g.tensor(t, "f32", [4, 2]), g.literal(-1, "f32", [2, 2]), g.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] })), { pos: [1] });
  assert.deepEqual(Array.from(y), [0, 1, -1, -1, -1, -1, 6, 7]);
  const s = run((g) => g.scatter(g.tensor(t, "f32", [4, 2]), g.tensor([10, 11, 20, 21, 30, 31], "f32", [3, 2]), g.tensor([3, -1, 3], "i32", [3])));
  assert.deepEqual(Array.from(s), [0, 1, 2, 3, 4, 5, 30, 31]); // -1 skipped; index 3 written twice, last wins
});

// llama2.c's RoPE loop, in f32: pairs (2i, 2i+1) in each head (rotating the pair at `off`, `off + half` for
// the half-split style).
function ropeRef(x: number[], H: number, D: number, pos: number, theta: number, half: boolean): number[] {
  const y = x.slice();
  for (let h = 0; h < H; h++) {
    for (let i = 0; i < D / 2; i++) {
      const freq = fr(1 / fr(Math.pow(theta, fr(fr(2 * i) / D))));
      const val = fr(pos * freq), c = fr(Math.cos(val)), s = fr(Math.sin(val));
      const a = half ? h * D + i : h * D + 2 * i, b = half ? a + D / 2 : a + 1;
      const v0 = fr(x[a]), v1 = fr(x[b]);
      y[a] = fr(fr(v0 * c) - fr(v1 * s));
      y[b] = fr(fr(v0 * s) + fr(v1 * c));
    }
  }
  return y;
}

test("rope matches llama2.c's loop (adjacent pairs) and the half-split convention, bit for bit", () => {
  const r = rng(3);
  const H = 4, D = 8, R = 3, pos0 = 37;
  const x = Array.from({ length: R * H * D }, () => r() * 2 - 1);
  for (const style of ["adjacent", "half"] as const) {
    const y = run((g) => g.rope(g.tensor(x, "f32", [R, H, D]), g.tensor([pos0, pos0 + 1, pos0 + 2], "i32", [R]), { theta: 10000, style }));
    for (let row = 0; row < R; row++) {
      const want = ropeRef(x.slice(row * H * D, (row + 1) * H * D), H, D, pos0 + row, 10000, style === "half");
      assert.deepEqual(Array.from(y.subarray(row * H * D, (row + 1) * H * D)), want, `${style} row ${row}`);
    }
  }
});

test("attention: grouped heads, mask from pos, softmax in f32, sequential dots (vs a direct loop)", () => {
  const r = rng(11);
  const R = 2, H = 4, KVH = 2, D = 4, C = 6, pos = 2, scale = 0.5;
  const q = Array.from({ length: R * H * D }, () => r() - 0.5);
  const k = Array.from({ length: C * KVH * D }, () => r() - 0.5);
  const v = Array.from({ length: C * KVH * D }, () => r() - 0.5);
  const y = run((g) =>
    g.attention(g.tensor(q, "f32", [R, H, D]), g.tensor(k, "f32", [C, KVH, D]), g.tensor(v, "f32", [C, KVH, D]),
      g.causalMask(g.tensor([pos], "i32", [1]), R, C), scale)
  );
  for (let row = 0; row < R; row++) {
    for (let h = 0; h < H; h++) {
      const kh = Math.floor(h / (H / KVH));
      const s: number[] = [];
      for (let t = 0; t < C; t++) {
        let acc = 0;
        for (let d = 0; d < D; d++) acc = fr(acc + fr(fr(q[(row * H + h) * D + d]) * fr(k[(t * KVH + kh) * D + d])));
        s.push(t <= pos + row ? fr(acc * scale) : -Infinity);
      }
      const m = Math.max(...s);
      const e = s.map((x) => fr(Math.exp(fr(x - m))));
      let z = 0;
      for (const x of e) z = fr(z + x);
      const p = e.map((x) => fr(x / z));
      for (let d = 0; d < D; d++) {
        let acc = 0;
        for (let t = 0; t < C; t++) acc = fr(acc + fr(p[t] * fr(v[(t * KVH + kh) * D + d])));
        assert.equal(y[(row * H + h) * D + d], acc, `row ${row} head ${h} dim ${d}`);
      }
    }
  }
});

test("rmsnorm and silu_mul follow llama2.c's order of operations", () => {
  const r = rng(5);
  const D = 16;
  const x = Array.from({ length: D }, () => r() * 4 - 2), w = Array.from({ length: D }, () => r());
  const y = run((g) => g.rmsnorm(g.tensor(x, "f32", [1, D]), g.tensor(w, "f32", [D]), 1e-5));
  let ss = 0;
  for (const v of x) ss = fr(ss + fr(fr(v) * fr(v)));
  const inv = fr(1 / Math.sqrt(fr(fr(ss / D) + fr(1e-5))));
  assert.deepEqual(Array.from(y), x.map((v, i) => fr(fr(w[i]) * fr(inv * fr(v)))));
  const s = run((g) => g.siluMul(g.tensor(x, "f32", [D]), g.tensor(w, "f32", [D])));
  assert.deepEqual(Array.from(s), x.map((v, i) => fr(fr(fr(v) * fr(1 / fr(fr(Math.exp(-fr(v))) + 1))) * fr(w[i]))));
});

test("env returns every node's value by id", () => {
  const g = new Tracer();
  const a = g.tensor([1, 2], "f32", [2]);
  const b = g.exp(a);
  g.output("y", g.sum(b));
  const e = evaluate(g.build(), {}, { env: true });
  assert.deepEqual(Array.from(e.env!.get(b.id)!), [fr(Math.exp(1)), fr(Math.exp(2))]);
});

test("tier-2 check: NaN/Inf where the oracle is finite fails at any tolerance; ints compare exactly", () => {
  const o = Float32Array.from([1, 2, Infinity, NaN]);
  assert.equal(checkClose("f32", Float32Array.from([1.001, 2, Infinity, NaN]), o, 0.01), undefined);
  assert.equal(checkClose("f32", Float32Array.from([NaN, 2, Infinity, NaN]), o, 1e30)?.reason, "non-finite");
  assert.equal(checkClose("f32", Float32Array.from([1, 2, -Infinity, NaN]), o, 1e30)?.reason, "non-finite");
  assert.equal(checkClose("f32", Float32Array.from([1, 2, Infinity, 0]), o, 1e30)?.reason, "non-finite");
  assert.equal(checkClose("f32", Float32Array.from([1.1, 2, Infinity, NaN]), o, 0.01)?.index, 0);
  assert.equal(checkClose("i32", Int32Array.from([1, 3]), Int32Array.from([1, 2]), 10)?.reason, "exact");
  assert.throws(() => assertClose("logits", "f32", Float32Array.from([5]), Float32Array.from([1]), 1), /logits: element 0/);
});

test("tier-2 check: a bound that is not finite fails; one past MAX_BOUND_FRACTION of the value is refused", () => {
  const o = Float32Array.from([1, 2, Infinity]);
  assert.equal(checkClose("f32", Float32Array.from([1e9, 2, Infinity]), o, [Infinity, 0, 0])?.reason, "unbounded");
  assert.equal(checkClose("f32", Float32Array.from([1, 2, Infinity]), o, [NaN, 0, 0])?.reason, "unbounded");
  assert.equal(checkClose("f32", Float32Array.from([1, 2, Infinity]), o, [0, 0, Infinity]), undefined, "a non-finite oracle value needs no bound");
  const st = boundStats("f32", Float32Array.from([4, -4, 0, Infinity]), [0.4, Infinity, 0.1, 0]);
  assert.deepEqual(st, { elements: 3, infinite: 1, maxRatio: 0.1, at: 0 }, "ratios against max(|value|, rms of the tensor)");
  assert.throws(() => assertMeaningful("y", "f32", Float32Array.from([4, -4]), [0.1, Infinity]), /1 of 2 bounds are not finite/);
  const big = 4 * MAX_BOUND_FRACTION * 1.01;
  assert.throws(() => assertMeaningful("y", "f32", Float32Array.from([4, -4]), [0.1, big]), /of the value's scale/);
  assert.equal(assertMeaningful("y", "f32", Float32Array.from([4, -4]), [0.1, 0.2]).maxRatio, 0.05);
});

test("tier-2 bounds hold for one matmul and one softmax under every emulated device order", () => {
  const r = rng(9);
  const K = 300, N = 40;
  const x = Array.from({ length: 4 * K }, () => (r() - 0.5) * 10);
  const w = Float32Array.from({ length: N * K }, () => r() - 0.5);
  const g = new Tracer();
  const mm = g.matmul(g.tensor(x, "f32", [4, K]), g.const({ role: "w" }, "f32", [N, K]));
  g.output("mm", mm);
  g.output("p", g.softmax(mm));
  const graph = g.build();
  for (const mode of ["worst", "expected"] as const) {
    const oracle = evaluate(graph, { consts: { w } }, { bounds: mode });
    for (const order of ["reverse", "pairwise", "fma"] as const) {
      const dev = evaluate(graph, { consts: { w } }, { order });
      for (const k of ["mm", "p"]) assertClose(`${mode}/${order}/${k}`, "f32", dev.output[k], oracle.output[k], oracle.bounds!.output[k]);
    }
  }
  // The local rule by hand for element 0.
  let abs = 0;
  for (let k = 0; k < K; k++) abs += Math.abs(fr(x[k]) * w[k]);
  const worst = evaluate(graph, { consts: { w } }, { bounds: "worst" }).bounds!.output.mm[0];
  assert.ok(Math.abs(worst - dotTolerance(K, abs)) <= 1e-6 * worst);
});

test("expandComposites lowers composites to primitives, except those the caller keeps", () => {
  const g = new Tracer();
  const x = g.slot("x", { kind: "Input", dtype: "f32", shape: [2, 8] });
  g.output("y", g.silu(g.rmsnorm(x, g.literal(1, "f32", [8]), 1e-5)));
  const graph = g.build();
  const all = expandComposites(graph).graph;
  assert.ok(all.nodes.every((n) => !COMPOSITE.has(n.op)));
  const some = expandComposites(graph, (n) => n.op === "rmsnorm");
  assert.deepEqual(some.graph.nodes.filter((n) => COMPOSITE.has(n.op)).map((n) => n.op), ["rmsnorm"]);
  const slots = { x: Array.from({ length: 16 }, (_, i) => i - 7.5) };
  const want = evaluate(graph, { slots }).output.y;
  assert.deepEqual(evaluate(all, { slots }).output.y, want);
  assert.deepEqual(evaluate(some.graph, { slots }).output.y, want);
});
