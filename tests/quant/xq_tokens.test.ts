// Tier 3 with quantized x (graph/ops/qdot.ts) for every block type with an integer path, on real blocks: the
// random-weight llama 256 wide (tests/quant/wide_llama.ts, every row whole 256-blocks) as `poot quantize` writes
// it for q4_k_m (q4_k, q6_k), q5_k_m (q5_k, q6_k), q6_k, q8_0 and q4_0, and with every matrix of one type for
// q4_1, q5_0 and q5_1 (no llama-quantize file type gives those but as fallbacks: stories260K's, in
// tests/quant/tier3.test.ts), generates llama.cpp's greedy tokens (node-llama-cpp on the CPU, reading the same
// file) in poot with --quantized-x on (every one of those gemvs on int8 x) on js, vulkan and ptx where present
// (POOT_BACKENDS selects), on ptx also with x quantized once per gemv (CompileOptions.xqPrep; the other devices
// hold that path bit for bit to this one in tests/quant/xq_prep.test.ts).
//
// Rule: both round the activations to int8 before the dot, poot per 16 or 32 values, llama.cpp per 32 (q8_0/q8_1)
// or 256 (q8_K), so neither computes the f32 math: a sequence may part from llama.cpp's on the same file only at
// a step where llama.cpp's top-two gap is below MARGIN and poot took its second choice, or where llama.cpp's run
// of the file had already parted from its run of the file's exact f32 dequantization at or before that step (its
// rounding moved: tests/quant/families.test.ts's rule; these random weights have flat distributions). And where
// poot parts from llama.cpp's run of the f32 dequantization, that run's gap must be below MARGIN too, poot having
// taken its second choice: poot's own rounding moves no token the f32 math decides by more (measured: 28 such
// flips over the 8 files, the widest at a gap of 0.061).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import { openDevice, selectedBackends } from "../devices/index.ts";
import { convertHF } from "../../llm/formats/convert.ts";
import { quantizeToGGUF } from "../../llm/formats/quantize.ts";
import { quantizeBlocks } from "../../llm/formats/ggml-quants.ts";
import { openGGUF } from "../../llm/formats/gguf.ts";
import { writeGGUF } from "../../llm/formats/gguf-write.ts";
import { type BlockDType, storageFromBytes } from "../../graph/dtype.ts";
import { hasXq } from "../../graph/ops/qdot.ts";
import { dequantizedCopy } from "./dequantized.ts";
import { wideLlama } from "./wide_llama.ts";
import { expected } from "../families/fixtures.ts";
import { type Job, jobKey, openStore, resolve, staleNote } from "../llm/llamacpp_store.ts";
import { scratchDir } from "../scratch.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
/** Largest llama.cpp top-two gap (nats) at which poot may take its second choice (the same file, or its f32 math). */
const MARGIN = 0.1;
const FILES = ["q4_k_m", "q5_k_m", "q6_k", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"] as const;
type Run = { prompt_ids: number[]; generated_ids: number[]; margins: number[]; seconds: number[] };

const nodeOk = spawnSync("node", ["--version"], { encoding: "utf8" }).status === 0;
const skip = !nodeOk ? "node is not installed"
  : !existsSync(`${root}node_modules/node-llama-cpp/package.json`) ? "node-llama-cpp is not installed (npm ci)" : false;

/** The f32 GGUF `src` with every matrix quantized to `t` (1-D tensors stay f32), as ggml's reference quantizer does. */
function retyped(src: string, out: string, t: BlockDType): void {
  const f = openGGUF(src);
  try {
    const tensors = [...f.tensors()].map((ti) => {
      const b = f.bytes(ti.name);
      if (ti.shape.length < 2) return { name: ti.name, dtype: ti.dtype, shape: ti.shape, data: b };
      assert.equal(ti.dtype, "f32", `${ti.name}: the source is f32`);
      return { name: ti.name, dtype: t, shape: ti.shape, data: quantizeBlocks(t, storageFromBytes("f32", b) as Float32Array) };
    });
    writeFileSync(out, writeGGUF({ metadata: f.metadata, tensors }));
  } finally {
    f.close();
  }
}

const dir = scratchDir("poot-xq-t3-");
const paths: Record<string, string> = {};
/** llama.cpp's runs per file, and per file + ".f32" of its exact f32 dequantization. */
const ref: Record<string, Run[]> = {};

test(`the wide llama as ${FILES.join(", ")}, and llama.cpp's tokens for each`, { skip, timeout: 600_000 }, () => {
  wideLlama(join(dir, "hf"));
  const m = loadModel(join(dir, "hf"));
  try {
    const c = convertHF(m);
    quantizeToGGUF(c.store, c.metadata, join(dir, "f32.gguf"), "f32");
    for (const ft of FILES) {
      paths[ft] = join(dir, `${ft}.gguf`);
      if (ft === "q4_1" || ft === "q5_0" || ft === "q5_1") retyped(join(dir, "f32.gguf"), paths[ft], ft);
      else quantizeToGGUF(c.store, c.metadata, paths[ft], ft);
      paths[`${ft}.f32`] = `${paths[ft]}.f32`;
      dequantizedCopy(paths[ft], paths[`${ft}.f32`]);
    }
  } finally {
    m.close();
  }
  const exp = expected("llama"), seqs = [...exp.prompts, ...exp.chats].map((s) => s.ids);
  const common = { tokens: 48, ctx: 128, ignoreEog: true, threads: 1 };
  const MARGINS = `${root}tests/quant/llamacpp-margins.mjs`;
  const store = openStore(`${root}tests/quant/llamacpp_xq.json`);
  const jobs: Job<{ runs: Run[] }>[] = FILES.flatMap((ft) => [ft, `${ft}.f32`]).map((n) => ({ name: n, key: jobKey(MARGINS, [paths[n]], { seqs, texts: [], ...common }) }));
  resolve(store, jobs, (missing) => {
    const todo = missing.map((j) => ({ model: paths[j.name], seqs, texts: [] }));
    const r = spawnSync("node", [MARGINS], { input: JSON.stringify({ jobs: todo, ...common }), encoding: "utf8", timeout: 540_000, maxBuffer: 1 << 26 });
    assert.equal(r.status, 0, `llama.cpp failed: ${r.stderr}`);
    return JSON.parse(r.stdout);
  });
  const note = staleNote(store, "tests/quant/xq_tokens.test.ts");
  if (note) console.log(note);
  for (const j of jobs) ref[j.name] = j.out!.runs;
});

for (const backend of (["js", "vulkan", "ptx"] as const).filter((b) => selectedBackends().includes(b))) {
  const dev = await openDevice(backend);
  const off = skip || (typeof dev === "string" ? dev : false);
  // Under Bun the JS device runs these several times slower than under Deno; the numerics do not depend on the
  // runtime, so Bun's js checks the two files whose decoders the others share least (q5_k; q5_1: a min and qh).
  const files = "Bun" in globalThis && backend === "js" ? FILES.filter((f) => f === "q5_k_m" || f === "q5_1") : FILES;
  const preps = backend === "ptx" ? [false, true] : [false];
  test(`quantized x on ${backend}${preps.length > 1 ? " (in the kernel, and prepared once per gemv)" : ""}: poot equals llama.cpp on the wide llama as ${files.join(", ")}`, { skip: off, timeout: 600_000 }, async () => {
    if (typeof dev === "string") return;
    const bad: string[] = [], flips: string[] = [], rounded: string[] = [];
    try {
      for (const [ft, prep] of files.flatMap((f) => preps.map((p) => [f, p] as const))) {
        const tag = prep ? `${ft} prepared` : ft;
        if (!ref[ft]) {
          bad.push(`${ft}: no file / llama.cpp reference (see the first test)`);
          continue;
        }
        const model = loadModel(paths[ft]);
        const types = new Set([...model.store.tensors()].filter((t) => t.shape.length === 2).map((t) => t.dtype));
        // every matrix type of the file has the integer path, so every decode gemv runs on int8 x
        assert.ok([...types].every((t) => hasXq(t)), `${ft}: ${[...types]}`);
        const engine = new Engine(dev, { compile: (g, t) => compileGraph(g, t, { quantizedX: true, xqPrep: prep }), ownsDevice: false });
        try {
          // llama.cpp's answers were recorded with an f32 K/V cache
          const driver = await Driver.open(model, engine, { ctx: 128, prefill: [8], kvDtype: "f32" });
          for (const [i, want] of ref[ft].entries()) {
            const got = (await driver.generate(want.prompt_ids, { maxTokens: want.generated_ids.length, ignoreEos: true })).generatedIds;
            const e = ref[`${ft}.f32`][i];
            const part = (r: Run) => r.generated_ids.findIndex((t, k) => got[k] !== t);
            const tie = (r: Run, at: number) => r.margins[at] < MARGIN && got[at] === r.seconds[at];
            const say = (r: Run, at: number, who: string) =>
              `${tag} #${i} token ${at}: poot ${got[at]}, ${who} ${r.generated_ids[at]} (its second ${r.seconds[at]}, gap ${r.margins[at].toFixed(4)})`;
            const ea = part(e);
            if (ea >= 0) (tie(e, ea) ? flips : bad).push(say(e, ea, "llama.cpp on the f32 dequantization"));
            const at = part(want);
            if (at < 0) continue;
            const own = want.generated_ids.findIndex((t, k) => e.generated_ids[k] !== t);
            if (tie(want, at)) flips.push(say(want, at, "llama.cpp"));
            else if (own >= 0 && own <= at) rounded.push(`${tag} #${i}@${at}`);
            else bad.push(say(want, at, "llama.cpp"));
          }
        } finally {
          model.close();
          await engine.unload();
        }
      }
    } finally {
      await dev.destroy();
    }
    assert.deepEqual(bad, []);
    if (flips.length) console.log(`near-tie flips on ${backend} within the rules (${flips.length}): ${flips.join("; ")}`);
    if (rounded.length) console.log(`where llama.cpp's rounded activations left its own f32 math first (${rounded.length}): ${rounded.join(", ")}`);
  });
}
