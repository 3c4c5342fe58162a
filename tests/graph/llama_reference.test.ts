// The oracle drives the traced Llama step of stories260K.bin and reproduces llama2.c's greedy outputs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import type { Storage } from "../../graph/dtype.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { parseGGUF } from "../../llm/formats/gguf.ts";
import { traceDecode, tracePrefill, weightMap } from "../../llm/families/llama.ts";
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

test("the same step from stories260K.gguf through the GGUF weight map gives bit-identical logits", () => {
  const gguf = parseGGUF(new Uint8Array(readFileSync(new URL("../../models/stories260K/stories260K.gguf", import.meta.url))));
  const names = [...gguf.tensors()].map((t) => t.name);
  const config = { ...model.config, tiedEmbeddings: !names.includes("output.weight") };
  const map = weightMap(config, "gguf", names);
  assert.equal(map.get("attn.q@3"), "blk.3.attn_q.weight");
  assert.equal(map.get("output"), "output.weight");
  const a = traceDecode(model.config, { cap: 16 }), b = traceDecode(config, { cap: 16 });
  const cb = constsFromStore(gguf, map);
  let sa: Record<string, Storage> | undefined, sb: Record<string, Storage> | undefined;
  let tok = 1;
  for (let pos = 0; pos < 16; pos++) {
    const ra = step(a, { token: [tok], pos: [pos] }, sa);
    const rb = evaluate(b, { consts: cb, slots: { token: [tok], pos: [pos] }, state: sb });
    assert.ok(ra.output.logits.every((x, i) => Object.is(x, rb.output.logits[i])), `position ${pos}`);
    sa = ra.state;
    sb = rb.state;
    tok = argmax(ra.output.logits);
  }
});

test("an f16 KV cache still follows the reference's first 24 greedy tokens", () => {
  const g = traceDecode(model.config, { cap: 32, kvDtype: "f16" });
  let state: Record<string, Storage> | undefined;
  let tok = 1;
  const out: number[] = [];
  for (let pos = 0; pos < 24; pos++) {
    const r = step(g, { token: [tok], pos: [pos] }, state);
    state = r.state;
    assert.ok(state["k_cache@0"] instanceof Uint16Array);
    tok = argmax(r.output.logits);
    out.push(tok);
  }
  assert.deepEqual(out, reference.cases[0].generated_ids.slice(0, 24));
});
