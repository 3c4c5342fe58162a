// Prompt chunk planning (llm/steps.ts planPrefill): the cheapest chunks of the prepared shapes when a step costs
// stepRows + its rows, the last one padded where that is cheaper and fits the context; and on the JS device
// (stories260K), a padded prefill gives the same tokens as whole chunks, greedy and with penalties (which read
// the prompt's marks: a padding row's mark goes nowhere).
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { open } from "../../mod.ts";
import { planPrefill } from "../../llm/steps.ts";

const SIZES = [2048, 512, 64, 16, 8];

test("planPrefill: whole chunks widest first at stepRows 0; padding where cheaper (narrow chunks dearer) and within the context", () => {
  assert.deepEqual(planPrefill(300, SIZES, 4096, 0), [64, 64, 64, 64, 16, 16, 8, 1, 1, 1, 1]);
  assert.deepEqual(planPrefill(300, SIZES, 4096, 128), [512]);
  assert.deepEqual(planPrefill(513, SIZES, 4096, 128), [512, 1]);
  assert.deepEqual(planPrefill(2047, SIZES, 4096, 128), [2048]);
  assert.deepEqual(planPrefill(1000, SIZES, 4096, 128), [512, 512]);
  assert.deepEqual(planPrefill(2048, SIZES, 4096, 128), [2048]);
  assert.deepEqual(planPrefill(7, SIZES, 4096, 128), [8]);
  assert.deepEqual(planPrefill(1, SIZES, 4096, 128), [1]);
  // chunks under 128 rows run slower kernels (slowBelow): 100 tokens as one padded 512-row chunk, not two of 64
  assert.deepEqual(planPrefill(100, SIZES, 4096, 128), [64, 64]);
  assert.deepEqual(planPrefill(100, SIZES, 4096, 128, 128), [512]);
  assert.deepEqual(planPrefill(513, SIZES, 4096, 128, 128), [512, 1]);
  assert.deepEqual(planPrefill(520, SIZES, 4096, 128, 128), [512, 8]);
  // a 512-row chunk past the context's end is not an option: 300 tokens in a context of 400
  const near = planPrefill(300, SIZES, 400, 128);
  assert.ok(near.every((r) => r <= 64), near.join(","));
  assert.equal(near.reduce((a, r) => a + r, 0) >= 300 && near.reduce((a, r) => a + r, 0) <= 400, true);
  // every plan covers the prompt, and only its last chunk runs past it
  for (const n of [1, 2, 9, 63, 65, 100, 511, 777, 3000]) {
    const p = planPrefill(n, SIZES, 4096, 128);
    const before = p.slice(0, -1).reduce((a, r) => a + r, 0);
    assert.ok(before < n && before + p.at(-1)! >= n, `${n}: ${p.join(",")}`);
  }
});

const PATH = fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url));

test("a padded prefill on the JS device gives whole chunks' tokens (greedy, and with penalties counting the prompt)", { timeout: 120_000 }, async () => {
  const whole = await open({ model: PATH, backend: "js", ctx: 128, prefill: [32, 8], prefillStepRows: 0 });
  const padded = await open({ model: PATH, backend: "js", ctx: 128, prefill: [32, 8], prefillStepRows: 1000 });
  try {
    for (const n of [3, 13, 41]) {
      const ids = Array.from({ length: n }, (_, i) => 1 + ((i * 37) % 400));
      for (const o of [{}, { repeatPenalty: 1.3, presencePenalty: 0.5 }]) {
        const a = await whole.generate(ids, { maxTokens: 12, ignoreEos: true, ...o });
        const b = await padded.generate(ids, { maxTokens: 12, ignoreEos: true, ...o });
        assert.deepEqual(b.generatedIds, a.generatedIds, `${n} prompt tokens ${JSON.stringify(o)}`);
      }
    }
  } finally {
    await whole.close();
    await padded.close();
  }
});
