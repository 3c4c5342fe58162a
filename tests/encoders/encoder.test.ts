// The BERT encoder family end to end on a tiny self-written checkpoint (tests/encoders/synth.ts): WordPiece ids
// by hand, the traced encode step (graph oracle) against a float64 plain-loop BERT, then driver.embed and
// driver.rerank on every backend present against the same reference (elementwise within a stated tolerance,
// cosine >= 0.9999, a text's embedding the same alone as in a padded batch), and the typed errors.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { dtypesFromStore } from "../../llm/families/family.ts";
import { ConfigError, ContextOverflowError, InvalidArgumentError, ModelKindError, TensorMismatchError, TokenizerError } from "../../llm/errors.ts";
import { frame } from "../../llm/tokenizer/template.ts";
import { unigramFromHF } from "../../llm/tokenizer/unigram.ts";
import { poolWeights } from "../../llm/pooling.ts";
import { type BackendName, openDevice, selectedBackends } from "../devices/index.ts";
import { DIMS, referenceHidden, referenceScore, writeBert } from "./synth.ts";

const ATOL = 2e-4, RTOL = 2e-4;
const emb = writeBert({ pooling: "mean", normalize: true });
const rr = writeBert({ labels: 1 });
const embModel = loadModel(emb.dir), rrModel = loadModel(rr.dir);
const TEXTS = ["The cat sat on the mat.", "hello world!", "Unable playing plays, a little dog ran to the park?", "你好"];
const QUERY = "where did the little dog go?";
const DOCS = ["the dog ran to the park.", "the cat sat on the mat.", "hello world", "a little dog played in the park"];

function close(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    const tol = ATOL + RTOL * Math.abs(want[i]);
    assert.ok(Number.isFinite(got[i]) && Math.abs(got[i] - want[i]) <= tol, `${what}[${i}]: ${got[i]} vs reference ${want[i]} (tolerance ${tol})`);
  }
}
function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) [ab, aa, bb] = [ab + a[i] * b[i], aa + a[i] * a[i], bb + b[i] * b[i]];
  return ab / Math.sqrt(aa * bb);
}
function meanL2(h: Float64Array[]): number[] {
  const m = Array.from({ length: DIMS.dim }, (_, i) => h.reduce((a, r) => a + r[i], 0) / h.length);
  const n = Math.hypot(...m);
  return m.map((x) => x / n);
}
const refEmbedding = (text: string) => {
  const f = frame(embModel.encoder!.template, embModel.tokenizer.encode(text));
  return meanL2(referenceHidden(emb.w, f.ids, f.types));
};

test("WordPiece: lowercase, accents, CJK, punctuation, ## pieces, [UNK], added tokens; pair framing with token types", () => {
  const t = embModel.tokenizer;
  assert.deepEqual(t.encode("The cat sat on the mat."), [5, 6, 7, 8, 5, 9, 20]);
  assert.deepEqual(t.encode("Unable playing plays"), [22, 23, 25, 26, 25, 24]);
  assert.deepEqual(t.encode("Café!"), [28, 18]);
  assert.deepEqual(t.encode("你好world"), [29, 30, 17]);
  assert.deepEqual(t.encode("123 zebra  \t dog"), [31, 32, 33, 1, 10]);
  assert.deepEqual(t.encode("[MASK] dog"), [4, 10]);
  assert.equal(t.decode(t.encode("Unable playing, the dog.")), "unable playing, the dog.");
  const f = frame(embModel.encoder!.template, t.encode("the cat"), t.encode("a dog"));
  assert.deepEqual(f, { ids: [2, 5, 6, 3, 14, 10, 3], types: [0, 0, 0, 0, 1, 1, 1] });
  assert.deepEqual(frame(embModel.encoder!.template, [5, 6, 7, 8], [14, 10], 6).ids, [2, 5, 6, 3, 14, 3]);
  assert.deepEqual(embModel.encoder!.pooling, { pooling: "mean", normalize: true, source: embModel.encoder!.pooling.source });
});

test("Unigram (XLM-R): Metaspace words, Viterbi by score, unknown characters fused, added tokens, decode", () => {
  const vocab: [string, number][] = [["<s>", 0], ["<pad>", 0], ["</s>", 0], ["<unk>", 0], ["\u2581", -2], ["\u2581the", -1], ["\u2581cat", -1.5],
    ["\u2581c", -3], ["at", -2], ["a", -3], ["t", -3], ["\u2581dog", -1.2], ["s", -2.5], ["\u2581ca", -2.9], ["ts", -2.0]];
  const t = unigramFromHF({
    added_tokens: ["<s>", "<pad>", "</s>", "<unk>"].map((content, id) => ({ id, content, special: true })),
    normalizer: { type: "Sequence", normalizers: [{ type: "Nmt" }, { type: "NFKC" }, { type: "Replace", pattern: { Regex: " {2,}" }, content: " " }] },
    pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true },
    model: { type: "Unigram", unk_id: 3, vocab },
  } as never);
  // "▁cat"+"s" (-4.0) beats "▁ca"+"ts" (-4.9) and "▁c"+"at"+"s" (-7.5).
  assert.deepEqual(t.encode("the cats"), [5, 6, 12]);
  // b and x are in no piece: one <unk> for "bx", then "at".
  assert.deepEqual(t.encode("the   bxat"), [5, 4, 3, 8]);
  assert.deepEqual(t.encode("</s>dog"), [2, 11]);
  assert.equal(t.decode([5, 6, 12, 11]), "the cats dog");
});

test("the traced encode step (graph oracle) matches a float64 BERT on a padded batch: mean and CLS pooling, classifier", () => {
  const framed = TEXTS.slice(0, 3).map((x) => frame(embModel.encoder!.template, embModel.tokenizer.encode(x)));
  const B = 4, S = 20;
  for (const pooling of ["mean", "cls"] as const) {
    const { tracer, pooled } = embModel.family.encode!(embModel.config, { batch: B, seq: S }, { dtypeOf: dtypesFromStore(embModel.store, embModel.map) });
    tracer.output("pooled", pooled);
    const token = new Int32Array(B * S), type = new Int32Array(B * S), position = new Int32Array(B * S), valid = new Uint8Array(B * S);
    framed.forEach((f, b) => {
      token.set(f.ids, b * S);
      type.set(f.types, b * S);
      f.ids.forEach((_, i) => position[b * S + i] = i);
      valid.fill(1, b * S, b * S + f.ids.length);
    });
    valid[3 * S] = 1;
    const pool = poolWeights([...framed.map((f) => f.ids.length), 1], S, B, pooling);
    const got = evaluate(tracer.build(), { consts: constsFromStore(embModel.store, embModel.map), slots: { token, type, position, valid, pool } }).output.pooled as Float32Array;
    framed.forEach((f, b) => {
      const h = referenceHidden(emb.w, f.ids, f.types);
      const want = pooling === "cls" ? Array.from(h[0]) : Array.from({ length: DIMS.dim }, (_, i) => h.reduce((a, r) => a + r[i], 0) / h.length);
      close(got.subarray(b * DIMS.dim, (b + 1) * DIMS.dim), want, `${pooling} text ${b}`);
    });
  }
  // The classifier head on (query, document) pairs with token types 1 on the document.
  const pairs = DOCS.map((d) => frame(rrModel.encoder!.template, rrModel.tokenizer.encode(QUERY), rrModel.tokenizer.encode(d)));
  const { tracer, pooled, scores } = rrModel.family.encode!(rrModel.config, { batch: B, seq: S }, { dtypeOf: dtypesFromStore(rrModel.store, rrModel.map) });
  tracer.output("pooled", pooled);
  tracer.output("scores", scores!);
  const token = new Int32Array(B * S), type = new Int32Array(B * S), position = new Int32Array(B * S), valid = new Uint8Array(B * S);
  pairs.forEach((f, b) => {
    token.set(f.ids, b * S);
    type.set(f.types, b * S);
    f.ids.forEach((_, i) => position[b * S + i] = i);
    valid.fill(1, b * S, b * S + f.ids.length);
  });
  const out = evaluate(tracer.build(), {
    consts: constsFromStore(rrModel.store, rrModel.map),
    slots: { token, type, position, valid, pool: poolWeights(pairs.map((f) => f.ids.length), S, B, "cls") },
  }).output.scores as Float32Array;
  close(out, pairs.map((f) => referenceScore(rr.w, f.ids, f.types)), "classifier scores");
});

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend as BackendName);
  const skip = typeof dev === "string" ? dev : false;
  test(`${backend}: driver.embed equals the reference (tolerance, cosine >= 0.9999), alone or batched; rerank scores and order`, { skip, timeout: 300_000 }, async () => {
    if (typeof dev === "string") return;
    const driver = await Driver.open(embModel, new Engine(dev, { compile: compileGraph, ownsDevice: false }), { encoder: { batches: [1, 4], seqs: [16] } });
    try {
      assert.equal(driver.isEncoder, true);
      const got = await driver.embed(TEXTS);
      assert.equal(got.length, TEXTS.length);
      TEXTS.forEach((t, i) => {
        const want = refEmbedding(t);
        close(got[i], want, `embedding ${i}`);
        assert.ok(cosine(got[i], want) >= 0.9999, `cosine ${cosine(got[i], want)}`);
      });
      // Five texts over batches of at most 4: two groups, longest first, back in input order.
      const five = [TEXTS[3], ...TEXTS.slice(0, 3), "a little dog"];
      (await driver.embed(five)).forEach((v, i) => close(v, refEmbedding(five[i]), `five[${i}]`));
      const alone = await driver.embed([TEXTS[2]]);
      close(alone[0], got[2], "alone vs batched");
      const raw = await driver.embed([TEXTS[0]], { pooling: "cls", normalize: false });
      const f = frame(embModel.encoder!.template, embModel.tokenizer.encode(TEXTS[0]));
      close(raw[0], Array.from(referenceHidden(emb.w, f.ids, f.types)[0]), "cls, not normalized");
      // Beyond the buckets (16) and within the positions (24): compiled at first use. Beyond 24: refused.
      const long = "the cat sat on the mat , the dog ran to the park";
      close((await driver.embed([long]))[0], refEmbedding(long), "long text");
      await assert.rejects(driver.embed([long + " " + long]), ContextOverflowError);
      await assert.rejects(driver.embed([]), InvalidArgumentError);
      await assert.rejects(driver.embed(["ok", 3 as unknown as string]), /texts\[1\]/);
      await assert.rejects(driver.embed(["ok"], { pooling: "max" as "mean" }), /pooling/);
      await assert.rejects(driver.rerank(QUERY, DOCS), ModelKindError);
      await assert.rejects(driver.generate("the cat"), ModelKindError);
    } finally {
      await driver.close();
    }
    const rdrv = await Driver.open(rrModel, new Engine(dev, { compile: compileGraph, ownsDevice: false }), { encoder: { batches: [1, 4], seqs: [16] } });
    try {
      const scores = await rdrv.rerank(QUERY, DOCS);
      const want = DOCS.map((d) => {
        const f = frame(rrModel.encoder!.template, rrModel.tokenizer.encode(QUERY), rrModel.tokenizer.encode(d));
        return referenceScore(rr.w, f.ids, f.types);
      });
      close(scores, want, "rerank scores");
      const order = (xs: number[]) => xs.map((_, i) => i).sort((a, b) => xs[b] - xs[a]);
      assert.deepEqual(order(scores), order(want));
      await assert.rejects(rdrv.rerank("", DOCS), /query/);
    } finally {
      await rdrv.close();
    }
  });
}

test("js: an XLMRobertaForSequenceClassification reranker (classifier.dense / out_proj, positions from pad + 1) equals the reference", { timeout: 120_000 }, async () => {
  const x = writeBert({ labels: 1, roberta: true });
  const m = loadModel(x.dir);
  const dev = await openDevice("js");
  const driver = await Driver.open(m, new Engine(dev as Exclude<typeof dev, string>, { compile: compileGraph, ownsDevice: false }), { encoder: { batches: [4], seqs: [16] } });
  try {
    assert.equal(m.family.name, "xlm-roberta");
    const scores = await driver.rerank(QUERY, DOCS);
    const want = DOCS.map((d) => {
      const f = frame(m.encoder!.template, m.tokenizer.encode(QUERY), m.tokenizer.encode(d));
      return referenceScore(x.w, f.ids, f.types, true);
    });
    close(scores, want, "roberta rerank scores");
  } finally {
    await driver.close();
    m.close();
    rmSync(x.dir, { recursive: true });
  }
});

test("the encoder's tensor prefix is read from the file, whatever the architecture says", () => {
  const b = writeBert({ pooling: "mean", prefix: "bert." });
  const m = loadModel(b.dir);
  assert.equal(m.map.get("tok_embd"), "bert.embeddings.word_embeddings.weight");
  m.close();
  rmSync(b.dir, { recursive: true });
});

test("bad encoder folders: typed errors naming the file and field", () => {
  const edit = (file: string, f: (j: Record<string, unknown>) => void) => {
    const d = writeBert({ pooling: "mean" }).dir;
    const j = JSON.parse(readFileSync(join(d, file), "utf8"));
    f(j);
    writeFileSync(join(d, file), JSON.stringify(j));
    return d;
  };
  const cases: [string, RegExp, new (...a: never[]) => Error][] = [
    [edit("config.json", (j) => (j.hidden_act = "relu")), /config\.json: field 'hidden_act': 'relu' is not supported/, ConfigError],
    [edit("config.json", (j) => (j.num_attention_heads = 3)), /field 'num_attention_heads': 3 does not divide hidden_size 16/, ConfigError],
    [edit("config.json", (j) => (j.position_embedding_type = "relative_key")), /position_embedding_type/, ConfigError],
    [edit("config.json", (j) => (j.intermediate_size = 31)), /intermediate\.dense\.weight/, TensorMismatchError],
    [edit("1_Pooling/config.json", (j) => (j.pooling_mode_cls_token = true)), /exactly one pooling mode/, ConfigError],
    [edit("1_Pooling/config.json", (j) => ((j.pooling_mode_mean_tokens = false), (j.pooling_mode_max_tokens = true))), /pooling_mode_max_tokens/, ConfigError],
    [edit("tokenizer.json", (j) => ((j.pre_tokenizer as Record<string, unknown>).type = "ByteLevel")), /pre-tokenizer ByteLevel is not supported with WordPiece/, TokenizerError],
  ];
  for (const [dir, msg, cls] of cases) {
    assert.throws(() => loadModel(dir), (e: Error) => e instanceof cls && msg.test(e.message), dir);
    rmSync(dir, { recursive: true });
  }
});

test("cleanup", () => {
  embModel.close();
  rrModel.close();
  rmSync(emb.dir, { recursive: true });
  rmSync(rr.dir, { recursive: true });
});
