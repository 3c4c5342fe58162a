// A loaded model: its file's weights (read once), config, weight map, tokenizer and what the metadata says of
// context and chat. What the Driver needs to compile and run it; nothing here touches a device.
import { type GGUFFile, openGGUF } from "./formats/gguf.ts";
import { familyOf, type Family } from "./registry.ts";
import { type LlamaConfig, llamaWeights, tensorName, weightMap } from "./families/llama.ts";
import { checkTensors, type ExpectedTensor, matrixDTypes } from "./validate.ts";
import type { WeightMap, WeightStore } from "../graph/weights.ts";
import { type Tokenizer, tokenizerFromGGUF } from "./tokenizer/mod.ts";

export interface ModelHandle {
  path: string;
  arch: string;
  family: Family;
  config: LlamaConfig;
  store: WeightStore;
  map: WeightMap;
  tokenizer: Tokenizer;
  /** Context length the model was trained for (metadata), when stated. */
  contextLength?: number;
  chatTemplate?: string;
  name?: string;
  gguf: GGUFFile;
}

/**
 * Opens a GGUF model file: reads its header, checks its config and that every tensor the family reads has the
 * shape and dtype the config implies, and builds the tokenizer. Tensor bytes stay in the file until the
 * executor loads them. Errors are typed (llm/errors.ts) and name the file and what was wrong; on an error
 * the file is closed.
 */
export function loadModel(path: string): ModelHandle {
  const gguf = openGGUF(path); // a missing file, a directory or a FIFO is a ModelNotFoundError
  try {
    return handle(path, gguf);
  } catch (e) {
    gguf.close();
    throw e;
  }
}

/** The tensors the Llama step reads from a GGUF file: matrices in any float or block type, vectors in f32. */
export function llamaExpected(config: LlamaConfig): ExpectedTensor[] {
  const matrix = matrixDTypes();
  return llamaWeights(config).map(({ role, shape }) => ({
    name: tensorName("gguf", role)!,
    shape,
    dtypes: shape.length === 1 ? ["f32"] : matrix,
  }));
}

function handle(path: string, gguf: GGUFFile): ModelHandle {
  const arch = gguf.optString("general.architecture");
  const family = familyOf(arch);
  const config = family.config(gguf);
  checkTensors(gguf.file, llamaExpected(config), gguf);
  const map = weightMap(config, "gguf", [...gguf.tensors()].map((t) => t.name));
  return {
    path,
    arch: arch!,
    family,
    config,
    store: gguf,
    map,
    tokenizer: tokenizerFromGGUF(gguf),
    contextLength: config.contextLength,
    chatTemplate: gguf.optString("tokenizer.chat_template"),
    name: gguf.optString("general.name"),
    gguf,
  };
}
