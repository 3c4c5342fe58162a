// Phi-3 (mini/medium, 4k-context rope): the Llama step, with q, k and v stored as one fused projection (rows
// q | k | v) and gate/up as one (rows gate | up). The fused tensors are bound as row ranges (family.ts
// rowSlices), so each part uploads as its own weight and the step is Llama's, fused decode units included.
// Rope rotates halves in both GGUF and Hugging Face files. Long-context "longrope" scaling is refused.
import { MetadataError } from "../errors.ts";
import type { Family, ModelConfig } from "./family.ts";
import { llamaConfigFromGGUF, llamaConfigFromHF, llamaWeights, tensorName, traceLlama } from "./llama.ts";

const FUSED = {
  gguf: { qkv: "attn_qkv.weight", gateUp: "ffn_up.weight", prefix: (l: number) => `blk.${l}.` },
  hf: { qkv: "self_attn.qkv_proj.weight", gateUp: "mlp.gate_up_proj.weight", prefix: (l: number) => `model.layers.${l}.` },
};

function names(format: "gguf" | "hf" | "llama2c", r: { role: string; layer?: number }, c: ModelConfig): string | undefined {
  if (format === "llama2c") return undefined;
  const f = FUSED[format], q = c.heads * c.headDim, kv = c.kvHeads * c.headDim, F = c.hidden;
  const rows = (name: string, from: number, n: number, of: number) => `${f.prefix(r.layer!)}${name}#rows=${from}:${from + n}:${of}`;
  switch (r.role) {
    case "attn.q": return rows(f.qkv, 0, q, q + 2 * kv);
    case "attn.k": return rows(f.qkv, q, kv, q + 2 * kv);
    case "attn.v": return rows(f.qkv, q + kv, kv, q + 2 * kv);
    case "ffn.gate": return rows(f.gateUp, 0, F, 2 * F);
    case "ffn.up": return rows(f.gateUp, F, F, 2 * F);
    default: return tensorName(format, r);
  }
}

export const phi3: Family = {
  name: "phi3",
  gguf: ["phi3"],
  hf: ["Phi3ForCausalLM", "phi3"],
  fromGGUF: (g, arch) => {
    if (g.info("rope_factors_short.weight") || g.info("rope_factors_long.weight")) {
      throw new MetadataError(g.file, "rope_factors_short.weight", "long-context (longrope) Phi-3 is not supported");
    }
    // llama.cpp runs Phi-3 files without their sliding window (its loader turns Phi SWA off): so does poot.
    return { ...llamaConfigFromGGUF(g, arch, "half"), qkvBias: false, qkNorm: false, slidingWindow: undefined };
  },
  fromHF: (src) => ({ ...llamaConfigFromHF(src), qkvBias: false }),
  weights: (c) => llamaWeights({ ...c, qkvBias: false, qkNorm: false, ropeFreqFactors: false }),
  tensorName: names,
  trace: traceLlama,
};
