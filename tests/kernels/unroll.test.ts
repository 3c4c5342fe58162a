// kernels/render/unroll.ts: a loop with constant bounds whose unroll hint covers its trips becomes its body
// per trip (nested in ifs and loops too), anything else stays a loop; the unrolled kernel computes the same
// (run both through the JS renderer), including a return inside the body and an i32 index counting down.
import { test } from "node:test";
import assert from "node:assert/strict";
import { i32, type Kernel, KernelBuilder, type Stmt, u32 } from "../../kernels/ir.ts";
import { renderJs } from "../../kernels/render/js.ts";
import { unrollLoops } from "../../kernels/render/unroll.ts";

const loops = (body: Stmt[]): number =>
  body.reduce((n, s) => n + (s.k === "for" ? 1 + loops(s.body) : s.k === "if" ? loops(s.then) + loops(s.else) : 0), 0);

function run(k: Kernel, n: number): Uint32Array {
  const x = new Uint32Array(n).map((_, i) => (i * 2654435761) >>> 0), y = new Uint32Array(n);
  const jk = renderJs(k, { subgroupSize: 1, debug: true });
  jk.run(jk.bind([x, y].map((a) => ({ buffer: a.buffer, offset: a.byteOffset, bytes: a.byteLength }))));
  return y;
}

function kernel(unroll: number, opts: { bound?: number; nested?: boolean; stop?: boolean } = {}): Kernel {
  const b = new KernelBuilder("loops", { workgroup: 16, grid: 1 });
  const x = b.buffer("x", "u32", "r"), y = b.buffer("y", "u32", "w");
  const acc = b.let(u32(0), "u32", "acc");
  const end = opts.bound ?? 8;
  b.for(u32(0), u32(end), 1, (j) => {
    b.set(acc, acc.mul(31).add(b.load(x, b.lid.x.add(j).mod(16))));
    if (opts.stop) b.if(j.eq(5).and(b.lid.x.eq(3)), () => b.return());
    if (opts.nested) b.for(u32(1), u32(7), 3, (m) => b.set(acc, acc.xor(m.add(j))), { unroll: 2 });
  }, { unroll });
  b.for(i32(3), i32(-3), 1, () => b.set(acc, acc.add(1)), { unroll: 4 }); // no trips
  b.if(b.lid.x.lt(8), () => b.for(i32(-2), i32(4), 2, (j) => b.set(acc, acc.add(j.cast("u32"))), { unroll: 3 }));
  b.store(y, b.lid.x, acc);
  return b.build();
}

test("unrollLoops: constant loops the hint covers are unrolled (inside ifs and loops too), the rest stay", () => {
  const full = kernel(8, { nested: true });
  assert.equal(loops(full.body), 4); // the outer loop and its nested one, the empty one, the one in the if
  const u = unrollLoops(full);
  assert.equal(loops(u.body), 0, "8 trips under unroll 8, 2 trips under unroll 2, 0 trips, 3 trips under unroll 3");
  const partial = unrollLoops(kernel(4, { nested: true }));
  assert.equal(loops(partial.body), 1, "the outer loop (8 trips, unroll 4) stays, its nested loop is unrolled");
  const big = unrollLoops(kernel(1000, { bound: 300 }));
  assert.equal(loops(big.body), 1, "past 256 trips a loop stays");
  const k1 = kernel(1);
  assert.equal(loops(unrollLoops(k1).body), 1);
});

test("unrollLoops: the unrolled kernel computes what the loops compute (JS renderer)", () => {
  for (const opts of [{ nested: true }, { stop: true }, {}]) {
    const k = kernel(8, opts);
    const u = unrollLoops(k);
    assert.notEqual(u, k);
    assert.deepEqual([...run(u, 16)], [...run(k, 16)], JSON.stringify(opts));
  }
});
