// Batch invariance of the serving step, bit for bit, on every device present: the logits of one sequence's
// rows are identical whether its tokens run one per step in the 1-row entry, or as one prefill chunk mixed with
// another sequence's rows and padding in the 32-row entry (the server's paths: decode alone, prefill chunk in a
// full batch), also with 32-row matmul passes; for stories260K and, where the target has MMA tiles, for a GQA model
// whose attention takes them (bf16 and Q4_K_M), or cooperative matrices for its matmuls. And against the oracle
// (graph/eval) within the tier-2 bound, so "identical" is also "right".
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device } from "../../backends/device.ts";
import { Engine } from "../../backends/executor.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { assertClose } from "../../graph/tolerance.ts";
import { SLOTS, traceLlama } from "../../llm/families/llama.ts";
import { servingCompileWith, type ServingChoices } from "../../llm/serve/batch.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import { dtypesFromStore } from "../../llm/families/family.ts";
import type { LlamaConfig } from "../../llm/families/llama.ts";
import type { WeightMap, WeightStore } from "../../graph/weights.ts";
import { openDevice, selectedBackends } from "../devices/index.ts";
import { model } from "./setup.ts";

const B = 8, BLOCKS = 12, MB = 40; // 320 positions a table: split attention where targets split
const batch = { block: B, blocks: BLOCKS, maxBlocks: MB };


interface Row { token: number; pos: number; table: number[] }
function slots(rows: Row[], N: number) {
  const token = new Int32Array(N), pos = new Int32Array(N), write = new Int32Array(N), table = new Int32Array(N * MB);
  rows.forEach((r, i) => {
    token[i] = r.token;
    pos[i] = r.pos;
    r.table.forEach((b, j) => table[i * MB + j] = b);
    write[i] = r.table[Math.floor(r.pos / B)] * B + (r.pos % B);
  });
  for (let i = rows.length; i < N; i++) write[i] = i % B;
  return { [SLOTS.token]: token, [SLOTS.pos]: pos, [SLOTS.blockTable]: table, [SLOTS.writeSlot]: write };
}

const A = model.tokenizer.encode("Once upon a time, there was a little girl");
const other = model.tokenizer.encode("The little dog ran to the park and");
const tableA = [3, 7, 1], tableB = [5, 2, 9];

/** A model as the test needs it: config, weights, their map. */
type Model = { config: LlamaConfig; store: WeightStore; map: WeightMap };

/**
 * A's logits one token per step through the 1-row entry against the same rows inside a 32-row step (B's first rows
 * before them, padding after), bit for bit; with a 32-row matmul tile too; and the batched step against the oracle.
 * Returns the 32-row plan's kernel names.
 */
async function checkInvariance(dev: Device, m: Model, A: number[], other: number[], kvDtype?: "f16", choices: ServingChoices = {}, blocks = false): Promise<string[]> {
  // blocks: the weights are GGUF blocks, whose matmuls (on MMA tiles) round them to bf16
  const compile = servingCompileWith(choices);
  const V = m.config.vocab;
  const graph = (rows: number) => {
    const { tracer, logits } = traceLlama(m.config, { rows, cap: B * MB, batch, kvDtype }, { dtypeOf: dtypesFromStore(m.store, m.map) });
    tracer.output("logits", logits);
    return tracer.build();
  };
  const eng = new Engine(dev, { compile, timeoutMs: 120_000, ownsDevice: false });
  try {
    await eng.loadWeights(m.store, m.map);
    const g1 = graph(1), g32 = graph(32);
    const one = eng.addEntry("inv:1", g1), many = eng.addEntry("inv:32", g32);
    // Alone: one token per step through the 1-row entry.
    const alone: Float32Array[] = [];
    for (let p = 0; p < A.length; p++) {
      const r = await eng.step(one, slots([{ token: A[p], pos: p, table: tableA }], 1));
      alone.push((r.outputs.logits as Float32Array).slice());
    }
    eng.resetState();
    // Together: B's first rows as decode-like rows, then all of A as one chunk, then padding.
    const rows: Row[] = [
      ...other.slice(0, 5).map((t, p) => ({ token: t, pos: p, table: tableB })),
      ...A.map((t, p) => ({ token: t, pos: p, table: tableA })),
    ];
    const r = await eng.step(many, slots(rows, 32));
    const all = r.outputs.logits as Float32Array;
    for (let p = 0; p < A.length; p++) {
      const got = new Uint32Array(all.slice((5 + p) * V, (6 + p) * V).buffer), want = new Uint32Array(alone[p].buffer);
      assert.deepEqual(got, want, `logits of position ${p} differ between batch 1 and batch 32`);
    }
    // A matmul tile of 32 rows (W read once a step) gives the same bits as the default tile.
    const eng32 = new Engine(dev, { compile: servingCompileWith({ ...choices, matmulTile: 32 }), timeoutMs: 120_000, ownsDevice: false });
    try {
      await eng32.loadWeights(m.store, m.map);
      const t32 = await eng32.step(eng32.addEntry("inv:32:t32", g32), slots(rows, 32));
      assert.deepEqual(new Uint32Array((t32.outputs.logits as Float32Array).slice().buffer), new Uint32Array(all.slice().buffer), "tile 32 differs");
    } finally {
      await eng32.unload();
    }
    // And the batched step against the oracle.
    const ev = evaluate(g32, { consts: constsFromStore(m.store, m.map), slots: slots(rows, 32) }, { bounds: "expected" });
    if (!blocks) assertClose("logits", "f32", all, ev.output.logits, ev.bounds!.output.logits);
    else {
      // weights rounded to bf16 as the MMA stages them (GGUF blocks): within ~1% of the logits' range, as the prefill tests
      const want = ev.output.logits as ArrayLike<number>;
      let worst = 0, scale = 0;
      for (let i = 0; i < rows.length * V; i++) {
        assert.ok(Number.isFinite(all[i]), `logit ${i} is ${all[i]}`);
        worst = Math.max(worst, Math.abs(all[i] - want[i]));
        scale = Math.max(scale, Math.abs(want[i]));
      }
      assert.ok(worst <= 2 ** 8 * 1e-4 * scale, `max |batched - oracle| = ${worst} of logits up to ${scale}`);
    }
    return compile(g32, dev.target).steps.flatMap((s) => (s.k === "kernel" ? [s.kernel.name] : []));
  } finally {
    await eng.unload();
  }
}

// A GQA model whose heads the serving attention takes on MMA tiles where the target has them (head_dim 64, 4 query
// heads per KV head, f16 pool: kernels/lib/flash_decode.ts): random bf16 weights, two layers.
const gqa = syntheticLlama({
  dim: 256, hidden: 512, layers: 2, heads: 8, kvHeads: 2, headDim: 64, vocab: 384, rmsEps: 1e-5, ropeTheta: 10000, ropeStyle: "half", tiedEmbeddings: false,
}, { dtype: "bf16", std: 0.05, seed: 3 });
const ids = (n: number, k: number) => Array.from({ length: n }, (_, i) => (i * k + 7) % 384);
// The same model as Q4_K_M blocks: where the target has MMA tiles, every serving entry runs its matmuls on the MMA
// kernel over the blocks, each lane decoding its chunks into operands (kernels/lower/matmul.ts registerBlocks).
const gqaQ = syntheticLlama({ ...gqa.config }, { dtype: "q4_k_m", std: 0.05, seed: 3 });

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;
  test(`serving step on ${backend}: a sequence's logits are bit-identical at batch 1 and in a mixed batch of 32`, { skip }, async () => {
    await checkInvariance(dev as Device, model, A, other);
  });
  const mma = typeof dev === "string" ? dev : dev.target.caps.mma ? false : `${dev.target.device} has no MMA tiles (the paged attention's MMA kernel)`;
  test(`serving step on ${backend}: the same with the paged attention on MMA tiles (GQA, head_dim 64, f16 pool)`, { skip: mma }, async () => {
    const names = await checkInvariance(dev as Device, gqa, ids(11, 37), ids(6, 101), "f16");
    assert.ok(names.some((n) => n.startsWith("paged_flash_")), `the MMA paged attention is in the plan: ${names.filter((n) => /attention|flash/.test(n)).join(", ")}`);
  });
  test(`serving step on ${backend}: the same over Q4_K_M blocks on the MMA kernel`, { skip: mma }, async () => {
    const names = await checkInvariance(dev as Device, gqaQ, ids(11, 37), ids(6, 101), "f16", {}, true);
    assert.ok(names.some((n) => /^mma_matmul_q\d_k/.test(n)), `the block matmuls on the MMA kernel: ${names.filter((n) => /matmul|mma/.test(n)).join(", ")}`);
  });
  const coop = typeof dev === "string" ? dev : dev.target.caps.coop?.bf16 ? false : `${dev.target.device} has no bf16 cooperative matrices`;
  test(`serving step on ${backend}: the same with bf16 and with Q4_K_M matmuls on cooperative matrices`, { skip: coop }, async () => {
    for (const [m, blocks] of [[gqa, false], [gqaQ, true]] as const) {
      const names = await checkInvariance(dev as Device, m, ids(11, 37), ids(6, 101), "f16", {}, blocks);
      assert.ok(names.some((n) => n.startsWith("coop_serving_")), `the matmuls on the serving kernel: ${names.filter((n) => /matmul|coop/.test(n)).join(", ")}`);
    }
  });
  const staged = typeof mma === "string" ? mma : !(dev as Device).target.caps.staging ? `${(dev as Device).target.device} has no cp.async staging` : false;
  test(`serving step on ${backend}: the same over Q4_K_M blocks on the staged MMA kernel (mmaBlocks "all")`, { skip: staged }, async () => {
    const names = await checkInvariance(dev as Device, gqaQ, ids(11, 37), ids(6, 101), "f16", { mmaBlocks: "all" }, true);
    assert.ok(names.some((n) => /^mma_staged_q\d_k/.test(n)), `the block matmuls on the staged kernel: ${names.filter((n) => /matmul|mma/.test(n)).join(", ")}`);
  });
}
