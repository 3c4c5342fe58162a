// llm/synthetic.ts: deterministic bytes of the right sizes and distribution, and models that decode to finite
// logits on the JS device (a stories260K-like shape, and a qwen-like one with QKV bias and half rope) within
// the tier-2 bound of the oracle.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { assertClose } from "../../graph/tolerance.ts";
import { decodeHalf, dequantize, type Storage } from "../../graph/dtype.ts";
import { type LlamaConfig, traceLlama } from "../../llm/families/llama.ts";
import { type SyntheticDtype, syntheticLlama } from "../../llm/synthetic.ts";
import { SHAPES } from "../../bench/shapes.ts";

const QWEN_TINY: LlamaConfig = {
  dim: 64, hidden: 96, layers: 3, heads: 4, kvHeads: 2, headDim: 16, vocab: 300,
  rmsEps: 1e-6, ropeTheta: 1e6, ropeStyle: "half", tiedEmbeddings: true, qkvBias: true,
};
const UNTIED_TINY: LlamaConfig = { ...QWEN_TINY, tiedEmbeddings: false, qkvBias: false, hidden: 128, layers: 2 };

function valuesOf(dtype: SyntheticDtype, bytes: Uint8Array, count: number): Float32Array {
  switch (dtype) {
    case "f32": return new Float32Array(bytes.slice().buffer);
    case "bf16": case "f16": return decodeHalf(dtype, new Uint16Array(bytes.slice().buffer));
    case "q8_0": return dequantize("q8_0", bytes, count);
    default: throw new Error(`valuesOf: ${dtype} mixes block types per tensor`);
  }
}

test("synthetic: same options give the same bytes; the seed and the name change them", () => {
  const a = syntheticLlama(QWEN_TINY), b = syntheticLlama(QWEN_TINY), c = syntheticLlama(QWEN_TINY, { seed: 7 });
  const n = "blk.1.attn_q.weight";
  assert.deepEqual(a.store.bytes(n), b.store.bytes(n));
  assert.notDeepEqual(a.store.bytes(n), c.store.bytes(n));
  assert.notDeepEqual(a.store.bytes("blk.0.attn_q.weight"), a.store.bytes("blk.1.attn_q.weight"));
  assert.equal(a.store.stats.tensors, 4);
});

test("synthetic: every role mapped, sizes match dtype and shape, totals add up", () => {
  for (const dtype of ["bf16", "f16", "f32", "q8_0"] as const) {
    const m = syntheticLlama(QWEN_TINY, { dtype });
    let total = 0;
    for (const [, name] of m.map) {
      const info = m.store.info(name)!;
      assert.ok(info, name);
      const n = info.shape.reduce((x, y) => x * y, 1);
      const want = info.dtype === "f32" ? 4 * n : info.dtype === "q8_0" ? (n / 32) * 34 : 2 * n;
      assert.equal(info.byteLength, want, name);
      assert.equal(m.store.bytes(name).byteLength, want, name);
      assert.equal(info.shape.length === 1 ? "f32" : dtype, info.dtype, name);
      total += want;
    }
    assert.equal(m.bytes, total);
    assert.equal(m.store.stats.bytes, total);
  }
  // q8_0 rows must be whole blocks: stories260K's ffn width 172 falls back to f16 for ffn_down.
  const s = syntheticLlama(SHAPES.stories260K, { dtype: "q8_0" });
  assert.equal(s.store.info("blk.0.ffn_down.weight")!.dtype, "f16");
  assert.equal(s.store.info("blk.0.ffn_up.weight")!.dtype, "q8_0");
});

test("synthetic: matrices are centred with the asked std, bounded; norms are one", () => {
  for (const dtype of ["bf16", "f16", "f32", "q8_0"] as const) {
    const m = syntheticLlama({ ...QWEN_TINY, dim: 256, hidden: 512 }, { dtype, std: 0.05 });
    const info = m.store.info("blk.0.ffn_up.weight")!;
    const v = valuesOf(dtype, m.store.bytes(info.name), 512 * 256);
    let s = 0, s2 = 0, most = 0;
    for (const x of v) {
      s += x;
      s2 += x * x;
      most = Math.max(most, Math.abs(x));
    }
    const mean = s / v.length, std = Math.sqrt(s2 / v.length - mean * mean);
    assert.ok(Math.abs(mean) < 0.002, `${dtype} mean ${mean}`);
    assert.ok(Math.abs(std - 0.05) < 0.003, `${dtype} std ${std}`);
    assert.ok(most <= 0.05 * 3.6, `${dtype} max ${most}`);
    const norm = new Float32Array(m.store.bytes("blk.0.attn_norm.weight").slice().buffer);
    assert.ok(norm.every((x) => x === 1));
  }
});

test("synthetic: a scratch store reuses one buffer and gives the same bytes", () => {
  const a = syntheticLlama(QWEN_TINY), s = syntheticLlama(QWEN_TINY, { scratch: true });
  const x = s.store.bytes("token_embd.weight");
  assert.deepEqual(x, a.store.bytes("token_embd.weight"));
  const y = s.store.bytes("blk.0.ffn_up.weight");
  assert.equal(x.buffer, y.buffer);
  assert.deepEqual(y, a.store.bytes("blk.0.ffn_up.weight"));
});

for (
  const [what, cfg, dtype] of [
    ["stories260K shape, bf16", SHAPES.stories260K, "bf16"],
    ["qwen-like (QKV bias, half rope), bf16", QWEN_TINY, "bf16"],
    ["qwen-like, q8_0", QWEN_TINY, "q8_0"],
    ["untied, f16", UNTIED_TINY, "f16"],
  ] as const
) {
  test(`synthetic ${what}: 8 decode steps on the JS device give finite logits within tolerance of the oracle`, async () => {
    const m = syntheticLlama(cfg, { dtype });
    const eng = new Engine(new JsDevice(), { compile: compileGraph, timeoutMs: 60_000 });
    try {
      await eng.loadWeights(m.store, m.map);
      const { tracer, logits } = traceLlama(cfg, { rows: 1, cap: 16, kvDtype: "f32" }, { dtypeOf: m.dtypeOf });
      tracer.output("token", tracer.argmax(logits, 1));
      tracer.output("logits", logits);
      const graph = tracer.build();
      const id = eng.addEntry("decode", graph);
      const consts = constsFromStore(m.store, m.map);
      let state: Record<string, Storage> = {};
      let stateBounds: Record<string, Float32Array> | undefined;
      let tok = 1;
      for (let pos = 0; pos < 8; pos++) {
        const slots = { token: new Int32Array([tok]), pos: new Int32Array([pos]) };
        const got = await eng.step(id, slots);
        const l = got.outputs.logits as Float32Array;
        assert.equal(l.length, cfg.vocab);
        assert.ok(l.every(Number.isFinite), `non-finite logits at pos ${pos}`);
        assert.ok(l.some((x) => x !== 0), `all-zero logits at pos ${pos}`);
        const want = evaluate(graph, { consts, slots, state, stateBounds }, { bounds: "expected" });
        assertClose(`logits at pos ${pos}`, "f32", l, want.output.logits, want.bounds!.output.logits);
        state = want.state;
        stateBounds = want.bounds!.state;
        tok = got.outputs.token[0];
      }
    } finally {
      await eng.unload();
    }
  });
}
