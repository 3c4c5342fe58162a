// Shared loading of stories260K for the model tests (llama2.c checkpoint, tokenizer, reference outputs).
import { readFileSync } from "node:fs";
import { type ConstSource, constsFromStore, evaluate, type Evaluation } from "../../graph/eval.ts";
import type { Graph } from "../../graph/ir.ts";
import type { Storage } from "../../graph/dtype.ts";
import { type Llama2cModel, readLlama2c, readLlama2cTokenizer } from "../../llm/formats/llama2c.ts";
import { weightMap } from "../../llm/families/llama.ts";

const DIR = new URL("../../models/stories260K/", import.meta.url);

export interface ReferenceCase {
  prompt: string;
  prompt_ids: number[];
  steps: number;
  generated_ids: number[];
  generated_text: string;
  first_logits: number[][];
}

export const model: Llama2cModel = readLlama2c(new Uint8Array(readFileSync(new URL("stories260K.bin", DIR))));
export const tokenizer = readLlama2cTokenizer(new Uint8Array(readFileSync(new URL("tok512.bin", DIR))), model.config.vocab);
export const reference: { cases: ReferenceCase[] } = JSON.parse(readFileSync(new URL("reference_greedy.json", DIR), "utf8"));
export const consts: ConstSource = constsFromStore(model.store, weightMap(model.config, "llama2c"));

export function argmax(l: ArrayLike<number>, from = 0, len = l.length - from): number {
  let best = 0;
  for (let i = 1; i < len; i++) if (l[from + i] > l[from + best]) best = i;
  return best;
}

/** Runs one step of `g` carrying `state` forward. */
export function step(
  g: Graph, slots: Record<string, ArrayLike<number>>, state?: Record<string, Storage>,
  extra: { bounds?: boolean; stateBounds?: Record<string, Float32Array>; order?: "pairwise" | "fma" | "reverse" } = {},
): Evaluation {
  return evaluate(g, { consts, slots, state, stateBounds: extra.stateBounds }, { bounds: extra.bounds, order: extra.order });
}
