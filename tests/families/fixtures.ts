// The transformers fixtures (fixtures/SOURCE.md): where they are, their expected outputs, and the greedy
// comparison with its near-tie rule.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { ChatMessage } from "../../llm/chat.ts";

export const FIXTURES = fileURLToPath(new URL("./fixtures/", import.meta.url));
export const FAMILY_DIRS = ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"];
/**
 * A greedy flip is allowed only at a step where transformers' own top-two logits are closer than this: f32
 * sums in another order differ by a few ulp of the logits' magnitude (|logit| < 40 here), far below 0.01.
 */
export const MARGIN = 0.01;
/** Next-token logits: |ours - transformers| <= ATOL + RTOL·|ref| per element (fp32 both; 3 layers, width 64). */
export const ATOL = 2e-3, RTOL = 1e-3;

interface Seq {
  ids: number[];
  greedy: number[];
  margins: number[];
  logits?: number[];
}
export interface Expected {
  family: string;
  steps: number;
  prompts: (Seq & { text: string })[];
  chats: (Seq & { messages: ChatMessage[]; text: string })[];
}

export function expected(family: string): Expected {
  return JSON.parse(readFileSync(`${FIXTURES}${family}/expected.json`, "utf8"));
}

/** Where ours first differs from the reference; a difference is accepted only after a step of near tie. */
export function compareGreedy(ours: number[], ref: Seq, what: string): void {
  assert.equal(ours.length, ref.greedy.length, `${what}: generated ${ours.length} tokens, reference ${ref.greedy.length}`);
  const at = ours.findIndex((t, i) => t !== ref.greedy[i]);
  if (at < 0) return;
  assert.ok(ref.margins[at] < MARGIN,
    `${what}: token ${at} is ${ours[at]}, transformers ${ref.greedy[at]} (its top-two margin ${ref.margins[at].toFixed(4)} >= ${MARGIN})\n` +
      `ours ${ours.join(",")}\nref  ${ref.greedy.join(",")}`);
}

