// The Driver on stories260K.gguf (JS device): entries are made up front and a token, a position or a sampler
// value never makes a new one (checked through stats()); streaming, stop strings, max tokens, the context
// bound; encode returns the final hidden states the oracle computes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { ContextOverflowError, LlmError } from "../../llm/errors.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { evaluate, constsFromStore } from "../../graph/eval.ts";
import { assertClose } from "../../graph/tolerance.ts";

const model = loadModel(fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url)));

async function open(ctx = 128) {
  const engine = new Engine(new JsDevice({}), { compile: compileGraph });
  return { engine, driver: await Driver.open(model, engine, { ctx, prefill: [16, 4] }) };
}

test("driver: entries are prepared up front; tokens, positions and sampler values never add one", async () => {
  const { engine, driver } = await open();
  const before = engine.stats().keys;
  assert.equal(before.length, 3, "decode + two prefill shapes");
  await driver.generate("Once upon a time", { maxTokens: 20 });
  await driver.generate("The cat sat on the mat and looked at the big red ball", { maxTokens: 12, sampler: { temperature: 0.9, topK: 20, seed: 3 } });
  await driver.generate("Lily", { maxTokens: 8, sampler: { temperature: 0.5, topP: 0.8, minP: 0.05, seed: 11 } });
  assert.deepEqual(engine.stats().keys, before);
  await engine.unload();
});

test("driver: streaming, seeded sampling repeats, stop strings and max tokens end generation", async () => {
  const { engine, driver } = await open();
  const pieces: string[] = [];
  const it = driver.stream("Once upon a time", { maxTokens: 30 });
  let r = await it.next();
  while (!r.done) {
    pieces.push(r.value.text);
    r = await it.next();
  }
  assert.equal(r.value.finish, "length");
  assert.equal(r.value.generatedIds.length, 30);
  assert.equal(pieces.join(""), r.value.text);
  assert.match(r.value.text, /^, there was a little girl named Lily/);

  const stop = await driver.generate("Once upon a time", { maxTokens: 60, stop: ["Lily"] });
  assert.equal(stop.finish, "stop");
  assert.equal(stop.text, ", there was a little girl named ");

  const s = { temperature: 1, seed: 1234 };
  const a = await driver.generate("Once upon a time", { maxTokens: 24, sampler: s });
  const b = await driver.generate("Once upon a time", { maxTokens: 24, sampler: s });
  const c = await driver.generate("Once upon a time", { maxTokens: 24, sampler: { ...s, seed: 99 } });
  assert.deepEqual(a.generatedIds, b.generatedIds, "same seed, same tokens");
  assert.notDeepEqual(a.generatedIds, c.generatedIds, "another seed, other tokens");
  await engine.unload();
});

test("driver: a prompt past the context and a bad sampler are typed errors", async () => {
  const { engine, driver } = await open(16);
  await assert.rejects(driver.generate("Once upon a time ".repeat(10)), ContextOverflowError);
  await assert.rejects(driver.generate("Once", { sampler: { temperature: -1 } }), LlmError);
  // Generation stops at the context's end rather than faulting.
  const r = await driver.generate("Once upon a time", { maxTokens: 100 });
  assert.equal(r.finish, "context");
  assert.equal(r.promptIds.length + r.generatedIds.length, 17);
  await engine.unload();
});

test("driver: encode returns the final hidden states, within tolerance of the oracle", async () => {
  const { engine, driver } = await open(64);
  driver.prepareEncode([16], { hidden: true });
  const keys = engine.stats().keys.length;
  const ids = driver.tokenize("Once upon a time there was");
  const hidden = await driver.encode(ids); // padded to the prepared 16 rows
  assert.equal(engine.stats().keys.length, keys, "encode used the prepared shape");
  assert.equal(hidden.length, ids.length * model.config.dim);
  const { tracer, logits } = traceLlama(model.config, { rows: ids.length, cap: 64 });
  tracer.output("hidden", tracer.nodes[tracer.nodes[logits.id].inputs[0]]);
  const want = evaluate(tracer.build(), {
    consts: constsFromStore(model.store, model.map),
    slots: { token: Int32Array.from(ids), pos: new Int32Array([0]) },
  }, { bounds: "expected" });
  assertClose("hidden", "f32", hidden, want.output.hidden, want.bounds!.output.hidden);
  await engine.unload();
});
