// The Llama family (Llama 2/3/3.1/3.2, Mistral, TinyLlama, SmolLM, stories) and its close kin that the same
// step traces under config flags: Qwen2/2.5 (q/k/v bias) and Qwen3 (q/k RMSNorm) live in qwen.ts.
// Config from GGUF metadata or config.json, weight roles and their tensor names per file format, the step.
//
// GGUF llama files store q/k rows permuted for GGML's adjacent-pair rope; Hugging Face checkpoints are not
// permuted and rotate halves, so the same weights need no reordering: the config's ropeStyle says which.
import type { Graph } from "../../graph/ir.ts";
import { Tracer } from "../../graph/tracer.ts";
import { roleKey, type WeightMap, type WeightRole } from "../../graph/weights.ts";
import { MetadataError } from "../errors.ts";
import type { GGUFFile } from "../formats/gguf.ts";
import { configFail, HFDecoderSchema, parseConfig, ropeParams } from "../formats/hf-config.ts";
import { attend, embed, gatedFfn, head, linear, norm, ropeOf, stepInputs, weightFn } from "./common.ts";
import {
  type Family, type HFConfigSource, type ModelConfig, namesFrom, ropeScalingFactors, type StepShape, type Traced,
  type TraceOptions, type WeightSpec,
} from "./family.ts";

export { dtypesFromStore } from "./family.ts";
export type { ModelConfig, StepShape, TraceOptions } from "./family.ts";
export { kvState, SLOTS } from "./common.ts";
/** The Llama-shaped config (every family's config has these fields). */
export type LlamaConfig = ModelConfig;

/** Every weight role the Llama step reads. */
export type LlamaRole =
  | "tok_embd" | "output_norm" | "output" | "rope_freqs"
  | "attn_norm" | "attn.q" | "attn.k" | "attn.v" | "attn.o" | "attn.q.bias" | "attn.k.bias" | "attn.v.bias"
  | "attn.q_norm" | "attn.k_norm" | "ffn_norm" | "ffn.gate" | "ffn.up" | "ffn.down";

/** The roles the step reads, with their shapes ([out, in] for matrices). */
export function llamaWeights(c: ModelConfig): WeightSpec[] {
  const q = c.heads * c.headDim, kv = c.kvHeads * c.headDim;
  const w: WeightSpec[] = [
    { role: { role: "tok_embd" }, shape: [c.vocab, c.dim] },
    { role: { role: "output_norm" }, shape: [c.dim] },
  ];
  if (!c.tiedEmbeddings) w.push({ role: { role: "output" }, shape: [c.vocab, c.dim] });
  if (c.ropeFreqFactors) w.push({ role: { role: "rope_freqs" }, shape: [(c.ropeDims ?? c.headDim) / 2] });
  for (let l = 0; l < c.layers; l++) {
    const at = (role: LlamaRole, shape: number[]) => w.push({ role: { role, layer: l }, shape });
    at("attn_norm", [c.dim]);
    at("attn.q", [q, c.dim]);
    at("attn.k", [kv, c.dim]);
    at("attn.v", [kv, c.dim]);
    if (c.qkvBias) {
      at("attn.q.bias", [q]);
      at("attn.k.bias", [kv]);
      at("attn.v.bias", [kv]);
    }
    if (c.qkNorm) {
      at("attn.q_norm", [c.headDim]);
      at("attn.k_norm", [c.headDim]);
    }
    at("attn.o", [c.dim, q]);
    at("ffn_norm", [c.dim]);
    at("ffn.gate", [c.hidden, c.dim]);
    at("ffn.up", [c.hidden, c.dim]);
    at("ffn.down", [c.dim, c.hidden]);
  }
  return w;
}

export const LLAMA_NAMES = {
  gguf: {
    tok_embd: "token_embd.weight", output_norm: "output_norm.weight", output: "output.weight", rope_freqs: "rope_freqs.weight",
    attn_norm: "attn_norm.weight", "attn.q": "attn_q.weight", "attn.k": "attn_k.weight", "attn.v": "attn_v.weight",
    "attn.o": "attn_output.weight", "attn.q.bias": "attn_q.bias", "attn.k.bias": "attn_k.bias", "attn.v.bias": "attn_v.bias",
    "attn.q_norm": "attn_q_norm.weight", "attn.k_norm": "attn_k_norm.weight",
    ffn_norm: "ffn_norm.weight", "ffn.gate": "ffn_gate.weight", "ffn.up": "ffn_up.weight", "ffn.down": "ffn_down.weight",
  },
  hf: {
    tok_embd: "model.embed_tokens.weight", output_norm: "model.norm.weight", output: "lm_head.weight",
    attn_norm: "input_layernorm.weight", "attn.q": "self_attn.q_proj.weight", "attn.k": "self_attn.k_proj.weight",
    "attn.v": "self_attn.v_proj.weight", "attn.o": "self_attn.o_proj.weight", "attn.q.bias": "self_attn.q_proj.bias",
    "attn.k.bias": "self_attn.k_proj.bias", "attn.v.bias": "self_attn.v_proj.bias",
    "attn.q_norm": "self_attn.q_norm.weight", "attn.k_norm": "self_attn.k_norm.weight",
    ffn_norm: "post_attention_layernorm.weight", "ffn.gate": "mlp.gate_proj.weight", "ffn.up": "mlp.up_proj.weight",
    "ffn.down": "mlp.down_proj.weight",
  },
  // llm/formats/llama2c.ts names each layer's slice of llama2.c's stacked arrays `<field>.<layer>`.
  llama2c: {
    tok_embd: "token_embedding_table", output_norm: "rms_final_weight", output: "wcls",
    attn_norm: "rms_att_weight", "attn.q": "wq", "attn.k": "wk", "attn.v": "wv", "attn.o": "wo",
    ffn_norm: "rms_ffn_weight", "ffn.gate": "w1", "ffn.up": "w3", "ffn.down": "w2",
  },
} satisfies Record<string, Partial<Record<LlamaRole, string>>>;

const llamaNames = namesFrom(LLAMA_NAMES);

/** The tensor name of a role in a file format (undefined when the format has no such tensor). */
export function tensorName(format: "gguf" | "hf" | "llama2c", r: WeightRole): string | undefined {
  return llamaNames(format, r);
}

/**
 * Binds every role the step reads to its tensor name in `format`. With `names` (the store's tensor names),
 * a role whose tensor is missing throws.
 */
export function weightMap(c: ModelConfig, format: "gguf" | "hf" | "llama2c", names?: Iterable<string>): WeightMap {
  const have = names ? new Set(names) : undefined;
  const map: WeightMap = new Map();
  for (const { role } of llamaWeights(c)) {
    const name = tensorName(format, role);
    if (!name || (have && !have.has(name))) {
      throw new RangeError(`${format} model has no tensor for ${roleKey(role)}${name ? ` (${name})` : ""}`);
    }
    map.set(roleKey(role), name);
  }
  return map;
}

/**
 * The Llama-shaped config of GGUF metadata under `${arch}.*` keys. `rope`: GGML's rope mode of the arch
 * (llama files are permuted for adjacent pairs; qwen2/qwen3 are NEOX, i.e. halves).
 */
export function llamaConfigFromGGUF(g: GGUFFile, arch: string, rope: "adjacent" | "half"): ModelConfig {
  const k = (s: string) => `${arch}.${s}`;
  const dim = g.getU32(k("embedding_length"));
  const heads = g.getU32(k("attention.head_count"));
  const kvHeads = g.optU32(k("attention.head_count_kv")) ?? heads;
  const headDim = g.optU32(k("attention.key_length")) ?? dim / heads;
  const tokens = g.optStrings("tokenizer.ggml.tokens");
  const embd = g.info("token_embd.weight");
  if (!embd) throw new MetadataError(g.file, "token_embd.weight", `${arch} model has no token_embd.weight tensor`);
  const vocab = embd.shape[0];
  if (tokens && tokens.length !== vocab) {
    throw new MetadataError(g.file, "tokenizer.ggml.tokens", `${tokens.length} tokens but token_embd.weight has ${vocab} rows`);
  }
  const ropeDims = g.optU32(k("rope.dimension_count"));
  const window = g.optU32(k("attention.sliding_window"));
  // Linear rope scaling (llama.cpp's rope.scaling.type "linear": positions divided by the factor).
  const linear = g.optString(k("rope.scaling.type")) === "linear" ? g.optF32(k("rope.scaling.factor")) : undefined;
  return {
    dim,
    hidden: g.getU32(k("feed_forward_length")),
    layers: g.getU32(k("block_count")),
    heads,
    kvHeads,
    headDim,
    vocab,
    rmsEps: g.optF32(k("attention.layer_norm_rms_epsilon")) ?? 1e-5,
    ropeTheta: g.optF32(k("rope.freq_base")) ?? 10000,
    ropeStyle: rope,
    ropeDims: ropeDims !== undefined && ropeDims !== headDim ? ropeDims : undefined,
    ropeFreqFactors: g.info("rope_freqs.weight") !== undefined,
    ropeFactors: linear && linear !== 1 ? new Array((ropeDims ?? headDim) / 2).fill(linear) : undefined,
    tiedEmbeddings: g.info("output.weight") === undefined,
    qkvBias: g.info("blk.0.attn_q.bias") !== undefined,
    qkNorm: g.info("blk.0.attn_q_norm.weight") !== undefined,
    slidingWindow: window || undefined,
    contextLength: g.optU32(k("context_length")),
  };
}

/** The Llama-shaped config of a Hugging Face config.json (q/k not permuted: rope rotates halves). */
export function llamaConfigFromHF(src: HFConfigSource): ModelConfig {
  const c = parseConfig(src, HFDecoderSchema);
  const heads = c.num_attention_heads, headDim = c.head_dim ?? c.hidden_size / heads;
  const rp = ropeParams(c);
  const theta = rp.theta ?? 10000;
  const partial = rp.partial_rotary_factor ?? 1;
  const ropeDims = partial < 1 ? Math.floor(headDim * partial) : undefined;
  const window = c.sliding_window && c.use_sliding_window !== false ? c.sliding_window : undefined;
  return {
    dim: c.hidden_size,
    hidden: c.intermediate_size,
    layers: c.num_hidden_layers,
    heads,
    kvHeads: c.num_key_value_heads ?? heads,
    headDim,
    vocab: c.vocab_size,
    rmsEps: c.rms_norm_eps ?? 1e-6,
    ropeTheta: theta,
    ropeStyle: "half",
    ropeDims,
    ropeFactors: ropeScalingFactors(rp, theta, ropeDims ?? headDim, configFail(src, "rope_parameters")),
    tiedEmbeddings: c.tie_word_embeddings ?? false,
    qkvBias: c.attention_bias ?? false,
    slidingWindow: window,
    slidingLayers: window && c.layer_types ? c.layer_types.map((t) => t === "sliding_attention") : undefined,
    contextLength: c.max_position_embeddings,
  };
}

/**
 * Traces the step and returns the tracer before build, with the logits [rows, vocab] and final hidden nodes,
 * so that a caller can append nodes (a sampler) and declare its own outputs. Slots: see common.ts.
 */
export function traceLlama(c: ModelConfig, s: StepShape, o: TraceOptions = {}): Traced {
  const g = new Tracer();
  const R = s.rows, D = c.dim, hd = c.headDim;
  const w = weightFn(g, o);
  const q = c.heads * hd, kv = c.kvHeads * hd;
  const inp = stepInputs(g, s);
  const freqs = c.ropeFreqFactors ? w("rope_freqs", [(c.ropeDims ?? hd) / 2]) : undefined;
  const tok = w("tok_embd", [c.vocab, D]);

  let x = embed(g, tok, inp, c);
  for (let l = 0; l < c.layers; l++) {
    x = g.scope(`blk.${l}`, () => {
      const h = norm(g, x, w("attn_norm", [D], l), c);
      const proj = (role: "attn.q" | "attn.k" | "attn.v", n: number, heads: number) => {
        const y = linear(g, h, w(role, [n, D], l), role, c.qkvBias ? w(`${role}.bias`, [n], l) : undefined);
        const r = g.reshape(y, [R, heads, hd]);
        return c.qkNorm && role !== "attn.v" ? norm(g, r, w(`${role}_norm`, [hd], l), c) : r;
      };
      const qh = g.label(ropeOf(inp, c, l, proj("attn.q", q, c.heads), freqs), "q");
      const kh = g.label(ropeOf(inp, c, l, proj("attn.k", kv, c.kvHeads), freqs), "k");
      const att = attend(inp, c, l, qh, kh, proj("attn.v", kv, c.kvHeads));
      const y = g.add(x, g.label(g.matmul(att, w("attn.o", [D, q], l)), "attn.o"));
      const h2 = norm(g, y, w("ffn_norm", [D], l), c);
      const gate = g.label(g.matmul(h2, w("ffn.gate", [c.hidden, D], l)), "ffn.gate");
      const up = g.label(g.matmul(h2, w("ffn.up", [c.hidden, D], l)), "ffn.up");
      return g.add(y, gatedFfn(g, c, gate, up, w("ffn.down", [D, c.hidden], l)));
    });
  }
  const xf = norm(g, x, w("output_norm", [D]), c);
  return { tracer: g, logits: head(g, c, xf, c.tiedEmbeddings ? tok : w("output", [c.vocab, D])), hidden: xf };
}

/** The traced step with output `logits` [rows, vocab]. */
export function traceStep(c: ModelConfig, s: StepShape, o: TraceOptions = {}): Graph {
  const { tracer, logits } = traceLlama(c, s, o);
  tracer.output("logits", logits);
  return tracer.build();
}

/** One-token decode step over KV capacity `cap`. */
export function traceDecode(c: ModelConfig, s: Omit<StepShape, "rows">, o: TraceOptions = {}): Graph {
  return traceStep(c, { ...s, rows: 1 }, o);
}

/** Prefill of `rows` token rows at positions pos..pos+rows-1 (causal among themselves). */
export function tracePrefill(c: ModelConfig, s: StepShape, o: TraceOptions = {}): Graph {
  return traceStep(c, s, o);
}

/** Llama 2/3.x, Mistral, TinyLlama, SmolLM: GGUF arch `llama` / `mistral`, HF LlamaForCausalLM / MistralForCausalLM. */
export const llama: Family = {
  name: "llama",
  gguf: ["llama", "mistral"],
  hf: ["LlamaForCausalLM", "MistralForCausalLM", "llama", "mistral"],
  fromGGUF: (g, arch) => llamaConfigFromGGUF(g, arch, "adjacent"),
  fromHF: llamaConfigFromHF,
  weights: llamaWeights,
  tensorName: llamaNames,
  trace: traceLlama,
};
