// stories260K greedy decode on the wgpu device: tokens per second, and per token the host microseconds spent
// encoding the cached dispatch list, submits and maps. Not a test (run it by hand, also on the GPU machine):
//   deno run -A tests/wgpu/stories_bench.ts [--tokens 200] [--eager] [--pass-per-dispatch] [--no-early-map]
// (--no-early-map awaits every mapAsync promise, as before the early read: the before/after of that fix)
// Prints one JSON line.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Engine } from "../../backends/executor.ts";
import { WgpuDevice } from "../../backends/wgpu/mod.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { readLlama2c } from "../../llm/formats/llama2c.ts";
import { traceLlama, weightMap } from "../../llm/families/llama.ts";
import { loadModel } from "../../llm/model.ts";

const { values } = parseArgs({
  options: {
    tokens: { type: "string", default: "200" },
    eager: { type: "boolean", default: false },
    "pass-per-dispatch": { type: "boolean", default: false },
    "no-early-map": { type: "boolean", default: false },
    model: { type: "string", default: new URL("../../models/stories260K/stories260K.gguf", import.meta.url).pathname },
  },
});
const steps = Number(values.tokens);
const dev = await WgpuDevice.open({ passPerDispatch: values["pass-per-dispatch"], earlyMap: !values["no-early-map"] });
if (typeof dev === "string") {
  console.log(JSON.stringify({ skipped: dev }));
} else {
  // The repo's GGUF by default (only the repository travels to the GPU machine); a llama2.c .bin also works.
  const model = values.model!.endsWith(".gguf") ? loadModel(values.model!) : undefined;
  const l2c = model ? undefined : readLlama2c(readFileSync(values.model!));
  const cfg = model?.config ?? l2c!.config;
  const eng = new Engine(dev, { compile: compileGraph, timeoutMs: 120_000 });
  await eng.loadWeights(model?.store ?? l2c!.store, model?.map ?? weightMap(cfg, "llama2c"));
  const { tracer, logits } = traceLlama(cfg, { rows: 1, cap: Math.max(256, steps + 4) }); // steps + 3 warm-up positions
  tracer.output("token", tracer.argmax(logits, 1));
  const id = eng.addEntry("decode", tracer.build());
  let tok = 1;
  const ids: number[] = [];
  const warm = 3;
  let s0 = { ...dev.stats }, t0 = performance.now();
  for (let pos = 0; pos < steps + warm; pos++) {
    if (pos === warm) {
      s0 = { ...dev.stats };
      t0 = performance.now();
    }
    const r = await eng.step(id, { token: new Int32Array([tok]), pos: new Int32Array([pos]) }, { eager: values.eager });
    tok = r.outputs.token[0];
    ids.push(tok);
  }
  const ms = performance.now() - t0, s = dev.stats;
  console.log(JSON.stringify({
    backend: "wgpu",
    device: dev.target.device,
    mode: values.eager ? "eager" : "capture",
    passPerDispatch: values["pass-per-dispatch"],
    earlyMap: !values["no-early-map"],
    earlyMapsPerToken: (s.earlyMaps - s0.earlyMaps) / steps,
    tokens: steps,
    tokPerSec: +(steps / (ms / 1000)).toFixed(1),
    msPerToken: +(ms / steps).toFixed(3),
    dispatchesPerToken: (s.dispatches - s0.dispatches) / steps,
    submitsPerToken: (s.submits - s0.submits) / steps,
    mapsPerToken: (s.maps - s0.maps) / steps,
    encodeMicrosPerToken: +((s.encodeMicros - s0.encodeMicros) / steps).toFixed(1),
    preEncodeMicrosPerToken: +((s.preEncodeMicros - s0.preEncodeMicros) / steps).toFixed(1),
    submitMicrosPerToken: +((s.submitMicros - s0.submitMicros) / steps).toFixed(1),
    mapMicrosPerToken: +((s.mapMicros - s0.mapMicros) / steps).toFixed(1),
    hostMicrosPerStep: +eng.stats().hostMicrosPerStep.toFixed(1),
    first: ids.slice(0, 12),
  }));
  await eng.unload();
}
