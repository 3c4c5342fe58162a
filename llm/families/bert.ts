// BERT-style encoders (BERT, XLM-RoBERTa): absolute position + token type embeddings, post-LayerNorm blocks, the
// exact (erf) GELU, bidirectional attention under a padding mask, and an optional sequence-classification head
// (dense + tanh on the first token, then a linear classifier: a cross-encoder reranker; BERT's pooler or
// RoBERTa's classifier.dense / out_proj, the same computation under other tensor names).
//
// One encode step runs `batch` texts padded to `seq` tokens. Its slots (all host-written per call):
//   token i32[B*S], type i32[B*S] (token_type_ids), position i32[B*S] (XLM-R counts from pad_token_id + 1),
//   valid bool[B, S] (false on padding: keys there are masked out), pool f32[B, S] (pooling weights: 1/len on
//   real tokens for mean, one-hot for CLS or last token), so one compiled step serves every pooling mode.
// Outputs: `pooled` f32[B, D] (un-normalized), and `scores` f32[B, labels] when the config has a classifier.
// Padding rows are computed and ignored; a padded key never reaches a real row.
import { z } from "zod";
import { type Tensor, Tracer } from "../../graph/tracer.ts";
import { ConfigError, LlmError, ModelKindError } from "../errors.ts";
import { parseConfig } from "../formats/hf-config.ts";
import { weightFn } from "./common.ts";
import type { Family, HFConfigSource, ModelConfig, TraceOptions, WeightFormat, WeightSpec } from "./family.ts";

/** What an encoder's config adds to ModelConfig. */
export interface EncoderInfo {
  /** Position embedding rows. */
  positions: number;
  /** Token type embedding rows. */
  typeVocab: number;
  /** Position ids start here (0 for BERT; pad_token_id + 1 for XLM-RoBERTa). */
  posOffset: number;
  /** "erf": exact GELU (hidden_act "gelu"); "tanh": the tanh approximation (gelu_new, gelu_pytorch_tanh). */
  gelu: "erf" | "tanh";
  layerNormEps: number;
  /** Number of classifier outputs (a *ForSequenceClassification), or 0 for a bare encoder. */
  labels: number;
  /**
   * The classification head's tensors: BERT's pooler (`pooler.dense`) then `classifier`, or RoBERTa's
   * `classifier.dense` then `classifier.out_proj`; both tanh a dense layer of the first token's row.
   */
  head: "bert" | "roberta";
  /** Tensor name prefix of the encoder in the file ("bert." under a task head, "" for a bare BertModel). */
  prefix: string;
}

/** The shape of one encode step: `batch` texts of up to `seq` tokens. */
export interface EncodeShape {
  batch: number;
  seq: number;
}

/** An encode step before build. */
export interface EncoderTraced {
  tracer: Tracer;
  /** Pooled rows f32[B, D] (the `pool` slot's weighted sum of the last hidden state). */
  pooled: Tensor;
  /** Classifier logits f32[B, labels], with a classification head. */
  scores?: Tensor;
}

/** Slot names of the encode step. */
export const ENCODER_SLOTS = { token: "token", type: "type", position: "position", valid: "valid", pool: "pool" } as const;

const pos = z.number().int().positive();
const BertSchema = z.object({
  architectures: z.array(z.string()).nullish(),
  model_type: z.string().optional(),
  vocab_size: pos,
  hidden_size: pos,
  num_hidden_layers: pos,
  num_attention_heads: pos,
  intermediate_size: pos,
  max_position_embeddings: pos,
  type_vocab_size: pos.optional(),
  layer_norm_eps: z.number().positive().optional(),
  hidden_act: z.string().optional(),
  pad_token_id: z.number().int().nonnegative().nullish(),
  position_embedding_type: z.string().optional(),
  num_labels: pos.optional(),
  id2label: z.record(z.string(), z.string()).optional(),
}).loose();

const ACTS: Record<string, "erf" | "tanh"> = { gelu: "erf", gelu_new: "tanh", gelu_pytorch_tanh: "tanh", gelu_fast: "tanh" };

function encoderConfig(src: HFConfigSource, roberta: boolean): ModelConfig {
  const c = parseConfig(src, BertSchema);
  const fail = (field: string, msg: string): never => {
    throw new ConfigError(src.file, field, msg);
  };
  if (c.hidden_size % c.num_attention_heads !== 0) fail("num_attention_heads", `${c.num_attention_heads} does not divide hidden_size ${c.hidden_size}`);
  const gelu = ACTS[c.hidden_act ?? "gelu"] ?? fail("hidden_act", `'${c.hidden_act}' is not supported (gelu, gelu_new, gelu_pytorch_tanh are)`);
  if (c.position_embedding_type !== undefined && c.position_embedding_type !== "absolute") {
    fail("position_embedding_type", `'${c.position_embedding_type}' is not supported (absolute is)`);
  }
  const arch = c.architectures?.[0] ?? "";
  const classifier = /ForSequenceClassification$/.test(arch);
  const labels = classifier ? c.num_labels ?? (c.id2label ? Object.keys(c.id2label).length : 2) : 0;
  const posOffset = roberta ? (c.pad_token_id ?? 1) + 1 : 0;
  const encoder: EncoderInfo = {
    positions: c.max_position_embeddings,
    typeVocab: c.type_vocab_size ?? (roberta ? 1 : 2),
    posOffset,
    gelu,
    layerNormEps: c.layer_norm_eps ?? 1e-12,
    labels,
    head: roberta ? "roberta" : "bert",
    prefix: classifier ? (roberta ? "roberta." : "bert.") : "",
  };
  return {
    dim: c.hidden_size,
    hidden: c.intermediate_size,
    layers: c.num_hidden_layers,
    heads: c.num_attention_heads,
    kvHeads: c.num_attention_heads,
    headDim: c.hidden_size / c.num_attention_heads,
    vocab: c.vocab_size,
    rmsEps: encoder.layerNormEps,
    ropeTheta: 0,
    ropeStyle: "half",
    tiedEmbeddings: false,
    contextLength: c.max_position_embeddings - posOffset,
    encoder,
  };
}

function info(c: ModelConfig): EncoderInfo {
  if (!c.encoder) throw new LlmError("not an encoder config");
  return c.encoder;
}

/** Every weight the encoder reads, [out, in] for matrices. */
export function encoderWeights(c: ModelConfig): WeightSpec[] {
  const e = info(c), D = c.dim, I = c.hidden;
  const out: WeightSpec[] = [
    { role: { role: "tok_embd" }, shape: [c.vocab, D] },
    { role: { role: "pos_embd" }, shape: [e.positions, D] },
    { role: { role: "type_embd" }, shape: [e.typeVocab, D] },
    { role: { role: "embd_norm" }, shape: [D] },
    { role: { role: "embd_norm_b" }, shape: [D] },
  ];
  const per: [string, number[]][] = [
    ["attn_q", [D, D]], ["attn_q_b", [D]], ["attn_k", [D, D]], ["attn_k_b", [D]], ["attn_v", [D, D]], ["attn_v_b", [D]],
    ["attn_out", [D, D]], ["attn_out_b", [D]], ["attn_norm", [D]], ["attn_norm_b", [D]],
    ["ffn_up", [I, D]], ["ffn_up_b", [I]], ["ffn_down", [D, I]], ["ffn_down_b", [D]], ["ffn_norm", [D]], ["ffn_norm_b", [D]],
  ];
  for (let l = 0; l < c.layers; l++) for (const [role, shape] of per) out.push({ role: { role, layer: l }, shape });
  if (e.labels > 0) {
    out.push({ role: { role: "pooler" }, shape: [D, D] }, { role: { role: "pooler_b" }, shape: [D] });
    out.push({ role: { role: "cls" }, shape: [e.labels, D] }, { role: { role: "cls_b" }, shape: [e.labels] });
  }
  return out;
}

const HF_GLOBAL: Record<string, string> = {
  tok_embd: "embeddings.word_embeddings.weight",
  pos_embd: "embeddings.position_embeddings.weight",
  type_embd: "embeddings.token_type_embeddings.weight",
  embd_norm: "embeddings.LayerNorm.weight",
  embd_norm_b: "embeddings.LayerNorm.bias",
  pooler: "pooler.dense.weight",
  pooler_b: "pooler.dense.bias",
};
const HF_LAYER: Record<string, string> = {
  attn_q: "attention.self.query.weight", attn_q_b: "attention.self.query.bias",
  attn_k: "attention.self.key.weight", attn_k_b: "attention.self.key.bias",
  attn_v: "attention.self.value.weight", attn_v_b: "attention.self.value.bias",
  attn_out: "attention.output.dense.weight", attn_out_b: "attention.output.dense.bias",
  attn_norm: "attention.output.LayerNorm.weight", attn_norm_b: "attention.output.LayerNorm.bias",
  ffn_up: "intermediate.dense.weight", ffn_up_b: "intermediate.dense.bias",
  ffn_down: "output.dense.weight", ffn_down_b: "output.dense.bias",
  ffn_norm: "output.LayerNorm.weight", ffn_norm_b: "output.LayerNorm.bias",
};

/** Hugging Face tensor names (GGUF BERT files are not read yet). */
export function encoderTensorName(format: WeightFormat, r: { role: string; layer?: number }, c: ModelConfig): string | undefined {
  if (format !== "hf") return undefined;
  const { prefix: p, head } = info(c);
  const rob = head === "roberta";
  if (r.role === "cls") return rob ? "classifier.out_proj.weight" : "classifier.weight";
  if (r.role === "cls_b") return rob ? "classifier.out_proj.bias" : "classifier.bias";
  if (rob && r.role === "pooler") return "classifier.dense.weight";
  if (rob && r.role === "pooler_b") return "classifier.dense.bias";
  if (r.layer !== undefined) return HF_LAYER[r.role] && `${p}encoder.layer.${r.layer}.${HF_LAYER[r.role]}`;
  return HF_GLOBAL[r.role] && `${p}${HF_GLOBAL[r.role]}`;
}

/**
 * The encoder's tensor name prefix as the file has it ("", "bert.", "roberta.", ...): sentence-transformers
 * and task checkpoints differ on it whatever `architectures` says. The config's guess stays when no word
 * embedding is found (checkTensors then names the missing tensor).
 */
export function prefixInStore(names: Iterable<{ name: string }>, guess: string): string {
  const suffix = "embeddings.word_embeddings.weight";
  for (const { name } of names) if (name.endsWith(suffix)) return name.slice(0, -suffix.length);
  return guess;
}

/**
 * GELU with the exact erf, from primitives: erf by Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7, the
 * size of f32 rounding here), so every backend runs it without a new op. x·erf(x/√2) = |x|·erf(|x|/√2).
 */
export function geluErf(g: Tracer, x: Tensor): Tensor {
  const z = g.mul(g.abs(x), Math.SQRT1_2);
  const t = g.recip(g.add(g.mul(z, 0.3275911), 1));
  let poly = g.mul(t, 1.061405429);
  for (const a of [-1.453152027, 1.421413741, -0.284496736, 0.254829592]) poly = g.mul(g.add(poly, a), t);
  const erfAbs = g.sub(1, g.mul(poly, g.exp(g.neg(g.mul(z, z)))));
  return g.mul(g.add(x, g.mul(g.abs(x), erfAbs)), 0.5);
}

/** Traces one encode step of `s.batch` texts padded to `s.seq` tokens (slots: see the top of this file). */
export function traceEncoder(c: ModelConfig, s: EncodeShape, o: TraceOptions = {}): EncoderTraced {
  const e = info(c);
  const g = new Tracer();
  const B = s.batch, S = s.seq, N = B * S, D = c.dim, H = c.heads, hd = c.headDim, I = c.hidden;
  const w = weightFn(g, o);
  const f32 = (t: Tensor) => (t.dtype === "f32" ? t : g.cast(t, "f32"));
  const token = g.slot(ENCODER_SLOTS.token, { kind: "Token", dtype: "i32", shape: [N] });
  const type = g.slot(ENCODER_SLOTS.type, { kind: "Input", dtype: "i32", shape: [N] });
  const position = g.slot(ENCODER_SLOTS.position, { kind: "Input", dtype: "i32", shape: [N] });
  const valid = g.slot(ENCODER_SLOTS.valid, { kind: "Input", dtype: "bool", shape: [B, S] });
  const poolW = g.slot(ENCODER_SLOTS.pool, { kind: "Input", dtype: "f32", shape: [B, S] });
  const ln = (x: Tensor, role: string, layer?: number) =>
    g.layernorm(x, f32(w(role, [D], layer)), f32(w(`${role}_b`, [D], layer)), e.layerNormEps);
  const linear = (x: Tensor, role: string, out: number, inn: number, layer?: number) =>
    g.add(g.matmul(x, w(role, [out, inn], layer)), f32(w(`${role}_b`, [out], layer)));

  let x = f32(g.gather(w("tok_embd", [c.vocab, D]), token));
  x = g.add(x, f32(g.gather(w("pos_embd", [e.positions, D]), position)));
  x = g.add(x, f32(g.gather(w("type_embd", [e.typeVocab, D]), type)));
  x = ln(x, "embd_norm");
  // A key at a padded position is hidden from every row of its text.
  const mask = g.broadcast(g.reshape(valid, [B, 1, 1, S]), [B, H, S, S]);
  const heads = (t: Tensor, perm: number[]) => g.permute(g.reshape(t, [B, S, H, hd]), perm);
  for (let l = 0; l < c.layers; l++) {
    const q = heads(linear(x, "attn_q", D, D, l), [0, 2, 1, 3]); // [B, H, S, hd]
    const k = heads(linear(x, "attn_k", D, D, l), [0, 2, 1, 3]); // [B, H, S, hd]
    const v = heads(linear(x, "attn_v", D, D, l), [0, 2, 3, 1]); // [B, H, hd, S]
    const scores = g.select(mask, g.mul(g.matmul(q, k), 1 / Math.sqrt(hd)), -Infinity);
    const ctx = g.matmul(g.softmax(scores, -1), v); // [B, H, S, hd]
    const a = g.reshape(g.permute(ctx, [0, 2, 1, 3]), [N, D]);
    x = ln(g.add(x, linear(a, "attn_out", D, D, l)), "attn_norm", l);
    const up = linear(x, "ffn_up", I, D, l);
    const act = e.gelu === "erf" ? geluErf(g, up) : g.gelu(up);
    x = ln(g.add(x, linear(act, "ffn_down", D, I, l)), "ffn_norm", l);
  }
  const hidden = g.reshape(x, [B, S, D]);
  const pooled = g.reshape(g.sum(g.mul(hidden, g.reshape(poolW, [B, S, 1])), 1), [B, D]);
  let scores: Tensor | undefined;
  if (e.labels > 0) {
    const first = g.reshape(g.slice(hidden, 1, 0, 1), [B, D]);
    const p = g.tanh(linear(first, "pooler", D, D));
    scores = linear(p, "cls", e.labels, D);
  }
  return { tracer: g, pooled, scores };
}

function encoderFamily(name: string, hf: string[], roberta: boolean): Family {
  return {
    name,
    gguf: [],
    hf,
    fromGGUF: () => {
      throw new LlmError(`${name}: GGUF encoders are not read yet (use the Hugging Face folder)`);
    },
    fromHF: (src) => encoderConfig(src, roberta),
    weights: encoderWeights,
    tensorName: encoderTensorName,
    trace: () => {
      throw new ModelKindError(name, "is an encoder: it embeds and reranks (poot embed, poot rerank, /v1/embeddings, /v1/rerank); it cannot generate text");
    },
    encode: traceEncoder,
  };
}

export const bert: Family = encoderFamily("bert", ["BertModel", "BertForSequenceClassification", "bert"], false);
export const xlmRoberta: Family = encoderFamily("xlm-roberta", ["XLMRobertaModel", "XLMRobertaForSequenceClassification", "xlm-roberta"], true);
