// stories260K decoding with the sampling suffix appended to the step graph (llm/sampling.ts appendSampler):
// greedy through the on-device sampler gives the reference tokens (reference_greedy.json, llama2.c's run.c),
// seeded sampling repeats exactly for the same seed and differs for another, and greedy and sampled decoding
// share one entry (sampler values are slot values). Every device present; the JS device always is.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Engine, type EntryId } from "../../backends/executor.ts";
import type { Device } from "../../backends/device.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { fileURLToPath } from "node:url";
import { loadModel } from "../../llm/model.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { appendSampler, GREEDY, readSample, type SamplerParams, samplerSlots } from "../../llm/sampling.ts";
import { openDevice, selectedBackends, slowDevice } from "../devices/index.ts";

// The GGUF shipped in the repo (its tensors equal the llama2.c checkpoint's), so the test runs where only the repo travels.
const DIR = new URL("../../models/stories260K/", import.meta.url);
const model = loadModel(fileURLToPath(new URL("stories260K.gguf", DIR)));
const ref = JSON.parse(readFileSync(new URL("reference_greedy.json", DIR), "utf8")) as {
  cases: { prompt_ids: number[]; steps: number; generated_ids: number[] }[];
};
const cfg = model.config;

function decodeGraph(cap: number) {
  const { tracer, logits } = traceLlama(cfg, { rows: 1, cap });
  appendSampler(tracer, logits);
  return tracer.build();
}

/** Feeds the prompt, then generates with `sampler` until EOS (1) or `steps` positions; returns the new ids. */
async function decode(eng: Engine<Device>, id: EntryId, prompt: number[], steps: number, sampler: SamplerParams): Promise<number[]> {
  eng.resetState();
  const out: number[] = [];
  let tok = prompt[0];
  for (let pos = 0; pos < steps; pos++) {
    const r = await eng.step(id, { token: new Int32Array([tok]), pos: new Int32Array([pos]), ...samplerSlots(sampler, pos) });
    const { tokens, nonFinite } = readSample(r.outputs);
    assert.equal(nonFinite[0], 0, `non-finite logits at pos ${pos}`);
    tok = pos + 1 < prompt.length ? prompt[pos + 1] : tokens[0];
    if (pos + 1 >= prompt.length) {
      if (tokens[0] === 1) break;
      out.push(tokens[0]);
    }
  }
  return out;
}

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = slowDevice(dev);
  test(`stories260K + sampler on ${backend}: greedy equals the reference; seeded draws repeat; one entry`, { skip }, async () => {
    const eng = new Engine(dev as Device, { compile: compileGraph, timeoutMs: 120_000 });
    try {
      await eng.loadWeights(model.store, model.map);
      const id = eng.addEntry("decode+sampler", decodeGraph(256));
      for (const c of ref.cases) assert.deepEqual(await decode(eng, id, c.prompt_ids, c.steps, GREEDY), c.generated_ids);

      const prompt = ref.cases[0].prompt_ids, steps = prompt.length + 40;
      const hot: SamplerParams = { temperature: 1, topK: 40, topP: 0.95, seed: 7 };
      const a = await decode(eng, id, prompt, steps, hot);
      const b = await decode(eng, id, prompt, steps, hot);
      assert.deepEqual(b, a, "the same seed draws the same tokens");
      const other = await decode(eng, id, prompt, steps, { ...hot, seed: 8 });
      assert.notDeepEqual(other, a, "another seed draws other tokens");
      const greedyIds = ref.cases[0].generated_ids;
      assert.notDeepEqual(a.slice(0, greedyIds.length), greedyIds, "temperature 1 is not greedy");
      assert.equal(eng.stats().entries, 1, "sampler values never make a new entry");
    } finally {
      await eng.unload();
    }
  });
}
