// Architecture name -> the family that reads its config and traces its step. GGUF files name it in
// `general.architecture`, Hugging Face folders in config.json `architectures[0]` (or `model_type`).
// llm/ never branches on a backend; it only branches here, on what the model file says it is.
// Adding a family: its file under llm/families/ and one entry in FAMILIES.
import { UnknownArchitectureError } from "./errors.ts";
import type { Family } from "./families/family.ts";
import { bert, xlmRoberta } from "./families/bert.ts";
import { gemma2, gemma3 } from "./families/gemma.ts";
import { llama } from "./families/llama.ts";
import { llava } from "./families/llava.ts";
import { phi3 } from "./families/phi3.ts";
import { qwen2, qwen3 } from "./families/qwen.ts";

export type { Family } from "./families/family.ts";

const FAMILIES: readonly Family[] = [llama, qwen2, qwen3, gemma2, gemma3, phi3, bert, xlmRoberta, llava];

// Maps, not objects: a name such as "constructor" or "__proto__" must not find anything.
const BY_GGUF = new Map(FAMILIES.flatMap((f) => f.gguf.map((a) => [a, f] as const)));
const BY_HF = new Map(FAMILIES.flatMap((f) => f.hf.map((a) => [a, f] as const)));

/** GGUF architecture names that have a family. */
export const ARCHITECTURES: readonly string[] = [...BY_GGUF.keys()];
/** Hugging Face architecture / model_type names that have a family. */
export const HF_ARCHITECTURES: readonly string[] = [...BY_HF.keys()];
/** Every family, in registry order. */
export const ALL_FAMILIES: readonly Family[] = FAMILIES;

/** The family of a GGUF architecture name; an unknown one is a typed error listing the known ones. */
export function familyOf(arch: string | undefined): Family {
  const f = typeof arch === "string" ? BY_GGUF.get(arch) : undefined;
  if (!f) throw new UnknownArchitectureError(arch ?? "(none: general.architecture is missing)", [...ARCHITECTURES]);
  return f;
}

/** The family of a Hugging Face config's `architectures` (first that is known) or, failing that, `model_type`. */
export function familyOfHF(architectures: readonly string[] | undefined, modelType: string | undefined): Family {
  for (const a of [...(architectures ?? []), ...(modelType === undefined ? [] : [modelType])]) {
    const f = BY_HF.get(a);
    if (f) return f;
  }
  const name = architectures?.[0] ?? modelType ?? "(none: config.json has neither architectures nor model_type)";
  throw new UnknownArchitectureError(name, [...HF_ARCHITECTURES.filter((a) => /For(CausalLM|ConditionalGeneration)$/.test(a))]);
}
