// A tokenizer from GGUF metadata (tokenizer.ggml.*), with llama.cpp's defaults per tokenizer model.
import { TokenizerError } from "../errors.ts";
import type { GGUFFile } from "../formats/gguf.ts";
import { preTokenizerByName } from "./pretokenize.ts";
import { createTokenizer } from "./tokenizer.ts";
import { type Tokenizer, type TokenizerSpec, TokenType } from "./types.ts";

/** The metadata-only view the builder needs (a GGUFFile satisfies it). */
type Meta = Pick<GGUFFile, "file" | "getString" | "getStrings" | "optString" | "optStrings" | "optF32s" | "optI32s" | "optU32" | "optBool">;

/**
 * llama.cpp sets token attributes GGUF cannot store by the model's name: a Phi-3 (general.name containing "phi-3"
 * or "phi3") strips whitespace right of every special token (its chat tokens are rstrip in tokenizer.json) and of
 * </s>, but not of <unk>, <s>, <|endoftext|>.
 */
function stripByName(g: Meta, tokens: string[], types: ArrayLike<number> | undefined): Map<number, { rstrip: boolean }> | undefined {
  const name = (g.optString("general.name") ?? "").toLowerCase();
  if (!name.includes("phi-3") && !name.includes("phi3")) return undefined;
  const strip = new Map<number, { rstrip: boolean }>();
  tokens.forEach((t, i) => {
    const ty = types?.[i];
    const special = ty === TokenType.control || ty === TokenType.userDefined || ty === TokenType.unknown || t === "</s>";
    if (special && t !== "<unk>" && t !== "<s>" && t !== "<|endoftext|>") strip.set(i, { rstrip: true });
  });
  return strip;
}

/** The GGUF description of a tokenizer, as plain data (useful to inspect or adjust before building). */
export function tokenizerSpecFromGGUF(g: Meta): TokenizerSpec {
  const model = g.optString("tokenizer.ggml.model");
  if (model === undefined) throw new TokenizerError(`${g.file}: no tokenizer (metadata 'tokenizer.ggml.model' is missing)`);
  const tokens = g.optStrings("tokenizer.ggml.tokens");
  if (tokens === undefined) throw new TokenizerError(`${g.file}: metadata 'tokenizer.ggml.tokens' is missing`);
  const n = tokens.length;
  const scores = g.optF32s("tokenizer.ggml.scores");
  const types = g.optI32s("tokenizer.ggml.token_type");
  if (scores && scores.length < n) throw new TokenizerError(`${g.file}: ${scores.length} token scores for ${n} tokens`);
  if (types && types.length < n) throw new TokenizerError(`${g.file}: ${types.length} token types for ${n} tokens`);

  // An id key overrides the default only when it is in range (converters write 0xFFFFFFFF for "none").
  const idKey = (key: string, dflt: number | undefined): number | undefined => {
    const v = g.optU32(`tokenizer.ggml.${key}`);
    return v !== undefined && v < n ? v : dflt !== undefined && dflt < n ? dflt : undefined;
  };
  const addBos = g.optBool("tokenizer.ggml.add_bos_token");
  const addEos = g.optBool("tokenizer.ggml.add_eos_token");
  const common = {
    tokens,
    scores,
    types,
    eot: idKey("eot_token_id", undefined),
    eom: idKey("eom_token_id", undefined),
    strip: stripByName(g, tokens, types),
  };

  if (model === "llama") {
    const addSpacePrefix = g.optBool("tokenizer.ggml.add_space_prefix") ?? true;
    return {
      ...common,
      model: "spm",
      bos: idKey("bos_token_id", 1),
      eos: idKey("eos_token_id", 2),
      unk: idKey("unknown_token_id", 0),
      pad: idKey("padding_token_id", undefined),
      addBos: addBos ?? true,
      addEos: addEos ?? false,
      spacePrefix: addSpacePrefix ? "after-special" : "never",
      escapeWhitespace: true,
      byteFallback: true,
    };
  }
  if (model === "gpt2") {
    const merges = g.optStrings("tokenizer.ggml.merges");
    if (merges === undefined) throw new TokenizerError(`${g.file}: metadata 'tokenizer.ggml.merges' is missing`);
    const pre = g.optString("tokenizer.ggml.pre") ?? "default";
    const preset = preTokenizerByName(pre);
    if (preset === undefined) throw new TokenizerError(`${g.file}: unknown pre-tokenizer type '${pre}' (tokenizer.ggml.pre)`);
    return {
      ...common,
      model: "bpe",
      merges,
      bos: idKey("bos_token_id", 11),
      eos: idKey("eos_token_id", 11),
      unk: idKey("unknown_token_id", undefined),
      pad: idKey("padding_token_id", undefined),
      addBos: addBos ?? preset.addBos ?? false,
      addEos: addEos ?? false,
      // llama.cpp's BPE path never adds a space prefix, whatever add_space_prefix says.
      spacePrefix: "never",
      byteLevel: true,
      pre,
    };
  }
  throw new TokenizerError(`${g.file}: unsupported tokenizer model '${model}' (supported: llama, gpt2)`);
}

/** Builds the tokenizer a GGUF file describes. */
export function tokenizerFromGGUF(g: Meta): Tokenizer {
  return createTokenizer(tokenizerSpecFromGGUF(g));
}
