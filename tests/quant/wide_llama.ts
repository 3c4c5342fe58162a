// The random-weight llama checkpoint of the quantized tier-3 tests (tests/quant/families.test.ts,
// tests/quant/xq_tokens.test.ts): a Hugging Face folder 256 wide, whose rows are whole 256-blocks.
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { llama } from "../../llm/families/llama.ts";
import { rng } from "../graph/random_graph.ts";
import { FIXTURES } from "../families/fixtures.ts";

/**
 * A random-weight llama checkpoint (seeded) 256 wide with a 512-wide FFN, so every row is whole 256-blocks and
 * q4_k_m / q5_k_m / q6_k write real K-quant blocks (the transformers fixtures are 64 wide: only fallbacks), with
 * the llama fixture's tokenizer. Norm weights near 1, matrices uniform with a 1/sqrt(in) scale, a wider output
 * head so the logits are not all near ties.
 */
export function wideLlama(to: string): void {
  mkdirSync(to);
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) copyFileSync(`${FIXTURES}llama/${f}`, join(to, f));
  const cfg = {
    architectures: ["LlamaForCausalLM"], model_type: "llama", hidden_size: 256, intermediate_size: 512, num_hidden_layers: 2,
    num_attention_heads: 4, num_key_value_heads: 2, head_dim: 64, vocab_size: 384, rms_norm_eps: 1e-5, rope_theta: 10000,
    max_position_embeddings: 256, tie_word_embeddings: false,
  };
  writeFileSync(join(to, "config.json"), JSON.stringify(cfg));
  const c = llama.fromHF({ file: join(to, "config.json"), json: cfg }), r = rng(16);
  const header: Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }> = {}, parts: Float32Array[] = [];
  let off = 0;
  for (const { role, shape } of llama.weights(c)) {
    const x = new Float32Array(shape.reduce((a, b) => a * b, 1));
    const scale = shape.length === 1 ? 0.2 : (role.role === "output" ? 8 : 2) / Math.sqrt(shape[1]);
    for (let i = 0; i < x.length; i++) x[i] = (shape.length === 1 ? 1 : 0) + (r() - 0.5) * scale;
    header[llama.tensorName("hf", role, c)!] = { dtype: "F32", shape, data_offsets: [off, off + x.byteLength] };
    parts.push(x);
    off += x.byteLength;
  }
  const h = new TextEncoder().encode(JSON.stringify(header)), out = new Uint8Array(8 + h.length + off);
  new DataView(out.buffer).setBigUint64(0, BigInt(h.length), true);
  out.set(h, 8);
  let at = 8 + h.length;
  for (const x of parts) out.set(new Uint8Array(x.buffer), at), at += x.byteLength;
  writeFileSync(join(to, "model.safetensors"), out);
}
