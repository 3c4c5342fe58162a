// How an embedding model pools its last hidden state into one vector per text, and whether it L2-normalizes:
// read from the sentence-transformers files of a Hugging Face folder (modules.json naming a Pooling module and
// optionally a Normalize module; the Pooling module's config.json), mean + L2 when the folder has none. A
// caller may override both per call. Bad JSON or an unsupported pooling mode is a ConfigError naming the field.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { ConfigError } from "./errors.ts";
import { openText } from "./formats/safetensors.ts";

/** How token states become one embedding: their mean, the first ([CLS]) token's, or the last token's. */
export type Pooling = "mean" | "cls" | "last";
export const POOLINGS: readonly Pooling[] = ["mean", "cls", "last"];

export interface PoolingConfig {
  pooling: Pooling;
  normalize: boolean;
  /** Where it came from: "default" or the config file read. */
  source: string;
}

const ModulesSchema = z.array(z.object({ path: z.string(), type: z.string() }).loose());
const PoolingSchema = z.object({
  pooling_mode_cls_token: z.boolean().optional(),
  pooling_mode_mean_tokens: z.boolean().optional(),
  pooling_mode_max_tokens: z.boolean().optional(),
  pooling_mode_mean_sqrt_len_tokens: z.boolean().optional(),
  pooling_mode_weightedmean_tokens: z.boolean().optional(),
  pooling_mode_lasttoken: z.boolean().optional(),
}).loose();

function parse<T extends z.ZodType>(file: string, schema: T): z.infer<T> {
  let json: unknown;
  try {
    json = JSON.parse(openText(file));
  } catch (e) {
    throw new ConfigError(file, "", `not valid JSON (${(e as Error).message})`);
  }
  const r = schema.safeParse(json);
  if (!r.success) throw new ConfigError(file, r.error.issues[0].path.join("."), r.error.issues[0].message);
  return r.data;
}

/** The pooling a folder's sentence-transformers config states, or `fallback` (mean + L2) without one. */
export function readPooling(dir: string, fallback: Pooling = "mean"): PoolingConfig {
  const modPath = join(dir, "modules.json");
  if (!existsSync(modPath)) return { pooling: fallback, normalize: true, source: "default" };
  const mods = parse(modPath, ModulesSchema);
  const normalize = mods.some((m) => m.type.endsWith(".Normalize"));
  const pm = mods.find((m) => m.type.endsWith(".Pooling"));
  if (!pm) return { pooling: fallback, normalize, source: modPath };
  const cfgPath = join(dir, pm.path, "config.json");
  const c = parse(cfgPath, PoolingSchema);
  const on: Pooling[] = [];
  if (c.pooling_mode_mean_tokens) on.push("mean");
  if (c.pooling_mode_cls_token) on.push("cls");
  if (c.pooling_mode_lasttoken) on.push("last");
  for (const k of ["pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens"] as const) {
    if (c[k]) throw new ConfigError(cfgPath, k, "this pooling mode is not supported (mean, cls and last token are)");
  }
  if (on.length !== 1) throw new ConfigError(cfgPath, "pooling_mode_*", `exactly one pooling mode must be on, found ${on.length}`);
  return { pooling: on[0], normalize, source: cfgPath };
}

/**
 * Pooling weights f32[batch, seq] for texts of these lengths padded to `seq` (right padding): 1/len on each
 * real token (mean), 1 on the first (cls) or the last real token (last).
 */
export function poolWeights(lengths: readonly number[], seq: number, batch: number, p: Pooling): Float32Array {
  const w = new Float32Array(batch * seq);
  lengths.forEach((n, b) => {
    if (p === "mean") w.fill(1 / n, b * seq, b * seq + n);
    else w[b * seq + (p === "cls" ? 0 : n - 1)] = 1;
  });
  return w;
}

/** Scales each row of `x` [rows, dim] to unit L2 norm (a zero row stays zero). */
export function l2Normalize(x: Float32Array, dim: number): Float32Array {
  const out = new Float32Array(x.length);
  for (let r = 0; r < x.length / dim; r++) {
    let s = 0;
    for (let i = 0; i < dim; i++) s += x[r * dim + i] * x[r * dim + i];
    const k = s > 0 ? 1 / Math.max(Math.sqrt(s), 1e-12) : 0;
    for (let i = 0; i < dim; i++) out[r * dim + i] = x[r * dim + i] * k;
  }
  return out;
}
