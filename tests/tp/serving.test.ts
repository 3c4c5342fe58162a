// The serving step (llm/serve: K/V in a paged pool, one block table and position per row, paged_attention)
// sharded over a simulated JS group (the host path) and over fake GPUs with a fake NCCL (the device path:
// tests/ptx/fake_nccl.ts) at tp 2 and 4: a mixed batch of two sequences' rows gives logits within the
// unsharded oracle's tier-2 bound, and each rank's K/V pool holds its heads of the whole pool. stories260K.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Engine } from "../../backends/executor.ts";
import { RankGroup } from "../../backends/group.ts";
import { JsDevice } from "../../backends/js/mod.ts";
import { storageFromBytes } from "../../graph/dtype.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { assertClose } from "../../graph/tolerance.ts";
import { kvState, SLOTS, traceLlama } from "../../llm/families/llama.ts";
import { loadModel } from "../../llm/model.ts";
import { servingCompile } from "../../llm/serve/batch.ts";
import { tpPlan } from "../../llm/tp.ts";
import { joinState } from "./helpers.ts";
import { fakeGroup } from "../ptx/fake_nccl.ts";

const model = loadModel(fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url)));
const B = 8, BLOCKS = 8, MB = 4, R = 12;
const batch = { block: B, blocks: BLOCKS, maxBlocks: MB };

function slots(rows: { token: number; pos: number; table: number[] }[]) {
  const token = new Int32Array(R), pos = new Int32Array(R), write = new Int32Array(R), table = new Int32Array(R * MB);
  rows.forEach((r, i) => {
    token[i] = r.token;
    pos[i] = r.pos;
    r.table.forEach((b, j) => table[i * MB + j] = b);
    write[i] = r.table[Math.floor(r.pos / B)] * B + (r.pos % B);
  });
  for (let i = rows.length; i < R; i++) write[i] = i % B; // padding rows write block 0, which no row reads
  return { [SLOTS.token]: token, [SLOTS.pos]: pos, [SLOTS.blockTable]: table, [SLOTS.writeSlot]: write };
}

for (const on of ["a JS group (host path)", "fake GPUs with a fake NCCL (device path)"] as const) {
  test(`the batched serving step (paged K/V, block tables) at tp 2 and 4 on ${on} equals the unsharded oracle within tier 2`, { timeout: 180_000 }, async () => {
    await checkServing((tp) => on.startsWith("a JS")
      ? new RankGroup(Array.from({ length: tp }, () => new Engine(new JsDevice(), { compile: servingCompile })), tpPlan(model.config, tp))
      : fakeGroup(tp, tpPlan(model.config, tp), servingCompile).group);
  });
}

async function checkServing(open: (tp: number) => RankGroup): Promise<void> {
  const { tracer, logits } = traceLlama(model.config, { rows: R, cap: B * MB, batch });
  tracer.output("logits", logits);
  const g = tracer.build();
  const a = model.tokenizer.encode("Once upon a time");
  const b = model.tokenizer.encode("The dog");
  const s = slots([...a.map((t, p) => ({ token: t, pos: p, table: [3, 1] })), ...b.map((t, p) => ({ token: t, pos: p, table: [6, 2] }))]);
  assert.ok(a.length + b.length <= R);
  const ev = evaluate(g, { consts: constsFromStore(model.store, model.map), slots: s }, { bounds: "expected" });
  for (const tp of [2, 4]) {
    const group = open(tp);
    try {
      await group.loadWeights(model.store, model.map);
      const r = await group.step(group.addEntry("serve", g), s);
      assertClose(`tp ${tp}: logits`, "f32", r.outputs.logits, ev.output.logits, ev.bounds!.output.logits);
      for (const kind of ["k", "v"] as const) {
        const name = kvState(kind, 0), shape = g.states[name].shape;
        const parts = (await group.readState(name)).map((x) => storageFromBytes("f32", x));
        const local = [shape[0], parts[0].length / (shape[0] * shape[2]), shape[2]];
        assertClose(`tp ${tp}: ${name}`, "f32", joinState(name, parts, local, 1, shape[1] / local[1]), ev.state[name], ev.bounds!.state[name]);
      }
    } finally {
      await group.unload();
    }
  }
}
