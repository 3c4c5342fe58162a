// The fields of a Hugging Face config.json that decoder families share, validated with zod. Both spellings of
// rope settings are read: transformers 5's `rope_parameters` (which may be keyed by layer type) and v4's
// `rope_theta` + `rope_scaling`. A bad or missing field is a ConfigError naming the file and the field.
import { z } from "zod";
import { ConfigError } from "../errors.ts";
import type { HFConfigSource, RopeScaling } from "../families/family.ts";

const pos = z.number().int().positive();
const rope = z.object({
  rope_type: z.string().optional(),
  type: z.string().optional(),
  rope_theta: z.number().positive().optional(),
  factor: z.number().positive().optional(),
  low_freq_factor: z.number().positive().optional(),
  high_freq_factor: z.number().positive().optional(),
  original_max_position_embeddings: pos.optional(),
  partial_rotary_factor: z.number().positive().max(1).optional(),
}).loose();
export type RopeParams = z.infer<typeof rope>;

export const HFDecoderSchema = z.object({
  hidden_size: pos,
  intermediate_size: pos,
  num_hidden_layers: pos,
  num_attention_heads: pos,
  num_key_value_heads: pos.nullish(),
  head_dim: pos.nullish(),
  vocab_size: pos,
  rms_norm_eps: z.number().positive().optional(),
  rope_theta: z.number().positive().optional(),
  rope_scaling: rope.nullish(),
  rope_parameters: z.union([rope, z.record(z.string(), rope)]).nullish(),
  tie_word_embeddings: z.boolean().optional(),
  max_position_embeddings: pos.optional(),
  sliding_window: pos.nullish(),
  use_sliding_window: z.boolean().optional(),
  layer_types: z.array(z.string()).nullish(),
  attention_bias: z.boolean().optional(),
}).loose();
export type HFDecoderConfig = z.infer<typeof HFDecoderSchema>;

/** Parses `src.json` with `schema`, turning the first zod issue into a ConfigError naming the field. */
export function parseConfig<T extends z.ZodType>(src: HFConfigSource, schema: T): z.infer<T> {
  const r = schema.safeParse(src.json);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new ConfigError(src.file, issue.path.join("."), issue.message);
  }
  return r.data;
}

/** The rope parameters of a layer type (v5 may key them by layer type), with v4's fields as the fallback. */
export function ropeParams(c: HFDecoderConfig, layerType = "full_attention"): RopeParams & RopeScaling & { theta?: number } {
  const rp = c.rope_parameters;
  const keyed = rp && !("rope_theta" in rp) && !("rope_type" in rp) && Object.values(rp).every((v) => typeof v === "object");
  const p = (keyed ? (rp as Record<string, RopeParams>)[layerType] : rp as RopeParams | undefined) ?? c.rope_scaling ?? {};
  return { ...p, theta: p.rope_theta ?? c.rope_theta };
}

/** The error thrower a family passes to ropeScalingFactors for this file. */
export function configFail(src: HFConfigSource, field: string): (msg: string) => never {
  return (msg) => {
    throw new ConfigError(src.file, field, msg);
  };
}
