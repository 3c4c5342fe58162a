// The tensor-core path end to end on the CPU: a Llama prefill step (20 rows, bf16 weights) compiled for a
// JS device that offers MMA tiles (emulated) picks the MMA matmul and the flash attention, and its logits equal
// the FMA path's (the same device without MMA) within the MMA's precision, x split or rounded once; a decode
// step keeps the gemv.
import { test } from "node:test";
import assert from "node:assert/strict";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";
import { type Tensor, Tracer } from "../../graph/tracer.ts";
import { JS_CAPS } from "../../kernels/target.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { randomLlama, TINY_LLAMA } from "../ptx/model.ts";
import { logitGap, prefillLogits } from "./mma_cases.ts";

const ROWS = 20, CAP = 160; // cap > 128: the flash attention splits its positions (3 ways)
const caps = { ...JS_CAPS, subgroups: true, subgroupSize: 32, maxWorkgroupSize: 1024 };

function step(rows: number) {
  const { store, map, dtypeOf } = randomLlama(TINY_LLAMA, 11, true);
  const { tracer, logits } = traceLlama(TINY_LLAMA, { rows, cap: CAP }, { dtypeOf });
  tracer.output("logits", logits);
  return { store, map, graph: tracer.build() };
}

test("lowering picks the MMA matmul and flash attention for a 20-row chunk only where caps.mma", () => {
  const { graph } = step(ROWS);
  const names = (mma: boolean) => compileGraph(graph, { backend: "js", device: "cpu", caps: { ...caps, mma }, memory: { totalBytes: 2 ** 30 }, watchdogBudget: 0 })
    .steps.flatMap((s) => s.k === "kernel" ? [s.kernel.name] : []);
  const on = names(true), off = names(false);
  assert.ok(on.some((n) => n.startsWith("mma_matmul")), "no MMA matmul with caps.mma");
  assert.ok(on.some((n) => n.startsWith("flash_attention")), "no flash attention with caps.mma");
  assert.ok(!off.some((n) => n.startsWith("mma_") || n.startsWith("flash_")), "MMA kernels without caps.mma");
  const decode = compileGraph(step(1).graph, { backend: "js", device: "cpu", caps: { ...caps, mma: true }, memory: { totalBytes: 2 ** 30 }, watchdogBudget: 0 });
  assert.ok(!decode.steps.some((s) => s.k === "kernel" && /^(mma_|flash_)/.test(s.kernel.name)), "batch-1 decode must keep its gemv kernels");
});

test("a 20-row Llama prefill on (emulated) MMA tiles equals the FMA path within the MMA's precision, x split or rounded once", { timeout: 120_000 }, async () => {
  const m = step(ROWS);
  const b = await prefillLogits(m, ROWS, TINY_LLAMA.vocab, { ...caps, mma: false });
  // split MMA: ~2^-16 relative per product; over two layers the logits move by less than 1e-4 of their range
  // (measured: ~5e-6). x rounded once (the prefill default): 8 significant bits, a 2^8 times wider bound.
  for (const [o, bound] of [[{ mmaSplit: true }, 1e-4], [{}, 2 ** 8 * 1e-4]] as const) {
    const a = await prefillLogits(m, ROWS, TINY_LLAMA.vocab, { ...caps, mma: true }, o);
    const { worst, scale } = logitGap(a, b);
    console.log(`mma ${JSON.stringify(o)} vs fma: max diff ${worst.toExponential(2)} of logits up to ${scale.toFixed(3)}`);
    assert.ok(worst <= bound * scale, `${JSON.stringify(o)}: max |mma - fma| = ${worst} of logits up to ${scale}`);
    assert.ok(worst > 0 || a.length === 0, "the MMA path ran the same kernels as the FMA path");
  }
});

test("the SiLU product before the down projection is made in its MMA x preparation: no kernel of its own, the same logits bit for bit", { timeout: 120_000 }, async () => {
  const m = step(ROWS);
  const target = { backend: "js" as const, device: "cpu", caps: { ...caps, mma: true }, memory: { totalBytes: 2 ** 30 }, watchdogBudget: 0 };
  const names = (o: CompileOptions) => compileGraph(m.graph, target, o)
    .steps.flatMap((s) => s.k === "kernel" ? [s.kernel.name] : []);
  const on = names({}), off = names({ mmaPrepFuse: false });
  const count = (ns: string[], re: RegExp) => ns.filter((n) => re.test(n)).length;
  // one a layer: the down projection's x
  assert.equal(count(on, /^mma_prep_.*_ew2$/), TINY_LLAMA.layers, on.join(" "));
  assert.equal(count(off, /^elementwise/) - count(on, /^elementwise/), TINY_LLAMA.layers, `${off.join(" ")}\n${on.join(" ")}`);
  assert.equal(on.length, off.length - TINY_LLAMA.layers);
  // and the product is not stored: the arena holds one [rows, ffn] f32 value fewer at the MLP
  const arena = (o: CompileOptions) => compileGraph(m.graph, target, o).buffers.find((b) => b.kind === "arena" && b.name === "arena")!.bytes;
  assert.ok(arena({}) < arena({ mmaPrepFuse: false }), `arena ${arena({})} against ${arena({ mmaPrepFuse: false })} bytes`);
  for (const split of [true, false]) {
    const a = await prefillLogits(m, ROWS, TINY_LLAMA.vocab, { ...caps, mma: true }, { mmaSplit: split });
    const b = await prefillLogits(m, ROWS, TINY_LLAMA.vocab, { ...caps, mma: true }, { mmaSplit: split, mmaPrepFuse: false });
    assert.deepEqual(a, b, `x ${split ? "split" : "rounded once"}: the fused preparation changed the logits`);
  }
});

test("an elementwise value is made in an MMA matmul's x preparation only when that matmul alone reads it, as x, right after it", () => {
  const target = { backend: "js" as const, device: "cpu", caps: { ...caps, mma: true }, memory: { totalBytes: 2 ** 30 }, watchdogBudget: 0 };
  const fused = (build: (t: Tracer, h: Tensor) => Record<string, Tensor>): boolean => {
    const t = new Tracer();
    const x = t.slot("x", { kind: "Input", dtype: "f32", shape: [32, 64] }), a = t.slot("a", { kind: "Input", dtype: "f32", shape: [32, 64] });
    for (const [name, v] of Object.entries(build(t, t.siluMul(x, a)))) t.output(name, v);
    const names = compileGraph(t.build(), target).steps.flatMap((s) => s.k === "kernel" ? [s.kernel.name] : []);
    const ew = names.some((n) => /_ew2$/.test(n));
    assert.equal(ew, !names.some((n) => n.startsWith("elementwise")), names.join(" "));
    return ew;
  };
  const w = (t: Tracer, dt: "bf16" | "f32" = "bf16", n = 64) => t.const({ role: `w${dt}${n}` }, dt, [n, 64]);
  assert.ok(fused((t, h) => ({ y: t.matmul(h, w(t)) })), "the plain case");
  assert.ok(!fused((t, h) => ({ y: t.add(h, t.matmul(h, w(t))) })), "x and the residual");
  assert.ok(!fused((t, h) => ({ y: t.matmul(h, w(t)), z: t.matmul(h, w(t, "bf16", 32)) })), "two readers");
  assert.ok(!fused((t, h) => ({ y: t.matmul(h, w(t)), h })), "an output");
  assert.ok(!fused((t, h) => ({ y: t.matmul(h, w(t, "f32")) })), "f32 weights (no MMA)");
});
