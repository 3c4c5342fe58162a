// A Hugging Face folder (config.json, safetensors, tokenizer.json) as the GGUF llama.cpp's convert_hf_to_gguf.py
// would write for it, so that llama.cpp and poot load the file and run the same model: plain data (metadata and a
// WeightStore under GGUF tensor names) that quantize.ts streams into a file, one tensor at a time.
//
// Per family, what llama.cpp expects (read from its converter and loader, not copied):
// - llama (+ Mistral): arch `llama`; q/k rows permuted from HF's rotate-halves order to GGML's adjacent pairs;
//   llama3 rope scaling as a `rope_freqs.weight` of per-frequency divisors, linear as rope.scaling.*; vocab_size
//   and rope.dimension_count. llama.cpp's llama has no sliding window: a Mistral window is dropped (a note says so).
// - qwen2 (q/k/v biases), qwen3 (q/k norms): NEOX rope, nothing permuted. phi3: fused attn_qkv and ffn_up (gate|up)
//   kept fused, sliding_window 0 when the config has none.
// - gemma2 / gemma3: every *norm.weight stored as 1 + w in f32; gemma2's lm_head is dropped (llama.cpp's gemma2
//   always ties the output to the embedding); sliding window, its period (attention.sliding_window_pattern) and
//   the local rope base (rope.freq_base_swa), soft-capping. A query_pre_attn_scalar other than llama.cpp's rule
//   (head_dim; hidden/heads for 27B) cannot be stated in GGUF: a note says the GGUF model differs there.
// - the tokenizer: byte-level BPE as `gpt2` (tokens padded to vocab_size with [PADi], token types, merges, the
//   pre-tokenizer name found by matching tokenizer.json's split regexes to llama.cpp's names and then checked by
//   encoding a probe text both ways), SentencePiece-style BPE (U+2581, byte fallback) as `llama` with scores that
//   rank merged pieces in merge order; bos/eos/unk/pad ids, add_bos/add_eos, the chat template.
// Anything else (an unknown architecture, a tokenizer GGUF cannot describe) is a ConvertError naming it.
import { readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { decodeHalf, type DType } from "../../graph/dtype.ts";
import { roleKey, type TensorInfo, type WeightStore } from "../../graph/weights.ts";
import { LlmError } from "../errors.ts";
import type { ModelConfig } from "../families/family.ts";
import type { ModelHandle } from "../model.ts";
import { TokenType } from "../tokenizer/types.ts";
import { createTokenizer, type HFTokenizerConfig, tokenizerFromGGUF, tokenizerSpecFromHF, type TokenizerSpec } from "../tokenizer/mod.ts";
import { compilePattern, preTokenizerByName } from "../tokenizer/pretokenize.ts";
import { type GGUFValue, parseGGUF } from "./gguf.ts";
import { meta, writeGGUF } from "./gguf-write.ts";

/** A conversion that cannot be done faithfully (the message names what). */
export class ConvertError extends LlmError {}

export interface Converted {
  /** GGUF general.architecture. */
  arch: string;
  metadata: Map<string, GGUFValue>;
  /** The tensors under GGUF names, in file order; `bytes` reads and transforms one tensor when asked. */
  store: WeightStore;
  /** What the GGUF states differently from the folder (the model llama.cpp runs differs there). */
  notes: string[];
}

/** GGUF architecture of each family (the HF architectures poot reads map onto these). */
const ARCH: Record<string, string> = { llama: "llama", qwen2: "qwen2", qwen3: "qwen3", gemma2: "gemma2", gemma3: "gemma3", phi3: "phi3" };

// deno-lint-ignore no-explicit-any
type Json = any;

/** The folder's model (loadModel of a Hugging Face folder) as llama.cpp's GGUF. */
export function convertHF(m: ModelHandle): Converted {
  if (m.format !== "hf") throw new ConvertError(`${m.path}: convertHF reads a Hugging Face folder, not a ${m.format} file`);
  const fam = m.family.name, arch = ARCH[fam];
  if (!arch) throw new ConvertError(`${m.path}: no GGUF architecture for the ${fam} family`);
  const c = m.config, dir = m.path, notes: string[] = [];
  const cfg: Json = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));

  // Tensors -----------------------------------------------------------------------------------------------
  const entries: { info: TensorInfo; read: () => Uint8Array }[] = [];
  const written = new Set<string>();
  const dropOutput = fam === "gemma2" && !c.tiedEmbeddings;
  if (dropOutput) notes.push("gemma2: lm_head.weight dropped (llama.cpp's gemma2 always uses the token embedding as the output)");
  for (const { role } of m.family.weights({ ...c, ropeFreqFactors: false })) {
    if (dropOutput && role.role === "output") continue;
    let src = m.map.get(roleKey(role))!, name = m.family.tensorName("gguf", role, c)!;
    if (name.includes("#rows=")) {
      // A row range of a fused tensor (phi3's qkv, gate|up): the GGUF holds the fused tensor once.
      [name, src] = [name.split("#")[0], src.split("#")[0]];
      if (written.has(name)) continue;
      written.add(name);
    }
    const info = m.store.info(src)!;
    const elem = info.dtype === "f32" ? 4 : 2;
    let read = () => m.store.bytes(src);
    let dtype: DType = info.dtype;
    if (arch === "llama" && (role.role === "attn.q" || role.role === "attn.k")) {
      const heads = role.role === "attn.q" ? c.heads : c.kvHeads;
      read = () => permuteRows(m.store.bytes(src), info.shape[0], info.shape[1] * elem, heads);
    } else if (c.normOffset && /norm/.test(role.role)) {
      // llama.cpp's gemma converters store (1 + w), in f32 as every norm.
      dtype = "f32";
      read = () => {
        const w = floats(info.dtype, m.store.bytes(src));
        return new Uint8Array(w.map((x) => x + c.normOffset!).buffer);
      };
    }
    const n = info.shape.reduce((a, b) => a * b, 1);
    entries.push({ info: { name, dtype, shape: info.shape, byteLength: n * (dtype === "f32" ? 4 : 2) }, read });
  }
  if (arch === "llama" && c.ropeFactors && ropeType(cfg) === "llama3") {
    const f = Float32Array.from(c.ropeFactors);
    entries.splice(2, 0, { info: { name: "rope_freqs.weight", dtype: "f32", shape: [f.length], byteLength: f.byteLength }, read: () => new Uint8Array(f.buffer) });
  }

  // Metadata ----------------------------------------------------------------------------------------------
  const md = new Map<string, GGUFValue>();
  const k = (s: string) => `${arch}.${s}`;
  md.set("general.architecture", meta.string(arch));
  md.set("general.name", meta.string(m.name ? basename(m.name) : basename(dir.replace(/\/+$/, ""))));
  md.set(k("context_length"), meta.u32(c.contextLength ?? 4096));
  md.set(k("embedding_length"), meta.u32(c.dim));
  md.set(k("feed_forward_length"), meta.u32(c.hidden));
  md.set(k("block_count"), meta.u32(c.layers));
  md.set(k("attention.head_count"), meta.u32(c.heads));
  md.set(k("attention.head_count_kv"), meta.u32(c.kvHeads));
  md.set(k("attention.layer_norm_rms_epsilon"), meta.f32(c.rmsEps));
  md.set(k("attention.key_length"), meta.u32(c.headDim));
  md.set(k("attention.value_length"), meta.u32(c.headDim));
  md.set(k("rope.freq_base"), meta.f32(c.ropeTheta));
  if (arch === "llama") md.set(k("vocab_size"), meta.u32(c.vocab));
  if (arch === "llama" || arch === "phi3") md.set(k("rope.dimension_count"), meta.u32(c.ropeDims ?? c.headDim));
  ropeMetadata(arch, c, cfg, md, notes);
  windowMetadata(arch, c, md, notes);
  if (c.attnSoftcap) md.set(k("attn_logit_softcapping"), meta.f32(c.attnSoftcap));
  if (c.finalSoftcap) md.set(k("final_logit_softcapping"), meta.f32(c.finalSoftcap));
  if (fam === "gemma2" || fam === "gemma3") {
    const big = c.layers === (fam === "gemma2" ? 46 : 62);
    const llamaScale = big ? c.dim / c.heads : c.headDim;
    const q = cfg.query_pre_attn_scalar ?? c.headDim;
    if (q !== llamaScale) {
      notes.push(`${fam}: query_pre_attn_scalar ${q} cannot be stated in GGUF: llama.cpp scales scores by 1/sqrt(${llamaScale}) for this model`);
    }
  }
  for (const [key, v] of tokenizerMetadata(m, dir)) md.set(key, v);
  if (m.chatTemplate !== undefined) md.set("tokenizer.chat_template", meta.string(m.chatTemplate));

  const byName = new Map(entries.map((e) => [e.info.name, e]));
  const store: WeightStore = {
    tensors: () => entries.map((e) => e.info),
    info: (name) => byName.get(name)?.info,
    bytes(name) {
      const e = byName.get(name);
      if (!e) throw new ConvertError(`no tensor '${name}' in the conversion`);
      return e.read();
    },
  };
  return { arch, metadata: md, store, notes };
}

/** HF q/k rows [heads, 2, hd/2] -> GGML's [heads, hd/2, 2] (convert_hf_to_gguf.py's LlamaModel.permute). */
export function permuteRows(data: Uint8Array, rows: number, rowBytes: number, heads: number): Uint8Array {
  const hd = rows / heads, half = hd / 2;
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

function floats(dtype: DType, b: Uint8Array): Float32Array {
  if (dtype === "f32") return new Float32Array(b.slice().buffer);
  return decodeHalf(dtype as "f16" | "bf16", new Uint16Array(b.slice().buffer));
}

function ropeType(cfg: Json): string | undefined {
  const p = cfg.rope_parameters ?? cfg.rope_scaling;
  const g = p && typeof p === "object" && "full_attention" in p ? p.full_attention : p;
  return g?.rope_type ?? g?.type;
}

function ropeMetadata(arch: string, c: ModelConfig, cfg: Json, md: Map<string, GGUFValue>, notes: string[]): void {
  const k = (s: string) => `${arch}.${s}`;
  const type = ropeType(cfg);
  if (c.ropeFactors && type === "linear") {
    md.set(k("rope.scaling.type"), meta.string("linear"));
    md.set(k("rope.scaling.factor"), meta.f32(c.ropeFactors[0]));
  } else if (c.ropeFactors && !(arch === "llama" && type === "llama3")) {
    throw new ConvertError(`rope scaling '${type}' of a ${arch} model has no GGUF form here (linear, and llama3 for llama, do)`);
  }
  if (c.ropeLocal) {
    md.set(k("rope.freq_base_swa"), meta.f32(c.ropeLocal.theta));
    if (c.ropeLocal.factors) notes.push(`${arch}: the sliding layers' rope scaling cannot be stated in GGUF (llama.cpp applies none there)`);
  }
}

/** Sliding-window keys as llama.cpp reads them per architecture (its llama has none; phi3 writes 0 for none). */
function windowMetadata(arch: string, c: ModelConfig, md: Map<string, GGUFValue>, notes: string[]): void {
  const k = (s: string) => `${arch}.${s}`;
  const w = c.slidingWindow;
  if (arch === "llama" || arch === "qwen2" || arch === "qwen3") {
    if (w) notes.push(`${arch}: sliding_window ${w} dropped: llama.cpp's ${arch} attends over the whole context`);
    return;
  }
  if (arch === "phi3") {
    md.set(k("attention.sliding_window"), meta.u32(w ?? 0));
    if (w) notes.push(`phi3: llama.cpp ignores the sliding window (${w}) of Phi-3 files`);
    return;
  }
  if (!w) return;
  md.set(k("attention.sliding_window"), meta.u32(w));
  // llama.cpp: layer l slides when l % period < period - 1. State the period the folder's layer types follow.
  const layers = c.slidingLayers ?? new Array(c.layers).fill(true);
  const fits = (p: number) => layers.every((s, l) => s === (p === 0 || l % p < p - 1));
  const period = [arch === "gemma2" ? 2 : 6, ...Array.from({ length: c.layers + 1 }, (_, i) => i)].find((p) => p !== 1 && fits(p));
  if (period === undefined) throw new ConvertError(`${arch}: sliding layers [${layers.map(Number).join("")}] follow no period llama.cpp can state`);
  if (period !== (arch === "gemma2" ? 2 : 6)) md.set(k("attention.sliding_window_pattern"), meta.u32(period));
}

/** llama.cpp's names for tokenizer.json pre-tokenizer regexes (one canonical name per distinct behaviour). */
const PRE_NAMES = ["gpt-2", "llama-bpe", "smaug-bpe", "qwen2", "smollm", "falcon", "tekken", "gpt-4o", "default"];
/** convert_hf_to_gguf.py's probe text (whitespace runs, emoji, digits, scripts, contractions). */
const PROBE = "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL";

function tokenizerMetadata(m: ModelHandle, dir: string): Map<string, GGUFValue> {
  const tjPath = join(dir, "tokenizer.json");
  const tj: Json = JSON.parse(readFileSync(tjPath, "utf8"));
  let tc: HFTokenizerConfig = {};
  try {
    tc = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  } catch { /* optional; loadModel validated it when present */ }
  const spec = tokenizerSpecFromHF(tj, tc);
  if (spec.normalize || spec.lowercase) {
    throw new ConvertError(`${tjPath}: the normalizer (${spec.normalize ?? "Lowercase"}) has no GGUF form`);
  }
  const n = Math.max(m.config.vocab, spec.tokens.length);
  const tokens = Array.from({ length: n }, (_, i) => (i < spec.tokens.length && spec.types?.[i] !== TokenType.unused ? spec.tokens[i] : `[PAD${i}]`));
  const types = Array.from({ length: n }, (_, i) => (i < spec.tokens.length ? spec.types?.[i] ?? TokenType.normal : TokenType.unused));
  const md = new Map<string, GGUFValue>();
  const merges = (spec.merges ?? []).map((x) => (typeof x === "string" ? x : x.join(" ")));
  if (spec.byteLevel) {
    md.set("tokenizer.ggml.model", meta.string("gpt2"));
    md.set("tokenizer.ggml.pre", meta.string("gpt-2")); // keeps llama.cpp's key order; preName sets the name below
  } else if (spec.escapeWhitespace && spec.byteFallback) {
    md.set("tokenizer.ggml.model", meta.string("llama"));
  } else {
    throw new ConvertError(`${tjPath}: a BPE tokenizer that is neither byte-level nor SentencePiece-style (U+2581, byte fallback) has no GGUF form`);
  }
  md.set("tokenizer.ggml.tokens", meta.strings(tokens));
  if (spec.byteLevel) {
    md.set("tokenizer.ggml.token_type", meta.i32s(types));
    md.set("tokenizer.ggml.merges", meta.strings(merges));
  } else {
    // llama.cpp's SPM merges the adjacent pair whose joined piece scores highest: score merged pieces by merge rank.
    const scores = new Float32Array(n);
    const id = new Map(tokens.map((t, i) => [t, i]));
    merges.forEach((mg, r) => {
      const sp = mg.indexOf(" ", 1), t = id.get(mg.slice(0, sp) + mg.slice(sp + 1));
      if (t !== undefined && scores[t] === 0) scores[t] = -(r + 1);
    });
    md.set("tokenizer.ggml.scores", meta.f32s(scores));
    md.set("tokenizer.ggml.token_type", meta.i32s(types));
    md.set("tokenizer.ggml.add_space_prefix", meta.bool(spec.spacePrefix !== "never"));
  }
  const ids: [string, number | undefined][] = [["bos_token_id", spec.bos], ["eos_token_id", spec.eos], ["unknown_token_id", spec.unk], ["padding_token_id", spec.pad]];
  for (const [key, v] of ids) if (v !== undefined) md.set(`tokenizer.ggml.${key}`, meta.u32(v));
  md.set("tokenizer.ggml.add_bos_token", meta.bool(spec.addBos ?? false));
  md.set("tokenizer.ggml.add_eos_token", meta.bool(spec.addEos ?? false));
  if (spec.byteLevel) md.set("tokenizer.ggml.pre", meta.string(preName(spec, md, tjPath)));
  else probe(spec, md, tjPath, "SentencePiece-style");
  return md;
}

/** The llama.cpp pre-tokenizer name whose regexes are tokenizer.json's (and that encodes the probe the same). */
function preName(spec: TokenizerSpec, md: Map<string, GGUFValue>, file: string): string {
  const src = (spec.pre as readonly string[] | undefined ?? []).map((s) => compilePattern(s).source).join("\u0000");
  const candidates = PRE_NAMES.filter((name) => {
    const p = preTokenizerByName(name)!;
    return p.regexes.map((r) => r.source).join("\u0000") === src && p.ignoreMerges === (spec.ignoreMerges ?? false);
  });
  for (const name of candidates) {
    md.set("tokenizer.ggml.pre", meta.string(name));
    if (probe(spec, md, file, name, false)) return name;
  }
  throw new ConvertError(`${file}: the pre-tokenizer (${(spec.pre as string[] | undefined)?.length ?? 0} split regexes) matches none of llama.cpp's names (${PRE_NAMES.join(", ")})`);
}

/** Whether the tokenizer llama.cpp/poot build from this metadata encodes the probe as tokenizer.json does. */
function probe(spec: TokenizerSpec, md: Map<string, GGUFValue>, file: string, what: string, strict = true): boolean {
  const hf = createTokenizer(spec);
  const gg = tokenizerFromGGUF(parseGGUF(writeGGUF({ metadata: md }), file));
  const texts = [PROBE, "Hello world! It's 2024, isn't it?  Yes.\n\nNew paragraph:\tx = 42;"];
  const same = texts.every((t) => gg.encode(t, { addBos: false }).join() === hf.encode(t, { addBos: false }).join());
  if (!same && strict) throw new ConvertError(`${file}: the ${what} tokenizer written as GGUF metadata encodes text differently from tokenizer.json`);
  return same;
}
