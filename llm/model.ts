// A loaded model: its weights (a store read on demand), family, config, weight map, tokenizer and what the
// files say of context and chat. What the Driver needs to compile and run it; nothing here touches a device.
//
// A model is a GGUF file or a Hugging Face folder (config.json, model.safetensors or sharded safetensors with
// model.safetensors.index.json, tokenizer.json, tokenizer_config.json, chat template in tokenizer_config.json
// or chat_template.jinja). Every weight the family reads is checked for shape and dtype before anything is
// uploaded (family.ts checkTensors).
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import type { TensorInfo, WeightMap, WeightStore } from "../graph/weights.ts";
import { decodeHalf } from "../graph/dtype.ts";
import { ConfigError, InvalidArgumentError, ModelNotFoundError, TokenizerError } from "./errors.ts";
import { checkTensors, type Family, type ModelConfig, rowSlices, type WeightFormat } from "./families/family.ts";
import { type GGUFFile, openGGUF } from "./formats/gguf.ts";
import { openSafetensorsFolder, openText } from "./formats/safetensors.ts";
import { familyOf, familyOfHF } from "./registry.ts";
import { checkGGUFConfig } from "./validate.ts";
import { type PoolingConfig, readPooling } from "./pooling.ts";
import { type Preprocess, readPreprocess } from "./preprocess.ts";
import { type InputTemplate, templateFromHF } from "./tokenizer/template.ts";
import { isWordPiece, wordPieceFromHF } from "./tokenizer/wordpiece.ts";
import { isUnigram, unigramFromHF } from "./tokenizer/unigram.ts";
import { prefixInStore } from "./families/bert.ts";
import type { HFTokenizerJson } from "./tokenizer/hf.ts";
import { createTokenizer, type HFTokenizerConfig, type Tokenizer, tokenizerFromGGUF, tokenizerSpecFromHF } from "./tokenizer/mod.ts";

export interface ModelHandle {
  path: string;
  /** The file's own architecture name (GGUF general.architecture, HF architectures[0] or model_type). */
  arch: string;
  family: Family;
  config: ModelConfig;
  format: WeightFormat;
  store: WeightStore;
  map: WeightMap;
  tokenizer: Tokenizer;
  /** Context length the model was trained for (metadata), when stated. */
  contextLength?: number;
  chatTemplate?: string;
  name?: string;
  /** The GGUF file, for a GGUF model. */
  gguf?: GGUFFile;
  /**
   * An embedding or reranking model: its input framing and the pooling its files state. Every encoder model
   * (config.encoder) has it; a decoder has it when its folder carries sentence-transformers files (a
   * decoder-based embedder such as Qwen3-Embedding, pooled from the final normed hidden state).
   */
  encoder?: { template: InputTemplate; pooling: PoolingConfig; maxTokens: number };
  /** A vision-language model's image processor (preprocessor_config.json, or the tower's defaults). */
  preprocess?: Preprocess;
  /** Releases the files the store reads from (the Driver has copied the weights by then). */
  close(): void;
}

/** Loads a GGUF file or a Hugging Face folder. Errors are typed (llm/errors.ts) and name the file and what was wrong. */
export function loadModel(path: string): ModelHandle {
  if (typeof path !== "string" || path === "") throw new InvalidArgumentError("path", `must be a non-empty file path string, got ${path === "" ? "\"\"" : typeof path}`);
  let dir = false;
  try {
    dir = statSync(path).isDirectory();
  } catch { /* openGGUF reports the missing file */ }
  return dir ? loadHFFolder(path) : loadGGUF(path);
}

function loadGGUF(path: string): ModelHandle {
  const gguf = openGGUF(path); // a missing file, a directory or a FIFO is a ModelNotFoundError
  try {
    const arch = gguf.optString("general.architecture");
    const family = familyOf(arch);
    checkGGUFConfig(gguf, arch!); // counts and dims bounded before the family sizes anything from them
    const config = family.fromGGUF(gguf, arch!);
    const store = rowSlices(widenVectors(gguf));
    const map = checkTensors(path, family, config, "gguf", store);
    return {
      path,
      arch: arch!,
      family,
      config,
      format: "gguf",
      store,
      map,
      tokenizer: tokenizerFromGGUF(gguf),
      contextLength: config.contextLength,
      chatTemplate: gguf.optString("tokenizer.chat_template"),
      name: gguf.optString("general.name"),
      gguf,
      close: () => gguf.close(),
    };
  } catch (e) {
    gguf.close();
    throw e;
  }
}

const Token = z.union([z.string(), z.object({ content: z.string() }).loose()]).nullish();
const TokenizerConfigSchema = z.object({
  add_bos_token: z.boolean().nullish(),
  add_eos_token: z.boolean().nullish(),
  bos_token: Token,
  eos_token: Token,
  pad_token: Token,
  unk_token: Token,
  chat_template: z.union([z.string(), z.array(z.object({ name: z.string(), template: z.string() }))]).nullish(),
}).loose();

const GenerationSchema = z.object({ eos_token_id: z.union([z.number().int().nonnegative(), z.array(z.number().int().nonnegative())]).nullish() }).loose();

const ArchSchema = z.object({
  architectures: z.array(z.string()).nullish(),
  model_type: z.string().optional(),
  _name_or_path: z.string().optional(),
}).loose();

/** A JSON file of the folder, parsed (a missing file: ModelNotFoundError; bad JSON: ConfigError). */
function readJson(path: string): unknown {
  const text = openText(path);
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ConfigError(path, "", `not valid JSON (${(e as Error).message})`);
  }
}

function zodParse<T extends z.ZodType>(file: string, schema: T, json: unknown): z.infer<T> {
  const r = schema.safeParse(json);
  if (!r.success) throw new ConfigError(file, r.error.issues[0].path.join("."), r.error.issues[0].message);
  return r.data;
}

/** tokenizer.json, parsed (bad JSON: TokenizerError naming the file). */
function parseTokenizerJson(path: string): HFTokenizerJson {
  try {
    return JSON.parse(openText(path));
  } catch (e) {
    if (e instanceof SyntaxError) throw new TokenizerError(`${path}: not valid JSON (${e.message})`);
    throw e;
  }
}

function loadHFFolder(dir: string): ModelHandle {
  const cfgPath = join(dir, "config.json");
  if (!existsSync(cfgPath)) throw new ModelNotFoundError(dir, "a Hugging Face folder needs config.json (none found)");
  const json = readJson(cfgPath);
  const a = zodParse(cfgPath, ArchSchema, json);
  const family = familyOfHF(a.architectures ?? undefined, a.model_type);
  const config = family.fromHF({ file: cfgPath, json });

  const tokPath = join(dir, "tokenizer.json");
  if (!existsSync(tokPath)) throw new ModelNotFoundError(dir, "no tokenizer.json in the folder");
  const tcPath = join(dir, "tokenizer_config.json");
  const tc = existsSync(tcPath) ? zodParse(tcPath, TokenizerConfigSchema, readJson(tcPath)) : {};
  // transformers' generate stops at generation_config.json's eos ids too (Phi-3: <|end|> and <|assistant|>).
  const genPath = join(dir, "generation_config.json");
  const gen = existsSync(genPath) ? zodParse(genPath, GenerationSchema, readJson(genPath)) : {};
  const eos = gen.eos_token_id;
  const tokJson = parseTokenizerJson(tokPath);
  const tokenizer = isWordPiece(tokJson)
    ? wordPieceFromHF(tokJson)
    : isUnigram(tokJson)
    ? unigramFromHF(tokJson)
    : createTokenizer({ ...tokenizerSpecFromHF(tokJson, tc as HFTokenizerConfig), eog: eos === undefined || eos === null ? [] : [eos].flat() });
  if (tokenizer.vocabSize > config.vocab) {
    throw new ConfigError(tokPath, "model.vocab", `${tokenizer.vocabSize} tokens but config.json vocab_size is ${config.vocab}`);
  }
  const jinja = join(dir, "chat_template.jinja");
  // A vision-language model is prompted through its processor's template (transformers' processor.apply_chat_template).
  const t = config.vision ? processorTemplate(dir) ?? tc.chat_template : tc.chat_template ?? processorTemplate(dir);
  const chatTemplate = existsSync(jinja) ? openText(jinja) : typeof t === "string" ? t : t?.find((x) => x.name === "default")?.template;

  const files = openSafetensorsFolder(dir);
  const widened = rowSlices(widenVectors(basePrefixed(files)));
  const store = family.adaptStore ? family.adaptStore(widened, config) : widened;
  if (config.encoder) config.encoder.prefix = prefixInStore(store.tensors(), config.encoder.prefix);
  try {
    const map = checkTensors(cfgPath, family, config, "hf", store);
    return {
      path: dir,
      arch: a.architectures?.[0] ?? a.model_type ?? family.name,
      family,
      config,
      format: "hf",
      store,
      map,
      tokenizer,
      contextLength: config.contextLength,
      chatTemplate,
      name: a._name_or_path || undefined,
      preprocess: config.vision ? readPreprocess(dir, config.vision.tower, config.vision.imageSize) : undefined,
      encoder: config.encoder
        ? { template: templateFromHF(tokJson), pooling: readPooling(dir), maxTokens: config.encoder.positions - config.encoder.posOffset }
        : existsSync(join(dir, "modules.json"))
        ? { template: templateFromHF(tokJson), pooling: readPooling(dir, "last"), maxTokens: config.contextLength ?? 2048 }
        : undefined,
      close: () => files.close(),
    };
  } catch (e) {
    files.close();
    throw e;
  }
}

/** A vision-language processor's template (chat_template.json, where transformers' processors save it). */
function processorTemplate(dir: string): string | undefined {
  const file = join(dir, "chat_template.json");
  if (!existsSync(file)) return undefined;
  return zodParse(file, z.object({ chat_template: z.string() }).loose(), readJson(file)).chat_template;
}

/**
 * A bare base-model checkpoint (Qwen3Model, LlamaModel: what sentence-transformers saves for a decoder
 * embedder) names its tensors without the task model's "model." prefix: the store answers the prefixed names
 * too, so the family's tensor names find them.
 */
function basePrefixed(store: WeightStore): WeightStore {
  if (store.info("model.embed_tokens.weight") || !store.info("embed_tokens.weight")) return store;
  const base = (name: string) => (name.startsWith("model.") && !store.info(name) ? name.slice(6) : name);
  return {
    tensors: () => [...store.tensors()].map((t) => (t.name.startsWith("lm_head") ? t : { ...t, name: `model.${t.name}` })),
    info: (name: string) => {
      const t = store.info(base(name));
      return t && { ...t, name };
    },
    bytes: (name: string) => store.bytes(base(name)),
  };
}

/**
 * The store with every 1-D half-precision tensor (norm weights, biases: a bf16 Hugging Face checkpoint has
 * them in bf16) read as f32, as GGUF files store them: the step then traces the same for both formats and the
 * planner's fused units (gemv with the norm, with the bias) apply. Matrices stay as they are.
 */
export function widenVectors(store: WeightStore): WeightStore {
  const wide = (t: TensorInfo): boolean => t.shape.length === 1 && (t.dtype === "f16" || t.dtype === "bf16");
  const info = (t: TensorInfo): TensorInfo => (wide(t) ? { ...t, dtype: "f32", byteLength: t.byteLength * 2 } : t);
  return {
    tensors: () => [...store.tensors()].map(info),
    info: (name) => {
      const t = store.info(name);
      return t && info(t);
    },
    bytes(name) {
      const t = store.info(name), b = store.bytes(name);
      if (!t || !wide(t)) return b;
      const half = new Uint16Array(b.slice().buffer);
      return new Uint8Array(decodeHalf(t.dtype as "f16" | "bf16", half).buffer);
    },
  };
}
