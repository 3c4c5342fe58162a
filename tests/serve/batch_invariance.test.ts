// Batch invariance of the serving step, bit for bit, on every device present: the logits of one sequence's
// rows are identical whether its tokens run one per step in the 1-row entry, or as one prefill chunk mixed with
// another sequence's rows and padding in the 32-row entry (the server's paths: decode alone, prefill chunk in a
// full batch), also with 32-row matmul passes. And against the oracle (graph/eval) within the tier-2 bound, so "identical" is also "right".
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device } from "../../backends/device.ts";
import { Engine } from "../../backends/executor.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { assertClose } from "../../graph/tolerance.ts";
import { SLOTS, traceLlama } from "../../llm/families/llama.ts";
import { servingCompile, servingCompileWith } from "../../llm/serve/batch.ts";
import { openDevice, selectedBackends } from "../devices/index.ts";
import { model } from "./setup.ts";

const B = 8, BLOCKS = 12, MB = 40, V = model.config.vocab; // 320 positions a table: split attention where targets split
const batch = { block: B, blocks: BLOCKS, maxBlocks: MB };

function graph(rows: number) {
  const { tracer, logits } = traceLlama(model.config, { rows, cap: B * MB, batch });
  tracer.output("logits", logits);
  return tracer.build();
}

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

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;
  test(`serving step on ${backend}: a sequence's logits are bit-identical at batch 1 and in a mixed batch of 32`, { skip }, async () => {
    const eng = new Engine(dev as Device, { compile: servingCompile, timeoutMs: 120_000, ownsDevice: false });
    try {
      await eng.loadWeights(model.store, model.map);
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
      const eng32 = new Engine(dev as Device, { compile: servingCompileWith({ matmulTile: 32 }), timeoutMs: 120_000, ownsDevice: false });
      try {
        await eng32.loadWeights(model.store, model.map);
        const t32 = await eng32.step(eng32.addEntry("inv:32:t32", g32), slots(rows, 32));
        assert.deepEqual(new Uint32Array((t32.outputs.logits as Float32Array).slice().buffer), new Uint32Array(all.slice().buffer), "tile 32 differs");
      } finally {
        await eng32.unload();
      }
      // And the batched step against the oracle.
      const ev = evaluate(g32, { consts: constsFromStore(model.store, model.map), slots: slots(rows, 32) }, { bounds: "expected" });
      assertClose("logits", "f32", all, ev.output.logits, ev.bounds!.output.logits);
    } finally {
      await eng.unload();
    }
  });
}
