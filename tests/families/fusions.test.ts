// The planner's declared fusions (graph/fusions.ts) on every family's decode step (the transformers fixtures'
// configs, every family's quirks on, bf16 matrices, plus the GGUF-style Llama with rope_freqs): each pattern
// fires at every site where its shape is present, and a near miss fails the test naming the node and why.
import { test } from "node:test";
import assert from "node:assert/strict";
import { optimize } from "../../graph/passes/mod.ts";
import { plan } from "../../graph/plan.ts";
import { FUSIONS, fusionReport } from "../../graph/fusions.ts";
import { decomposeGraph } from "../../kernels/decomp/graph.ts";
import { loadModel } from "../../llm/model.ts";
import { familyOf } from "../../llm/registry.ts";
import type { Family, ModelConfig } from "../../llm/families/family.ts";
import { FAMILY_DIRS, FIXTURES } from "./fixtures.ts";

const CASES: { name: string; family: Family; config: ModelConfig }[] = FAMILY_DIRS.map((f) => {
  const m = loadModel(`${FIXTURES}${f}`);
  m.close();
  return { name: f, family: m.family, config: m.config };
});
{
  const llama = CASES.find((c) => c.name === "llama")!;
  CASES.push({ name: "llama-gguf-rope_freqs", family: familyOf("llama"), config: { ...llama.config, ropeStyle: "adjacent", ropeFactors: undefined, ropeFreqFactors: true } });
}
const dtypeOf = (r: { role: string }) => (/norm|bias|rope_freqs/.test(r.role) ? "f32" : "bf16") as "f32" | "bf16";

for (const c of CASES) {
  test(`${c.name}: every declared fusion fires on the decode step (no near miss)`, { timeout: 120_000 }, () => {
    const { tracer, logits } = c.family.trace(c.config, { rows: 1, cap: 64 }, { dtypeOf });
    tracer.output("token", tracer.argmax(logits, 1));
    const p = plan(optimize(decomposeGraph(tracer.build())));
    const report = fusionReport(p);
    console.log(`${c.name}: ${report.map((r) => `${r.name} ${r.fused}/${r.sites}`).join(", ")}`);
    for (const r of report) for (const m of r.missed) console.log(`  near miss: ${r.name} at ${m.label ?? `#${m.node}`}: ${m.why}`);
    const L = c.config.layers;
    const by = Object.fromEntries(report.map((r) => [r.name, r]));
    // Every layer's K and V cache writes are sites, and its attention under the causal mask; with a per-head
    // q/k norm (qwen3, gemma3) K's rope and write follow a norm over each head's whole result, which a gemv's
    // epilogue cannot see, so only V's write is (and the rope is none).
    assert.equal(by["gemv+kv-write"].sites, c.config.qkNorm ? L : 2 * L, `${c.name}: K/V writes`);
    assert.equal(by["gemv+rope"].sites, c.config.qkNorm ? 0 : 2 * L, `${c.name}: ropes`);
    assert.equal(by["gemv+norm"].sites, by["gemv+norm"].fused);
    assert.equal(by["attention+mask"].sites, L, `${c.name}: attention sites`);
    assert.equal(by["gemv+gated"].sites, L, `${c.name}: gated FFN sites`);
    const missed = report.flatMap((r) => r.missed.map((m) => `${r.name} at ${m.label ?? `#${m.node}`}: ${m.why}`));
    assert.deepEqual(missed, []);
  });
}

test("a near miss is reported, not silent: a norm also read by something else keeps its gemv unfused", () => {
  const c = CASES.find((x) => x.name === "llama")!;
  const { tracer, logits } = c.family.trace(c.config, { rows: 1, cap: 64 }, { dtypeOf });
  tracer.output("token", tracer.argmax(logits, 1));
  const g = tracer.build();
  // Also output the first attention norm: its value must now be stored, so it cannot fold into the gemv.
  const norm = g.nodes.find((n) => n.op === "rmsnorm")!;
  const p = plan(optimize({ ...g, outputs: { ...g.outputs, norm: norm.id } }));
  const r = fusionReport(p).find((x) => x.name === "gemv+norm")!;
  assert.equal(r.missed.length, 1, JSON.stringify(r));
  assert.match(r.missed[0].why, /./);
  assert.ok(FUSIONS.length >= 6);
});
