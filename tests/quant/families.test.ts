// Tier 3 for converted checkpoints: each family fixture (tests/families/fixtures, a Hugging Face folder written by
// transformers) converted by poot's converter (llm/formats/convert.ts, what `poot quantize FOLDER OUT` runs) to
// GGUF as its stored type (f32; qwen2 bf16, gemma2 f16), f16, q8_0 and q4_k_m (the fixtures' 64- and 128-wide rows
// are not whole 256-blocks, so q4_k_m takes llama.cpp's fallbacks: q5_0 for q4_k, q8_0 for q6_k), and a seeded
// random-weight llama 256 wide (wideLlama, the fixture's tokenizer) to q4_k_m, q5_k_m and q6_k, whose rows take
// real K-quant blocks (no transformers reference for that one: llama.cpp and poot only), then:
// - llama.cpp (node-llama-cpp on the CPU) loads every file; its tokenizer, built from the metadata we wrote,
//   tokenizes every prompt and chat text as poot's tokenizer built from the same file does, and plain prompts to
//   transformers' ids;
// - for the families GGUF states exactly (llama, qwen2, qwen3, phi3), llama.cpp on the stored-type file (bf16 qwen2:
//   its exact f32 dequantization, the math transformers ran) generates transformers' 48 greedy tokens (the fixture
//   margin rule of tests/families/fixtures.ts): the conversion is the
//   model, checked by llama.cpp itself. mistral, gemma2, gemma3 differ from transformers by what GGUF cannot say
//   (llama.cpp's llama has no sliding window; gemma's query_pre_attn_scalar; gemma2's untied lm_head): the
//   converter's notes must name exactly that;
// - poot (js, vulkan, wgpu: f16 and q8_0 only, see RUNS_ON; on lavapipe the files holding every kernel, see
//   COVER; POOT_BACKENDS selects) reading each file
//   generates llama.cpp's greedy tokens for every prompt and chat (48 each). Exact: every f16/bf16/quantized file
//   dequantized to f32 by the oracle (bit-exact with ggml's dequantize_row_*) runs in llama.cpp as plain f32 math,
//   and poot on the file must give its tokens;
//   a sequence may part only at a step where llama.cpp's own top-two gap is below EXACT_MARGIN (f32 sums in
//   another order) and poot took its second choice; f32 files are held to the same rule directly. Same file:
//   llama.cpp rounds the activations before a half or quantized dot (bf16/f16, q8_0), so where poot parts from
//   llama.cpp on the file itself it must be a near tie (gap below MARGIN, poot took its second choice, as
//   tests/quant/tier3.test.ts), or llama.cpp's run of the file must already have parted from its run of the exact
//   dequantization at or before that step (its rounding, not poot, moved). The second kind is counted and printed.
//   These random-weight fixtures have flat distributions where stories260K's are peaked: llama.cpp's rounding
//   moves tokens here at gaps up to ~1.4 nats (measured), which is why that rule, not a wider MARGIN, is used.
// - poot's tokenizer built from each file's metadata tokenizes every prompt and chat text as llama.cpp does (Phi-3
//   included: both strip the whitespace after its special tokens by the model's name, which is llama.cpp's rule).
// The poot-GGUF vs poot-folder bit-exact check is tests/families/gguf.test.ts. llama.cpp's answers are stored in
// llamacpp_families.json under a key of each converted file's bytes (tests/llm/llamacpp_store.ts): while the
// converter and quantizer write the same bytes they are read, otherwise llama.cpp runs here live.
import { test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import type { ProgramCompiler } from "../../backends/executor.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { sharingKernels } from "../devices/kernel_cache.ts";
import { convertHF } from "../../llm/formats/convert.ts";
import { type FileType, quantizeToGGUF } from "../../llm/formats/quantize.ts";
import { roleKey } from "../../graph/weights.ts";
import { dequantizedCopy } from "./dequantized.ts";
import { type Job, jobKey, openStore, resolve, staleNote } from "../llm/llamacpp_store.ts";
import { type BackendName, openDevice, selectedBackends, slowDevice, softwareVulkan } from "../devices/index.ts";
import type { Device } from "../../backends/device.ts";
import { expected, FAMILY_DIRS, FIXTURES, MARGIN as FIXTURE_MARGIN } from "../families/fixtures.ts";
import { wideLlama } from "./wide_llama.ts";
import { scratchDir } from "../scratch.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
/** Largest llama.cpp top-two logit gap (nats) at which poot may take its second choice on the same file. */
const MARGIN = 0.1;
/** The same, against llama.cpp on the f32 dequantization (the same math; only summation order differs). */
const EXACT_MARGIN = 0.01;
/** Families whose GGUF is the folder's model exactly: llama.cpp must give transformers' tokens. */
const EXACT = ["llama", "qwen2", "qwen3", "phi3"];
/** What the converter must say it could not state, per family that GGUF cannot state exactly. */
const NOTES: Record<string, RegExp[]> = {
  mistral: [/sliding_window 8 dropped/],
  gemma2: [/lm_head\.weight dropped/, /query_pre_attn_scalar 24/],
  gemma3: [/query_pre_attn_scalar 24/],
};
/** The random-weight llama whose rows are whole 256-blocks (see wideLlama), and its K-quant file types. */
const WIDE = "llama-wide";
const WIDE_TYPES: FileType[] = ["q4_k_m", "q5_k_m", "q6_k"];
/**
 * WebGPU through lavapipe takes ~6 s a model here (js and Vulkan ~1.5 s): it runs the minimum, f16 and
 * q8_0, and the K-quant files, to keep CI bounded; js and vulkan run every file.
 */
const RUNS_ON: Partial<Record<string, (family: string, type: FileType) => boolean>> = {
  wgpu: (family, type) => type === "f16" || type === "q8_0" || family === WIDE,
  // Under Bun the JS device runs these ~9x slower than under Deno (218 s against 24 s here); the numerics do not
  // depend on the runtime, so Bun checks each family's q8_0 file and one K-quant file, Deno every file.
  ...("Bun" in globalThis ? { js: (family: string, type: FileType) => type === "q8_0" || (family === WIDE && type === "q4_k_m") } : {}),
};
/**
 * On a software Vulkan (lavapipe, through vulkan or wgpu), the files whose plans hold, together, every kernel
 * the files RUNS_ON gives that backend compile there: 16 of vulkan's 30 files hold its 185 distinct kernels, 10
 * of wgpu's 17 its 127 (greedy cover, measured on lavapipe's caps). A device's part is its kernels, and each
 * kernel runs in some file's tokens there; every file still runs on js. The test checks the claim on each run:
 * the plans of the files it leaves out are compiled for the device's target (no device work) and may hold no
 * kernel the files it ran did not compile. A real GPU runs every file.
 */
const COVER: Partial<Record<string, string[]>> = {
  vulkan: [
    "gemma3:q4_k_m", "llama-wide:q4_k_m", "gemma2:f16", "llama:f32", "qwen2:q4_k_m", "qwen2:bf16", "llama-wide:q5_k_m", "qwen2:f16",
    "llama-wide:q6_k", "gemma2:q4_k_m", "qwen2:q8_0", "gemma3:f32", "gemma2:q8_0", "phi3:q4_k_m", "qwen3:f16", "qwen3:q8_0",
  ],
  wgpu: ["gemma3:f16", "llama-wide:q4_k_m", "gemma2:q8_0", "llama-wide:q5_k_m", "llama:f16", "qwen2:q8_0", "llama-wide:q6_k", "qwen2:f16", "gemma2:f16", "qwen3:q8_0"],
};
type Run = { prompt_ids: number[]; generated_ids: number[]; margins: number[]; seconds: number[] };

const nodeOk = spawnSync("node", ["--version"], { encoding: "utf8" }).status === 0;
const refSkip = !nodeOk ? "node is not installed"
  : !existsSync(`${root}node_modules/node-llama-cpp/package.json`) ? "node-llama-cpp is not installed (npm ci)" : false;

const dir = scratchDir("poot-convert-t3-");

/** family -> [file type, path] of its converted files; (family, type) -> llama.cpp's runs. */
const files = new Map<string, [FileType, string][]>();
const reference = new Map<string, Run[]>();
/** llama.cpp's answers for the converted files (tests/llm/llamacpp_store.ts: used while the key matches). */
const store = openStore(`${root}tests/quant/llamacpp_families.json`);
const MARGINS = `${root}tests/quant/llamacpp-margins.mjs`;

test("every family fixture converts to GGUF (stored type, f16, q8_0, q4_k_m; the wide llama to K-quants) and llama.cpp runs each as transformers does", { skip: refSkip, timeout: 600_000 }, () => {
  const jobs: { model: string; seqs: number[][]; texts: string[]; family: string; type: FileType }[] = [];
  wideLlama(join(dir, WIDE));
  for (const family of [...FAMILY_DIRS, WIDE]) {
    const m = loadModel(family === WIDE ? join(dir, WIDE) : `${FIXTURES}${family}`);
    try {
      const c = convertHF(m);
      const want = NOTES[family] ?? [];
      assert.equal(c.notes.length, want.length, `${family} notes: ${c.notes.join("; ")}`);
      want.forEach((re, i) => assert.match(c.notes[i], re));
      const stored = m.store.info(m.map.get(roleKey({ role: "tok_embd" }))!)!.dtype as FileType;
      const types = family === WIDE ? WIDE_TYPES : [...new Set<FileType>([stored, "f16", "q8_0", "q4_k_m"])];
      const list: [FileType, string][] = [];
      for (const type of types) {
        const path = join(dir, `${family}-${type}.gguf`);
        const r = quantizeToGGUF(c.store, c.metadata, path, type);
        if (family === WIDE) {
          const used = new Set(r.choices.map((x) => x.to));
          assert.ok(used.has(type === "q5_k_m" ? "q5_k" : type === "q6_k" ? "q6_k" : "q4_k") && used.has("q6_k"), `${type}: K-quant blocks written (${[...used]})`);
        } else if (type === "q4_k_m") assert.ok(r.choices.some((x) => x.to === "q5_0"), `${family} q4_k_m: q4_k rows of 64 fall back to q5_0 as in llama.cpp`);
        list.push([type, path]);
        const exp = expected(family === WIDE ? "llama" : family), seqs = [...exp.prompts, ...exp.chats];
        jobs.push({ model: path, seqs: seqs.map((s) => s.ids), texts: seqs.map((s) => s.text), family, type });
        if (type !== "f32") {
          dequantizedCopy(path, `${path}.f32`);
          jobs.push({ model: `${path}.f32`, seqs: seqs.map((s) => s.ids), texts: [], family, type: `${type}.f32` as FileType });
        }
      }
      files.set(family, list);
    } finally {
      m.close();
    }
  }
  const common = { tokens: 48, ctx: 128, ignoreEog: true, threads: 1 };
  type Out = { runs: Run[]; tokenized: number[][] };
  const keyed: Job<Out>[] = jobs.map(({ model, seqs, texts, family, type }) => ({ name: `${family}:${type}`, key: jobKey(MARGINS, [model], { seqs, texts, ...common }) }));
  resolve(store, keyed, (missing) => {
    const todo = missing.map((j) => jobs[keyed.indexOf(j)]);
    const r = spawnSync("node", [MARGINS], {
      input: JSON.stringify({ jobs: todo.map(({ model, seqs, texts }) => ({ model, seqs, texts })), ...common }),
      encoding: "utf8", timeout: 540_000, maxBuffer: 1 << 26,
    });
    assert.equal(r.status, 0, `llama.cpp failed on a converted file: ${r.stderr}`);
    return JSON.parse(r.stdout) as Out[];
  });
  const note = staleNote(store, "tests/quant/families.test.ts");
  if (note) console.log(note);
  const out = keyed.map((j) => j.out!);
  jobs.forEach((j, k) => {
    const exp = expected(j.family === WIDE ? "llama" : j.family), seqs = [...exp.prompts, ...exp.chats];
    const { runs, tokenized } = out[k];
    if (tokenized.length) {
      const g = loadModel(j.model);
      try {
        tokenized.forEach((ids, i) => {
          const s = seqs[i], ours = g.tokenizer.encode(s.text, { addBos: false, parseSpecial: true });
          assert.deepEqual(ids, ours, `${j.family} ${j.type}: llama.cpp and poot tokenize ${JSON.stringify(s.text)} alike`);
          // Plain prompts: also transformers' ids (which carry the BOS add_bos_token adds; these calls add none).
          if (i < exp.prompts.length) assert.deepEqual(g.tokenizer.addBos ? [g.tokenizer.bos, ...ids] : ids, s.ids, `${j.family}: ${JSON.stringify(s.text)}`);
        });
      } finally {
        g.close();
      }
    }
    runs.forEach((r) => assert.equal(r.generated_ids.length, exp.steps, `${j.family} ${j.type}: llama.cpp generated ${r.generated_ids.length} tokens`));
    reference.set(`${j.family}:${j.type}`, runs);
  });
  // The stored type's f32 math (bf16 qwen2: its exact f32 dequantization, as transformers ran it) in llama.cpp.
  for (const family of EXACT) {
    const stored = files.get(family)![0][0], exp = expected(family);
    const runs = reference.get(stored === "f32" ? `${family}:f32` : `${family}:${stored}.f32`)!;
    [...exp.prompts, ...exp.chats].forEach((s, i) => {
      const got = runs[i].generated_ids, at = got.findIndex((t, k) => t !== s.greedy[k]);
      assert.ok(at < 0 || s.margins[at] < FIXTURE_MARGIN,
        `llama.cpp on the converted ${family} (${stored}) sequence ${i}: token ${at} is ${got[at]}, transformers ${s.greedy[at]} ` +
          `(its top-two margin ${s.margins[at]?.toFixed(4)} >= ${FIXTURE_MARGIN})`);
    });
  }
});

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend as BackendName);
  // A software fallback adapter runs these for minutes: skipped there, said (lavapipe and the GPUs run them).
  const skip = refSkip || (typeof dev === "string" ? dev : slowDevice(dev));
  if (skip && typeof dev === "object") await dev.destroy();
  test(`converted families on ${backend}: poot reading each GGUF generates llama.cpp's greedy tokens`, { skip, timeout: 600_000 }, async () => {
    // (the files and llama.cpp's runs of them are the first test's: a --filter that leaves it out would check nothing)
    assert.ok(files.size > 0 && reference.size > 0, "no converted files or llama.cpp runs: the conversion test (this file's first) did not run");
    const bad: string[] = [], flips: string[] = [], rounded: string[] = [];
    const cover = COVER[backend] && softwareVulkan(dev as Device) ? new Set(COVER[backend]) : undefined;
    /** Kernel names compiled for the device by the files run, and the files left out (see COVER). */
    const ran = new Set<string>(), left: [string, string][] = [];
    // The f32 path on every device: the exact rule above is about the dequantized weights' f32 math, which the
    // integer gemv (the default where caps.dot4: ptx, Vulkan on NVIDIA, wgpu on a GPU) does not compute;
    // tests/quant/tier3.test.ts holds that path to llama.cpp.
    const recordKernels = (names: Set<string>): ProgramCompiler => (g, t) => {
      const p = compileGraph(g, t, { quantizedX: false });
      // a launch of sibling kernels (kernels/lower/siblings.ts) counts as its parts: their code is the parts' own,
      // the merge around it is the same for every pair (tests/kernels/siblings.test.ts)
      for (const st of p.steps) if (st.k === "kernel") for (const k of st.kernel.name.split("+")) names.add(k.replace(/@[\d.]+$/, ""));
      return p;
    };
    try {
      for (const family of [...FAMILY_DIRS, WIDE]) {
        for (const [type, path] of files.get(family) ?? []) {
          if (RUNS_ON[backend] && !RUNS_ON[backend]!(family, type)) continue;
          if (cover && !cover.has(`${family}:${type}`)) {
            left.push([`${family}:${type}`, path]);
            continue;
          }
          const ref = reference.get(`${family}:${type}`);
          if (!ref) {
            bad.push(`${family} ${type}: no llama.cpp reference (see the conversion test)`);
            continue;
          }
          // One device serves every model (opening one per model cost more than some models' runs); each model's
          // engine frees what it allocated when it unloads.
          const t0 = performance.now();
          const m = loadModel(path), engine = new Engine(dev as Device, { compile: sharingKernels(recordKernels(ran)), ownsDevice: false });
          try {
            // llama.cpp's answers were recorded with an f32 K/V cache
            const driver = await Driver.open(m, engine, { ctx: 128, prefill: [8], kvDtype: "f32" });
            const exact = reference.get(`${family}:${type}.f32`);
            for (const [i, want] of ref.entries()) {
              const got = (await driver.generate(want.prompt_ids, { maxTokens: want.generated_ids.length, ignoreEos: true })).generatedIds;
              const fail = (r: Run, at: number, who: string) =>
                `${family} ${type} sequence ${i}: token ${at}: poot ${got[at]}, ${who} ${r.generated_ids[at]} (its second ${r.seconds[at]}, gap ${r.margins[at].toFixed(4)})`;
              const part = (r: Run) => r.generated_ids.findIndex((t, k) => got[k] !== t);
              const nearTie = (r: Run, at: number, margin: number) => r.margins[at] < margin && got[at] === r.seconds[at];
              const e = exact?.[i] ?? want, ea = part(e);
              if (ea >= 0) (nearTie(e, ea, EXACT_MARGIN) ? flips : bad).push(fail(e, ea, exact ? "llama.cpp on the f32 dequantization" : "llama.cpp"));
              const at = part(want);
              if (!exact || at < 0) continue;
              const own = want.generated_ids.findIndex((t, k) => e.generated_ids[k] !== t);
              if (nearTie(want, at, MARGIN)) flips.push(fail(want, at, "llama.cpp"));
              else if (own >= 0 && own <= at) rounded.push(`${family} ${type} #${i}@${at}`);
              else bad.push(fail(want, at, "llama.cpp"));
            }
          } finally {
            m.close();
            await engine.unload();
          }
          if (process.env.POOT_TIMES) console.log(`${family} ${type} ${backend}: ${(performance.now() - t0).toFixed(0)} ms`);
        }
      }
      // The files left out: their plans for this device's target, compiled on the side (a JS engine loads them).
      for (const [name, path] of left) {
        const m = loadModel(path), kernels = new Set<string>(), target = (dev as Device).target;
        const engine = new Engine(new JsDevice(), { compile: (g, t) => (recordKernels(kernels)(g, target), compileGraph(g, t)) });
        try {
          await (await Driver.open(m, engine, { ctx: 128, prefill: [8], kvDtype: "f32" })).close();
        } finally {
          m.close();
          await engine.unload();
        }
        const missing = [...kernels].filter((k) => !ran.has(k));
        if (missing.length) bad.push(`${name} (not run on ${backend}, see COVER) compiles kernels no file run there did: ${missing.join(", ")}`);
      }
    } finally {
      await (dev as Device).destroy();
    }
    assert.deepEqual(bad, []);
    if (flips.length) console.log(`near-tie flips within the margin rule on ${backend}: ${flips.join("; ")}`);
    if (rounded.length) console.log(`where llama.cpp's rounded activations left its own f32 math first (${rounded.length}): ${rounded.join(", ")}`);
  });
}
