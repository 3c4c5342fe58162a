// A family fixture (tests/families/fixtures) whose tokenizer gives its last vocabulary ids to added tokens (a
// thinking model's <think> tags, Mistral's tool-call markers), the merges that made the old tokens dropped: the
// weights stay as they are, so the model runs, and the tokens a feature needs are single tokens of its vocabulary.
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadModel, type ModelHandle } from "../../llm/model.ts";
import { scratchDir } from "../scratch.ts";

/** `family`'s fixture with `added` (in order) on its highest ids and `template` as its chat template. */
export function retokened(family: string, added: { content: string; special: boolean }[], template: string): ModelHandle {
  const src = fileURLToPath(new URL(`../families/fixtures/${family}/`, import.meta.url));
  const dir = scratchDir(`poot-${family}-`);
  for (const f of ["config.json", "model.safetensors", "tokenizer_config.json"]) copyFileSync(join(src, f), join(dir, f));
  const tj = JSON.parse(readFileSync(join(src, "tokenizer.json"), "utf8"));
  const vocab = tj.model.vocab as Record<string, number>;
  const last = Object.entries(vocab).sort((a, b) => b[1] - a[1]).slice(0, added.length).reverse();
  const gone = new Set(last.map(([t]) => t));
  for (const t of gone) delete vocab[t];
  tj.model.merges = (tj.model.merges as [string, string][]).filter(([a, b]) => !gone.has(a + b) && !gone.has(a) && !gone.has(b));
  added.forEach((a, i) => tj.added_tokens.push({ id: last[i][1], content: a.content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: a.special }));
  writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(tj));
  writeFileSync(join(dir, "chat_template.jinja"), template);
  const m = loadModel(dir);
  m.chatTemplate = template; // whichever of the fixture's own places the loader reads first
  return m;
}
