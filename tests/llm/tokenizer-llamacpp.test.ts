// The tokenizers against llama.cpp itself (node-llama-cpp 3.21.1 under Node, CPU, vocab only): 400 generated
// strings mixing scripts, whitespace runs, digits, emoji, contractions and special-token spellings, encoded
// with parse_special off and on, on the Llama 2 SPM, GPT-2 and stories260K vocabularies. Skipped when Node or
// node-llama-cpp is missing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { openGGUF } from "../../llm/formats/gguf.ts";
import { tokenizerFromGGUF } from "../../llm/tokenizer/gguf.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const MODELS: Record<string, string> = {
  spm: fileURLToPath(new URL("../fixtures/llama2-tokenizer/ggml-vocab-llama-spm.gguf", import.meta.url)),
  gpt2: fileURLToPath(new URL("../fixtures/gpt2-tokenizer/ggml-vocab-gpt-2.gguf", import.meta.url)),
  stories: fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url)),
};

function texts(): string[] {
  let s = 12345;
  const rnd = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  const pieces = [
    "Hello", " world", "  ", "\n", "\t", "3", "333", "12345", "'s", "'LL", " I'm", "é", "ü", "ß", "Ñ", "世界", "我想", "🦙",
    "😶‍🌫️", "✅", "нещо", "Български", "កាន់", "  \n ", ".", "...", "!!", "—", "\u00a0", "\u0085", "\u2028", "\u3000",
    "<s>", "</s>", "<|endoftext|>", "▁", "Ġ", "abc", "x", "The", " quick", " brown", "fox", "ṁ", "ǅ", "٣", "𝔘", "\r\n",
    "’", "``", '""', "@#", "$", "%^&*", "<0x0A>", "<unk>",
  ];
  const out: string[] = [];
  for (let i = 0; i < 400; i++) {
    const n = 1 + Math.floor(rnd() * 12);
    let t = "";
    for (let j = 0; j < n; j++) t += pieces[Math.floor(rnd() * pieces.length)];
    out.push(t);
  }
  return out;
}

const probe = spawnSync("node", ["--version"], { encoding: "utf8" });
const skip = probe.status !== 0
  ? "node is not installed"
  : !existsSync(`${root}node_modules/node-llama-cpp/package.json`)
  ? "node-llama-cpp is not installed"
  : undefined;

test("tokenizers match llama.cpp on 400 generated strings (3 vocabularies, parse_special off and on)", { skip, timeout: 120_000 }, () => {
  const input = texts();
  const run = spawnSync("node", [fileURLToPath(new URL("./llamacpp-tokenize.mjs", import.meta.url))], {
    cwd: root,
    input: JSON.stringify({ models: MODELS, texts: input }),
    encoding: "utf8",
    maxBuffer: 64 << 20,
    timeout: 120_000,
  });
  assert.equal(run.status, 0, run.stderr);
  const ref: Record<string, [number[], number[], string][]> = JSON.parse(run.stdout);
  for (const [name, path] of Object.entries(MODELS)) {
    const tok = tokenizerFromGGUF(openGGUF(path));
    input.forEach((text, i) => {
      const [ids, idsSpecial, detok] = ref[name][i];
      const where = `${name} #${i} ${JSON.stringify(text)}`;
      assert.deepEqual(tok.encode(text, { addBos: false }), ids, where);
      assert.deepEqual(tok.encode(text, { addBos: false, parseSpecial: true }), idsSpecial, `${where} (parse_special)`);
      // llama.cpp's BPE detokenizer also applies clean_up_tokenization_spaces, which poot's does not.
      if (name !== "gpt2") assert.equal(tok.decode(ids), detok, where);
    });
  }
});
