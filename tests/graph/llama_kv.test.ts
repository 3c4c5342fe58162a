// KV layouts and step shapes of the traced Llama step agree: paged vs contiguous (bit for bit), prefill of N
// rows vs N decode steps (within the tier-2 tolerance), and the tier-2 bounds hold against emulated devices.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Storage } from "../../graph/dtype.ts";
import { optimize } from "../../graph/passes/mod.ts";
import { assertClose } from "../../graph/tolerance.ts";
import { traceDecode, tracePrefill } from "../../llm/families/llama.ts";
import { argmax, model, reference, step } from "./stories.ts";

const V = model.config.vocab;

function sameBits(a: Storage, b: Storage): boolean {
  return a.length === b.length && a.every((x, i) => Object.is(x, b[i]));
}

// A paged layout: cap positions in pages of `block` rows, pages placed in a shuffled order.
function pages(cap: number, block: number): Int32Array {
  const n = cap / block, order = Array.from({ length: n }, (_, i) => (i * 5 + 3) % n);
  return Int32Array.from({ length: cap }, (_, t) => order[Math.floor(t / block)] * block + (t % block));
}

test("paged and contiguous KV give bit-identical logits over a 64-token decode", () => {
  const cap = 64, slotMap = pages(cap, 8);
  const flat = traceDecode(model.config, { cap });
  const paged = traceDecode(model.config, { cap, paged: true });
  let sf: Record<string, Storage> | undefined, sp: Record<string, Storage> | undefined;
  let tok = 1;
  const out: number[] = [];
  for (let pos = 0; pos < 64; pos++) {
    const a = step(flat, { token: [tok], pos: [pos] }, sf);
    const b = step(paged, { token: [tok], pos: [pos], slot_map: slotMap, write_map: [slotMap[pos]] }, sp);
    assert.ok(sameBits(a.output.logits, b.output.logits), `logits differ at position ${pos}`);
    sf = a.state;
    sp = b.state;
    tok = argmax(a.output.logits);
    out.push(tok);
  }
  assert.deepEqual(out, reference.cases[0].generated_ids.slice(0, 64));
  // The paged buffer holds the same rows, at the physical places the slot map names.
  const row = model.config.kvHeads * model.config.headDim;
  for (const [name, s] of Object.entries(sf!)) {
    for (let t = 0; t < 64; t++) {
      assert.ok(sameBits(s.subarray(t * row, (t + 1) * row), sp![name].subarray(slotMap[t] * row, (slotMap[t] + 1) * row)));
    }
  }
});

test("prefill of N rows then decode equals N decode steps within the tier-2 tolerance (and the optimized graphs agree)", () => {
  const cap = 32, N = 12, more = 6;
  const prompt = [1, ...reference.cases[0].generated_ids.slice(0, N - 1)];
  const dec = traceDecode(model.config, { cap });
  const pre = tracePrefill(model.config, { cap, rows: N });
  const decOpt = optimize(dec);
  // N single steps, with bounds: the tolerance each row of the prefill must meet.
  let s1: Record<string, Storage> | undefined, b1: Record<string, Float32Array> | undefined;
  const rows: { logits: Storage; bound: Float32Array }[] = [];
  for (let pos = 0; pos < N; pos++) {
    const r = step(dec, { token: [prompt[pos]], pos: [pos] }, s1, { bounds: true, stateBounds: b1 });
    rows.push({ logits: r.output.logits, bound: r.bounds!.output.logits });
    s1 = r.state;
    b1 = r.bounds!.state;
  }
  for (const g of [pre, optimize(pre)]) {
    const r = step(g, { token: prompt, pos: [0] });
    for (let p = 0; p < N; p++) {
      assertClose(`prefill row ${p}`, "f32", r.output.logits.subarray(p * V, (p + 1) * V), rows[p].logits, rows[p].bound);
    }
    for (const k of Object.keys(s1!)) assertClose(`state ${k}`, "f32", r.state[k], s1![k], b1![k]);
    // Decode on from both states.
    let sa = s1!, sb = r.state, ba = b1;
    let tok = argmax(rows[N - 1].logits);
    for (let pos = N; pos < N + more; pos++) {
      const a = step(dec, { token: [tok], pos: [pos] }, sa, { bounds: true, stateBounds: ba });
      const b = step(decOpt, { token: [tok], pos: [pos] }, sb);
      assertClose(`decode at ${pos}`, "f32", b.output.logits, a.output.logits, a.bounds!.output.logits);
      sa = a.state;
      sb = b.state;
      ba = a.bounds!.state;
      tok = argmax(a.output.logits);
    }
  }
});

test("paged prefill equals contiguous prefill bit for bit", () => {
  const cap = 32, N = 7, slotMap = pages(cap, 4);
  const prompt = [1, 403, 407, 261, 378, 432, 383];
  const a = step(tracePrefill(model.config, { cap, rows: N }), { token: prompt, pos: [0] });
  const b = step(tracePrefill(model.config, { cap, rows: N, paged: true }), {
    token: prompt, pos: [0], slot_map: slotMap, write_map: slotMap.subarray(0, N),
  });
  assert.ok(sameBits(a.output.logits, b.output.logits));
});

const tierGraph = traceDecode(model.config, { cap: 32 });
for (const order of ["pairwise", "reverse", "fma"] as const) {
  test(`tier-2 bounds of a 32-token decode cover a device that reassociates (${order})`, () => {
    const cap = 32, g = tierGraph;
    let so: Record<string, Storage> | undefined, sd: Record<string, Storage> | undefined;
    let sb: Record<string, Float32Array> | undefined;
    let tok = 1;
    for (let pos = 0; pos < cap; pos += 1) {
      const o = step(g, { token: [tok], pos: [pos] }, so, { bounds: true, stateBounds: sb });
      const d = step(g, { token: [tok], pos: [pos] }, sd, { order });
      assertClose(`${order} logits at ${pos}`, "f32", d.output.logits, o.output.logits, o.bounds!.output.logits);
      for (const k of Object.keys(o.state)) assertClose(`${order} ${k} at ${pos}`, "f32", d.state[k], o.state[k], o.bounds!.state[k]);
      so = o.state;
      sd = d.state;
      sb = o.bounds!.state;
      tok = argmax(o.output.logits); // both follow the oracle's tokens
    }
  });
}
