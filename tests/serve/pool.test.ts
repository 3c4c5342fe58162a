// The paged pool's host side: sizing from memory, the reserved block, reference counts, the prefix cache
// (share, publish, eviction of idle cached blocks, oldest first), and refusals.
import { test } from "node:test";
import assert from "node:assert/strict";
import { kvTypeFor } from "../../llm/steps.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import { loadModel } from "../../llm/model.ts";
import { MODEL_PATH } from "./setup.ts";
import { BlockPool, planPool, PoolSizeError, prefixKey } from "../../llm/serve/pool.ts";

const KV = { layers: 2, kvHeads: 2, headDim: 4, elemBytes: 4 }; // 64 B per position per K or V per layer... x2 x2
const BLOCK_BYTES = 2 * 2 * 16 * 2 * 4 * 4;

test("planPool: blocks from a fraction of memory, capped by slots x context, at least one context", () => {
  const p = planPool(KV, { ctx: 64, slots: 4, block: 16, fraction: 0.5, memory: { totalBytes: 100 * BLOCK_BYTES } });
  assert.equal(p.maxBlocks, 4);
  assert.equal(p.blocks, Math.min(50, 4 * 4 + 1));
  assert.equal(p.bytes, p.blocks * BLOCK_BYTES);
  const few = planPool(KV, { ctx: 64, slots: 64, block: 16, fraction: 0.1, memory: { totalBytes: 100 * BLOCK_BYTES, freeBytes: 60 * BLOCK_BYTES } });
  assert.equal(few.blocks, 6);
  const buf = planPool(KV, { ctx: 64, slots: 64, block: 16, fraction: 1, memory: { totalBytes: 1e12 }, maxBufferBytes: 7 * 16 * 2 * 4 * 4 });
  assert.equal(buf.blocks, 7, "one layer's K pool must fit one buffer");
  assert.throws(() => planPool(KV, { ctx: 64, slots: 4, block: 16, fraction: 0.01, memory: { totalBytes: 100 * BLOCK_BYTES } }), PoolSizeError);
  assert.throws(() => planPool(KV, { ctx: 64, slots: 4, block: 0, fraction: 1, memory: { totalBytes: 1e9 } }), /block size/);
});

test("BlockPool: block 0 is never handed out; release of a block not held throws", () => {
  const p = new BlockPool(4);
  const got = [p.alloc(), p.alloc(), p.alloc()];
  assert.deepEqual(got.sort(), [1, 2, 3]);
  assert.equal(p.alloc(), undefined);
  assert.equal(p.used, 3);
  p.release([2]);
  assert.equal(p.free, 1);
  assert.throws(() => p.release([2]), /not held/);
  assert.throws(() => p.release([0]), /not held/);
});

test("BlockPool prefix cache: share holds, idle blocks stay cached until evicted oldest first, forget drops all", () => {
  const p = new BlockPool(4);
  const k1 = prefixKey(undefined, [1, 2, 3]), k2 = prefixKey(k1, [4, 5, 6]), other = prefixKey(undefined, [1, 2, 4]);
  assert.notEqual(k1, other);
  assert.notEqual(prefixKey(prefixKey(undefined, [9]), [4, 5, 6]), k2, "the key depends on every earlier token");
  const a = p.alloc()!, b = p.alloc()!;
  p.publish(a, k1);
  p.publish(b, k2);
  assert.equal(p.share(other), undefined);
  assert.equal(p.share(k1), a);
  p.release([a, a, b]); // both holders of a, then b
  assert.equal(p.used, 0);
  assert.equal(p.cached, 2);
  assert.equal(p.share(k2), b, "an idle cached block is still shared");
  p.release([b]);
  // Allocations take the free block first, then evict the oldest idle one (a), then b.
  const c = p.alloc()!;
  assert.ok(c !== a && c !== b);
  assert.equal(p.alloc(), a);
  assert.equal(p.share(k1), undefined, "evicted");
  assert.equal(p.share(k2), b);
  p.release([b, a, c]);
  p.forget();
  assert.equal(p.cached, 0);
  assert.equal(p.share(k2), undefined);
  assert.equal(p.free, 3);
});

test("--kv-type auto: f16 for 16-bit or quantized matrices, f32 for f32 ones", () => {
  assert.equal(kvTypeFor(loadModel(MODEL_PATH)), "f32"); // stories260K: f32 matrices
  const cfg = { dim: 64, hidden: 128, layers: 1, heads: 2, kvHeads: 1, headDim: 32, vocab: 64, rmsEps: 1e-5, ropeTheta: 10000, ropeStyle: "half" as const, tiedEmbeddings: true };
  for (const dtype of ["bf16", "f16", "q8_0"] as const) assert.equal(kvTypeFor(syntheticLlama(cfg, { dtype })), "f16", dtype);
  assert.equal(kvTypeFor(syntheticLlama(cfg, { dtype: "f32" })), "f32");
});
