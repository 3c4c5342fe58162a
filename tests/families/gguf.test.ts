// GGUF and safetensors of the same checkpoint give the same tokens: the llama, qwen2, qwen3 and phi3 transformers
// fixtures converted to GGUF here the way llama.cpp's convert_hf_to_gguf.py does it (llama q/k rows permuted for
// GGML's adjacent-pair rope, the llama3 rope scaling as a `rope_freqs` weight, the tokenizer as tokenizer.ggml.*,
// qwen2 kept in bf16, qwen3's q/k norms, phi3's fused qkv and gate|up as attn_qkv / ffn_up; NEOX order for all
// but llama), then both run greedy on the JS device: identical tokens (a difference is
// allowed only after a step where transformers' top-two margin is below MARGIN, see fixtures.ts), identical
// prompt ids from the two tokenizers, and the same chat template.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { JsDevice } from "../../backends/js/device.ts";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import type { ModelHandle } from "../../llm/model.ts";
import { meta, writeGGUF, type GGUFWriteTensor } from "../../llm/formats/gguf-write.ts";
import { roleKey } from "../../graph/weights.ts";
import { decodeHalf } from "../../graph/dtype.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { dtypesFromStore } from "../../llm/families/family.ts";
import { compareGreedy, expected, FIXTURES } from "./fixtures.ts";
import { readFileSync } from "node:fs";

/** HF q/k rows [heads, 2, hd/2] -> GGUF llama's [heads, hd/2, 2] (convert_hf_to_gguf.py `permute`). */
function permute(data: Uint8Array, rows: number, cols: number, heads: number, elem: number): Uint8Array {
  const hd = rows / heads, half = hd / 2, rowBytes = cols * elem;
  const out = new Uint8Array(data.length);
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < 2; j++) {
      for (let i = 0; i < half; i++) {
        const from = h * hd + j * half + i, to = h * hd + 2 * i + j;
        out.set(data.subarray(from * rowBytes, (from + 1) * rowBytes), to * rowBytes);
      }
    }
  }
  return out;
}

/** The GGUF a converter would write for an HF fixture of the llama or qwen2 family. */
export function toGGUF(m: ModelHandle, dir: string): Uint8Array {
  const c = m.config, arch = m.family.name;
  const tensors: GGUFWriteTensor[] = [];
  const written = new Set<string>();
  for (const { role } of m.family.weights({ ...c, ropeFreqFactors: false })) {
    let hfName = m.map.get(roleKey(role))!, name = m.family.tensorName("gguf", role, c)!;
    // A row range of a fused tensor (phi3's qkv, gate|up): the GGUF holds the fused tensor once.
    if (name.includes("#rows=")) {
      [name, hfName] = [name.split("#")[0], hfName.split("#")[0]];
      if (written.has(name)) continue;
      written.add(name);
    }
    const info = m.store.info(hfName)!;
    let data = m.store.bytes(hfName);
    const elem = info.dtype === "f32" ? 4 : 2;
    if (arch === "llama" && (role.role === "attn.q" || role.role === "attn.k")) {
      data = permute(data, info.shape[0], info.shape[1], role.role === "attn.q" ? c.heads : c.kvHeads, elem);
    }
    if (c.normOffset && /norm/.test(role.role)) {
      // Gemma's converter stores norm weights as 1 + w, in f32.
      const w = info.dtype === "f32" ? new Float32Array(data.slice().buffer) : decodeHalf(info.dtype as "f16" | "bf16", new Uint16Array(data.slice().buffer));
      tensors.push({ name, dtype: "f32", shape: info.shape, data: new Uint8Array(w.map((x) => x + c.normOffset!).buffer) });
      continue;
    }
    tensors.push({ name, dtype: info.dtype, shape: info.shape, data });
  }
  if (c.ropeFactors) {
    tensors.push({ name: "rope_freqs.weight", dtype: "f32", shape: [c.ropeFactors.length], data: new Uint8Array(Float32Array.from(c.ropeFactors).buffer) });
  }
  const tj = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const tok = m.tokenizer;
  const tokens = Array.from({ length: tok.vocabSize }, (_, i) => tok.tokenText(i));
  const types = Array.from({ length: tok.vocabSize }, (_, i) => tok.tokenType(i));
  const k = (s: string) => `${arch}.${s}`;
  const md: Record<string, ReturnType<typeof meta.u32>> = {
    "general.architecture": meta.string(arch),
    [k("embedding_length")]: meta.u32(c.dim),
    [k("feed_forward_length")]: meta.u32(c.hidden),
    [k("block_count")]: meta.u32(c.layers),
    [k("attention.head_count")]: meta.u32(c.heads),
    [k("attention.head_count_kv")]: meta.u32(c.kvHeads),
    [k("attention.key_length")]: meta.u32(c.headDim),
    [k("attention.value_length")]: meta.u32(c.headDim),
    [k("rope.freq_base")]: meta.f32(c.ropeTheta),
    [k("attention.layer_norm_rms_epsilon")]: meta.f32(c.rmsEps),
    [k("context_length")]: meta.u32(c.contextLength ?? 256),
    "tokenizer.ggml.model": meta.string("gpt2"),
    "tokenizer.ggml.pre": meta.string("gpt-2"),
    "tokenizer.ggml.tokens": meta.strings(tokens),
    "tokenizer.ggml.token_type": meta.i32s(types),
    "tokenizer.ggml.merges": meta.strings(tj.model.merges.map((x: string | string[]) => (typeof x === "string" ? x : x.join(" ")))),
    "tokenizer.ggml.add_bos_token": meta.bool(tok.addBos),
    "tokenizer.chat_template": meta.string(m.chatTemplate!),
  };
  if (tok.bos !== undefined) md["tokenizer.ggml.bos_token_id"] = meta.u32(tok.bos);
  if (tok.eos !== undefined) md["tokenizer.ggml.eos_token_id"] = meta.u32(tok.eos);
  if (c.attnSoftcap) md[k("attn_logit_softcapping")] = meta.f32(c.attnSoftcap);
  if (c.finalSoftcap) md[k("final_logit_softcapping")] = meta.f32(c.finalSoftcap);
  if (c.slidingWindow) md[k("attention.sliding_window")] = meta.u32(c.slidingWindow);
  if (c.ropeLocal && c.ropeFactors) md[k("rope.scaling.factor")] = meta.f32(c.ropeFactors[0]);
  return writeGGUF({ metadata: md, tensors });
}

for (const family of ["llama", "qwen2", "qwen3", "phi3"]) {
  test(`${family}: the GGUF conversion and the safetensors folder give the same prompt ids and greedy tokens (js)`, { timeout: 300_000 }, async () => {
    const dir = `${FIXTURES}${family}`, hf = loadModel(dir);
    const tmp = mkdtempSync(join(tmpdir(), "poot-gguf-"));
    try {
      const path = join(tmp, `${family}.gguf`);
      writeFileSync(path, toGGUF(hf, dir));
      const gg = loadModel(path);
      assert.equal(gg.family, hf.family);
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

// GGUF cannot state what these fixtures set (query_pre_attn_scalar 24 != head_dim; three layers, fewer than
// Gemma 3's fixed pattern of six), so the GGUF model runs under the HF config's attention scale and layer
// pattern: what this checks is the GGUF side of the family (names, 1 + w norms, soft-capping, window and rope
// metadata) giving the oracle the same logits as the safetensors folder.
for (const family of ["gemma2", "gemma3"]) {
  test(`${family}: the GGUF conversion reads back to the same weights, metadata and (oracle) logits`, { timeout: 120_000 }, () => {
    const dir = `${FIXTURES}${family}`, hf = loadModel(dir);
    const tmp = mkdtempSync(join(tmpdir(), "poot-gguf-"));
    try {
      const path = join(tmp, `${family}.gguf`);
      writeFileSync(path, toGGUF(hf, dir));
      const gg = loadModel(path);
      assert.equal(gg.family, hf.family);
      const a = hf.config, b = gg.config;
      for (const f of ["dim", "hidden", "layers", "heads", "kvHeads", "headDim", "vocab", "ropeTheta", "ropeStyle", "tiedEmbeddings", "qkNorm", "embedScale", "act", "attnSoftcap", "finalSoftcap", "slidingWindow"] as const) {
        assert.deepEqual(b[f], a[f], f);
      }
      assert.equal(b.normOffset, undefined, "GGUF norms hold 1 + w already");
      const ids = expected(family).prompts[0].ids, R = ids.length;
      const logits = (m: ModelHandle, c: typeof a) => {
        const { tracer, logits } = m.family.trace(c, { rows: R, cap: 64 }, { dtypeOf: dtypesFromStore(m.store, m.map) });
        tracer.output("l", logits);
        return evaluate(tracer.build(), { consts: constsFromStore(m.store, m.map), slots: { token: Int32Array.from(ids), pos: new Int32Array([0]) } }).output.l as Float32Array;
      };
      const want = logits(hf, a), got = logits(gg, { ...b, attnScale: a.attnScale, slidingLayers: a.slidingLayers, ropeLocal: a.ropeLocal, ropeFactors: a.ropeFactors });
      let worst = 0;
      for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / (1e-4 + 1e-4 * Math.abs(want[i])));
      assert.ok(worst <= 1, `logits differ by up to ${worst.toFixed(2)}x the tolerance 1e-4 + 1e-4|x| (only 1 + w rounds differently)`);
    } finally {
      hf.close();
      rmSync(tmp, { recursive: true, force: true });
    }
  });
}
