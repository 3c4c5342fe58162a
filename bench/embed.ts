// Throughput of an encoder's embed step at a BERT shape (default bert-base: 768 wide, 12 layers, 12 heads,
// 3072 FFN, 30522 vocab) with deterministic random f32 weights held in memory: texts per second at each
// batch size, every text `--seq` tokens (no padding), the step compiled before timing. One table row per
// (batch, seq); compare with PyTorch eager (tests/encoders/fixgen/make.py --bench).
//
//   deno run -A bench/embed.ts --backend ptx --batch 1,32,256 --seq 128 [--layers 12 --dim 768]
//     [--tiled auto|on|off] [--tiled-min-rows N] [--tiled-tile BMxBNxTMxTN]   (the tiled matmul's choice and tile:
//     CompileOptions.tiled / tiledMinRows / tiledTile)
import { parseFlags } from "./flags.ts";
import { Engine } from "../backends/executor.ts";
import { type BackendChoice, openBackend } from "../backends/open.ts";
import { compileGraph, type CompileOptions } from "../kernels/lower.ts";
import type { TensorInfo, WeightStore } from "../graph/weights.ts";
import { checkTensors } from "../llm/families/family.ts";
import { bert } from "../llm/families/bert.ts";
import type { ModelHandle } from "../llm/model.ts";
import { EncoderRunner } from "../llm/encoder.ts";

const { values: a } = parseFlags("bench/embed.ts", {
  options: {
    backend: { type: "string", default: "auto" }, batch: { type: "string", default: "1,32,256" }, seq: { type: "string", default: "128" },
    layers: { type: "string", default: "12" }, dim: { type: "string", default: "768" }, seconds: { type: "string", default: "1" },
    tiled: { type: "string", default: "auto" }, "tiled-min-rows": { type: "string" }, "tiled-tile": { type: "string" },
  },
});
const D = +a.dim!, layers = +a.layers!, heads = D / 64, V = 30522, P = 512;
const json = { architectures: ["BertModel"], model_type: "bert", vocab_size: V, hidden_size: D, num_hidden_layers: layers, num_attention_heads: heads, intermediate_size: 4 * D, max_position_embeddings: P, type_vocab_size: 2, hidden_act: "gelu" };
const config = bert.fromHF({ file: "(bench)", json });
// Random weights: a fixed LCG, scaled so activations stay O(1) through the layers.
const infos = new Map<string, TensorInfo>();
for (const { role, shape } of bert.weights(config)) {
  const name = bert.tensorName("hf", role, config)!;
  infos.set(name, { name, dtype: "f32", shape, byteLength: shape.reduce((x, y) => x * y, 1) * 4 } as TensorInfo);
}
let seed = 12345;
const store: WeightStore = {
  tensors: () => [...infos.values()],
  info: (n) => infos.get(n),
  bytes(n) {
    const t = infos.get(n)!, f = new Float32Array(t.byteLength / 4);
    const scale = t.shape.length === 2 ? 1 / Math.sqrt(t.shape[1]) : 0.1;
    for (let i = 0; i < f.length; i++) f[i] = ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32 - 0.5) * 2 * scale + (/LayerNorm.weight/.test(n) ? 1 : 0);
    return new Uint8Array(f.buffer);
  },
};
const map = checkTensors("(bench)", bert, config, "hf", store);
const model = {
  path: "(bench)", arch: "bert-bench", family: bert, config, format: "hf", store, map, tokenizer: { pad: 0 },
  encoder: { template: { single: [{ seq: "A", type: 0 }], pair: [] }, pooling: { pooling: "mean", normalize: true, source: "bench" }, maxTokens: P },
  close() {},
} as unknown as ModelHandle;

const batches = a.batch!.split(",").map(Number), seqs = a.seq!.split(",").map(Number);
if (!["auto", "on", "off"].includes(a.tiled!)) throw new RangeError(`--tiled: ${a.tiled} is not auto, on or off`);
const copts: CompileOptions = {
  tiled: a.tiled === "auto" ? "auto" : a.tiled === "on",
  tiledMinRows: a["tiled-min-rows"] ? +a["tiled-min-rows"] : undefined,
};
if (a["tiled-tile"]) {
  const t = a["tiled-tile"].split("x").map(Number);
  if (t.length !== 4 || !t.every((v) => Number.isInteger(v) && v > 0)) throw new RangeError(`--tiled-tile: ${a["tiled-tile"]} is not BMxBNxTMxTN`);
  copts.tiledTile = { bm: t[0], bn: t[1], tm: t[2], tn: t[3] };
}
const exec = new Engine(await openBackend(a.backend as BackendChoice), { compile: (g, t) => compileGraph(g, t, copts) });
const t = exec.targetSet();
console.log(`# poot embed, bert shape dim ${D} layers ${layers}, f32 weights, ${t.backend} on ${t.device}, tiled ${a.tiled}${a["tiled-min-rows"] ? ` from ${a["tiled-min-rows"]} rows` : ""}${a["tiled-tile"] ? ` tile ${a["tiled-tile"]}` : ""}`);
console.log("batch seq compile_s ms_per_batch texts_per_s");
await exec.loadWeights(store, map);
const runner = new EncoderRunner(model, exec, { batches, seqs });
for (const S of seqs) {
  for (const B of batches) {
    const inputs = Array.from({ length: B }, (_, b) => ({ ids: Array.from({ length: S }, (_, i) => 1000 + ((b * 7919 + i * 104729) % 28000)), types: new Array(S).fill(0) }));
    const c0 = performance.now();
    await runner.run(inputs, "mean"); // compiles (first use) and warms
    const compile = (performance.now() - c0) / 1000;
    let n = 0;
    const t0 = performance.now();
    while (n < 3 || performance.now() - t0 < +a.seconds! * 1000) {
      await runner.run(inputs, "mean");
      n++;
    }
    const ms = (performance.now() - t0) / n;
    console.log(`${B} ${S} ${compile.toFixed(2)} ${ms.toFixed(3)} ${(B / ms * 1000).toFixed(1)}`);
  }
}
await exec.unload();
