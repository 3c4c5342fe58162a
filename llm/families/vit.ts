// Vision towers (ViT): SigLIP and CLIP, and the LLaVA projector that maps their rows into a text model's width.
//
// SigLIP: patch embedding (a convolution with stride = kernel = patch, i.e. a matmul over unfolded patches,
// with a bias), learned position embeddings, pre-norm blocks (LayerNorm, bidirectional attention with biased
// q/k/v/out projections, LayerNorm, fc1-GELU(tanh)-fc2), post-LayerNorm. CLIP: the same blocks after a class
// token row, position embeddings over both, and a pre-LayerNorm; quick_gelu (x·sigmoid(1.702x)).
// LLaVA reads hidden_states[vision_feature_layer] (0 = the embeddings, i = after block i): the tower runs only
// that many blocks and never its post-LayerNorm; strategy "default" drops the first row (CLIP's class token;
// on SigLIP that is a real patch: transformers drops it too). The projector is linear_1 - act - linear_2.
//
// One vision step runs `images` images. Its slot `pixels` f32[images·patches, channels·patch²] holds the images'
// patches already unfolded on the host (llm/image.ts unfoldPatches: patch rows in row-major order, each
// (channel, y, x) within the patch, the order of the convolution weight flattened to [dim, channels·patch²]).
// Outputs: `frames` f32[images·rows, visionDim] (the selected hidden rows) and `embeds` f32[images·rows, textDim].
import { type Tensor, Tracer } from "../../graph/tracer.ts";
import { LlmError } from "../errors.ts";
import { geluErf } from "./bert.ts";
import { weightFn } from "./common.ts";
import type { ModelConfig, TraceOptions, WeightSpec } from "./family.ts";

/** Activation names as the configs spell them, by what they compute. */
export type Activation = "erf" | "tanh" | "quick" | "relu";
export const ACTIVATIONS: Record<string, Activation> = {
  gelu: "erf", gelu_new: "tanh", gelu_pytorch_tanh: "tanh", gelu_fast: "tanh", quick_gelu: "quick", relu: "relu",
};

/** A vision-language model's tower and projector, as its config says. */
export interface VisionInfo {
  tower: "siglip" | "clip";
  /** Tower width, MLP width, blocks in the checkpoint, heads. */
  dim: number;
  hidden: number;
  layers: number;
  heads: number;
  imageSize: number;
  patchSize: number;
  channels: number;
  layerNormEps: number;
  act: Activation;
  /** Blocks run: the hidden state the projector reads (vision_feature_layer resolved to 0..layers). */
  featureLayer: number;
  /** vision_feature_select_strategy "default": the first row of each image is dropped. */
  dropFirst: boolean;
  projectorAct: Activation;
  projectorBias: boolean;
  /** The placeholder token id one image row stands in for (LLaVA image_token_index). */
  imageToken: number;
  /**
   * Where the checkpoint keeps its tensors, as name prefixes read from the file (llm/families/llava.ts
   * llavaStore): the tower (before `embeddings.`), the projector (before `linear_1.`), the text model (before
   * `embed_tokens.`) and the output head (before `lm_head.`).
   */
  prefixes: VisionPrefixes;
  /** The text family the model generates with (llm/families/llava.ts). */
  text: string;
}

export interface VisionPrefixes {
  tower: string;
  projector: string;
  text: string;
  head: string;
}

/** transformers 5's names (`model.vision_tower.vision_model.…`), the default before a file is read. */
export const MODEL_PREFIXES: VisionPrefixes = {
  tower: "model.vision_tower.vision_model.", projector: "model.multi_modal_projector.", text: "model.language_model.", head: "",
};

/** The shape of one vision step: `images` images of the config's size. */
export interface VisionShape {
  images: number;
}

/** A vision step before build. */
export interface VisionTraced {
  tracer: Tracer;
  /** The tower's selected hidden rows f32[images·rows, visionDim]. */
  frames: Tensor;
  /** Projected rows f32[images·rows, textDim]: what replaces the image placeholders' rows. */
  embeds: Tensor;
}

/** The vision step's slot: unfolded patches. */
export const VISION_SLOT = "pixels";

export function visionInfo(c: ModelConfig): VisionInfo {
  if (!c.vision) throw new LlmError("not a vision-language config");
  return c.vision;
}

/** Patches per image (a square grid). */
export function patchesOf(v: VisionInfo): number {
  return (v.imageSize / v.patchSize) ** 2;
}

/** Rows each image contributes to the prompt (what one `<image>` placeholder expands to). */
export function imageRows(v: VisionInfo): number {
  return patchesOf(v) + (v.tower === "clip" ? 1 : 0) - (v.dropFirst ? 1 : 0);
}

/** Every weight of the tower blocks LLaVA reads and of the projector, [out, in] for matrices. */
export function visionWeights(c: ModelConfig): WeightSpec[] {
  const v = visionInfo(c), D = v.dim, I = v.hidden, K = v.channels * v.patchSize ** 2;
  const rows = patchesOf(v) + (v.tower === "clip" ? 1 : 0);
  const out: WeightSpec[] = [
    { role: { role: "v.patch" }, shape: [D, K] },
    { role: { role: "v.pos" }, shape: [rows, D] },
  ];
  if (v.tower === "siglip") out.push({ role: { role: "v.patch_b" }, shape: [D] });
  else out.push({ role: { role: "v.cls" }, shape: [D] }, { role: { role: "v.pre_norm" }, shape: [D] }, { role: { role: "v.pre_norm_b" }, shape: [D] });
  const per: [string, number[]][] = [
    ["v.ln1", [D]], ["v.ln1_b", [D]], ["v.q", [D, D]], ["v.q_b", [D]], ["v.k", [D, D]], ["v.k_b", [D]], ["v.v", [D, D]], ["v.v_b", [D]],
    ["v.o", [D, D]], ["v.o_b", [D]], ["v.ln2", [D]], ["v.ln2_b", [D]], ["v.fc1", [I, D]], ["v.fc1_b", [I]], ["v.fc2", [D, I]], ["v.fc2_b", [D]],
  ];
  for (let l = 0; l < v.featureLayer; l++) for (const [role, shape] of per) out.push({ role: { role, layer: l }, shape });
  out.push({ role: { role: "mm.1" }, shape: [c.dim, D] }, { role: { role: "mm.2" }, shape: [c.dim, c.dim] });
  if (v.projectorBias) out.push({ role: { role: "mm.1_b" }, shape: [c.dim] }, { role: { role: "mm.2_b" }, shape: [c.dim] });
  return out;
}

const TOWER_GLOBAL: Record<string, string> = {
  "v.patch": "embeddings.patch_embedding.weight", "v.patch_b": "embeddings.patch_embedding.bias",
  "v.pos": "embeddings.position_embedding.weight", "v.cls": "embeddings.class_embedding",
  // sic: CLIP's module is spelled pre_layrnorm
  "v.pre_norm": "pre_layrnorm.weight", "v.pre_norm_b": "pre_layrnorm.bias",
};
const TOWER_LAYER: Record<string, string> = {
  "v.ln1": "layer_norm1.weight", "v.ln1_b": "layer_norm1.bias",
  "v.q": "self_attn.q_proj.weight", "v.q_b": "self_attn.q_proj.bias", "v.k": "self_attn.k_proj.weight", "v.k_b": "self_attn.k_proj.bias",
  "v.v": "self_attn.v_proj.weight", "v.v_b": "self_attn.v_proj.bias", "v.o": "self_attn.out_proj.weight", "v.o_b": "self_attn.out_proj.bias",
  "v.ln2": "layer_norm2.weight", "v.ln2_b": "layer_norm2.bias",
  "v.fc1": "mlp.fc1.weight", "v.fc1_b": "mlp.fc1.bias", "v.fc2": "mlp.fc2.weight", "v.fc2_b": "mlp.fc2.bias",
};
const PROJECTOR: Record<string, string> = {
  "mm.1": "linear_1.weight", "mm.1_b": "linear_1.bias", "mm.2": "linear_2.weight", "mm.2_b": "linear_2.bias",
};

/** The Hugging Face tensor name of a tower or projector role (undefined for any other role). */
export function visionTensorName(r: { role: string; layer?: number }, v: VisionInfo): string | undefined {
  if (PROJECTOR[r.role]) return `${v.prefixes.projector}${PROJECTOR[r.role]}`;
  const tower = v.prefixes.tower;
  if (r.layer !== undefined) return TOWER_LAYER[r.role] && `${tower}encoder.layers.${r.layer}.${TOWER_LAYER[r.role]}`;
  return TOWER_GLOBAL[r.role] && `${tower}${TOWER_GLOBAL[r.role]}`;
}

/** An activation from primitives (the tanh GELU is the graph's own op). */
export function activate(g: Tracer, x: Tensor, a: Activation): Tensor {
  if (a === "tanh") return g.gelu(x);
  if (a === "erf") return geluErf(g, x);
  if (a === "relu") return g.max(x, 0);
  // quick_gelu: x·sigmoid(1.702x) = x / (1 + e^(-1.702x)); a large negative x gives x / inf = -0, as torch.
  return g.div(x, g.add(g.exp(g.mul(x, -1.702)), 1));
}

/** Traces the tower and the projector over `s.images` images (slots and outputs: see the top of this file). */
export function traceVision(c: ModelConfig, s: VisionShape, o: TraceOptions = {}): VisionTraced {
  const v = visionInfo(c);
  const g = new Tracer();
  const w = weightFn(g, o);
  const f32 = (t: Tensor) => (t.dtype === "f32" ? t : g.cast(t, "f32"));
  const B = s.images, D = v.dim, H = v.heads, hd = D / H, I = v.hidden, P = patchesOf(v), K = v.channels * v.patchSize ** 2;
  const clip = v.tower === "clip", T = P + (clip ? 1 : 0), N = B * T;
  const ln = (x: Tensor, role: string, layer?: number) =>
    g.layernorm(x, f32(w(role, [D], layer)), f32(w(`${role}_b`, [D], layer)), v.layerNormEps);
  const linear = (x: Tensor, role: string, out: number, inn: number, layer?: number, bias = true) => {
    const y = g.matmul(x, w(role, [out, inn], layer));
    return bias ? g.add(y, f32(w(`${role}_b`, [out], layer))) : y;
  };

  const pixels = g.slot(VISION_SLOT, { kind: "Input", dtype: "f32", shape: [B * P, K] });
  let x = linear(pixels, "v.patch", D, K, undefined, !clip); // [B·P, D]
  if (clip) {
    const cls = g.broadcast(g.reshape(f32(w("v.cls", [D])), [1, 1, D]), [B, 1, D]);
    x = g.reshape(g.concat([cls, g.reshape(x, [B, P, D])], 1), [N, D]);
  }
  const posRows = g.broadcast(g.reshape(f32(w("v.pos", [T, D])), [1, T, D]), [B, T, D]);
  x = g.add(x, g.reshape(posRows, [N, D]));
  if (clip) x = ln(x, "v.pre_norm");
  const heads = (t: Tensor, perm: number[]) => g.permute(g.reshape(t, [B, T, H, hd]), perm);
  for (let l = 0; l < v.featureLayer; l++) {
    const h = ln(x, "v.ln1", l);
    const q = heads(linear(h, "v.q", D, D, l), [0, 2, 1, 3]); // [B, H, T, hd]
    const k = heads(linear(h, "v.k", D, D, l), [0, 2, 1, 3]); // [B, H, T, hd]
    const val = heads(linear(h, "v.v", D, D, l), [0, 2, 3, 1]); // [B, H, hd, T]
    const p = g.softmax(g.mul(g.matmul(q, k), 1 / Math.sqrt(hd)), -1); // every row sees every row of its image
    const a = g.reshape(g.permute(g.matmul(p, val), [0, 2, 1, 3]), [N, D]);
    x = g.add(x, linear(a, "v.o", D, D, l));
    const m = activate(g, linear(ln(x, "v.ln2", l), "v.fc1", I, D, l), v.act);
    x = g.add(x, linear(m, "v.fc2", D, I, l));
  }
  const frames = v.dropFirst ? g.reshape(g.slice(g.reshape(x, [B, T, D]), 1, 1, T), [B * (T - 1), D]) : x;
  const hProj = activate(g, linear(frames, "mm.1", c.dim, D, undefined, v.projectorBias), v.projectorAct);
  const embeds = linear(hProj, "mm.2", c.dim, c.dim, undefined, v.projectorBias);
  return { tracer: g, frames, embeds };
}
