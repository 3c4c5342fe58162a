// Provenance of models/stories260K/reference_greedy.json, which the model, sampling and tokenizer tests read: it
// was made by a NumPy re-implementation of llama2.c's run.c that is not in this repository. Here llama.cpp
// (the independent reference of tier 3, tests/llm/llamacpp_reference.ts) recomputes it where it can run: the
// prompt ids and every greedy token must be equal, and the log-softmax of each stored `first_logits` row must
// be within FIRST_LOGITS_TOL of llama.cpp's at that position (the stored rows are raw logits; llama.cpp gives
// probabilities, so both sides are compared as log-softmax, which is blind only to a constant shift).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { computeReference, CTX, llamaCppMissing, logSoftmax, root } from "./llamacpp_reference.ts";

const ref = JSON.parse(readFileSync(`${root}models/stories260K/reference_greedy.json`, "utf8")) as {
  cases: { prompt: string; prompt_ids: number[]; steps: number; generated_ids: number[]; first_logits: number[][] }[];
};
/**
 * Absolute bound on |log-softmax difference| of the stored logits rows: two f32 evaluations of a 5-layer,
 * 64-wide model whose logits reach about 20 in magnitude differ by a few 1e-6 (measured here: 1.2e-5 at most);
 * 1e-4 leaves room for the NumPy run's own order of summation and still fails a row from another position or
 * another model (log-probabilities that differ by whole units).
 */
const FIRST_LOGITS_TOL = 1e-4;

const missing = llamaCppMissing();

test("reference_greedy.json equals llama.cpp: prompt ids, greedy tokens, first logits", { skip: missing }, () => {
  const r = computeReference({
    prompts: ref.cases.map((c) => c.prompt),
    tokens: ref.cases.map((c) => c.generated_ids.length),
    ctx: CTX,
    logprob_prompts: ref.cases.length,
    logprob_positions: ref.cases.map((c) => c.first_logits.map((_, p) => p)),
  });
  let worst = 0;
  for (const [i, c] of ref.cases.entries()) {
    const l = r.cases[i];
    assert.deepEqual(l.prompt_ids, c.prompt_ids, `case ${i}: prompt ids`);
    assert.deepEqual(l.generated_ids, c.generated_ids, `case ${i}: greedy tokens`);
    assert.equal(l.logprobs?.length, c.first_logits.length);
    for (const [p, row] of c.first_logits.entries()) {
      const want: { pos: number; values: number[] } = l.logprobs![p];
      const got = logSoftmax(row);
      assert.equal(want.pos, p);
      for (let t = 0; t < got.length; t++) {
        const d = Math.abs(got[t] - want.values[t]);
        worst = Math.max(worst, d);
        assert.ok(d <= FIRST_LOGITS_TOL, `case ${i} position ${p} token ${t}: |${got[t]} - ${want.values[t]}| = ${d}`);
      }
    }
  }
  console.log(`reference_greedy.json vs llama.cpp: tokens equal, largest first-logits log-softmax difference ${worst.toExponential(2)}`);
});
