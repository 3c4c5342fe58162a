// GGUF and safetensors of the same checkpoint give the same tokens: the llama, qwen2, qwen3 and phi3 transformers
// fixtures converted to GGUF in their stored type by poot's converter (llm/formats/convert.ts, as llama.cpp's
// convert_hf_to_gguf.py writes them: llama q/k rows permuted for GGML's adjacent-pair rope, the llama3 rope scaling
// as a `rope_freqs` weight, the tokenizer as tokenizer.ggml.*, qwen2 kept in bf16, qwen3's q/k norms, phi3's fused
// qkv and gate|up as attn_qkv / ffn_up; NEOX order for all but llama), then both run greedy on the JS device:
// identical tokens (bit-exact: no margin between the two; each against transformers under the fixtures' near-tie
// rule, see fixtures.ts), identical prompt ids from the two tokenizers, and the same chat template. mistral is not
// here: llama.cpp's llama has no sliding window, so its GGUF attends past the fixture's window of 8 (the converter
// says so; tests/quant/families.test.ts runs it against llama.cpp).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { JsDevice } from "../../backends/js/device.ts";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import type { ModelHandle } from "../../llm/model.ts";
import { convertHF } from "../../llm/formats/convert.ts";
import { type FileType, quantizeToGGUF } from "../../llm/formats/quantize.ts";
import { roleKey } from "../../graph/weights.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { dtypesFromStore } from "../../llm/families/family.ts";
import { compareGreedy, expected, FIXTURES } from "./fixtures.ts";

/** Converts the folder's model to a GGUF file in its stored type (what `poot quantize DIR OUT --type T` writes). */
function convertTo(hf: ModelHandle, path: string): void {
  const c = convertHF(hf);
  quantizeToGGUF(c.store, c.metadata, path, hf.store.info(hf.map.get(roleKey({ role: "tok_embd" }))!)!.dtype as FileType);
}

for (const family of ["llama", "qwen2", "qwen3", "phi3"]) {
  test(`${family}: the GGUF conversion and the safetensors folder give the same prompt ids and greedy tokens (js)`, { timeout: 300_000 }, async () => {
    const dir = `${FIXTURES}${family}`, hf = loadModel(dir);
    const tmp = mkdtempSync(join(tmpdir(), "poot-gguf-"));
    try {
      const path = join(tmp, `${family}.gguf`);
      convertTo(hf, path);
      const gg = loadModel(path);
      assert.equal(gg.family, hf.family);
      for (const [role, name] of hf.map) assert.equal(gg.store.info(gg.map.get(role)!)!.dtype, hf.store.info(name)!.dtype, `${role}: stored type kept`);
      assert.equal(gg.config.ropeStyle, family === "llama" ? "adjacent" : "half");
      assert.equal(gg.config.ropeFreqFactors, family === "llama", "llama3 scaling arrives as rope_freqs");
      assert.equal(gg.chatTemplate, hf.chatTemplate);
      const exp = expected(family);
      for (const p of exp.prompts) assert.deepEqual(gg.tokenizer.encode(p.text), hf.tokenizer.encode(p.text), p.text);
      const run = async (m: ModelHandle) => {
        const engine = new Engine(new JsDevice({}), { compile: compileGraph });
        try {
          const d = await Driver.open(m, engine, { ctx: 128, prefill: [8] });
          const out: number[][] = [];
          for (const s of [...exp.prompts, ...exp.chats]) out.push((await d.generate(s.ids, { maxTokens: exp.steps, ignoreEos: true })).generatedIds);
          return out;
        } finally {
          await engine.unload();
        }
      };
      const a = await run(hf), b = await run(gg);
      [...exp.prompts, ...exp.chats].forEach((s, i) => {
        compareGreedy(a[i], s, `${family} safetensors sequence ${i}`);
        compareGreedy(b[i], s, `${family} gguf sequence ${i}`);
      });
      assert.deepEqual(b, a, "GGUF and safetensors tokens");
    } finally {
      hf.close();
      rmSync(tmp, { recursive: true, force: true });
    }
  });
}

// GGUF cannot state what these fixtures set (query_pre_attn_scalar 24 != head_dim; gemma2's lm_head, which
// llama.cpp's gemma2 never reads: the converter drops it), so the GGUF model runs under the HF config's attention
// scale and the folder's model with a tied head (gemma2): what this checks is the GGUF side of the family (names,
// 1 + w norms, soft-capping, window, its layer pattern and local rope base as metadata) giving the oracle the same
// logits as the safetensors folder.
for (const family of ["gemma2", "gemma3"]) {
  test(`${family}: the GGUF conversion reads back to the same weights, metadata and (oracle) logits`, { timeout: 120_000 }, () => {
    const dir = `${FIXTURES}${family}`, hf = loadModel(dir);
    const tmp = mkdtempSync(join(tmpdir(), "poot-gguf-"));
    try {
      const path = join(tmp, `${family}.gguf`);
      convertTo(hf, path);
      const gg = loadModel(path);
      assert.equal(gg.family, hf.family);
      const a = { ...hf.config, tiedEmbeddings: hf.config.tiedEmbeddings || family === "gemma2" }, b = gg.config;
      for (const f of ["dim", "hidden", "layers", "heads", "kvHeads", "headDim", "vocab", "ropeTheta", "ropeStyle", "tiedEmbeddings", "qkNorm", "embedScale", "act", "attnSoftcap", "finalSoftcap", "slidingWindow", "slidingLayers", "ropeFactors", "ropeLocal"] as const) {
        assert.deepEqual(b[f], a[f], f);
      }
      assert.equal(b.normOffset, undefined, "GGUF norms hold 1 + w already");
      const ids = expected(family).prompts[0].ids, R = ids.length;
      const logits = (m: ModelHandle, c: typeof a) => {
        const { tracer, logits } = m.family.trace(c, { rows: R, cap: 64 }, { dtypeOf: dtypesFromStore(m.store, m.map) });
        tracer.output("l", logits);
        return evaluate(tracer.build(), { consts: constsFromStore(m.store, m.map), slots: { token: Int32Array.from(ids), pos: new Int32Array([0]) } }).output.l as Float32Array;
      };
      const want = logits(hf, a), got = logits(gg, { ...b, attnScale: a.attnScale });
      let worst = 0;
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / (1e-4 + 1e-4 * Math.abs(want[i])));
      assert.ok(worst <= 1, `logits differ by up to ${worst.toFixed(2)}x the tolerance 1e-4 + 1e-4|x| (only 1 + w rounds differently)`);
    } finally {
      hf.close();
      rmSync(tmp, { recursive: true, force: true });
    }
  });
}
