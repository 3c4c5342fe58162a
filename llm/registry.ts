// Architecture name (GGUF `general.architecture`) -> the family that traces it and reads its config.
// llm/ never branches on a backend; it only branches here, on what the model file says it is.
import type { GGUFFile } from "./formats/gguf.ts";
import { MetadataError, UnknownArchitectureError } from "./errors.ts";
import type { LlamaConfig } from "./families/llama.ts";
import { checkCount, checkDivides, checkEven, checkPositive } from "./validate.ts";

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
      // Every count and dim is checked before anything is sized from it (llm/validate.ts): a layer needs
      // tensors, so block_count is bounded by the file's tensor count; widths by what they must divide.
      const f = g.file;
      const k = (s: string) => `${arch}.${s}`;
      const count = (key: string, v: number, max = 2 ** 24) => checkCount(f, k(key), v, 1, max);
      const dim = count("embedding_length", g.getU32(k("embedding_length")));
      const heads = count("attention.head_count", g.getU32(k("attention.head_count")), dim);
      const kvHeads = count("attention.head_count_kv", g.optU32(k("attention.head_count_kv")) ?? heads, heads);
      checkDivides(f, k("attention.head_count"), heads, k("attention.head_count_kv"), kvHeads);
      const keyLength = g.optU32(k("attention.key_length"));
      const headDim = keyLength !== undefined
        ? count("attention.key_length", keyLength)
        : checkDivides(f, k("embedding_length"), dim, k("attention.head_count"), heads);
      const layers = checkCount(f, k("block_count"), g.getU32(k("block_count")), 1, g.tensorCount, `the file has ${g.tensorCount} tensors`);
      const hidden = count("feed_forward_length", g.getU32(k("feed_forward_length")));
      const tokens = g.optStrings("tokenizer.ggml.tokens");
      const embd = g.info("token_embd.weight");
      if (!embd) throw new MetadataError(f, "token_embd.weight", `${arch} model has no token_embd.weight tensor`);
      if (embd.shape.length !== 2) {
        throw new MetadataError(f, "token_embd.weight", `expected a 2-D [vocab, ${dim}] tensor, found shape [${embd.shape.join(", ")}]`);
      }
      const vocab = checkCount(f, "token_embd.weight rows (vocabulary size)", embd.shape[0], 1, 2 ** 24);
      if (tokens && tokens.length !== vocab) {
        throw new MetadataError(f, "tokenizer.ggml.tokens", `${tokens.length} tokens but token_embd.weight has ${vocab} rows`);
      }
      const ropeDims = g.optU32(k("rope.dimension_count"));
      if (ropeDims !== undefined) checkEven(f, k("rope.dimension_count"), checkCount(f, k("rope.dimension_count"), ropeDims, 2, headDim, `${k("attention.key_length")} (head dim) = ${headDim}`));
      checkEven(f, keyLength !== undefined ? k("attention.key_length") : k("embedding_length"), headDim);
      const eps = g.optF32(k("attention.layer_norm_rms_epsilon"));
      const theta = g.optF32(k("rope.freq_base"));
      const ctx = g.optU32(k("context_length"));
      return {
        dim,
        hidden,
        layers,
        heads,
        kvHeads,
        headDim,
        vocab,
        rmsEps: eps === undefined ? 1e-5 : checkPositive(f, k("attention.layer_norm_rms_epsilon"), eps),
        ropeTheta: theta === undefined ? 10000 : checkPositive(f, k("rope.freq_base"), theta),
        ropeStyle: rope,
        ropeDims: ropeDims !== undefined && ropeDims !== headDim ? ropeDims : undefined,
        ropeFreqFactors: g.info("rope_freqs.weight") !== undefined,
        tiedEmbeddings: g.info("output.weight") === undefined,
        qkvBias: qkvBias && g.info("blk.0.attn_q.bias") !== undefined,
        contextLength: ctx === undefined ? undefined : checkCount(f, k("context_length"), ctx, 2, 0x7fffffff),
      };
    },
  };
}

// GGML rope modes: LLAMA-arch files store Q/K permuted for the adjacent-pair rotation (NORM); Qwen2 uses NEOX.
// A Map, so that a file naming its architecture "constructor" or "__proto__" finds nothing, not Object's.
const FAMILIES = new Map<string, Family>([
  ["llama", llamaLike("llama", "adjacent", false)],
  ["mistral", llamaLike("mistral", "adjacent", false)],
  ["qwen2", llamaLike("qwen2", "half", true)],
]);

export const ARCHITECTURES: readonly string[] = [...FAMILIES.keys()];

/** The family of an architecture name; an unknown one is a typed error listing the known ones. */
export function familyOf(arch: string | undefined): Family {
  const f = arch === undefined ? undefined : FAMILIES.get(arch);
  if (!f) throw new UnknownArchitectureError(arch ?? "(none: general.architecture is missing)", [...ARCHITECTURES]);
  return f;
}
