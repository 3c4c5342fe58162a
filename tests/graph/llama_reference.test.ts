// The oracle drives the traced Llama step of stories260K.bin and reproduces llama2.c's greedy outputs.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Storage } from "../../graph/dtype.ts";
import { traceDecode, tracePrefill } from "../../llm/families/llama.ts";
import { argmax, model, reference, step, tokenizer } from "./stories.ts";

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>, off = 0): number {
  let m = 0;
  for (let i = 0; i < b.length; i++) m = Math.max(m, Math.abs(a[off + i] - b[i]));
  return m;
}

test("tokenizer: run.c encoding of the prompt, and decoding of both reference continuations", () => {
  for (const c of reference.cases) {
    assert.deepEqual(tokenizer.encode(c.prompt), c.prompt_ids);
    assert.equal(tokenizer.decode(c.generated_ids, c.prompt_ids[c.prompt_ids.length - 1]), c.generated_text);
  }
  assert.deepEqual(tokenizer.encode("Once upon a time", { bos: false, eos: true }), [403, 407, 261, 378, 2]);
  assert.deepEqual(tokenizer.encode("", { bos: false }), []);
});

test("case 1 (empty prompt, 200 steps): every greedy token, first logits within 1e-4", () => {
  const c = reference.cases[0];
  const g = traceDecode(model.config, { cap: 256 });
  let state: Record<string, Storage> | undefined;
  let tok = c.prompt_ids[0];
  const out: number[] = [];
  for (let pos = 0; pos < c.steps; pos++) {
    const r = step(g, { token: [tok], pos: [pos] }, state);
    state = r.state;
    const logits = r.output.logits;
    if (pos < c.first_logits.length) {
      const d = maxDiff(logits, c.first_logits[pos]);
      assert.ok(d < 1e-4, `position ${pos}: max |logit - reference| = ${d}`);
    }
    tok = argmax(logits);
    if (tok === 1) break;
    out.push(tok);
  }
  assert.deepEqual(out, c.generated_ids);
});

test("case 2 (\"Once upon a time\", 64 steps): prompt as one prefill step, then decode", () => {
  const c = reference.cases[1];
  const P = c.prompt_ids.length, cap = 64;
  const pre = tracePrefill(model.config, { cap, rows: P });
  const dec = traceDecode(model.config, { cap });
  const r0 = step(pre, { token: c.prompt_ids, pos: [0] });
  const V = model.config.vocab;
  for (let p = 0; p < c.first_logits.length; p++) {
    const d = maxDiff(r0.output.logits, c.first_logits[p], p * V);
    assert.ok(d < 1e-4, `prompt row ${p}: max |logit - reference| = ${d}`);
  }
  let state = r0.state;
  let tok = argmax(r0.output.logits, (P - 1) * V, V);
  const out = [tok];
  for (let pos = P; pos < c.steps && out.length < c.generated_ids.length; pos++) {
    const r = step(dec, { token: [tok], pos: [pos] }, state);
    state = r.state;
    tok = argmax(r.output.logits);
    if (tok === 1) break;
    out.push(tok);
  }
  assert.deepEqual(out, c.generated_ids);
});
