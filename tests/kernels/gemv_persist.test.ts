// Persistent gemv grids (kernels/lib/gemv_tune.ts GemvTune.persist: a grid of a few workgroups per multiprocessor,
// each walking the teams' workgroups in strides of the grid): the same bits as the grid of one workgroup per team
// workgroup, and within the oracle's tolerance, on every device. The device's caps say one multiprocessor here,
// so the grid is one or a few workgroups and every one of them loops (on ptx too, whose 132 would cover these
// shapes). Kernels: block weights with several row units per team on teams of several subgroups (their shared
// scratch reused by the next workgroup), one-subgroup teams several a workgroup (the last one's teams past the
// end), float weights; then a Q4_K_M decode plan (x prepared once, sibling launches) for three tokens, and the
// lockstep JS device's variants (32- and 8-lane subgroups, none, 2-D/3-D grids; debug barriers that every lane must
// reach).
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device } from "../../backends/device.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { Engine } from "../../backends/executor.ts";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";
import type { Program } from "../../kernels/program.ts";
import { type Caps, JS_CAPS, type TargetSet } from "../../kernels/target.ts";
import { familyOf } from "../../llm/registry.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import type { LlamaConfig } from "../../llm/families/llama.ts";
import { gemvCase } from "./cases.ts";
import { assertCase, runKernel } from "./harness.ts";
import { openDevice, selectedBackends, slowDevice } from "../devices/index.ts";

const one = (caps: Caps): Caps => ({ ...caps, multiprocessors: 1 });
const persistent = (name: string) => /_g\d+$/.test(name);

type Opts = Parameters<typeof gemvCase>[2];
const SHAPES: [Parameters<typeof gemvCase>[0], number, Opts][] = [
  ["q4_k", 512, { hd: 16, heads: 3, rot: 12, style: "half", n: 7, ffn: 5, cap: 3, pos: 1, tune: { rows: 3, lanes: 64 } }],
  ["q8_0", 64, { hd: 8, heads: 2, rot: 8, style: "adjacent", n: 9, ffn: 6, cap: 2, pos: 1, tune: { rows: 1, lanes: 32, teams: 4 } }],
  ["f16", 96, { hd: 12, heads: 2, rot: 8, style: "adjacent", n: 13, ffn: 5, cap: 4, pos: 2, tune: { rows: 1, unroll: 2 } }],
];

/** Each shape's kernel on grids of `persists` subgroups' worth, against the plain grid and the oracle. */
async function kernels(dev: Device, caps: Caps, persists = [1, 3]): Promise<void> {
  for (const [w, k, o] of SHAPES) {
    const base = gemvCase(w, k, o).make(caps);
    for (const persist of persists) {
      // (a case's inputs are drawn by its name, which names the tuning: the plain grid runs this one's)
      const kc = gemvCase(w, k, { ...o, tune: { ...o.tune, persist } });
      const kern = kc.make(one(caps));
      assert.ok(persistent(kern.name) || kern.grid[0] === base.grid[0], `${kern.name}: neither persistent nor the plain grid`);
      if (persist === 1) assert.ok(persistent(kern.name), `${kern.name}: a grid of one workgroup loops`);
      const inputs = kc.inputs(), out = await runKernel(dev, kern, inputs), plain = await runKernel(dev, base, inputs);
      assertCase(kc, { inputs, outputs: out });
      out.forEach((b, i) => assert.deepEqual(b, plain[i], `${kern.name}: binding ${i} differs from the plain grid's`));
    }
  }
}

// Eight layers, v in q6_k in some (llama-quantize's Q4_K_M), as tests/kernels/siblings.test.ts
const TINY: LlamaConfig = {
  dim: 256, hidden: 512, layers: 8, heads: 4, kvHeads: 2, headDim: 64, vocab: 96,
  rmsEps: 1e-5, ropeTheta: 10000, ropeStyle: "half", tiedEmbeddings: false,
};

/** The Q4_K_M plan's logits for three tokens, its gemvs on persistent grids or not; and whether any was. */
async function logits(dev: Device, persist: number | undefined): Promise<{ out: Float32Array[]; looped: boolean }> {
  const model = syntheticLlama(TINY, { dtype: "q4_k_m", seed: 5, std: 0.5 });
  const { tracer, logits } = familyOf("llama").trace(TINY, { rows: 1, cap: 64, kvDtype: "f16" }, { dtypeOf: model.dtypeOf } as never);
  tracer.output("logits", logits);
  const graph = tracer.build();
  let looped = false;
  const compile = (g: typeof graph, t: TargetSet, o?: CompileOptions): Program => {
    const p = compileGraph(g, { ...t, caps: one(t.caps) }, o);
    looped ||= p.steps.some((s) => s.k === "kernel" && s.kernel.name.split("+").some(persistent));
    return p;
  };
  const eng = new Engine(dev, { compile, ownsDevice: false, timeoutMs: 120_000 });
  try {
    await eng.loadWeights(model.store, model.map);
    const id = eng.addEntry("decode", graph, { quantizedX: true, xqPrep: true, ...(persist ? { gemvTune: { persist } } : {}) });
    const out: Float32Array[] = [];
    for (let p = 0; p < 3; p++) {
      const r = await eng.step(id, { token: new Int32Array([(p * 37 + 3) % TINY.vocab]), pos: new Int32Array([p]) });
      out.push(Float32Array.from(r.outputs.logits as Float32Array));
    }
    return { out, looped };
  } finally {
    await eng.unload();
  }
}

async function plan(dev: Device): Promise<void> {
  const plain = await logits(dev, undefined), pers = await logits(dev, 2);
  assert.ok(!plain.looped && pers.looped, "only the persistent plan's gemvs loop");
  plain.out.forEach((l, p) => {
    assert.ok(l.every(Number.isFinite), `pos ${p}: non-finite logits`);
    assert.deepEqual(new Uint32Array(pers.out[p].buffer), new Uint32Array(l.buffer), `pos ${p}: logits differ`);
  });
}

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;
  test(`persistent gemv grids on ${backend}: the plain grid's bits, within the oracle's tolerance`, { skip, timeout: 600_000 }, async () => {
    if (typeof dev === "string") return;
    await kernels(dev, dev.target.caps);
  });
  const heavy = skip || slowDevice(dev as Device) || ("Bun" in globalThis && backend === "js" ? "left to Deno (the same JS kernels)" : false);
  test(`persistent gemv grids on ${backend}: a Q4_K_M decode plan's logits bit for bit`, { skip: heavy, timeout: 600_000 }, async () => {
    if (typeof dev === "string") return;
    await plan(dev);
  });
}

// (sg32: one-subgroup teams four a workgroup, the last workgroup's teams past the end; tiny: grids of at most 3 x 2
// workgroups a plane, so that both the plain and the persistent grids are 2-D or 3-D)
const LOCKSTEP: Record<string, [Caps, number[]]> = {
  sg32: [{ ...JS_CAPS, subgroupSize: 32, maxWorkgroupSize: 1024 }, [1, 8]],
  sg8: [{ ...JS_CAPS, subgroupSize: 8, maxWorkgroupSize: 128 }, [1, 3]],
  shared: [{ ...JS_CAPS, subgroups: false, subgroupSize: 0, maxWorkgroupSize: 64 }, [1, 3]],
  tiny: [{ ...JS_CAPS, subgroupSize: 8, maxWorkgroupSize: 128, maxWorkgroupsPerDim: [3, 2, 65535] }, [3, 16]],
};
for (const [tag, [caps, persists]] of Object.entries(LOCKSTEP)) {
  test(`persistent gemv grids on the lockstep JS device (${tag}, barriers checked)`, async () => {
    const dev = new JsDevice({ debug: true, caps });
    try {
      await kernels(dev, caps, persists);
    } finally {
      await dev.destroy();
    }
  });
}
