// The sample kernel rendered to PTX for the H200 (SM90 caps, no GPU needed) assembles with ptxas, without
// spilling, at real vocabularies and at a batch of short rows. Skips where there is no ptxas.
import { test } from "node:test";
import assert from "node:assert/strict";
import { renderPtx } from "../../kernels/render/ptx.ts";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import { sample, sampleLayout } from "../../kernels/lib/sample.ts";
import { sampleList } from "../../kernels/lib/sample_list.ts";
import { sampleMass, sampleParts, sampleStats } from "../../kernels/lib/sample_split.ts";
import { logprobsCombine, logprobsPart, logprobsParts } from "../../kernels/lib/logprobs_split.ts";
import { logitsProcess, logprobs } from "../../kernels/lib/logits.ts";
import { assemble, findPtxas } from "../ptx/ptxas.ts";

const ptxas = findPtxas();

test("sample kernel: PTX for sm_90 assembles without spills", { skip: ptxas ? false : "no ptxas on this machine" }, () => {
  for (const [rows, vocab] of [[1, 151936], [1, 32000], [64, 128], [1, 512]]) {
    const m = renderPtx(sample(SM90_CAPS, { rows, vocab }), { sm: 90 });
    const r = assemble(ptxas!, m.ptx, "sm_90", true);
    assert.ok(r.ok, `${rows}x${vocab}: ${r.log}`);
    assert.match(r.log, /0 bytes spill stores/, `${rows}x${vocab}: ${r.log}`);
  }
});

test("split sample kernels (stats, masses, list, pick) and split logprobs (parts, combine): PTX for sm_90 assembles without spills", { skip: ptxas ? false : "no ptxas on this machine" }, () => {
  for (const [rows, vocab] of [[1, 128256], [32, 151936], [1, 32000]]) {
    const parts = sampleParts(SM90_CAPS, vocab);
    assert.ok(parts > 1, `${vocab}: the H200 splits a long row (parts ${parts})`);
    const shape = { rows, vocab, parts };
    const lp = { rows, vocab, n: 20, parts: logprobsParts(SM90_CAPS, vocab) };
    assert.ok(lp.parts > 1, `${vocab}: the H200 splits logprobs of a long row (parts ${lp.parts})`);
    const list = sampleList(SM90_CAPS, { ...shape, cap: sampleLayout(SM90_CAPS, shape).cap });
    for (const k of [sampleStats(SM90_CAPS, shape), sampleMass(SM90_CAPS, shape), list, sample(SM90_CAPS, shape), logprobsPart(SM90_CAPS, lp), logprobsCombine(SM90_CAPS, lp)]) {
      const r = assemble(ptxas!, renderPtx(k, { sm: 90 }).ptx, "sm_90", true);
      assert.ok(r.ok, `${k.name}: ${r.log}`);
      assert.match(r.log, /0 bytes spill stores/, `${k.name}: ${r.log}`);
    }
  }
});

test("logits_process and logprobs kernels: PTX for sm_90 assembles without spills", { skip: ptxas ? false : "no ptxas on this machine" }, () => {
  for (const [rows, vocab] of [[1, 128256], [16, 151936], [8, 512]]) {
    for (const k of [logitsProcess(SM90_CAPS, { rows, vocab, entries: 1344 }), logprobs(SM90_CAPS, { rows, vocab, n: 20 })]) {
      const r = assemble(ptxas!, renderPtx(k, { sm: 90 }).ptx, "sm_90", true);
      assert.ok(r.ok, `${k.name}: ${r.log}`);
      assert.match(r.log, /0 bytes spill stores/, `${k.name}: ${r.log}`);
    }
  }
});
