// `poot embed` and `poot rerank` as a user runs them (a child process): --json prints {"embeddings"} equal to
// transformers' (the committed fixture) and {"scores"} equal to the float64 reference, in document order; bad
// command lines exit 2, a model of the wrong kind exits 1, each with one error line naming what was wrong.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { loadModel } from "../../engine.ts";
import { frameInput } from "../../llm/encoder.ts";
import { poot } from "../cli/poot.ts";
import { referenceScore, writeBert } from "./synth.ts";

const BERT = fileURLToPath(new URL("./fixtures/bert-embed", import.meta.url));
const exp = JSON.parse(readFileSync(`${BERT}/expected.json`, "utf8")) as { texts: { text: string; embedding: number[] }[] };

test("poot embed --json prints transformers' embeddings; poot rerank --json the scores in document order; errors", { timeout: 300_000 }, () => {
  const texts = exp.texts.slice(0, 3);
  const r = poot(["embed", "-m", BERT, "--backend", "js", "--json", ...texts.flatMap((t) => ["--text", t.text])]);
  assert.equal(r.code, 0, r.stderr);
  const got = JSON.parse(r.stdout).embeddings as number[][];
  assert.equal(got.length, texts.length);
  texts.forEach((t, i) => t.embedding.forEach((w, j) => assert.ok(Math.abs(got[i][j] - w) <= 2e-3 + 1e-3 * Math.abs(w), `text ${i}[${j}]: ${got[i][j]} vs ${w}`)));
  const plain = poot(["embed", "-m", BERT, "--backend", "js", "-t", "hello", "-t", "world"]);
  assert.equal(plain.code, 0, plain.stderr);
  assert.match(plain.stdout, /^embedding 0: (-?\d+\.\d{6} ){63}-?\d+\.\d{6}\nembedding 1: /);

  const rr = writeBert({ labels: 1 });
  try {
    const docs = ["the dog ran to the park.", "hello world", "the cat sat on the mat."];
    const q = "where did the dog go?";
    const s = poot(["rerank", "-m", rr.dir, "--backend", "js", "--json", "-q", q, ...docs.flatMap((d) => ["-d", d])]);
    assert.equal(s.code, 0, s.stderr);
    const scores = JSON.parse(s.stdout).scores as number[];
    const m = loadModel(rr.dir);
    docs.forEach((d, i) => {
      const f = frameInput(m, "d", 64, q, d);
      const want = referenceScore(rr.w, f.ids, f.types);
      assert.ok(Math.abs(scores[i] - want) <= 2e-4 + 2e-4 * Math.abs(want), `score ${i}: ${scores[i]} vs ${want}`);
    });
    m.close();
    const bad = poot(["rerank", "-m", BERT, "--backend", "js", "-q", "q", "-d", "d"]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /ModelKindError: BertModel: has no classification head/);
  } finally {
    rmSync(rr.dir, { recursive: true });
  }
  for (const [args, msg] of [
    [["embed", "-m", BERT], /--text is required/],
    [["embed", "--text", "x"], /--model is required/],
    [["embed", "-m", BERT, "-t", "x", "--pooling", "max"], /--pooling: unknown pooling "max"/],
    [["embed", "-m", BERT, "-t", "x", "--normalize", "--no-normalize"], /give one/],
    [["embed", "-m", BERT, "stray"], /unexpected argument "stray"/],
    [["rerank", "-m", BERT, "-d", "x"], /--query is required/],
  ] as const) {
    const e = poot([...args]);
    assert.equal(e.code, 2, `${args.join(" ")}: ${e.stderr}`);
    assert.match(e.stderr, msg);
  }
  const gen = poot(["run", "-m", BERT, "-p", "hi", "--backend", "js"]);
  assert.equal(gen.code, 1);
  assert.equal(gen.stdout, "");
  assert.match(gen.stderr, /is an encoder: it embeds and reranks/);
});
