// Model shapes the decode benchmark runs: real architectures' dimensions with synthetic weights (the bytes
// per token are what a trained checkpoint of that shape costs; the values do not matter to speed).
import type { LlamaConfig } from "../llm/families/llama.ts";

export type ShapeName = "llama-3.2-1b" | "qwen2.5-0.5b" | "llama-3-8b" | "stories260K";

export const SHAPES: Record<ShapeName, LlamaConfig> = {
  // Llama 3.2 1B: tied embeddings; its llama3 rope scaling only rescales frequencies (same cost).
  "llama-3.2-1b": {
    dim: 2048, hidden: 8192, layers: 16, heads: 32, kvHeads: 8, headDim: 64, vocab: 128256,
    rmsEps: 1e-5, ropeTheta: 500000, ropeStyle: "half", tiedEmbeddings: true,
  },
  "qwen2.5-0.5b": {
    dim: 896, hidden: 4864, layers: 24, heads: 14, kvHeads: 2, headDim: 64, vocab: 151936,
    rmsEps: 1e-6, ropeTheta: 1000000, ropeStyle: "half", tiedEmbeddings: true, qkvBias: true,
  },
  "llama-3-8b": {
    dim: 4096, hidden: 14336, layers: 32, heads: 32, kvHeads: 8, headDim: 128, vocab: 128256,
    rmsEps: 1e-5, ropeTheta: 500000, ropeStyle: "half", tiedEmbeddings: false,
  },
  // karpathy's stories260K (llama2.c): a quick shape that runs anywhere.
  stories260K: {
    dim: 64, hidden: 172, layers: 5, heads: 8, kvHeads: 4, headDim: 8, vocab: 512,
    rmsEps: 1e-5, ropeTheta: 10000, ropeStyle: "adjacent", tiedEmbeddings: true,
  },
};

/** The shapes `--shape all` (and the default) runs: the three of the PTX issue's table. */
export const REAL_SHAPES: readonly ShapeName[] = ["llama-3.2-1b", "qwen2.5-0.5b", "llama-3-8b"];

/** A shape to run: a named one, or a custom config under a name of its own. */
export interface Shape {
  name: string;
  config: LlamaConfig;
}

export function isShapeName(s: string): s is ShapeName {
  return Object.hasOwn(SHAPES, s);
}

const NUMERIC = ["dim", "hidden", "layers", "heads", "kvHeads", "headDim", "vocab", "rmsEps", "ropeTheta"] as const;
const FLAGS = ["tiedEmbeddings", "qkvBias"] as const;

/**
 * A custom shape from `key=value,...` over a base (default stories260K): numeric keys of LlamaConfig,
 * `ropeStyle=half|adjacent`, `tiedEmbeddings=true|false`, `qkvBias=true|false`. headDim defaults to dim/heads
 * when dim or heads change and headDim is not given.
 */
export function parseCustom(spec: string, base: LlamaConfig = SHAPES.stories260K): LlamaConfig {
  const c: LlamaConfig = { ...base };
  const given = new Set<string>();
  for (const part of spec.split(",").map((s) => s.trim()).filter(Boolean)) {
    const eq = part.indexOf("=");
    if (eq < 0) throw new RangeError(`custom shape: "${part}" is not key=value`);
    const k = part.slice(0, eq).trim(), v = part.slice(eq + 1).trim();
    given.add(k);
    if ((NUMERIC as readonly string[]).includes(k)) {
      const n = Number(v);
      if (!Number.isFinite(n) || n <= 0) throw new RangeError(`custom shape: ${k}=${v} is not a positive number`);
      (c as unknown as Record<string, number>)[k] = n;
    } else if ((FLAGS as readonly string[]).includes(k)) {
      if (v !== "true" && v !== "false") throw new RangeError(`custom shape: ${k} must be true or false`);
      (c as unknown as Record<string, boolean>)[k] = v === "true";
    } else if (k === "ropeStyle") {
      if (v !== "half" && v !== "adjacent") throw new RangeError(`custom shape: ropeStyle must be half or adjacent`);
      c.ropeStyle = v;
    } else {
      throw new RangeError(`custom shape: unknown key ${k}`);
    }
  }
  if (!given.has("headDim") && (given.has("dim") || given.has("heads"))) c.headDim = c.dim / c.heads;
  checkConfig(c);
  return c;
}

/** Throws on a config the Llama trace cannot take. */
export function checkConfig(c: LlamaConfig): void {
  for (const k of ["dim", "hidden", "layers", "heads", "kvHeads", "headDim", "vocab"] as const) {
    if (!Number.isInteger(c[k]) || c[k] <= 0) throw new RangeError(`shape: ${k} must be a positive integer, got ${c[k]}`);
  }
  if (c.heads % c.kvHeads !== 0) throw new RangeError(`shape: heads ${c.heads} is not a multiple of kvHeads ${c.kvHeads}`);
  if (c.headDim % 2 !== 0) throw new RangeError(`shape: headDim ${c.headDim} must be even (rope pairs)`);
}

/** Parameter count of a config (every weight tensor's elements). */
export function paramCount(c: LlamaConfig): number {
  const q = c.heads * c.headDim, kv = c.kvHeads * c.headDim;
  const layer = 2 * c.dim + c.dim * (q + 2 * kv) + q * c.dim + 3 * c.dim * c.hidden + (c.qkvBias ? q + 2 * kv : 0);
  return c.vocab * c.dim * (c.tiedEmbeddings ? 1 : 2) + c.dim + c.layers * layer;
}
