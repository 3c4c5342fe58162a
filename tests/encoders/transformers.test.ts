// Tier 3 against transformers for the encoder families: random-weight checkpoints written by transformers
// itself (tests/encoders/fixgen/make.py on the project's GPU machine; fixtures/SOURCE.md) load from their
// Hugging Face folders; our ids and token types equal the HF tokenizer's; embeddings (pooling and
// normalization from the sentence-transformers files) are within ATOL + RTOL·|ref| of transformers' fp32 ones
// element by element with cosine >= 0.9999, through the graph oracle and on every backend present; the
// cross-encoder's scores are within the same tolerance and rank the documents in the same order.
// The decoder-based embedder (Qwen3-Embedding style: EOS appended, last-token pooling, L2) is checked the same
// way through the driver. A fixture folder that is absent is a skip naming it; a model kind poot does not read
// yet is a skip saying so.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import type { ModelHandle } from "../../llm/model.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { dtypesFromStore } from "../../llm/families/family.ts";
import { frameInput } from "../../llm/encoder.ts";
import { l2Normalize, poolWeights } from "../../llm/pooling.ts";
import { type BackendName, openDevice, selectedBackends, slowDevice } from "../devices/index.ts";

const FIXTURES = fileURLToPath(new URL("./fixtures/", import.meta.url));
/** The families' tier-3 tolerance (fp32 both sides, width 64, 2 layers). */
const ATOL = 2e-3, RTOL = 1e-3, COSINE = 0.9999;
const EMBEDDERS = ["bert-embed", "bert-cls", "xlmr-embed", "qwen3-embed"];
const RERANKERS = ["bert-rerank", "xlmr-rerank"];
const NOT_YET: Record<string, string> = {};

interface TextCase { text: string; ids: number[]; type_ids?: number[]; embedding: number[] }
interface EmbedExpected { pooling: string; normalize: boolean; texts: TextCase[]; batched: number[][] }
interface RerankExpected { query: string; pairs: { document: string; ids: number[]; type_ids: number[]; score: number }[] }

const present = (name: string) => existsSync(`${FIXTURES}${name}/expected.json`);
const expected = <T>(name: string): T => JSON.parse(readFileSync(`${FIXTURES}${name}/expected.json`, "utf8"));
const models = new Map<string, ModelHandle>();
for (const n of [...EMBEDDERS, ...RERANKERS]) if (present(n)) models.set(n, loadModel(`${FIXTURES}${n}`));

function near(got: ArrayLike<number>, want: readonly number[], what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < want.length; i++) {
    const tol = ATOL + RTOL * Math.abs(want[i]);
    assert.ok(Number.isFinite(got[i]) && Math.abs(got[i] - want[i]) <= tol, `${what}[${i}]: ${got[i]} vs transformers ${want[i]} (tolerance ${tol})`);
    [ab, aa, bb] = [ab + got[i] * want[i], aa + got[i] * got[i], bb + want[i] * want[i]];
  }
  const cos = ab / Math.sqrt(aa * bb);
  assert.ok(cos >= COSINE, `${what}: cosine ${cos} < ${COSINE}`);
}
const order = (xs: readonly number[]) => xs.map((_, i) => i).sort((a, b) => xs[b] - xs[a]);

for (const [name, why] of Object.entries(NOT_YET)) test(`${name}: transformers parity`, { skip: why }, () => {});

for (const name of EMBEDDERS) {
  const skip = present(name) ? false : `no fixture ${name} (run tests/encoders/fixgen/make.py on a machine with transformers)`;
  test(`${name}: ids and token types equal the HF tokenizer's; the oracle's pooled embeddings match transformers'`, { skip }, () => {
    const m = models.get(name)!, exp = expected<EmbedExpected>(name);
    assert.equal(m.encoder!.pooling.pooling, exp.pooling === "lasttoken" ? "last" : exp.pooling);
    assert.equal(m.encoder!.pooling.normalize, exp.normalize);
    const framed = exp.texts.map((t) => frameInput(m, "text", 1 << 20, t.text));
    exp.texts.forEach((t, i) => {
      assert.deepEqual(framed[i].ids, t.ids, JSON.stringify(t.text));
      if (t.type_ids) assert.deepEqual(framed[i].types, t.type_ids);
    });
    if (!m.family.encode) return; // a decoder-based embedder: its embeddings are checked through the driver below
    const B = framed.length, S = Math.max(...framed.map((f) => f.ids.length)), D = m.config.dim;
    const { tracer, pooled } = m.family.encode!(m.config, { batch: B, seq: S }, { dtypeOf: dtypesFromStore(m.store, m.map) });
    tracer.output("pooled", pooled);
    const token = new Int32Array(B * S), type = new Int32Array(B * S), position = new Int32Array(B * S), valid = new Uint8Array(B * S);
    framed.forEach((f, b) => {
      token.set(f.ids, b * S);
      type.set(f.types, b * S);
      f.ids.forEach((_, i) => position[b * S + i] = m.config.encoder!.posOffset + i);
      valid.fill(1, b * S, b * S + f.ids.length);
    });
    const pool = poolWeights(framed.map((f) => f.ids.length), S, B, m.encoder!.pooling.pooling);
    let got = evaluate(tracer.build(), { consts: constsFromStore(m.store, m.map), slots: { token, type, position, valid, pool } }).output.pooled as Float32Array;
    if (exp.normalize) got = l2Normalize(got, D);
    exp.texts.forEach((t, b) => near(got.subarray(b * D, (b + 1) * D), t.embedding, `${name} text ${b}`));
  });
}

for (const name of RERANKERS) {
  const skip = present(name) ? false : `no fixture ${name} (run tests/encoders/fixgen/make.py on a machine with transformers)`;
  test(`${name}: pair ids and token types equal the HF tokenizer's`, { skip }, () => {
    const m = models.get(name)!, exp = expected<RerankExpected>(name);
    for (const p of exp.pairs) {
      const f = frameInput(m, "pair", 1 << 20, exp.query, p.document);
      assert.deepEqual(f.ids, p.ids, p.document);
      assert.deepEqual(f.types, p.type_ids, p.document);
    }
  });
}

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend as BackendName);
  const skip = typeof dev === "string" ? dev : slowDevice(dev);
  for (const name of EMBEDDERS) {
    test(`${backend}: ${name} driver.embed equals transformers (tolerance, cosine >= ${COSINE}), in one padded batch`, { skip: skip || (!present(name) && `no fixture ${name}`), timeout: 300_000 }, async () => {
      if (typeof dev === "string") return;
      const m = models.get(name)!, exp = expected<EmbedExpected>(name);
      const driver = await Driver.open(m, new Engine(dev, { compile: compileGraph, ownsDevice: false }), { encoder: { batches: [8], seqs: [32] }, ctx: 64, prefill: [8] });
      try {
        const got = await driver.embed(exp.texts.map((t) => t.text));
        exp.texts.forEach((t, i) => near(got[i], t.embedding, `${name} text ${i}`));
        // transformers' left-padded batch of a decoder shifts positions (its plain forward takes no position
        // ids from the mask), so only the encoders' padded batch is the same as the texts alone.
        if (m.family.encode) exp.batched.forEach((want, i) => near(got[i], want, `${name} text ${i} vs transformers' padded batch`));
      } finally {
        await driver.close();
      }
    });
  }
  for (const name of RERANKERS) {
    test(`${backend}: ${name} driver.rerank scores equal transformers' logits and rank the documents the same`, { skip: skip || (!present(name) && `no fixture ${name}`), timeout: 300_000 }, async () => {
      if (typeof dev === "string") return;
      const m = models.get(name)!, exp = expected<RerankExpected>(name);
      const driver = await Driver.open(m, new Engine(dev, { compile: compileGraph, ownsDevice: false }), { encoder: { batches: [8], seqs: [32] } });
      try {
        const scores = await driver.rerank(exp.query, exp.pairs.map((p) => p.document));
        const want = exp.pairs.map((p) => p.score);
        near(scores, want, `${name} scores`);
        assert.deepEqual(order(scores), order(want));
      } finally {
        await driver.close();
      }
    });
  }
}
