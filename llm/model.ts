// A loaded model: its file's weights (read once), config, weight map, tokenizer and what the metadata says of
// context and chat. What the Driver needs to compile and run it; nothing here touches a device.
import { type GGUFFile, openGGUF } from "./formats/gguf.ts";
import { InvalidArgumentError } from "./errors.ts";
import { familyOf, type Family } from "./registry.ts";
import { type LlamaConfig, weightMap } from "./families/llama.ts";
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

/** Loads a GGUF model file. Errors are typed (llm/errors.ts) and name the file and what was wrong. */
export function loadModel(path: string): ModelHandle {
  if (typeof path !== "string" || path === "") throw new InvalidArgumentError("path", `must be a non-empty file path string, got ${path === "" ? "\"\"" : typeof path}`);
  const gguf = openGGUF(path); // a missing file or a directory is a ModelNotFoundError
  const arch = gguf.optString("general.architecture");
  const family = familyOf(arch);
  const config = family.config(gguf);
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
