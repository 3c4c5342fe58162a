// The short-context decode entry (kernels/lower/attention.ts SHORT_DECODE, llm/steps.ts): where it applies
// (shortDecodeReach: where decode attention is the MMA flash decode and a combine), that a step compiled with it
// gives the subgroup partials-and-combine entry's bits at every position, below its reach (the fused kernel's
// workgroup combine) and past it (its counted last-team combine), and that the Driver makes it, runs it by position
// and generates the same greedy tokens as without it (on the JS device with MMA tiles emulated: its flash decode
// rounds otherwise than the fused kernel, which tier 3 holds to llama.cpp's tokens on the H200).
import { test } from "node:test";
import assert from "node:assert/strict";
import { compileGraph, type CompileOptions, SHORT_DECODE, shortDecodeReach } from "../../kernels/lower.ts";
import { JS_CAPS, type TargetSet } from "../../kernels/target.ts";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import * as lib from "../../kernels/lib/mod.ts";
import { JsDevice } from "../../backends/js/mod.ts";
import { Engine } from "../../backends/executor.ts";
import type { Graph } from "../../graph/ir.ts";
import { familyOf } from "../../llm/registry.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import type { LlamaConfig } from "../../llm/families/llama.ts";
import { Driver } from "../../engine.ts";
import type { ModelHandle } from "../../llm/model.ts";
import type { Tokenizer } from "../../llm/tokenizer/mod.ts";
import { InvalidArgumentError } from "../../llm/errors.ts";

const bun = "Bun" in globalThis;
const skip = bun ? "left to Deno (the same code; Bun's JS device is slower)" : false;
const js32 = (mma = false) => new JsDevice({ caps: { ...JS_CAPS, subgroupSize: 32, maxWorkgroupSize: 256, mma } });

test("shortDecodeReach: the fused kernel's local reach where decode attention is two kernels; none with a dispatch gap or one-lane teams", () => {
  const qwen = { heads: 14, kvHeads: 2, hd: 64 }, l8b = { heads: 32, kvHeads: 8, hd: 128 };
  // hd 64 over f16 K/V: 32 positions a trip, 8 teams a workgroup; hd 128: 16 a trip
  assert.equal(shortDecodeReach(SM90_CAPS, { ...qwen, cap: 2048, kv: "f16" }), 256);
  assert.equal(shortDecodeReach(SM90_CAPS, { ...l8b, cap: 2048, kv: "f16" }), 128);
  assert.equal(shortDecodeReach({ ...JS_CAPS, mma: true }, { ...l8b, cap: 8192, kv: "f16" }), 128);
  // a capacity the workgroup's chunks cover whole
  assert.equal(shortDecodeReach(SM90_CAPS, { ...qwen, cap: 256, kv: "f16" }), 256);
  // fused already (a dispatch gap); no flash decode (no MMA tiles, f32 K/V, head_dim 96)
  assert.equal(shortDecodeReach({ ...SM90_CAPS, dispatchGap: true }, { ...qwen, cap: 2048, kv: "f16" }), 0);
  assert.equal(shortDecodeReach(JS_CAPS, { ...qwen, cap: 2048, kv: "f16" }), 0);
  assert.equal(shortDecodeReach(SM90_CAPS, { ...l8b, cap: 2048, kv: "f32" }), 0);
  assert.equal(shortDecodeReach(SM90_CAPS, { heads: 32, kvHeads: 32, hd: 96, cap: 2048, kv: "f16" }), 0);
});

test("liveChunks: a short row spreads a slot or two a team over the workgroup's 8 teams; longer ones whole trips, the reach unchanged", () => {
  const qwen = lib.attentionChunking(SM90_CAPS, { heads: 14, kvHeads: 2, hd: 64, cap: 2048, kv: "f16", splits: 16 });
  assert.deepEqual(qwen, { trip: 32, step: 4, spread: 8, tail: 2 });
  // 17 positions: 5 teams of a slot (4 positions) each, where whole trips put them all on one team; up to 64
  // (8 teams of 2 slots) spread, past that whole trips of 32
  assert.deepEqual([1, 4, 5, 17, 33, 64, 65, 100, 256, 257, 300].map((n) => lib.liveChunks(n, 16, qwen)), [1, 1, 2, 5, 8, 8, 3, 4, 8, 9, 10]);
  assert.deepEqual([1, 5, 17, 33, 64, 256, 257].map((n) => lib.liveChunks(n, 16, { ...qwen, spread: 1 })), [1, 1, 1, 2, 2, 8, 9]);
  for (const off of [{ spread: false }, { prefetch: true }]) {
    assert.equal(lib.attentionChunking(SM90_CAPS, { heads: 14, kvHeads: 2, hd: 64, cap: 2048, kv: "f16", splits: 16, ...off }).spread, 1);
  }
  // hd 128: 16 positions a trip, 2 a slot, spread up to 32; at most the splits
  const l8b = lib.attentionChunking(SM90_CAPS, { heads: 32, kvHeads: 8, hd: 128, cap: 2048, kv: "f16", splits: 16 });
  assert.deepEqual([4, 17, 32, 33, 49, 200, 300].map((n) => lib.liveChunks(n, 16, l8b)), [2, 8, 8, 3, 4, 13, 16]);
  assert.equal(lib.liveChunks(100, 1, l8b), 1);
});

// One layer, hd 64, two heads: 16 chunks at cap 1024 against 8 teams a workgroup, so a reach of 128 of 1024.
const TINY: LlamaConfig = {
  dim: 128, hidden: 192, layers: 1, heads: 2, kvHeads: 1, headDim: 64, vocab: 96,
  rmsEps: 1e-5, ropeTheta: 10000, ropeStyle: "half", tiedEmbeddings: true,
};
const CAP = 1024;

test("a decode step under SHORT_DECODE gives the default entry's bits below its reach and past it (JS, 32-lane subgroups)", { skip, timeout: 300_000 }, async () => {
  const dev = js32();
  const caps = dev.target.caps;
  // the lowering's 16 chunks at this capacity (kernels/lower/attention.ts attentionSplitCount)
  const reach = lib.attentionLocalReach(caps, { heads: TINY.heads, kvHeads: TINY.kvHeads, hd: TINY.headDim, cap: CAP, kv: "f32", splits: 16 });
  assert.equal(reach, 128);
  const model = syntheticLlama(TINY, { dtype: "f32", seed: 7, std: 0.5 });
  const { tracer, logits } = familyOf("llama").trace(TINY, { rows: 1, cap: CAP, kvDtype: "f32" }, { dtypeOf: model.dtypeOf });
  tracer.output("logits", logits);
  const graph: Graph = tracer.build();
  const plans: string[][] = [];
  const compile = (g: Graph, t: TargetSet, o?: CompileOptions) => {
    const p = compileGraph(g, t, o);
    plans.push(p.steps.flatMap((s) => (s.k === "kernel" ? [s.kernel.name] : [])));
    return p;
  };
  const run = async (opts?: CompileOptions): Promise<Float32Array[]> => {
    const eng = new Engine(dev, { compile, ownsDevice: false });
    try {
      await eng.loadWeights(model.store, model.map);
      const id = eng.addEntry("decode", graph, opts);
      const out: Float32Array[] = [];
      for (let p = 0; p < reach + 24; p++) {
        const r = await eng.step(id, { token: new Int32Array([(p * 37) % TINY.vocab]), pos: new Int32Array([p]) });
        out.push(Float32Array.from(r.outputs.logits as Float32Array));
      }
      return out;
    } finally {
      await eng.unload();
    }
  };
  const long = await run(), short = await run(SHORT_DECODE);
  // the default plans partials and a combine; SHORT_DECODE the fused kernel with its local combine, one dispatch fewer
  assert.ok(plans[0].some((n) => n.startsWith("attention_partial_r1_h2_kv1_d64_c1024_f32_i32_s16")) && plans[0].some((n) => n.startsWith("attention_combine")), plans[0].join(" "));
  assert.ok(plans[1].some((n) => n.startsWith("attention_fused_r1_h2_kv1_d64_c1024_f32_i32_s16") && n.includes("_wl")) && !plans[1].some((n) => n.startsWith("attention_combine")), plans[1].join(" "));
  assert.equal(plans[1].length, plans[0].length - 1);
  for (let p = 0; p < long.length; p++) {
    assert.ok(long[p].every(Number.isFinite), `pos ${p}: non-finite logits`);
    assert.deepEqual(new Uint32Array(short[p].buffer), new Uint32Array(long[p].buffer), `pos ${p} (reach ${reach}): logits differ`);
  }
  await dev.destroy();
});

// TINY as a model the Driver runs (random weights, no tokenizer: token ids in, no text), as bench/driver.ts makes one
const NO_TEXT = { decoder: () => ({ push: () => "", flush: () => "" }), isEog: () => false, eog: new Set<number>() } as unknown as Tokenizer;
const tiny = (() => {
  const syn = syntheticLlama(TINY, { dtype: "f32", seed: 3, std: 0.5 });
  return { arch: "llama", family: familyOf("llama"), config: TINY, store: syn.store, map: syn.map, tokenizer: NO_TEXT, path: "tiny", format: "gguf", contextLength: 4096, close() {} } as unknown as ModelHandle;
})();

test("the Driver's short-context entry: made by reach, run by position, the same tokens as without it (JS, MMA tiles)", { skip, timeout: 300_000 }, async () => {
  const dev = js32(true);
  const gen = async (shortDecode: boolean | number, stepsAhead = 1) => {
    const seen: (CompileOptions | undefined)[] = [];
    const engine = new Engine(dev, { compile: (g, t, o) => (seen.push(o), compileGraph(g, t, o)), ownsDevice: false });
    // the entry each one-row step ran, by its position
    const ran: [number, number][] = [];
    const step = engine.step.bind(engine);
    engine.step = (id, slots, o) => {
      const tok = slots.token as Int32Array, pos = slots.pos as Int32Array;
      if (tok.length === 1) ran.push([pos[0], id]);
      return step(id, slots, o);
    };
    // f16 K/V: the MMA flash decode's (a 256-position context: 4 chunks, inside one workgroup's reach)
    const driver = await Driver.open(tiny, engine, { ctx: 256, prefill: [16], stepsAhead, kvDtype: "f16", shortDecode });
    try {
      const r = await driver.generate([1, 5, 9, 13, 17], { maxTokens: 70, ignoreEos: true });
      return { ids: r.generatedIds, keys: engine.stats().keys, seen, ran };
    } finally {
      await driver.close();
    }
  };
  const off = await gen(false), whole = await gen(true), cut = await gen(40), ahead = await gen(40, 4);
  assert.equal(off.ids.length, 70);
  // the reach covers the context: the decode step is one entry, compiled under SHORT_DECODE
  assert.ok(!whole.keys.some((k) => k.endsWith(":short")), whole.keys.join(" "));
  assert.equal(whole.seen.filter((o) => o === SHORT_DECODE).length, 1);
  assert.equal(off.seen.filter((o) => o === SHORT_DECODE).length, 0);
  // at most 40 positions: a second entry beside the step's
  const shortKeys = cut.keys.filter((k) => k.endsWith(":short"));
  assert.equal(shortKeys.length, 1, cut.keys.join(" "));
  assert.ok(shortKeys[0].includes(":rows=1:"), shortKeys[0]);
  assert.deepEqual(whole.ids, off.ids);
  assert.deepEqual(cut.ids, off.ids);
  // 4 steps in flight, fed by the device (a block crosses the reach: its steps on both entries, one token State)
  assert.deepEqual(ahead.ids, off.ids);
  assert.equal(new Set(ahead.ran.map(([, id]) => id)).size, 2);
  // positions below 40 on one entry, the rest on another; without the cut one entry throughout
  const below = new Set(cut.ran.filter(([p]) => p < 40).map(([, id]) => id)), past = new Set(cut.ran.filter(([p]) => p >= 40).map(([, id]) => id));
  assert.ok(below.size === 1 && past.size === 1 && [...below][0] !== [...past][0] && cut.ran.some(([p]) => p >= 70), JSON.stringify(cut.ran));
  assert.equal(new Set(whole.ran.map(([, id]) => id)).size, 1);
  await assert.rejects(gen(0), InvalidArgumentError);
  await dev.destroy();
});
