// A Llama with deterministic random weights built in memory (no file), for device tests of whole steps.
import { bufferStore, roleKey, type TensorEntry, type WeightMap, type WeightStore } from "../../graph/weights.ts";
import { type LlamaConfig, llamaWeights } from "../../llm/families/llama.ts";

export const TINY_LLAMA: LlamaConfig = {
  dim: 128, hidden: 344, layers: 2, heads: 4, kvHeads: 2, headDim: 32, vocab: 320, rmsEps: 1e-5,
  ropeTheta: 10000, ropeStyle: "half", tiedEmbeddings: false,
};

/** Weights ~U(-a, a) with a = 1/sqrt(fan-in) (norms ~1), every tensor f32 or, for matmuls, bf16. */
export function randomLlama(c: LlamaConfig, seed = 1, bf16 = false): { store: WeightStore; map: WeightMap; dtypeOf: (r: { role: string }) => "f32" | "bf16" } {
  let s = seed >>> 0;
  const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296) * 2 - 1;
  const dtypeOf = (r: { role: string }) => (bf16 && !r.role.endsWith("norm") && r.role !== "tok_embd" && !r.role.endsWith(".bias") ? "bf16" : "f32");
  const ws = llamaWeights(c);
  const entries: TensorEntry[] = [];
  let off = 0;
  for (const w of ws) {
    const n = w.shape.reduce((a, b) => a * b, 1), dt = dtypeOf(w.role);
    const bytes = n * (dt === "bf16" ? 2 : 4);
    entries.push({ name: roleKey(w.role), dtype: dt, shape: w.shape, byteLength: bytes, offset: off });
    off += Math.ceil(bytes / 16) * 16;
  }
  const file = new Uint8Array(off);
  const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
  for (const e of entries) {
    const n = e.shape.reduce((a, b) => a * b, 1);
    const norm = e.name.includes("norm");
    const scale = norm ? 0.2 : 1 / Math.sqrt(e.shape[e.shape.length - 1]);
    const dv = new DataView(file.buffer, e.offset, e.byteLength);
    for (let i = 0; i < n; i++) {
      const v = norm ? 1 + rnd() * scale : rnd() * scale;
      if (e.dtype === "bf16") {
        f32[0] = v;
        dv.setUint16(i * 2, u32[0] >>> 16, true);
      } else dv.setFloat32(i * 4, v, true);
    }
  }
  const map: WeightMap = new Map(entries.map((e) => [e.name, e.name]));
  return { store: bufferStore(file, entries), map, dtypeOf };
}
