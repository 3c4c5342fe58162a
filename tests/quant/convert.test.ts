// The converter's details (llm/formats/convert.ts), without a model run: per family the GGUF architecture, keys and
// tensors llama.cpp expects (mistral as llama; llama's q/k rows in GGML's adjacent-pair order, every other family's
// untouched; gemma's norms as 1 + w in f32), the pre-tokenizer name found from tokenizer.json's regexes (gpt-2,
// llama-bpe, qwen2; an unknown one is a ConvertError), and a SentencePiece-style tokenizer.json (U+2581, byte
// fallback) written as tokenizer model `llama` with merge-rank scores that poot and llama.cpp (node-llama-cpp)
// both tokenize as tokenizer.json does; linear rope scaling as rope.scaling.* read back to the folder's factors and
// logits; `poot quantize FOLDER` end to end. tests/quant/families.test.ts runs the converted models.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadModel } from "../../engine.ts";
import { ConvertError, convertHF, permuteRows } from "../../llm/formats/convert.ts";
import { quantizeToGGUF } from "../../llm/formats/quantize.ts";
import { roleKey } from "../../graph/weights.ts";
import { tokenizerFromHF } from "../../llm/tokenizer/mod.ts";
import { FAMILY_DIRS, FIXTURES } from "../families/fixtures.ts";
import { poot } from "../cli/poot.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { dtypesFromStore } from "../../llm/families/family.ts";
import { scratchDir } from "../scratch.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const dir = scratchDir("poot-convert-");
const ARCH: Record<string, string> = { llama: "llama", mistral: "llama", qwen2: "qwen2", qwen3: "qwen3", gemma2: "gemma2", gemma3: "gemma3", phi3: "phi3" };

const f32 = (b: Uint8Array) => new Float32Array(b.slice().buffer);

for (const family of FAMILY_DIRS) {
  test(`${family}: converted as llama.cpp's ${ARCH[family]} (keys, tensor names, q/k order, norms, tokenizer)`, () => {
    const m = loadModel(`${FIXTURES}${family}`);
    try {
      const c = convertHF(m), md = c.metadata, k = (s: string) => `${c.arch}.${s}`;
      assert.equal(c.arch, ARCH[family]);
      assert.equal(md.get("general.architecture")?.value, ARCH[family]);
      for (const key of ["embedding_length", "block_count", "feed_forward_length", "attention.head_count", "attention.head_count_kv", "context_length", "rope.freq_base"]) {
        assert.ok(md.has(k(key)), `${k(key)} is written`);
      }
      assert.equal(md.get(k("block_count"))?.value, m.config.layers);
      assert.equal(md.get("tokenizer.ggml.model")?.value, "gpt2");
      assert.equal(md.get("tokenizer.ggml.pre")?.value, "gpt-2", "the fixtures' ByteLevel pre-tokenizer is GPT-2's");
      assert.equal((md.get("tokenizer.ggml.tokens")?.value as { value: string[] }).value.length, m.config.vocab);
      assert.equal(md.get("tokenizer.chat_template")?.value, m.chatTemplate);
      const names = [...c.store.tensors()].map((t) => t.name);
      assert.ok(names.includes("token_embd.weight") && names.includes("blk.0.attn_output.weight") && names.includes("output_norm.weight"));
      assert.equal(new Set(names).size, names.length, "no tensor twice");
      // q rows: llama permuted into GGML's adjacent pairs (row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i); others as stored.
      if (family !== "phi3") {
        const hfQ = m.store.bytes(m.map.get(roleKey({ role: "attn.q", layer: 0 }))!), ggQ = c.store.bytes("blk.0.attn_q.weight");
        const rowBytes = m.config.dim * 4, rows = m.config.heads * m.config.headDim;
        const want = ARCH[family] === "llama" ? permuteRows(hfQ, rows, rowBytes, m.config.heads) : hfQ;
        assert.deepEqual(ggQ, want);
        if (ARCH[family] === "llama") {
          const hd = m.config.headDim;
          assert.deepEqual(ggQ.subarray(1 * rowBytes, 2 * rowBytes), hfQ.subarray((hd / 2) * rowBytes, (hd / 2 + 1) * rowBytes), "row 1 is HF row hd/2");
        }
      }
      if (family.startsWith("gemma")) {
        const w = f32(m.store.bytes(m.map.get(roleKey({ role: "attn_norm", layer: 0 }))!)), g = f32(c.store.bytes("blk.0.attn_norm.weight"));
        assert.deepEqual(Array.from(g), Array.from(w, (x) => Math.fround(x + 1)));
      }
      assert.equal(names.includes("rope_freqs.weight"), family === "llama", "llama3 rope scaling as rope_freqs");
    } finally {
      m.close();
    }
  });
}

/** A copy of the llama fixture whose tokenizer.json is edited. */
function withTokenizer(name: string, edit: (tj: Record<string, unknown>) => void): string {
  const d = join(dir, name);
  cpSync(`${FIXTURES}llama`, d, { recursive: true });
  const tj = JSON.parse(readFileSync(join(d, "tokenizer.json"), "utf8"));
  edit(tj);
  writeFileSync(join(d, "tokenizer.json"), JSON.stringify(tj));
  return d;
}
const L3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = L3.replace("\\p{N}{1,3}", "\\p{N}");
const split = (regex: string) => ({
  type: "Sequence",
  pretokenizers: [
    { type: "Split", pattern: { Regex: regex }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
  ],
});

for (const [name, regex, ignoreMerges, want] of [["llama-bpe", L3, true, "llama-bpe"], ["qwen2", QWEN2, false, "qwen2"], ["smaug-bpe", L3, false, "smaug-bpe"]] as const) {
  test(`the pre-tokenizer of a tokenizer.json with ${name}'s split regex is written as '${want}'`, () => {
    const m = loadModel(withTokenizer(name, (tj) => {
      tj.pre_tokenizer = split(regex);
      (tj.model as Record<string, unknown>).ignore_merges = ignoreMerges;
    }));
    try {
      assert.equal(convertHF(m).metadata.get("tokenizer.ggml.pre")?.value, want);
    } finally {
      m.close();
    }
  });
}

test("a pre-tokenizer llama.cpp has no name for is a ConvertError naming the file", () => {
  const m = loadModel(withTokenizer("odd-pre", (tj) => {
    tj.pre_tokenizer = split("\\p{L}+|[^\\p{L}]+");
  }));
  try {
    assert.throws(() => convertHF(m), (e) => e instanceof ConvertError && /tokenizer\.json: the pre-tokenizer .* matches none of llama\.cpp's names/.test(e.message));
  } finally {
    m.close();
  }
});

/**
 * A SentencePiece-style BPE tokenizer.json (Llama 2 / Mistral written by tokenizers): U+2581 for spaces by a
 * Prepend + Replace normalizer, <0xXX> byte fallback, merges learned here from a text by plain BPE counting.
 */
function spmTokenizer(text: string, merges: number): Record<string, unknown> {
  const vocab: Record<string, number> = { "<unk>": 0, "<s>": 1, "</s>": 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = 3 + b;
  const words = text.split(" ").map((w) => [..."\u2581" + w]);
  for (const ch of new Set(words.flat())) vocab[ch] ??= Object.keys(vocab).length;
  const rules: string[] = [];
  for (let r = 0; r < merges; r++) {
    const count = new Map<string, number>();
    for (const w of words) for (let i = 0; i + 1 < w.length; i++) count.set(`${w[i]} ${w[i + 1]}`, (count.get(`${w[i]} ${w[i + 1]}`) ?? 0) + 1);
    const best = [...count].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))[0];
    if (!best) break;
    const [a, b] = best[0].split(" ");
    rules.push(best[0]);
    vocab[a + b] ??= Object.keys(vocab).length;
    for (const w of words) for (let i = 0; i + 1 < w.length; i++) if (w[i] === a && w[i + 1] === b) w.splice(i, 2, a + b);
  }
  return {
    added_tokens: ["<unk>", "<s>", "</s>"].map((content, id) => ({ id, content, special: true })),
    normalizer: { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "\u2581" }, { type: "Replace", pattern: { String: " " }, content: "\u2581" }] },
    pre_tokenizer: null,
    post_processor: { type: "TemplateProcessing", single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }] },
    decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" }] },
    model: { type: "BPE", vocab, merges: rules, unk_token: "<unk>", byte_fallback: true, ignore_merges: false },
  };
}

const nodeOk = spawnSync("node", ["--version"], { encoding: "utf8" }).status === 0;
const refSkip = !nodeOk ? "node is not installed"
  : !existsSync(`${root}node_modules/node-llama-cpp/package.json`) ? "node-llama-cpp is not installed (npm ci)" : false;

const spmTexts = ["the lazy dog runs", "Über 3 quick foxes!", "hills  and\ndogs"];
const spmFile = join(dir, "spm.gguf");
let spmIds: number[][] | undefined;

test("a SentencePiece-style tokenizer.json becomes tokenizer model 'llama' (merge-rank scores) that poot tokenizes as tokenizer.json does", () => {
  const corpus = "the quick brown fox jumps over the lazy dog and the dog sleeps while the fox runs over the hills";
  const d = withTokenizer("spm", (tj) => Object.assign(tj, spmTokenizer(corpus, 40)));
  writeFileSync(join(d, "tokenizer_config.json"), JSON.stringify({ bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>", add_bos_token: true }));
  const m = loadModel(d);
  const out = spmFile;
  try {
    const c = convertHF(m);
    assert.equal(c.metadata.get("tokenizer.ggml.model")?.value, "llama");
    assert.equal(c.metadata.get("tokenizer.ggml.add_space_prefix")?.value, true);
    quantizeToGGUF(c.store, c.metadata, out, "f32");
  } finally {
    m.close();
  }
  const hf = tokenizerFromHF(readFileSync(join(d, "tokenizer.json"), "utf8"), { bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>", add_bos_token: true });
  const gg = loadModel(out);
  try {
    for (const s of spmTexts) assert.deepEqual(gg.tokenizer.encode(s), hf.encode(s), JSON.stringify(s));
    assert.ok(hf.encode(spmTexts[0]).length < spmTexts[0].length, "merges apply");
    spmIds = spmTexts.map((s) => hf.encode(s, { addBos: false }));
  } finally {
    gg.close();
  }
});

test("llama.cpp tokenizes with that 'llama' tokenizer as tokenizer.json does", { skip: refSkip, timeout: 60_000 }, () => {
  assert.ok(spmIds, "the conversion test wrote the file");
  const r = spawnSync("node", [`${root}tests/quant/llamacpp-margins.mjs`], {
    input: JSON.stringify({ jobs: [{ model: spmFile, seqs: [], texts: spmTexts }], tokens: 1, ctx: 64, threads: 1 }), encoding: "utf8", timeout: 60_000,
  });
  assert.equal(r.status, 0, r.stderr);
  const [{ tokenized }] = JSON.parse(r.stdout) as { tokenized: number[][] }[];
  spmTexts.forEach((s, i) => assert.deepEqual(tokenized[i], spmIds![i], `llama.cpp: ${JSON.stringify(s)}`));
});

test("poot quantize FOLDER OUT --type q8_0 converts and quantizes in one command, printing the notes", { timeout: 120_000 }, () => {
  const out = join(dir, "gemma2-q8_0.gguf");
  const r = poot(["quantize", `${FIXTURES}gemma2`, out, "--type", "q8_0"]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stderr, /^note: gemma2: lm_head\.weight dropped .*\nnote: gemma2: query_pre_attn_scalar 24 cannot be stated in GGUF/);
  assert.match(r.stdout, /\] blk\.0\.attn_q\.weight \[64, 64\] f16 -> q8_0\n/);
  assert.match(r.stdout, /\] blk\.0\.attn_norm\.weight \[64\] f32 -> f32\n/);
  assert.match(r.stdout, /as q8_0: \d+ of 35 tensors converted, 0 fallbacks\n$/);
  const g = loadModel(out);
  try {
    assert.equal(g.arch, "gemma2");
    assert.equal(g.gguf!.optU32("general.file_type"), 7);
    assert.equal(g.store.info("blk.1.ffn_down.weight")!.dtype, "q8_0");
    assert.equal(g.store.info("output.weight"), undefined, "tied as llama.cpp's gemma2 reads it");
  } finally {
    g.close();
  }
});

test("linear rope scaling of a llama checkpoint is written as rope.scaling.* and read back to the folder's factors and logits", () => {
  const d = join(dir, "llama-linear");
  cpSync(`${FIXTURES}llama`, d, { recursive: true });
  const cfgPath = join(d, "config.json"), cfg = JSON.parse(readFileSync(cfgPath, "utf8"));
  cfg.rope_parameters = { rope_type: "linear", factor: 4, rope_theta: 10000 };
  writeFileSync(cfgPath, JSON.stringify(cfg));
  const hf = loadModel(d), out = join(dir, "llama-linear.gguf");
  try {
    const c = convertHF(hf);
    assert.equal(c.metadata.get("llama.rope.scaling.type")?.value, "linear");
    assert.equal(c.metadata.get("llama.rope.scaling.factor")?.value, 4);
    assert.equal(c.store.info("rope_freqs.weight"), undefined);
    quantizeToGGUF(c.store, c.metadata, out, "f32");
    const gg = loadModel(out);
    try {
      assert.deepEqual(gg.config.ropeFactors, hf.config.ropeFactors);
      assert.equal(gg.config.ropeStyle, "adjacent");
      const ids = [1, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150], R = ids.length;
      const logits = (m: typeof hf) => {
        const { tracer, logits } = m.family.trace(m.config, { rows: R, cap: 16 }, { dtypeOf: dtypesFromStore(m.store, m.map) });
        tracer.output("l", logits);
        return evaluate(tracer.build(), { consts: constsFromStore(m.store, m.map), slots: { token: Int32Array.from(ids), pos: new Int32Array([0]) } }).output.l as Float32Array;
      };
      const want = logits(hf), got = logits(gg);
      for (let i = 0; i < want.length; i++) {
        assert.ok(Math.abs(got[i] - want[i]) <= 1e-4 + 1e-4 * Math.abs(want[i]), `logit ${i}: ${got[i]} vs the folder's ${want[i]} (adjacent vs half rope: only summation order differs)`);
      }
    } finally {
      gg.close();
    }
  } finally {
    hf.close();
  }
});
