// Architecture name (GGUF `general.architecture`) -> the family that traces it and reads its config.
// llm/ never branches on a backend; it only branches here, on what the model file says it is.
import type { GGUFFile } from "./formats/gguf.ts";
import { MetadataError, UnknownArchitectureError } from "./errors.ts";
import type { LlamaConfig } from "./families/llama.ts";

export interface Family {
  /** The family module that traces the step (only "llama" so far: Llama 2/3, Mistral, Qwen2, stories). */
  family: "llama";
  /** The model's config from its GGUF metadata and tensors. */
  config(g: GGUFFile): LlamaConfig;
}

/** A Llama-shaped architecture whose GGUF keys are `${arch}.*`; `rope` is GGML's rope mode for it. */
function llamaLike(arch: string, rope: "adjacent" | "half", qkvBias: boolean): Family {
  return {
    family: "llama",
    config(g) {
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
        tiedEmbeddings: g.info("output.weight") === undefined,
        qkvBias: qkvBias && g.info("blk.0.attn_q.bias") !== undefined,
        contextLength: g.optU32(k("context_length")),
      };
    },
  };
}

// GGML rope modes: LLAMA-arch files store Q/K permuted for the adjacent-pair rotation (NORM); Qwen2 uses NEOX.
const FAMILIES: Record<string, Family> = {
  llama: llamaLike("llama", "adjacent", false),
  mistral: llamaLike("mistral", "adjacent", false),
  qwen2: llamaLike("qwen2", "half", true),
};

export const ARCHITECTURES: readonly string[] = Object.keys(FAMILIES);

/** The family of an architecture name; an unknown one is a typed error listing the known ones. */
export function familyOf(arch: string | undefined): Family {
  const f = arch === undefined ? undefined : FAMILIES[arch];
  if (!f) throw new UnknownArchitectureError(arch ?? "(none: general.architecture is missing)", [...ARCHITECTURES]);
  return f;
}
