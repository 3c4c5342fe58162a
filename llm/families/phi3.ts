// Phi-3 (mini/medium, 4k-context rope): the Llama step with q, k and v in one fused projection (rows q | k | v)
// and gate/up in one (rows gate | up). Rope rotates halves in both GGUF and Hugging Face files. Long-context
// "longrope" scaling is refused, not approximated.
import { Tracer } from "../../graph/tracer.ts";
import { MetadataError } from "../errors.ts";
import { attend, embed, gatedFfn, head, norm, ropeOf, stepInputs, weightFn } from "./common.ts";
import { type Family, type ModelConfig, namesFrom, type StepShape, type Traced, type TraceOptions, type WeightSpec } from "./family.ts";
import { llamaConfigFromGGUF, llamaConfigFromHF } from "./llama.ts";

const names = namesFrom({
  gguf: {
    tok_embd: "token_embd.weight", output_norm: "output_norm.weight", output: "output.weight", attn_norm: "attn_norm.weight",
    "attn.qkv": "attn_qkv.weight", "attn.o": "attn_output.weight", ffn_norm: "ffn_norm.weight", "ffn.gate_up": "ffn_up.weight",
    "ffn.down": "ffn_down.weight",
  },
  hf: {
    tok_embd: "model.embed_tokens.weight", output_norm: "model.norm.weight", output: "lm_head.weight",
    attn_norm: "input_layernorm.weight", "attn.qkv": "self_attn.qkv_proj.weight", "attn.o": "self_attn.o_proj.weight",
    ffn_norm: "post_attention_layernorm.weight", "ffn.gate_up": "mlp.gate_up_proj.weight", "ffn.down": "mlp.down_proj.weight",
  },
});

function weights(c: ModelConfig): WeightSpec[] {
  const q = c.heads * c.headDim, kv = c.kvHeads * c.headDim;
  const w: WeightSpec[] = [
    { role: { role: "tok_embd" }, shape: [c.vocab, c.dim] },
    { role: { role: "output_norm" }, shape: [c.dim] },
  ];
  if (!c.tiedEmbeddings) w.push({ role: { role: "output" }, shape: [c.vocab, c.dim] });
  for (let l = 0; l < c.layers; l++) {
    const at = (role: string, shape: number[]) => w.push({ role: { role, layer: l }, shape });
    at("attn_norm", [c.dim]);
    at("attn.qkv", [q + 2 * kv, c.dim]);
    at("attn.o", [c.dim, q]);
    at("ffn_norm", [c.dim]);
    at("ffn.gate_up", [2 * c.hidden, c.dim]);
    at("ffn.down", [c.dim, c.hidden]);
  }
  return w;
}

function trace(c: ModelConfig, s: StepShape, o: TraceOptions = {}): Traced {
  const g = new Tracer();
  const R = s.rows, D = c.dim, hd = c.headDim, F = c.hidden;
  const w = weightFn(g, o);
  const q = c.heads * hd, kv = c.kvHeads * hd;
  const inp = stepInputs(g, s);
  const tok = w("tok_embd", [c.vocab, D]);
  let x = embed(g, tok, inp, c);
  for (let l = 0; l < c.layers; l++) {
    x = g.scope(`blk.${l}`, () => {
      const h = norm(g, x, w("attn_norm", [D], l), c);
      const qkv = g.label(g.matmul(h, w("attn.qkv", [q + 2 * kv, D], l)), "attn.qkv");
      const part = (from: number, n: number, heads: number) => g.reshape(g.slice(qkv, 1, from, from + n), [R, heads, hd]);
      const qh = g.label(ropeOf(inp, c, l, part(0, q, c.heads)), "q");
      const kh = g.label(ropeOf(inp, c, l, part(q, kv, c.kvHeads)), "k");
      const att = attend(inp, c, l, qh, kh, part(q + kv, kv, c.kvHeads));
      const y = g.add(x, g.label(g.matmul(att, w("attn.o", [D, q], l)), "attn.o"));
      const h2 = norm(g, y, w("ffn_norm", [D], l), c);
      const gu = g.label(g.matmul(h2, w("ffn.gate_up", [2 * F, D], l)), "ffn.gate_up");
      return g.add(y, gatedFfn(g, c, g.slice(gu, 1, 0, F), g.slice(gu, 1, F, 2 * F), w("ffn.down", [D, F], l)));
    });
  }
  const xf = norm(g, x, w("output_norm", [D]), c);
  return { tracer: g, logits: head(g, c, xf, c.tiedEmbeddings ? tok : w("output", [c.vocab, D])), hidden: xf };
}

export const phi3: Family = {
  name: "phi3",
  gguf: ["phi3"],
  hf: ["Phi3ForCausalLM", "phi3"],
  fromGGUF: (g, arch) => {
    if (g.info("rope_factors_short.weight") || g.info("rope_factors_long.weight")) {
      throw new MetadataError(g.file, "rope_factors_short.weight", "long-context (longrope) Phi-3 is not supported");
    }
    // llama.cpp's phi3 GGUF has no attn_q tensor to infer biases from; the step reads none.
    return { ...llamaConfigFromGGUF(g, arch, "half"), qkvBias: false, qkNorm: false };
  },
  fromHF: (src) => ({ ...llamaConfigFromHF(src), qkvBias: false }),
  weights,
  tensorName: names,
  trace,
};
