// stories260K through the whole engine on every device present: greedy tokens equal the reference
// (reference_greedy.json, from llama2.c's run.c), and after 64 decode steps the logits and every layer's K/V
// State are within the tier-2 bound ("expected" mode, propagated across steps) of the oracle's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Engine } from "../../backends/executor.ts";
import type { Device } from "../../backends/device.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { evaluate, constsFromStore } from "../../graph/eval.ts";
import { assertClose } from "../../graph/tolerance.ts";
import { type Storage, storageFromBytes } from "../../graph/dtype.ts";
import { fileURLToPath } from "node:url";
import { loadModel } from "../../llm/model.ts";
import { kvState, traceLlama } from "../../llm/families/llama.ts";
import { openDevice, selectedBackends, slowDevice } from "../devices/index.ts";

// The GGUF shipped in the repo (its tensors equal the llama2.c checkpoint's; tests/graph checks that bit for bit).
const DIR = new URL("../../models/stories260K/", import.meta.url);
const gguf = loadModel(fileURLToPath(new URL("stories260K.gguf", DIR)));
const model = { config: gguf.config, store: gguf.store };
const ref = JSON.parse(readFileSync(new URL("reference_greedy.json", DIR), "utf8")) as {
  cases: { prompt_ids: number[]; steps: number; generated_ids: number[] }[];
};
const cfg = model.config;
const map = gguf.map;

function decodeGraph(cap: number, withLogits: boolean) {
  const { tracer, logits } = traceLlama(cfg, { rows: 1, cap });
  tracer.output("token", tracer.argmax(logits, 1));
  if (withLogits) tracer.output("logits", logits);
  return tracer.build();
}

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = slowDevice(dev);

  test(`stories260K on ${backend}: greedy tokens equal the reference (both cases)`, { skip }, async () => {
    const eng = new Engine(dev as Device, { compile: compileGraph, timeoutMs: 120_000, ownsDevice: false });
    try {
      await eng.loadWeights(model.store, map);
      const id = eng.addEntry("decode", decodeGraph(256, false));
      for (const c of ref.cases) {
        eng.resetState();
        const out: number[] = [];
        let tok = c.prompt_ids[0];
        for (let pos = 0; pos < c.steps; pos++) {
          const r = await eng.step(id, { token: new Int32Array([tok]), pos: new Int32Array([pos]) });
          const next = r.outputs.token[0];
          tok = pos + 1 < c.prompt_ids.length ? c.prompt_ids[pos + 1] : next;
          if (pos + 1 >= c.prompt_ids.length) {
            if (next === 1) break;
            out.push(next);
          }
        }
        assert.deepEqual(out, c.generated_ids);
      }
      assert.equal(eng.stats().entries, 1, "a token or a position never makes a new entry");
    } finally {
      await eng.unload();
    }
  });

  test(`stories260K on ${backend}: logits and K/V State within tolerance of the oracle after 64 steps`, { skip }, async () => {
    const eng = new Engine(dev as Device, { compile: compileGraph, timeoutMs: 120_000, ownsDevice: false });
    try {
      await eng.loadWeights(model.store, map);
      const cap = 96;
      const graph = decodeGraph(cap, true);
      const id = eng.addEntry("decode+logits", graph);
      const consts = constsFromStore(model.store, map);
      let state: Record<string, Storage> = {};
      let stateBounds: Record<string, Float32Array> | undefined;
      let tok = 1;
      for (let pos = 0; pos < 64; pos++) {
        const slots = { token: new Int32Array([tok]), pos: new Int32Array([pos]) };
        const want = evaluate(graph, { consts, slots, state, stateBounds }, { bounds: "expected" });
        const got = await eng.step(id, slots);
        assertClose(`logits at pos ${pos}`, "f32", got.outputs.logits as Float32Array, want.output.logits, want.bounds!.output.logits);
        state = want.state;
        stateBounds = want.bounds!.state;
        tok = want.output.token[0];
      }
      for (let l = 0; l < cfg.layers; l++) {
        for (const kind of ["k", "v"] as const) {
          const name = kvState(kind, l);
          const a = storageFromBytes("f32", await eng.readState(name));
          assertClose(`${name} after 64 steps`, "f32", a, state[name], stateBounds![name]);
        }
      }
    } finally {
      await eng.unload();
    }
  });
}
