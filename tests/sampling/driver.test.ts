// The full sampler through the Driver on stories260K (JS device): logprobs on events and on the result (greedy:
// the token is the first of the top list and carries its logprob; the raw logprobs of a step do not depend on
// temperature, bias or penalties), min_tokens bans end-of-generation until then (a +40 bias on it otherwise ends at once), and every bad sampler value or format
// is a typed error naming it, raised before anything runs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { InvalidArgumentError } from "../../llm/errors.ts";

const model = loadModel(fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url)));

test("driver sampler: logprobs, min_tokens, and typed errors for bad values", { timeout: 600_000 }, async () => {
  const engine = new Engine(new JsDevice({}), { compile: compileGraph });
  const d = await Driver.open(model, engine, { ctx: 128, prefill: [16, 4] });
  try {
    const events = [];
    const s = d.stream("Once upon a time", { maxTokens: 6, sampler: { topLogprobs: 4 } });
    for await (const e of s) events.push(e);
    const r = await s.result;
    assert.equal(r.logprobs!.length, 6);
    for (const [i, e] of events.entries()) {
      assert.equal(e.topLogprobs!.length, 4);
      assert.equal(e.topLogprobs![0].id, e.id, `event ${i}: greedy takes the most likely`);
      assert.equal(e.logprob, e.topLogprobs![0].logprob);
      assert.ok(e.topLogprobs!.every((t, k) => k === 0 || t.logprob <= e.topLogprobs![k - 1].logprob));
      assert.deepEqual(r.logprobs![i], { logprob: e.logprob, top: e.topLogprobs });
    }
    // raw logprobs: the first step's top list is the same under temperature, bias and penalties
    const other = await d.generate("Once upon a time", { maxTokens: 1, sampler: { temperature: 1.7, seed: 9, logitBias: { 5: 50 }, repeatPenalty: 2, topLogprobs: 4 } });
    assert.deepEqual(other.logprobs![0].top, r.logprobs![0].top);
    assert.equal(other.generatedIds[0], 5, "a +50 bias takes the draw");
    // logprobs: true alone reports the chosen token's logprob and no top list
    const only = await d.generate("Once upon a time", { maxTokens: 2, sampler: { logprobs: true } });
    assert.deepEqual(only.logprobs!.map((l) => l.top.length), [0, 0]);
    assert.equal(only.logprobs![0].logprob, r.logprobs![0].logprob);
    assert.equal((await d.generate("Once upon a time", { maxTokens: 2 })).logprobs, undefined);

    // min_tokens: with end-of-generation made near certain by a bias, it comes right after min_tokens
    const eos = model.tokenizer.eos!;
    const ends = await d.generate("Once upon a time", { maxTokens: 40, sampler: { logitBias: { [eos]: 40 } } });
    assert.deepEqual([ends.finish, ends.generatedIds.length], ["eos", 0]);
    const forced = await d.generate("Once upon a time", { maxTokens: 40, sampler: { logitBias: { [eos]: 40 }, minTokens: 5 } });
    assert.deepEqual([forced.finish, forced.generatedIds.length], ["eos", 5]);

    const bad: [object, RegExp][] = [
      [{ sampler: { logitBias: { 5: 101 } } }, /logitBias\[5\] = 101/],
      [{ sampler: { logitBias: { 99999: 1 } } }, /logitBias token id 99999 is outside the vocabulary/],
      [{ sampler: { logitBias: { x: 1 } } }, /logitBias = NaN: keys must be token ids/],
      [{ sampler: { repeatPenalty: 0 } }, /repeatPenalty = 0/],
      [{ sampler: { frequencyPenalty: 2.5 } }, /frequencyPenalty = 2.5/],
      [{ sampler: { presencePenalty: -3 } }, /presencePenalty = -3/],
      [{ sampler: { minTokens: 1.5 } }, /minTokens = 1.5/],
      [{ sampler: { topLogprobs: 21 } }, /topLogprobs = 21/],
      [{ sampler: { logprobs: "yes" } }, /logprobs = yes/],
      [{ format: null }, /format: must be an object/],
    ];
    for (const [opts, msg] of bad) {
      assert.throws(() => d.stream("Once", opts), (e: unknown) => e instanceof InvalidArgumentError && msg.test((e as Error).message), JSON.stringify(opts));
    }
    assert.equal((await d.generate("Once upon a time", { maxTokens: 3 })).generatedIds.length, 3, "still serving");
  } finally {
    await d.close();
  }
});
