// LLaVA (LlavaForConditionalGeneration): a vision tower (SigLIP or CLIP, vit.ts), the two-layer projector, and a
// text model (Llama, Mistral, Qwen2/3: their own families) that generates over a prompt in which each `<image>`
// placeholder token stands for the image's projected rows (the driver writes them by value: StepShape.inputRows).
//
// Config: config.json with `vision_config` and `text_config`. transformers writes only the fields that differ
// from the classes' defaults, so a missing field takes the default of its config class (SiglipVisionConfig,
// CLIPVisionConfig, LlavaConfig). Tensors: transformers 5 keeps `model.language_model.*`,
// `model.vision_tower.vision_model.*`, `model.multi_modal_projector.*` and `lm_head.*` in memory; older
// checkpoints (llava-hf) and what transformers 5.17 writes back to disk use `language_model.model.*`,
// `vision_tower.[vision_model.]*`, `multi_modal_projector.*` and `language_model.lm_head.*`. The prefixes are
// read from the file's names (llavaStore), so any of these loads.
import { z } from "zod";
import type { WeightStore } from "../../graph/weights.ts";
import { ConfigError, LlmError } from "../errors.ts";
import { parseConfig } from "../formats/hf-config.ts";
import type { Family, HFConfigSource, ModelConfig, WeightFormat } from "./family.ts";
import { llama } from "./llama.ts";
import { qwen2, qwen3 } from "./qwen.ts";
import { ACTIVATIONS, MODEL_PREFIXES, traceVision, type VisionInfo, visionTensorName, visionWeights } from "./vit.ts";

/** Text families a LLaVA checkpoint may carry, by text_config.model_type. */
const TEXT: Record<string, Family> = { llama, mistral: llama, qwen2, qwen3 };

/** Class defaults of the tower configs (transformers omits a field equal to its default). */
const TOWER_DEFAULTS = {
  siglip: { hidden_size: 768, intermediate_size: 3072, num_hidden_layers: 12, num_attention_heads: 12, num_channels: 3, image_size: 224, patch_size: 16, hidden_act: "gelu_pytorch_tanh", layer_norm_eps: 1e-6 },
  clip: { hidden_size: 768, intermediate_size: 3072, num_hidden_layers: 12, num_attention_heads: 12, num_channels: 3, image_size: 224, patch_size: 32, hidden_act: "quick_gelu", layer_norm_eps: 1e-5 },
} as const;
const TOWERS: Record<string, "siglip" | "clip"> = { siglip_vision_model: "siglip", clip_vision_model: "clip" };

const pos = z.number().int().positive();
const VisionSchema = z.object({
  model_type: z.string(),
  hidden_size: pos.optional(),
  intermediate_size: pos.optional(),
  num_hidden_layers: pos.optional(),
  num_attention_heads: pos.optional(),
  num_channels: pos.optional(),
  image_size: pos.optional(),
  patch_size: pos.optional(),
  hidden_act: z.string().optional(),
  layer_norm_eps: z.number().positive().optional(),
}).loose();
const LlavaSchema = z.object({
  vision_config: VisionSchema,
  text_config: z.object({ model_type: z.string().optional() }).loose(),
  image_token_index: z.number().int().nonnegative().optional(),
  image_token_id: z.number().int().nonnegative().optional(),
  projector_hidden_act: z.string().optional(),
  vision_feature_select_strategy: z.enum(["default", "full"]).optional(),
  vision_feature_layer: z.union([z.number().int(), z.array(z.number().int())]).optional(),
  multimodal_projector_bias: z.boolean().optional(),
  tie_word_embeddings: z.boolean().optional(),
}).loose();

function textFamily(c: ModelConfig): Family {
  const v = c.vision;
  const f = v && TEXT[v.text];
  if (!f) throw new LlmError("not a LLaVA config");
  return f;
}

/** The config of a LlavaForConditionalGeneration folder: the text family's, with `vision` added. */
export function llavaConfigFromHF(src: HFConfigSource): ModelConfig {
  const c = parseConfig(src, LlavaSchema);
  const fail = (field: string, msg: string): never => {
    throw new ConfigError(src.file, field, msg);
  };
  const vc = c.vision_config;
  const tower = TOWERS[vc.model_type] ?? fail("vision_config.model_type", `'${vc.model_type}' is not supported (${Object.keys(TOWERS).join(", ")} are)`);
  const d = { ...TOWER_DEFAULTS[tower], ...Object.fromEntries(Object.entries(vc).filter(([, x]) => x !== undefined && x !== null)) };
  const textType = c.text_config.model_type ?? "llama";
  if (!TEXT[textType]) fail("text_config.model_type", `'${textType}' is not supported (${Object.keys(TEXT).join(", ")} are)`);
  let text: ModelConfig;
  try {
    // text_config inherits the top level's tie_word_embeddings when it does not state its own (LlavaConfig)
    const json = { tie_word_embeddings: c.tie_word_embeddings, ...c.text_config };
    text = TEXT[textType].fromHF({ file: src.file, json });
  } catch (e) {
    if (e instanceof ConfigError) throw new ConfigError(src.file, `text_config.${e.field}`, e.message.replace(/^.*?field '[^']*': /, ""));
    throw e;
  }
  if (d.hidden_size % d.num_attention_heads !== 0) fail("vision_config.num_attention_heads", `${d.num_attention_heads} does not divide hidden_size ${d.hidden_size}`);
  if (d.image_size % d.patch_size !== 0) fail("vision_config.patch_size", `${d.patch_size} does not divide image_size ${d.image_size}`);
  const act = ACTIVATIONS[d.hidden_act] ?? fail("vision_config.hidden_act", `'${d.hidden_act}' is not supported (${Object.keys(ACTIVATIONS).join(", ")} are)`);
  const pAct = c.projector_hidden_act ?? "gelu";
  const projectorAct = ACTIVATIONS[pAct] ?? fail("projector_hidden_act", `'${pAct}' is not supported (${Object.keys(ACTIVATIONS).join(", ")} are)`);
  const layer = c.vision_feature_layer ?? -2;
  if (typeof layer !== "number") fail("vision_feature_layer", "a list of layers (concatenated features) is not supported; one layer is");
  const featureLayer = (layer as number) < 0 ? d.num_hidden_layers + 1 + (layer as number) : layer as number;
  if (featureLayer < 0 || featureLayer > d.num_hidden_layers) fail("vision_feature_layer", `${layer} is outside the tower's ${d.num_hidden_layers} layers`);
  const imageToken = c.image_token_index ?? c.image_token_id ?? 32000;
  if (imageToken >= text.vocab) fail("image_token_index", `${imageToken} is outside the text vocabulary (${text.vocab})`);
  const vision: VisionInfo = {
    tower,
    dim: d.hidden_size,
    hidden: d.intermediate_size,
    layers: d.num_hidden_layers,
    heads: d.num_attention_heads,
    imageSize: d.image_size,
    patchSize: d.patch_size,
    channels: d.num_channels,
    layerNormEps: d.layer_norm_eps,
    act,
    featureLayer,
    dropFirst: (c.vision_feature_select_strategy ?? "default") === "default",
    projectorAct,
    projectorBias: c.multimodal_projector_bias ?? true,
    imageToken,
    prefixes: { ...MODEL_PREFIXES },
    text: textType,
  };
  return { ...text, vision };
}

/**
 * The Hugging Face name of a role: a tower or projector role (vit.ts), else the text family's name moved under
 * the LLaVA prefix of the file's layout.
 */
export function llavaTensorName(format: WeightFormat, r: { role: string; layer?: number }, c: ModelConfig): string | undefined {
  if (format !== "hf") return undefined;
  const v = c.vision!;
  if (r.role.startsWith("v.") || r.role.startsWith("mm.")) return visionTensorName(r, v);
  const name = textFamily(c).tensorName("hf", r, c);
  if (name === undefined) return undefined;
  if (name.startsWith("lm_head.")) return `${v.prefixes.head}${name}`;
  return `${v.prefixes.text}${name.replace(/^model\./, "")}`;
}

/**
 * The file's layout (set in the config), and the patch convolution [dim, channels, patch, patch] read as the
 * [dim, channels·patch²] matrix it is (the same bytes, row-major).
 */
export function llavaStore(store: WeightStore, c: ModelConfig): WeightStore {
  const v = c.vision!;
  const names = new Set([...store.tensors()].map((t) => t.name));
  const before = (suffix: string): string | undefined => {
    for (const n of names) if (n.endsWith(suffix)) return n.slice(0, n.length - suffix.length);
  };
  v.prefixes = {
    tower: before("embeddings.patch_embedding.weight") ?? MODEL_PREFIXES.tower,
    projector: before("multi_modal_projector.linear_1.weight")?.concat("multi_modal_projector.") ?? MODEL_PREFIXES.projector,
    text: before("embed_tokens.weight") ?? MODEL_PREFIXES.text,
    head: before("lm_head.weight") ?? MODEL_PREFIXES.head,
  };
  const conv = visionTensorName({ role: "v.patch" }, v)!;
  return {
    tensors: () => store.tensors(),
    info(name) {
      const t = store.info(name);
      if (name !== conv || !t || t.shape.length !== 4) return t;
      return { ...t, shape: [t.shape[0], t.shape[1] * t.shape[2] * t.shape[3]] };
    },
    bytes: (name) => store.bytes(name),
  };
}

/** LlavaForConditionalGeneration: generates like its text family; `vision` traces the tower and projector. */
export const llava: Family = {
  name: "llava",
  gguf: [],
  hf: ["LlavaForConditionalGeneration", "llava"],
  fromGGUF: () => {
    throw new LlmError("llava: GGUF vision-language models (a separate mmproj file) are not read yet; use the Hugging Face folder");
  },
  fromHF: llavaConfigFromHF,
  weights: (c) => [...textFamily(c).weights(c), ...visionWeights(c)],
  tensorName: llavaTensorName,
  trace: (c, s, o) => textFamily(c).trace(c, s, o),
  vision: traceVision,
  adaptStore: llavaStore,
};
