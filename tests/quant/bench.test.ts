// The quantized rows of bench/decode.ts at a tiny shape on the JS device: `--dtype q4_k_m,q8_0` gives one row
// per shape and dtype, synthetic weights typed as llama-quantize would type them, bytes per token counted from
// the quantized tensors, and the same tokens eager and replayed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { parseBenchArgs, runBench } from "../../bench/decode.ts";
import { parseCustom } from "../../bench/shapes.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import { quantPlan } from "../../llm/formats/quantize.ts";
import { dequantize, isBlock } from "../../graph/dtype.ts";

const cfg = parseCustom("dim=256,hidden=512,layers=2,heads=4,kvHeads=2,headDim=64,vocab=1024");

test("parseBenchArgs: --dtype takes a list of dtypes and quantization mixes, and names a bad one", () => {
  const o = parseBenchArgs(["--dtype", "q4_k_m,Q8_0,bf16"]);
  assert.deepEqual(o.dtypes, ["q4_k_m", "q8_0", "bf16"]);
  assert.throws(() => parseBenchArgs(["--dtype", "q4_k_m,q3_k"]), /--dtype: "q3_k" is not one of/);
});

test("synthetic q4_k_m / q5_k_m / q6_k / q4_0: tensor types as quantPlan gives them, real blocks", () => {
  for (const ft of ["q4_k_m", "q5_k_m", "q6_k", "q4_0"] as const) {
    const m = syntheticLlama(cfg, { dtype: ft });
    const infos = [...m.store.tensors()];
    const plan = quantPlan(infos.map((t) => ({ ...t, dtype: t.shape.length > 1 ? "f16" : "f32" })), ft);
    infos.forEach((t, i) => assert.equal(t.dtype, plan[i].to, `${ft} ${t.name}`));
    assert.ok(infos.some((t) => t.dtype === "q6_k"), `${ft}: the output gets q6_k`);
    for (const t of infos) {
      if (!isBlock(t.dtype)) continue;
      const x = dequantize(t.dtype, m.store.bytes(t.name), t.shape.reduce((a, b) => a * b, 1));
      let sq = 0;
      for (const v of x) {
        assert.ok(Number.isFinite(v));
        sq += v * v;
      }
      const std = Math.sqrt(sq / x.length);
      assert.ok(std > 0.01 && std < 0.03, `${ft} ${t.name}: std ${std} (asked 0.02)`);
    }
  }
});

test("runBench --dtype q4_k_m,q8_0 on the JS device: a row each, quantized bytes per token, eager == replay", async () => {
  const res = await runBench({
    shapes: [{ name: "tiny", config: cfg }], dtypes: ["q4_k_m", "q8_0", "bf16"], open: () => Promise.resolve(new JsDevice()),
    tokens: 4, warmup: 1, deep: 0, cap: 16, log: () => {},
  });
  assert.deepEqual(res.rows.map((r) => [r.shape, r.dtype, r.error]), [["tiny", "q4_k_m", undefined], ["tiny", "q8_0", undefined], ["tiny", "bf16", undefined]]);
  const [q4, q8, bf] = res.rows;
  for (const r of res.rows) {
    assert.equal(r.eagerMatchesReplay, true, `${r.dtype}: eager and replay tokens`);
    assert.ok(r.replay!.tokPerSec > 0 && Number.isFinite(r.replay!.rooflineFraction));
  }
  // bytes per token from the stored tensors: q4_k_m < q8_0 < bf16, and q8_0 is 34/64 of bf16's matrices
  assert.ok(q4.weightBytesPerToken < q8.weightBytesPerToken && q8.weightBytesPerToken < bf.weightBytesPerToken);
  assert.equal(q8.weightBytes, syntheticLlama(cfg, { dtype: "q8_0" }).bytes);
  assert.match(res.table, /q4_k_m/);
});

test("parseBenchArgs --xq-prep: a variant per value, a bad value named", () => {
  assert.deepEqual(parseBenchArgs(["--xq-prep", "on,off"]).variants, [{ label: "xq-prep on", compile: { xqPrep: true } }, { label: "xq-prep off", compile: { xqPrep: false } }]);
  assert.deepEqual(parseBenchArgs(["--xq-prep", "no-norm"]).variants, [{ label: "xq-prep no-norm", compile: { xqPrep: "no-norm" } }]);
  assert.equal(parseBenchArgs([]).variants, undefined);
  assert.throws(() => parseBenchArgs(["--xq-prep", "on,maybe"]), /--xq-prep must be on, off/);
});

test("runBench --xq-prep on,off on the JS device: a row each on one load, the same tokens, a prep dispatch per int8 gemv", async () => {
  const res = await runBench({
    shapes: [{ name: "tiny", config: cfg }], dtypes: ["q4_k_m"], open: () => Promise.resolve(new JsDevice()),
    tokens: 4, warmup: 1, deep: 0, cap: 16, log: () => {}, compile: { quantizedX: true },
    variants: [{ label: "xq-prep on", compile: { xqPrep: true } }, { label: "xq-prep off", compile: { xqPrep: false } }],
  });
  assert.deepEqual(res.rows.map((r) => [r.variant, r.error]), [["xq-prep on", undefined], ["xq-prep off", undefined]]);
  const [on, off] = res.rows;
  assert.equal(on.loadSeconds, off.loadSeconds, "one load of the weights");
  // x quantized in one kernel or in every team: bit-identical gemvs, so the same greedy tokens
  assert.deepEqual(on.replay!.tokenIds, off.replay!.tokenIds);
  assert.equal(on.eagerMatchesReplay, true);
  // per layer q/k/v (q6_k v in some layers: a unit of its own), o, gate/up, down, and the head
  assert.ok(on.dispatches >= off.dispatches + 4 * cfg.layers + 1, `${on.dispatches} against ${off.dispatches} dispatches`);
  assert.match(res.table, /tiny \(xq-prep on\)/);
});
