// Gemma 2 and Gemma 3 (text): embedding scaled by sqrt(dim), RMSNorm applied as (1 + w) (Hugging Face files;
// GGUF converters store 1 + w), a norm before and after both attention and FFN, GeGLU (tanh GELU), scores
// scaled by query_pre_attn_scalar^-1/2, sliding-window layers interleaved with global ones. Gemma 2 soft-caps
// attention scores and the final logits; Gemma 3 normalizes q/k heads and gives local layers their own rope.
import { Tracer } from "../../graph/tracer.ts";
import type { GGUFFile } from "../formats/gguf.ts";
import { configFail, HFDecoderSchema, parseConfig, ropeParams } from "../formats/hf-config.ts";
import { attend, embed, gatedFfn, head, norm, ropeOf, stepInputs, weightFn } from "./common.ts";
import {
  type Family, type HFConfigSource, type ModelConfig, namesFrom, ropeScalingFactors, type StepShape, type Traced,
  type TraceOptions, type WeightSpec,
} from "./family.ts";
import { z } from "zod";

type GemmaRole =
  | "tok_embd" | "output_norm" | "output" | "attn_norm" | "attn.q" | "attn.k" | "attn.v" | "attn.o" | "attn.q_norm"
  | "attn.k_norm" | "post_attn_norm" | "ffn_norm" | "ffn.gate" | "ffn.up" | "ffn.down" | "post_ffn_norm";

const names = namesFrom({
  gguf: {
    tok_embd: "token_embd.weight", output_norm: "output_norm.weight", output: "output.weight", attn_norm: "attn_norm.weight",
    "attn.q": "attn_q.weight", "attn.k": "attn_k.weight", "attn.v": "attn_v.weight", "attn.o": "attn_output.weight",
    "attn.q_norm": "attn_q_norm.weight", "attn.k_norm": "attn_k_norm.weight", post_attn_norm: "post_attention_norm.weight",
    ffn_norm: "ffn_norm.weight", "ffn.gate": "ffn_gate.weight", "ffn.up": "ffn_up.weight", "ffn.down": "ffn_down.weight",
    post_ffn_norm: "post_ffw_norm.weight",
  },
  hf: {
    tok_embd: "model.embed_tokens.weight", output_norm: "model.norm.weight", output: "lm_head.weight",
    attn_norm: "input_layernorm.weight", "attn.q": "self_attn.q_proj.weight", "attn.k": "self_attn.k_proj.weight",
    "attn.v": "self_attn.v_proj.weight", "attn.o": "self_attn.o_proj.weight", "attn.q_norm": "self_attn.q_norm.weight",
    "attn.k_norm": "self_attn.k_norm.weight", post_attn_norm: "post_attention_layernorm.weight",
    ffn_norm: "pre_feedforward_layernorm.weight", "ffn.gate": "mlp.gate_proj.weight", "ffn.up": "mlp.up_proj.weight",
    "ffn.down": "mlp.down_proj.weight", post_ffn_norm: "post_feedforward_layernorm.weight",
  },
} satisfies Record<string, Record<GemmaRole, string>>);

function weights(c: ModelConfig): WeightSpec[] {
  const q = c.heads * c.headDim, kv = c.kvHeads * c.headDim;
  const w: WeightSpec[] = [
    { role: { role: "tok_embd" }, shape: [c.vocab, c.dim] },
    { role: { role: "output_norm" }, shape: [c.dim] },
  ];
  if (!c.tiedEmbeddings) w.push({ role: { role: "output" }, shape: [c.vocab, c.dim] });
  for (let l = 0; l < c.layers; l++) {
    const at = (role: GemmaRole, shape: number[]) => w.push({ role: { role, layer: l }, shape });
    at("attn_norm", [c.dim]);
    at("attn.q", [q, c.dim]);
    at("attn.k", [kv, c.dim]);
    at("attn.v", [kv, c.dim]);
    if (c.qkNorm) {
      at("attn.q_norm", [c.headDim]);
      at("attn.k_norm", [c.headDim]);
    }
    at("attn.o", [c.dim, q]);
    at("post_attn_norm", [c.dim]);
    at("ffn_norm", [c.dim]);
    at("ffn.gate", [c.hidden, c.dim]);
    at("ffn.up", [c.hidden, c.dim]);
    at("ffn.down", [c.dim, c.hidden]);
    at("post_ffn_norm", [c.dim]);
  }
  return w;
}

function trace(c: ModelConfig, s: StepShape, o: TraceOptions = {}): Traced {
  const g = new Tracer();
  const R = s.rows, D = c.dim, hd = c.headDim;
  const w = weightFn(g, o);
  const q = c.heads * hd, kv = c.kvHeads * hd;
  const inp = stepInputs(g, s);
  const tok = w("tok_embd", [c.vocab, D]);
  let x = embed(g, tok, inp, c);
  for (let l = 0; l < c.layers; l++) {
    x = g.scope(`blk.${l}`, () => {
      const h = norm(g, x, w("attn_norm", [D], l), c);
      const proj = (role: "attn.q" | "attn.k" | "attn.v", n: number, heads: number) => {
        const r = g.reshape(g.label(g.matmul(h, w(role, [n, D], l)), role), [R, heads, hd]);
        return c.qkNorm && role !== "attn.v" ? norm(g, r, w(`${role}_norm`, [hd], l), c) : r;
      };
      const qh = g.label(ropeOf(inp, c, l, proj("attn.q", q, c.heads)), "q");
      const kh = g.label(ropeOf(inp, c, l, proj("attn.k", kv, c.kvHeads)), "k");
      const att = attend(inp, c, l, qh, kh, proj("attn.v", kv, c.kvHeads));
      const a = norm(g, g.label(g.matmul(att, w("attn.o", [D, q], l)), "attn.o"), w("post_attn_norm", [D], l), c);
      const y = g.add(x, a);
      const h2 = norm(g, y, w("ffn_norm", [D], l), c);
      const gate = g.label(g.matmul(h2, w("ffn.gate", [c.hidden, D], l)), "ffn.gate");
      const up = g.label(g.matmul(h2, w("ffn.up", [c.hidden, D], l)), "ffn.up");
      return g.add(y, norm(g, gatedFfn(g, c, gate, up, w("ffn.down", [D, c.hidden], l)), w("post_ffn_norm", [D], l), c));
    });
  }
  const xf = norm(g, x, w("output_norm", [D]), c);
  return { tracer: g, logits: head(g, c, xf, c.tiedEmbeddings ? tok : w("output", [c.vocab, D])), hidden: xf };
}

const GemmaSchema = HFDecoderSchema.extend({
  hidden_activation: z.string().optional(),
  hidden_act: z.string().optional(),
  query_pre_attn_scalar: z.number().positive().nullish(),
  attn_logit_softcapping: z.number().positive().nullish(),
  final_logit_softcapping: z.number().positive().nullish(),
  rope_local_base_freq: z.number().positive().optional(),
  sliding_window_pattern: z.number().int().positive().optional(),
});

/** Which layers slide when the config has no layer_types: Gemma 2 alternates, Gemma 3 has 5 local per global. */
function pattern(layers: number, every: number): boolean[] {
  return Array.from({ length: layers }, (_, l) => (l + 1) % every !== 0);
}

function fromHF(src: HFConfigSource, gen: 2 | 3): ModelConfig {
  const c = parseConfig(src, GemmaSchema);
  const act = c.hidden_activation ?? c.hidden_act ?? "gelu_pytorch_tanh";
  if (act !== "gelu_pytorch_tanh" && act !== "gelu_tanh") throw configFail(src, "hidden_activation")(`'${act}' is not supported (gelu_pytorch_tanh is)`);
  const heads = c.num_attention_heads, headDim = c.head_dim ?? c.hidden_size / heads;
  // v5 keys rope_parameters by layer type; v4 has one rope_scaling for global layers and rope_local_base_freq.
  const keyed = c.rope_parameters !== undefined && c.rope_parameters !== null && "sliding_attention" in c.rope_parameters;
  const global = ropeParams(c, "full_attention");
  const local = keyed ? ropeParams(c, "sliding_attention") : { theta: c.rope_local_base_freq };
  const theta = global.theta ?? 10000;
  const localTheta = local.theta ?? theta;
  const slidingLayers = c.layer_types?.map((t) => t === "sliding_attention") ?? pattern(c.num_hidden_layers, c.sliding_window_pattern ?? (gen === 2 ? 2 : 6));
  const fail = configFail(src, "rope_parameters");
  const globalFactors = ropeScalingFactors(global, theta, headDim, fail);
  const localFactors = keyed ? ropeScalingFactors(local, localTheta, headDim, fail) : undefined;
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
    ropeFactors: globalFactors,
    ropeLocal: localTheta !== theta || String(localFactors) !== String(globalFactors) ? { theta: localTheta, factors: localFactors } : undefined,
    tiedEmbeddings: c.tie_word_embeddings ?? true,
    qkNorm: gen === 3,
    normOffset: 1,
    embedScale: Math.sqrt(c.hidden_size),
    act: "gelu",
    attnScale: 1 / Math.sqrt(c.query_pre_attn_scalar ?? headDim),
    attnSoftcap: c.attn_logit_softcapping ?? undefined,
    finalSoftcap: c.final_logit_softcapping ?? undefined,
    slidingWindow: c.sliding_window ?? undefined,
    slidingLayers,
    contextLength: c.max_position_embeddings,
  };
}

/**
 * GGUF metadata of llama.cpp's gemma2/gemma3 converters (norm weights already hold 1 + w), read as llama.cpp's
 * loader reads it: layer l slides when l % P < P - 1 for the period P of attention.sliding_window_pattern
 * (default 2 / 6; gemma3 slides nowhere without a window), sliding layers rope with rope.freq_base_swa (gemma3
 * default 10000; gemma2 default the global base) scaled as llama.cpp does (gemma2 as the global rope,
 * gemma3 not at all), scores scale by 1/sqrt(head_dim), or 1/sqrt(hidden/heads) for the 27B models
 * (46 / 62 layers), as llama.cpp decides by layer count.
 */
function fromGGUF(g: GGUFFile, arch: string, gen: 2 | 3): ModelConfig {
  const k = (s: string) => `${arch}.${s}`;
  const dim = g.getU32(k("embedding_length"));
  const heads = g.getU32(k("attention.head_count"));
  const headDim = g.optU32(k("attention.key_length")) ?? dim / heads;
  const layers = g.getU32(k("block_count"));
  const embd = g.info("token_embd.weight");
  const theta = g.optF32(k("rope.freq_base")) ?? 10000;
  const scale = g.optF32(k("rope.scaling.factor"));
  const window = g.optU32(k("attention.sliding_window")) || undefined;
  const period = g.optU32(k("attention.sliding_window_pattern")) ?? (gen === 2 ? 2 : 6);
  const localTheta = g.optF32(k("rope.freq_base_swa")) ?? (gen === 3 ? 10000 : theta);
  const big = layers === (gen === 2 ? 46 : 62);
  const factors = scale && scale !== 1 ? new Array(headDim / 2).fill(scale) : undefined;
  // llama.cpp's gemma2 scales the sliding layers' rope as the global one; gemma3 does not scale them.
  const localFactors = gen === 2 ? factors : undefined;
  return {
    dim,
    hidden: g.getU32(k("feed_forward_length")),
    layers,
    heads,
    kvHeads: g.optU32(k("attention.head_count_kv")) ?? heads,
    headDim,
    vocab: embd?.shape[0] ?? g.getStrings("tokenizer.ggml.tokens").length,
    rmsEps: g.optF32(k("attention.layer_norm_rms_epsilon")) ?? 1e-6,
    ropeTheta: theta,
    ropeStyle: "half",
    ropeFactors: factors,
    ropeLocal: window && (localTheta !== theta || localFactors !== factors) ? { theta: localTheta, factors: localFactors } : undefined,
    tiedEmbeddings: g.info("output.weight") === undefined,
    qkNorm: gen === 3,
    embedScale: Math.sqrt(dim),
    act: "gelu",
    attnScale: 1 / Math.sqrt(big ? dim / heads : headDim),
    attnSoftcap: g.optF32(k("attn_logit_softcapping")) || undefined,
    finalSoftcap: g.optF32(k("final_logit_softcapping")) || undefined,
    slidingWindow: window,
    slidingLayers: window ? (period === 0 ? new Array(layers).fill(true) : pattern(layers, period)) : undefined,
    contextLength: g.optU32(k("context_length")),
  };
}

export const gemma2: Family = {
  name: "gemma2",
  gguf: ["gemma2"],
  hf: ["Gemma2ForCausalLM", "gemma2"],
  fromGGUF: (g, arch) => fromGGUF(g, arch, 2),
  fromHF: (src) => fromHF(src, 2),
  weights,
  tensorName: names,
  trace,
};

export const gemma3: Family = {
  name: "gemma3",
  gguf: ["gemma3"],
  hf: ["Gemma3ForCausalLM", "gemma3_text"],
  fromGGUF: (g, arch) => fromGGUF(g, arch, 3),
  fromHF: (src) => fromHF(src, 3),
  weights,
  tensorName: names,
  trace,
};
