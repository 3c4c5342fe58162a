// The larger check of issue 13 (run on the GPU machine after make_large.py): each family's realistic-width bf16
// checkpoint loads from its Hugging Face folder and, on each backend, the decode step's logits follow
// transformers' fp32 reference (on the same bf16 weights) for 64 greedy steps, teacher-forced on the reference
// tokens: every element within ATOL_REL·rms(ref row) + RTOL·|ref| (f32 on both sides; only summation order
// differs), never non-finite, and the same argmax unless the reference's top-two margin is inside the
// tolerance. With llama-3-8b present, also the peak RSS while its 16 GB of safetensors upload.
//
// Usage: deno run -A tests/families/h200/compare.ts OUTDIR ptx,vulkan,wgpu [families...]
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { compileGraph, Engine, loadModel, openBackend } from "../../../engine.ts";
import type { BackendChoice } from "../../../engine.ts";
import type { WeightStore } from "../../../graph/weights.ts";
import { dtypesFromStore } from "../../../llm/families/family.ts";

const [out, backends = "ptx,vulkan,wgpu", ...only] = (globalThis as unknown as { Deno: { args: string[] } }).Deno.args;
const FAMILIES = only.length ? only : ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"];
const ATOL_REL = 2e-3, RTOL = 1e-3;
const rss = () => (globalThis as unknown as { process: { memoryUsage(): { rss: number } } }).process.memoryUsage().rss;

let failures = 0;
for (const family of FAMILIES) {
  const dir = join(out, family);
  if (!existsSync(join(dir, "ref.json"))) {
    console.log(`${family}: no checkpoint in ${dir}`);
    continue;
  }
  const ref = JSON.parse(readFileSync(join(dir, "ref.json"), "utf8")) as { prompt: number[]; ids: number[]; steps: number; vocab: number };
  const raw = readFileSync(join(dir, "ref_logits.f32"));
  const refLogits = new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
  for (const backend of backends.split(",")) {
    const model = loadModel(dir);
    const dev = await openBackend(backend as BackendChoice).catch((e) => e as Error);
    if (dev instanceof Error) {
      console.log(`${family} ${backend}: skipped (${dev.message.split("\n")[0]})`);
      continue;
    }
    const engine = new Engine(dev, { compile: compileGraph });
    try {
      await engine.loadWeights(model.store, model.map);
      model.close();
      const cap = ref.ids.length + 8;
      const { tracer, logits } = model.family.trace(model.config, { rows: 1, cap }, { dtypeOf: dtypesFromStore(model.store, model.map) });
      tracer.output("logits", logits);
      const id = engine.addEntry(`${family}:check`, tracer.build());
      engine.resetState();
      let worst = 0, flips = 0, bad = "";
      const P = ref.prompt.length, V = ref.vocab;
      for (let t = 0; t < P - 1 + ref.steps; t++) {
        const r = await engine.step(id, { token: new Int32Array([ref.ids[t]]), pos: new Int32Array([t]) });
        if (t < P - 1) continue;
        const got = r.outputs.logits as Float32Array, s = t - (P - 1);
        const want = refLogits.subarray(s * V, (s + 1) * V);
        let ss = 0;
        for (let i = 0; i < V; i++) ss += want[i] * want[i];
        const atol = ATOL_REL * Math.sqrt(ss / V);
        let a = 0, b = 0;
        for (let i = 0; i < V; i++) {
          const d = Math.abs(got[i] - want[i]), tol = atol + RTOL * Math.abs(want[i]);
          if (!Number.isFinite(got[i]) || d > tol) bad ||= `step ${s} logit ${i}: ${got[i]} vs ${want[i]} (tolerance ${tol.toExponential(2)})`;
          worst = Math.max(worst, d / tol);
          if (got[i] > got[a]) a = i;
          if (want[i] > want[b]) b = i;
        }
        if (a !== b) {
          const margin = want[b] - want[a];
          if (margin > atol + RTOL * Math.abs(want[b])) bad ||= `step ${s}: argmax ${a}, reference ${b} (margin ${margin})`;
          flips++;
        }
      }
      if (bad) failures++;
      console.log(`${family} ${backend}: ${bad ? `FAIL ${bad}` : "ok"} (worst |d|/tol ${worst.toFixed(3)}, near-tie argmax flips ${flips}, ${ref.steps} steps)`);
    } catch (e) {
      failures++;
      console.log(`${family} ${backend}: FAIL ${(e as Error).name}: ${(e as Error).message.split("\n")[0]}`);
    } finally {
      await engine.unload();
    }
  }
}

// Peak host memory while the 8B checkpoint uploads one tensor at a time (sampled at every tensor read).
const big = join(out, "llama-3-8b");
if (existsSync(join(big, "config.json"))) {
  const backend = backends.split(",")[0];
  const before = rss();
  const model = loadModel(big);
  let peak = rss(), bytes = 0;
  const store: WeightStore = {
    tensors: () => model.store.tensors(),
    info: (n) => model.store.info(n),
    bytes(n) {
      const b = model.store.bytes(n);
      bytes += b.byteLength;
      peak = Math.max(peak, rss());
      return b;
    },
  };
  const dev = await openBackend(backend as BackendChoice);
  const engine = new Engine(dev, { compile: compileGraph });
  const t0 = performance.now();
  await engine.loadWeights(store, model.map);
  peak = Math.max(peak, rss());
  console.log(`llama-3-8b on ${backend}: uploaded ${(bytes / 2 ** 30).toFixed(2)} GiB in ${((performance.now() - t0) / 1000).toFixed(1)} s; ` +
    `RSS before ${(before / 2 ** 20).toFixed(0)} MiB, peak ${(peak / 2 ** 20).toFixed(0)} MiB`);
  model.close();
  await engine.unload();
}
console.log(failures ? `${failures} FAILED` : "all ok");
(globalThis as unknown as { Deno: { exit(c: number): void } }).Deno.exit(failures ? 1 : 0);
