// bench/boundary.ts's chains and kernels, checked where no GPU is needed: each shape's chain reads the bytes
// bench/decode.ts counted for that shape's bf16 weights on the H200 (988.21 MB, 2.47 GB) plus one 128 KiB
// attention read a layer, and the variants differ where they say they do (the early stream's loads before
// griddepcontrol.wait, the prefetching chain's next-stream loads before its barrier's release).
import { test } from "node:test";
import assert from "node:assert/strict";
import { boundaryPtx, chainOf } from "../../bench/boundary_ptx.ts";

test("chainOf: a decode step's bf16 weight bytes, stream by stream", () => {
  for (const [shape, weights] of [["qwen2.5-0.5b", 988.21e6], ["llama-3.2-1b", 2.47e9]] as const) {
    const c = chainOf(shape);
    assert.equal(c.layer.length, 5);
    const total = c.layers * c.layer.reduce((a, b) => a + b, 0) + c.head - c.layers * (128 << 10);
    // decode.ts's figure also holds the norms and (qwen) the q/k/v biases: well under 0.5%
    assert.ok(Math.abs(total - weights) / weights < 0.005, `${shape}: ${total} bytes against ${weights}`);
    for (const b of [...c.layer, c.head]) assert.equal(b % 16, 0);
  }
});

test("boundaryPtx: where the loads sit against the wait and the barrier", () => {
  const U = 4, k = boundaryPtx(U);
  const loads = (s: string) => (s.match(/ld\.global\.nc\.v4/g) ?? []).length;
  for (const t of [64, 256]) {
    const pdl = k.stage(false, t), early = k.stage(true, t);
    assert.equal(pdl.split("griddepcontrol.wait")[0].match(/ld\.global\.nc\.v4/g), null);
    assert.equal(loads(early.split("griddepcontrol.wait")[0]), U);
    assert.equal(loads(pdl), loads(early));
    assert.match(pdl, new RegExp(`mad\\.lo\\.u32 %r4, %r2, ${t}, %r1`));
  }
  const persist = k.chain(false), prefetch = k.chain(true);
  // stream 0, the loop and the next stream's first batch: U loads each
  assert.equal(loads(persist), 3 * U);
  assert.equal(loads(prefetch), 3 * U);
  assert.equal(loads(prefetch.split("red.release")[0]), 3 * U);
  assert.equal(loads(persist.split("red.release")[0]), 2 * U);
  for (const s of [persist, prefetch]) assert.doesNotMatch(s, /griddepcontrol/);
});
