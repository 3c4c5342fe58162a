// Qwen2/2.5 (q/k/v biases) and Qwen3 (RMSNorm of each q and k head before rope): the Llama step under config
// flags. Both rotate halves (GGML NEOX) in GGUF as in Hugging Face files.
import { llamaConfigFromGGUF, llamaConfigFromHF, llamaWeights, tensorName, traceLlama } from "./llama.ts";
import type { Family } from "./family.ts";

export const qwen2: Family = {
  name: "qwen2",
  gguf: ["qwen2"],
  hf: ["Qwen2ForCausalLM", "qwen2"],
  fromGGUF: (g, arch) => ({ ...llamaConfigFromGGUF(g, arch, "half"), qkNorm: false }),
  // Qwen2 configs carry no attention_bias field: the biases are always there.
  fromHF: (src) => ({ ...llamaConfigFromHF(src), qkvBias: true }),
  weights: llamaWeights,
  tensorName,
  trace: traceLlama,
};

export const qwen3: Family = {
  name: "qwen3",
  gguf: ["qwen3"],
  hf: ["Qwen3ForCausalLM", "qwen3"],
  fromGGUF: (g, arch) => ({ ...llamaConfigFromGGUF(g, arch, "half"), qkNorm: true }),
  fromHF: (src) => ({ ...llamaConfigFromHF(src), qkNorm: true }),
  weights: llamaWeights,
  tensorName,
  trace: traceLlama,
};
